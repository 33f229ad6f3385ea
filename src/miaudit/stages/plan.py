"""The plan stage: everything up to, not including, the first write.

Load the data, split the pool (audited / population / holdout), plan memberships
(complementary pairs: raising ``num_models`` keeps every existing model), derive every model's
identity and dry-build every architecture, so that bad input fails before any training.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from miaudit import identity as ids
from miaudit.allocator import keep_freed_memory
from miaudit.config import (
    AuditConfig,
    ModelConfig,
    TrainConfig,
    build_recipe,
)
from miaudit.data import Pool, make_pool
from miaudit.errors import ConfigError, DataError
from miaudit.machine import physical_memory_bytes
from miaudit.modeljob import ModelJob, build_architecture
from miaudit.parents import parent_configs
from miaudit.planning import Plan, make_plan, make_split, model_seed
from miaudit.registry import DATASETS
from miaudit.rundir import ModelCache


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


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} requested but CUDA is not available here")
    if device.type == "cuda" and device.index is not None \
            and device.index >= torch.cuda.device_count():
        raise ConfigError(f"device {name!r}: only {torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {name!r} requested but MPS is not available here")
    return device


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
        from miaudit.threads import default_threads

        torch.set_num_threads(default_threads() if cfg.threads == "auto" else cfg.threads)
    pool = load_pool(cfg)
    check_pool(cfg, pool)
    members = None if cfg.target is None else read_members(cfg.target.members, len(pool))
    split = make_split(len(pool), cfg.data.population_size, cfg.data.holdout_size, cfg.seed,
                       exclude=members)
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
    for model_cfg, train_cfg in {(j.model.model_dump_json(), j.train.model_dump_json()): (
            j.model, j.train) for j in every}.values():
        build_architecture(model_cfg, train_cfg, pool)
    return Audit(cfg, pool, plan, device, data, jobs)


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
        code=code_digests(cfg.data.name, model_cfg, train_cfg), parent=parent)


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


def code_digests(data_name: str, model_cfg: ModelConfig, train_cfg: TrainConfig) -> list[str]:
    """The user-code and checkpoint digests of one planned model (see
    :func:`miaudit.identity.code_digests`), its recipe built from ``train_cfg``."""
    return ids.code_digests(data_name, model_cfg.name, model_cfg.options, build_recipe(train_cfg))


def check_pool(cfg: AuditConfig, pool: Pool) -> None:
    """Problems knowable from the data alone, before anything is written."""
    from miaudit.text_audit import check_modality

    check_modality(cfg, pool)  # attacks and settings that fit text / class outputs
    if pool.is_text:
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
    needed = score_memory_bytes(cfg.num_models + (cfg.protocol == "fixed_target"), len(pool),
                                len(cfg.queries), pool.num_classes)
    available = physical_memory_bytes()
    if needed > available:
        raise ConfigError(f"num_models {cfg.num_models} x pool {len(pool)} x "
                          f"{len(cfg.queries)} queries x {pool.num_classes} classes needs about "
                          f"{needed / 2**30:.1f} GiB to score (memberships, outputs, signals), "
                          f"this machine has {available / 2**30:.1f} GiB; lower one of them")


def score_memory_bytes(models: int, pool: int, queries: int, classes: int) -> int:
    """Peak bytes of the score stage: the keep matrix (bool), every model's float32 outputs,
    and the float64 signals the attacks derive from them (log-softmax over the classes)."""
    return models * pool * (1 + queries * classes * (4 + 8))


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
