"""The plan stage: everything up to, not including, the first write.

Load the data, split the pool (audited / population / holdout), plan memberships
(complementary pairs: raising ``num_models`` keeps every existing model), derive every model's
identity and dry-build every architecture, so that bad input fails before any training.
"""

from __future__ import annotations

import dataclasses
import functools
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from miaudit._runtime.allocator import keep_freed_memory
from miaudit._runtime.machine import (
    check_score_memory,
    physical_memory_bytes,
    resolve_device,
    score_memory_bytes,
)
from miaudit.auditor import identity as ids
from miaudit.auditor.design import Plan, make_plan, make_split, model_seed
from miaudit.auditor.modality import modality_of
from miaudit.auditor.model_cache import ModelCache
from miaudit.auditor.modeljob import ModelJob, build_architecture
from miaudit.config import (
    AuditConfig,
    ModelConfig,
    TrainConfig,
    parent_configs,
)
from miaudit.data import Pool, make_pool
from miaudit.errors import ConfigError, DataError
from miaudit.registry import DATASETS


@dataclass
class Audit:
    """The planned audit: config, data, plan and the per-model jobs."""

    cfg: AuditConfig
    pool: Pool
    plan: Plan
    device: torch.device
    data_identity: dict[str, Any]
    jobs: list[ModelJob]

    @property
    def run_identity(self) -> str:
        cfg = self.cfg
        dump = ids.section_dump
        return ids.run_identity(
            data=self.data_identity, seed=cfg.seed, protocol=cfg.protocol,
            model=dump(cfg.model), train=dump(cfg.train),
            reference_model=dump(cfg.reference_model), reference_train=dump(cfg.reference_train))

    @property
    def run_dir(self) -> Path:
        return self.cfg.output_dir / f"{self.cfg.run_name()}-{self.run_identity[:12]}"

    @property
    def cache(self) -> ModelCache | None:
        """The model cache shared between run directories (None when share_models is off)."""
        return ModelCache(self.cfg.output_dir / "model_cache") if self.cfg.share_models \
            else None


def load_pool(cfg: AuditConfig) -> Pool:
    splits = DATASETS.create(cfg.data.name, {"data_dir": cfg.data.data_dir, **cfg.data.options},
                             where=f"data set {cfg.data.name!r}")
    return make_pool(splits, cfg.data.pool, cfg.data.pool_size, cfg.seed)


def plan_audit(cfg: AuditConfig) -> Audit:
    """Everything up to, not including, the first write: data, split, plan, identities, and
    a dry build of every architecture (a bad model option fails here, before training)."""
    device = resolve_device(cfg.device)
    keep_freed_memory()
    if cfg.threads is not None:
        from miaudit._runtime.threads import default_threads

        torch.set_num_threads(default_threads() if cfg.threads == "auto" else cfg.threads)
    pool = load_pool(cfg)
    check_pool(cfg, pool)
    members = None if cfg.target is None else read_members(cfg.target.members, len(pool))
    split = make_split(len(pool), cfg.data.population_size, cfg.data.holdout_size, cfg.seed,
                       exclude=members)
    check_work(cfg, pool, cfg.num_models + (cfg.target is not None))  # before planning
    plan = make_plan(cfg.protocol, cfg.num_models, split, cfg.seed, cfg.num_targets,
                     target_members=members)
    data = ids.data_identity(cfg.data.model_dump(mode="json"), ids.pool_digest(pool.x, pool.y))
    jobs = []
    if cfg.target is not None:
        weights = cfg.target.weights
        jobs.append(ModelJob(0, cfg.model, cfg.train, model_seed(cfg.seed, 0),
                             ids.pretrained_identity(weights, members), pretrained=weights))
    for index in range(len(jobs), len(plan.keep)):
        model_cfg, train_cfg = model_configs(cfg, plan, index)
        seed = model_seed(cfg.seed, index)
        identity = functools.partial(
            job_identity, cfg=cfg, data=data, seed=seed, membership=plan.keep[index],
            holdout=split.holdout, device_kind=train_device(cfg, device).type)
        jobs.append(model_job(index, model_cfg, train_cfg, seed, identity))
    check_snapshot_jobs(cfg, jobs)
    every = [level for job in jobs for level in chain(job)]
    parameters, flops = 0, 0.0
    sized = cfg.threads == "auto"  # the thread default reads the model's size
    for model_cfg, train_cfg in {(j.model.model_dump_json(), j.train.model_dump_json()): (
            j.model, j.train) for j in every}.values():
        parameters = max(parameters, check_model_size(model_cfg, train_cfg, pool))
        architecture = build_architecture(model_cfg, train_cfg, pool)
        flops = max(flops, forward_flops(architecture, pool) if sized else 0.0)
    check_disk(cfg, pool, len(every), parameters)
    if sized:  # small models train fastest per CPU-s on one thread
        from miaudit._runtime.threads import threads_for_model

        torch.set_num_threads(threads_for_model(torch.get_num_threads(), flops))
    return Audit(cfg, pool, plan, device, data, jobs)


def forward_flops(model: torch.nn.Module, pool: Pool) -> float:
    """FLOPs of one sample's forward pass (torch's counter, eval mode, no gradients); 0 where
    the counter cannot run the model (then the thread default ignores the model's size)."""
    from torch.utils.flop_counter import FlopCounterMode

    sample = pool.x[:2]
    try:
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            model.eval()(sample)
    except (RuntimeError, NotImplementedError, TypeError, ValueError):
        return 0.0
    return counter.get_total_flops() / len(sample)


def check_model_size(model_cfg: ModelConfig, train_cfg: TrainConfig, pool: Pool) -> int:
    """The model's parameter count, counted on the meta device (nothing allocated); a model
    whose training state (float32 weights, gradients, two optimizer moments) exceeds the
    machine's memory raises ConfigError before it is built. 0 where a builder cannot run on
    the meta device (it is then built, and checked by torch, as before)."""
    try:
        with torch.device("meta"):
            model = build_architecture(model_cfg, train_cfg, pool)
        count = sum(p.numel() for p in model.parameters())
    except Exception:  # noqa: BLE001 - the real build below reports a bad option itself
        return 0
    needed = 16 * count
    if needed > (available := physical_memory_bytes()):
        raise ConfigError(f"model {model_cfg.name!r} has {count:,} parameters: training takes "
                          f"about {needed / 2**30:,.1f} GiB (weights, gradients, optimizer "
                          f"state), this machine has {available / 2**30:,.1f} GiB; lower "
                          "model.options (dim, layers, width, hidden) or model.width")
    return count


#: the bounds on an audit's work (limits.work_limit: MIAUDIT_MAX_<NAME> overrides)
WORK_LIMITS = {"passes_per_sample": 1e6, "forward_passes": 1e11, "training_steps": 1e8,
               "files": 1e5}
WORK_UNITS = {"passes_per_sample": "forward passes per sample", "forward_passes":
              "forward passes", "training_steps": "training steps", "files": "files"}


def check_work(cfg: AuditConfig, pool: Pool, models: int) -> None:
    """The audit's work, bounded before anything starts: query passes per sample and in
    all (queries, robust evaluation), training steps and files written. Each bound's line
    states the estimate and the override (:data:`WORK_LIMITS`)."""
    from miaudit._runtime.limits import work_limit
    from miaudit.queries import build_query, num_passes

    def refuse(what: str, amount: float, name: str, fix: str) -> None:
        limit = work_limit(name, WORK_LIMITS[name])
        if amount > limit:
            raise ConfigError(f"{what} need {amount:.3g} {WORK_UNITS[name]} (bound "
                              f"{limit:.3g}); {fix}, or raise the bound: "
                              f"MIAUDIT_MAX_{name.upper()}={amount:.3g}")

    n = len(pool)
    passes = {spec: build_query(spec).n for spec in cfg.queries}
    robust = cfg.robust_eval
    if robust is not None:
        passes["robust_eval"] = robust.steps + 1
    for spec, count in passes.items():
        refuse("robust_eval.steps" if spec == "robust_eval" else f"queries: {spec}", count,
               "passes_per_sample",
               f"lower {'robust_eval.steps' if spec == 'robust_eval' else 'its budget or n'}")
    queried = models * n * num_passes(cfg.queries)  # a draw stream's queries share passes
    if robust is not None:
        queried += models * 2 * min(robust.max_samples, n) * passes["robust_eval"]
    refuse(f"{models} models x {n:,} samples x queries {sorted(passes)}", queried,
           "forward_passes", "lower num_models, the pool or the queries' budgets")
    members = max(1, n // 2)
    steps = models * cfg.train.epochs * -(-members // cfg.train.batch_size)
    refuse(f"{models} models x {cfg.train.epochs} epochs x {-(-members // cfg.train.batch_size)}"
           " batches", steps, "training_steps", "lower num_models or train.epochs")
    copies = 2 if cfg.share_models else 1  # the run directory and the model cache
    files = copies * models * (2 + 2 * len(cfg.queries))
    refuse(f"{models} models x (weights, record, {len(cfg.queries)} queries' outputs)", files,
           "files", "lower num_models or the queries")


def check_disk(cfg: AuditConfig, pool: Pool, models: int, parameters: int) -> None:
    """The bytes the models and their outputs take (float32) against the free disk space
    where the run directory goes."""
    n, copies = len(pool), 2 if cfg.share_models else 1
    width = modality_of(pool).output_width(pool)
    written = copies * models * (4 * parameters + 4 * n * width * len(cfg.queries))
    free = shutil.disk_usage(_existing(cfg.output_dir)).free
    if written > free:
        raise ConfigError(f"{models} models of {parameters:,} parameters with their outputs "
                          f"write about {written / 2**30:,.1f} GiB, {cfg.output_dir} has "
                          f"{free / 2**30:,.1f} GiB free; lower num_models or free space")


def _existing(path: Path) -> Path:
    path = Path(path).absolute()
    while not path.exists():
        path = path.parent
    return path


def model_job(index: int, model_cfg: ModelConfig, train_cfg: TrainConfig, seed: int,
              identity: Any) -> ModelJob:
    """The job of one model and, recursively, of the parents its recipe starts from (each
    identified as that model would be in an audit of its own: ``identity(model_cfg,
    train_cfg, parent=...)``)."""
    parent_cfgs = parent_configs(model_cfg, train_cfg)
    parent = None if parent_cfgs is None else model_job(index, *parent_cfgs, seed, identity)
    return ModelJob(index, model_cfg, train_cfg, seed, identity(
        model_cfg, train_cfg, parent=parent and parent.identity), parent=parent)


def check_snapshot_jobs(cfg: AuditConfig, jobs: list[ModelJob]) -> None:
    """Every model keeps the same snapshots (each epoch is audited with targets and
    references at that epoch); a target trained elsewhere has none."""
    if not cfg.train.snapshots:
        return
    if cfg.target is not None:
        raise ConfigError("train.snapshots need targets trained by the audit; a target.weights "
                          "file has no training to take snapshots from")
    if any(job.train.snapshots != cfg.train.snapshots for job in jobs):
        raise ConfigError(f"reference_train.snapshots must equal train.snapshots "
                          f"({list(cfg.train.snapshots)}): each epoch is audited with its "
                          "targets and references at that epoch")


def snapshot_job(job: ModelJob, epoch: int) -> ModelJob:
    """``job`` at the end of ``epoch`` (train.snapshots): its own identity, same model."""
    return dataclasses.replace(job, identity=ids.snapshot_identity(job.identity, epoch))


def stored_models(run: Any, planned: Audit) -> list[tuple[ModelJob, Path]]:
    """Every model the query stage queries, with the folder holding its weights: the final
    models, then each snapshot of each model."""
    models = [(job, run.model_dir(job.index)) for job in planned.jobs]
    return models + [(snapshot_job(job, epoch), run.snapshot_dir(job.index, epoch))
                     for epoch in planned.cfg.train.snapshots for job in planned.jobs]


def chain(job: ModelJob) -> list[ModelJob]:
    """``job`` and its parents, the nearest first."""
    return [job] + ([] if job.parent is None else chain(job.parent))


def job_identity(model_cfg: ModelConfig, train_cfg: TrainConfig, *, cfg: AuditConfig,
                 data: dict[str, Any], seed: int, membership: np.ndarray, holdout: np.ndarray,
                 device_kind: str, parent: str | None = None) -> str:
    """The model identity of one job (its parent's identity included for derived models)."""
    return ids.model_identity(
        data=data, model=ids.section_dump(model_cfg), train=ids.section_dump(train_cfg),
        model_seed=seed, membership=membership, holdout=holdout, device_kind=device_kind,
        code=ids.code_digests(cfg.data.name, model_cfg.name, model_cfg.options,
                              cfg.components.recipe_of(train_cfg)), parent=parent)


def read_members(path: Path, pool_size: int) -> np.ndarray:
    """A pre-trained target's training set as a pool-length bool mask, from a .npy of pool
    indices or of a boolean mask."""
    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise DataError(f"target.members {path}: not a .npy array ({error})") from None
    if array.dtype == bool:
        if array.shape != (pool_size,):
            raise DataError(f"target.members {path}: a mask needs shape ({pool_size},) (the "
                            f"pool), got {array.shape}")
        mask = array.copy()
    elif np.issubdtype(array.dtype, np.integer) and array.ndim == 1:
        if array.size and (array.min() < 0 or array.max() >= pool_size):
            raise DataError(f"target.members {path}: indices must lie in 0..{pool_size - 1}")
        mask = np.zeros(pool_size, dtype=bool)
        mask[array] = True
    else:
        raise DataError(f"target.members {path}: expected pool indices (int) or a boolean "
                        f"mask, got {array.dtype} {array.shape}")
    if mask.all() or not mask.any():
        raise DataError(f"target.members {path}: the target needs members and non-members "
                        "in the pool")
    return mask


def check_pool(cfg: AuditConfig, pool: Pool) -> None:
    """Problems knowable from the data alone, before anything is written."""
    from miaudit.auditor.text_audit import check_modality

    check_modality(cfg, pool)  # attacks and settings that fit text / class outputs
    if not modality_of(pool).has_classes:  # check_modality checked the text settings
        return
    classes = int(pool.y.unique().numel())
    if classes < 2:
        raise DataError(f"data set {cfg.data.name!r} has {classes} class in the pool; "
                        "membership inference needs at least 2")
    from miaudit.queries import build_query, check_fits

    for spec in cfg.queries:
        if not pool.is_image and not build_query(spec).applies_to_tabular:
            raise ConfigError(f"queries: {spec!r} needs image inputs, but data set "
                              f"{cfg.data.name!r} is tabular; use identity or dropout")
        if pool.is_image:
            check_fits(spec, *pool.x.shape[-2:])
    values = len(cfg.queries) * pool.num_classes  # outputs, and their log-softmax signals
    check_score_memory(
        score_memory_bytes(cfg.num_models + (cfg.protocol == "fixed_target"), len(pool),
                           outputs=values, signals=values),
        f"num_models {cfg.num_models} x pool {len(pool)} x {len(cfg.queries)} queries x "
        f"{pool.num_classes} classes", "lower one of them")


def model_configs(cfg: AuditConfig, plan: Plan, index: int) -> tuple[ModelConfig, TrainConfig]:
    """Architecture and recipe of model ``index`` (references may differ under fixed_target)."""
    if plan.is_reference_architecture(index):
        return cfg.reference_model or cfg.model, cfg.reference_train or cfg.train
    return cfg.model, cfg.train


def train_device(cfg: AuditConfig, device: torch.device) -> torch.device:
    """Where models train: the audit's device, or on Ray the device each task is given (a
    GPU share when ``gpus_per_model`` > 0, else the CPU: Ray leaves CUDA visible to CPU tasks,
    which would all land on GPU 0)."""
    if cfg.executor.name == "ray":
        return torch.device("cuda" if cfg.executor.gpus_per_model > 0 else "cpu")
    return device
