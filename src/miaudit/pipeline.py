"""The audit pipeline: stages with their own identities.

``audit(config) -> Results`` runs, for the run directory of ``config``:

1. **plan**: load the data, split the pool (audited / population / holdout), plan memberships
   (complementary pairs: raising ``num_models`` keeps every existing model);
2. **train**: weights of every model, keyed by data + architecture + recipe + seed +
   membership (+ device kind); reused from the run directory or the shared model cache;
3. **query**: logits of every pool sample under every query spec, keyed by the weights and the
   spec, computed from the *reloaded* weights (so adding a query trains nothing);
4. **evaluate**: robust accuracy, keyed by the weights and its settings;
5. **score**: attacks and metrics over stored outputs, never touching a model, written as one
   atomic generation;
6. **report**: plots and the HTML report.

Each stage resumes on its own: a killed run, rerun with the same command, recomputes only
what is missing, stale (another identity) or damaged (digest mismatch).
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from miaudit import identity as ids
from miaudit.attacks import AttackInput
from miaudit.config import (
    AuditConfig,
    ModelConfig,
    RobustEvalConfig,
    TrainConfig,
    build_attack,
    build_output_defense,
    build_recipe,
    load_config,
    validate_config,
)
from miaudit.data import Pool, make_pool
from miaudit.errors import ConfigError, DataError, MiauditError
from miaudit.executors import Job, JobFailedError, make_executor, resolve
from miaudit.features import input_features
from miaudit.io import file_digest, read_json, write_json
from miaudit.label_queries import protect_decision_columns
from miaudit.models import build_model
from miaudit.planning import Plan, make_plan, make_split, model_seed
from miaudit.queries import query_outputs
from miaudit.registry import DATASETS
from miaudit.results import Results
from miaudit.rundir import MODEL_RECORD, WEIGHTS, ModelCache, RunDir, scores_name
from miaudit.scoring import accuracy_stats, publish, score_attacks
from miaudit.training import TrainEnv

__all__ = ["Results", "audit"]


@dataclass(frozen=True)
class ModelJob:
    """Everything that determines one model (picklable: executors ship it to workers)."""

    index: int
    model: ModelConfig
    train: TrainConfig
    seed: int
    identity: str
    pretrained: Path | None = None  # weights trained elsewhere: loaded, not trained


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
        dump = _dump
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


def _dump(model: Any) -> Any:
    """A config section as it enters identities (TrainConfig leaves out identity-neutral
    fields at their neutral defaults)."""
    if model is None:
        return None
    dump = getattr(model, "identity_dump", None)
    return dump() if dump is not None else model.model_dump(mode="json")


def audit(config: AuditConfig | dict[str, Any] | str | Path | None = None, *,
          console: Console | None = None, show_progress: bool = True,
          wait: bool = False) -> Results:
    """Run (or resume, or grow) the audit described by ``config`` and return its results."""
    cfg = _coerce_config(config)
    console = console or Console(stderr=True)
    started = time.perf_counter()
    planned = plan_audit(cfg)
    run = RunDir(planned.run_dir)
    made_output_dir = not cfg.output_dir.exists()
    with run.lock(wait=wait), _removed_if_failed(run, made_output_dir):
        swept = run.sweep() + (planned.cache.sweep() if planned.cache is not None else 0)
        if swept:
            console.print(f"[dim]removed {swept} temporary file(s) a killed run left[/dim]")
        run.claim(planned.run_identity, cfg.model_dump(mode="json"))
        run.write_plan(planned.plan.keep, {"audited": planned.plan.split.audited,
                                           "population": planned.plan.split.population,
                                           "holdout": planned.plan.split.holdout})
        train_seconds = train_stage(run, planned, console, show_progress)
        query_seconds = query_stage(run, planned, console, show_progress)
        evaluate_stage(run, planned)
        score_started = time.perf_counter()
        summary = score_stage(run, planned)
        summary["timing"] = {
            "train_seconds_this_run": round(train_seconds, 2),
            "query_seconds_this_run": round(query_seconds, 2),
            "attack_seconds": round(time.perf_counter() - score_started, 2),
            "total_seconds_this_run": round(time.perf_counter() - started, 2),
            "device": str(planned.device),
        }
        results = publish(run, summary)
        write_reports(run, planned, results.summary)
    return results


def write_reports(run: RunDir, planned: Audit, summary: dict[str, Any]) -> None:
    """The report stage: plots, the most exposed samples and the HTML report."""
    from miaudit.report import read_scores, render_plots
    from miaudit.reporting import write_exposed_samples, write_html_report
    from miaudit.reporting.run_view import RunView

    render_plots(run.root, summary)
    audited, pool = planned.plan.split.audited, planned.pool
    best = RunView(run.root, summary).best_attack().label
    write_exposed_samples(run.root, read_scores(run.root, summary, best),
                          planned.plan.keep[summary["targets"]][:, audited],
                          pool.x.numpy()[audited] if pool.is_image else None,
                          pool.y.numpy()[audited], pool.class_names, attack=best)
    write_html_report(run.root, summary)


@contextmanager
def _removed_if_failed(run: RunDir, made_output_dir: bool) -> Iterator[None]:
    """A run that fails before its first model is saved (a diverging first model, an error
    found while training) leaves no empty run directory behind, nor the output directory it
    created. Runs under the lock; a run directory that existed before is never touched."""
    fresh = not (run.root / "manifest.json").exists()
    try:
        yield
    except BaseException:
        if fresh and not (run.root / "models").exists():
            run.remove()
            if made_output_dir:
                try:
                    run.root.parent.rmdir()  # only when empty: another run may have started
                except OSError:
                    pass
        raise


def _coerce_config(config: AuditConfig | dict[str, Any] | str | Path | None) -> AuditConfig:
    if isinstance(config, AuditConfig):
        return config
    if isinstance(config, dict):
        return validate_config(config)
    return load_config(None if config is None else Path(config))


# -- plan ---------------------------------------------------------------------------------------
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
    try:
        splits = DATASETS.build(cfg.data.name, data_dir=cfg.data.data_dir, **cfg.data.options)
    except ValueError as error:  # loaders validate their option values that way
        raise ConfigError(f"data set {cfg.data.name!r}: {error}") from None
    try:
        return make_pool(splits, cfg.data.pool, cfg.data.pool_size, cfg.seed)
    except ValueError as error:
        raise DataError(str(error)) from None


def plan_audit(cfg: AuditConfig) -> Audit:
    """Everything up to, not including, the first write: data, split, plan, identities, and
    a dry build of every architecture (a bad model option fails here, before training)."""
    device = resolve_device(cfg.device)
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
        jobs.append(ModelJob(0, cfg.model, cfg.train, model_seed(cfg.seed, 0), ids.text_digest(
            {"pretrained": file_digest(weights), "members": ids.array_digest(members)})[:32],
            pretrained=weights))
    for index in range(len(jobs), len(plan.keep)):
        model_cfg, train_cfg = model_configs(cfg, plan, index)
        seed = model_seed(cfg.seed, index)
        identity = ids.model_identity(
            data=data, model=_dump(model_cfg), train=_dump(train_cfg), model_seed=seed,
            membership=plan.keep[index], holdout=split.holdout,
            device_kind=train_device(cfg, device).type,
            code=code_digests(cfg.data.name, model_cfg, train_cfg))
        jobs.append(ModelJob(index, model_cfg, train_cfg, seed, identity))
    for model_cfg, train_cfg in {(j.model.model_dump_json(), j.train.model_dump_json()): (
            j.model, j.train) for j in jobs}.values():
        build_architecture(model_cfg, train_cfg, pool)
    return Audit(cfg, pool, plan, device, data, jobs)


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
    """Digests of the user's own code that a model depends on (components named by import
    path, a user training function): editing that code retrains the model."""
    from miaudit.importpath import source_digest
    from miaudit.registry import MODELS

    digests = [source_digest(registry.get(name)) for registry, name in
               ((DATASETS, data_name), (MODELS, model_cfg.name)) if ":" in name]
    fingerprint = getattr(build_recipe(train_cfg), "fingerprint", None)
    return digests + ([fingerprint] if fingerprint else [])


def check_pool(cfg: AuditConfig, pool: Pool) -> None:
    """Problems knowable from the data alone, before anything is written."""
    classes = int(pool.y.unique().numel())
    if classes < 2:
        raise DataError(f"data set {cfg.data.name!r} has {classes} class in the pool; "
                        "membership inference needs at least 2")
    if not pool.is_image:
        from miaudit.queries import build_query

        for spec in cfg.queries:
            if not build_query(spec).applies_to_tabular:
                raise ConfigError(f"queries: {spec!r} needs image inputs, but data set "
                                  f"{cfg.data.name!r} is tabular; use identity or dropout")
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


def physical_memory_bytes() -> int:
    """The machine's physical memory (POSIX sysconf), or 64 GiB where it cannot be asked."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not POSIX (Windows)
        return 64 << 30


def model_configs(cfg: AuditConfig, plan: Plan, index: int) -> tuple[ModelConfig, TrainConfig]:
    """Architecture and recipe of model ``index`` (references may differ under fixed_target)."""
    if plan.is_reference_architecture(index):
        return cfg.reference_model or cfg.model, cfg.reference_train or cfg.train
    return cfg.model, cfg.train


def build_registry_model(model_cfg: ModelConfig, pool: Pool) -> torch.nn.Module:
    """The registry model as configured (what a recipe's ``train`` starts from)."""
    try:
        return build_model(model_cfg.name, input_shape=pool.input_shape,
                           num_classes=pool.num_classes, width=model_cfg.width,
                           **model_cfg.options)
    except (ValueError, TypeError) as error:  # the dry build at plan time: a bad option value
        raise ConfigError(f"model {model_cfg.name!r} (width {model_cfg.width}, options "
                          f"{model_cfg.options}) cannot be built: {error}") from None


def build_architecture(model_cfg: ModelConfig, train_cfg: TrainConfig,
                       pool: Pool) -> torch.nn.Module:
    """The registry model as its recipe outputs it (what saved weights load into)."""
    return build_recipe(train_cfg).architecture(build_registry_model(model_cfg, pool))


# -- train --------------------------------------------------------------------------------------
def train_device(cfg: AuditConfig, device: torch.device) -> torch.device:
    """Where models train: the audit's device, or on Ray the device each task is given (a
    GPU share when ``gpus_per_model`` > 0, else the CPU: Ray leaves CUDA visible to CPU tasks,
    which would all land on GPU 0)."""
    if cfg.executor.name == "ray":
        return torch.device("cuda" if cfg.executor.gpus_per_model > 0 else "cpu")
    return device


def train_stage(run: RunDir, planned: Audit, console: Console, show_progress: bool) -> float:
    """Train the models that have no valid record yet (on the configured executor); returns
    the seconds spent. Each finished model is written by this (driver) process as it
    arrives, so an interrupted stage resumes from the models already written."""
    todo = [job for job in planned.jobs if run.model_record(job.index, job.identity) is None]
    cache = planned.cache
    if cache is not None:
        fetched = [job for job in todo if fetch_model(cache, run, job)]
        todo = [job for job in todo if job not in fetched]
        if fetched:
            console.print(f"reused {len(fetched)} identical model(s) from "
                          f"{escape(str(cache.root))}")
    done = len(planned.jobs) - len(todo)
    if done and todo:
        console.print(f"[dim]resuming: {done} of {len(planned.jobs)} models already trained"
                      "[/dim]")
    started = time.perf_counter()
    with _progress(console, show_progress) as bar, make_executor(planned.cfg.executor) as pool:
        overall = bar.add_task("training", total=len(planned.jobs), completed=done)
        tasks: dict[int, Any] = {}
        local = planned.cfg.executor.name == "local"

        def on_epoch(index: int, epoch: int, total: int, stats: dict[str, float]) -> None:
            bar.update(tasks[index], completed=epoch, total=total,
                       description=f"model {index} loss {stats.get('loss', float('nan')):.3f}")

        def on_start(job: Job) -> None:
            tasks[job.index] = bar.add_task(f"model {job.index}", total=None)

        def on_done(job: Job, result: Any, seconds: float) -> None:
            state, meta = result
            model_job = job.payload[0]
            run.save_model(model_job.index, model_job.identity, state, meta)
            if cache is not None:
                cache.store(model_job.identity, MODEL_RECORD, WEIGHTS,
                            run.model_dir(model_job.index))
            bar.remove_task(tasks.pop(job.index))
            bar.advance(overall)

        shared = (pool.put(planned.pool), pool.put(planned.plan))
        device = str(train_device(planned.cfg, planned.device))
        jobs = [Job(job.index, (job, *shared, device, on_epoch if local else None))
                for job in todo]
        if local and planned.cfg.train.ensemble > 1:
            train_ensembles(jobs, planned, on_start, on_done)
            jobs = []
        try:
            pool.run(jobs, run_model_job, on_done, on_start)
        except JobFailedError as error:
            if isinstance(error.cause, MiauditError):
                raise error.cause from None
            raise
    seconds = time.perf_counter() - started
    if todo:
        console.print(f"trained {len(todo)} model(s) in {seconds:.1f} s "
                      f"({seconds / len(todo):.1f} s per model, device {device})")
    return seconds


def train_ensembles(jobs: list[Job], planned: Audit, on_start: Any, on_done: Any) -> None:
    """``train.ensemble`` > 1 (local executor): train up to that many models at once as one
    vectorized ensemble where they can share a run; each model is written as it finishes."""
    from miaudit.training.ensemble import train_ensemble

    by_index = {job.index: job for job in jobs}
    for job in jobs:
        on_start(job)
    train_ensemble([job.payload[0] for job in jobs], planned.pool, planned.plan,
                   train_device(planned.cfg, planned.device), size=planned.cfg.train.ensemble,
                   on_done=lambda model_job, state, meta: on_done(
                       by_index[model_job.index], (state, meta), 0.0))


def run_model_job(job: Job) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """One train job (module level, so Ray workers can import it): the model's state dict
    and meta, returned to the driver, which writes them."""
    model_job, pool_ref, plan_ref, device, on_epoch = job.payload
    progress = None if on_epoch is None else (
        lambda epoch, total, stats: on_epoch(model_job.index, epoch, total, stats))
    return train_model(model_job, resolve(pool_ref), resolve(plan_ref), torch.device(device),
                       progress)


def fetch_model(cache: ModelCache, run: RunDir, job: ModelJob) -> bool:
    return cache.fetch(job.identity, job.identity, MODEL_RECORD, WEIGHTS,
                       run.model_dir(job.index))


def train_model(job: ModelJob, pool: Pool, plan: Plan, device: torch.device,
                progress: Any = None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Train model ``job.index`` on its members; returns (state dict, JSON-able meta)."""
    if job.pretrained is not None:
        return load_pretrained(job, pool)
    recipe = build_recipe(job.train)
    torch.manual_seed(job.seed)
    model = build_registry_model(job.model, pool)
    member = torch.from_numpy(plan.keep[job.index])
    x_val = y_val = None
    if recipe.needs_validation:
        held_out = torch.from_numpy(plan.split.holdout)
        x_val, y_val = pool.x[held_out], pool.y[held_out]
    started = time.perf_counter()
    env = TrainEnv(device=device, seed=job.seed, progress=progress,
                   cuda_speedups=job.train.amp)
    try:
        model, log = recipe.train(model, pool.x[member], pool.y[member], job.train.params(),
                                  env, x_val, y_val)
    except FloatingPointError as error:
        raise MiauditError(f"model {job.index} diverged: {error}; lower train.lr "
                           f"(now {job.train.lr})") from None
    meta = {"index": job.index, "seed": job.seed, "model": _dump(job.model),
            "recipe": job.train.recipe, "train_seconds": round(time.perf_counter() - started, 3),
            "log": _jsonable(log)}
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}, meta


def load_pretrained(job: ModelJob, pool: Pool) -> tuple[dict[str, torch.Tensor],
                                                      dict[str, Any]]:
    """A target trained elsewhere: its weights, checked to load into the configured
    architecture (safetensors, or a torch state dict read with ``weights_only=True``)."""
    path = Path(job.pretrained)
    try:
        if path.suffix == ".safetensors":
            from miaudit.io import read_tensors

            state = read_tensors(path)
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(state, dict):
            raise DataError(f"target.weights {path}: expected a state dict, got "
                            f"{type(state).__name__}")
        build_architecture(job.model, job.train, pool).load_state_dict(state, strict=True)
    except (RuntimeError, OSError, ValueError) as error:
        raise DataError(f"target.weights {path} do not load into model {job.model.name!r} "
                        f"(width {job.model.width}, options {job.model.options}): "
                        f"{str(error).splitlines()[0]}") from None
    return state, {"index": job.index, "seed": job.seed, "model": _dump(job.model),
                   "recipe": "pretrained", "pretrained": str(path), "train_seconds": 0.0,
                   "log": {}}


@contextmanager
def _progress(console: Console, enabled: bool) -> Iterator[Progress]:
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, disable=not enabled, transient=False)
    with progress:
        yield progress


def _jsonable(log: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {key: [float(v) if isinstance(v, (int, float, np.floating)) else str(v) for v in values]
            for key, values in log.items()}


# -- query --------------------------------------------------------------------------------------
def query_key(job: ModelJob, spec: str) -> str:
    return ids.query_identity(job.identity, spec)


def load_trained(run: RunDir, job: ModelJob, pool: Pool, device: torch.device) -> torch.nn.Module:
    """Rebuild the architecture and load the saved weights (strict: every tensor must fit)."""
    model = build_architecture(job.model, job.train, pool)
    model.load_state_dict(run.load_weights(job.index), strict=True)
    return model.to(device).eval()


def query_stage(run: RunDir, planned: Audit, console: Console, show_progress: bool) -> float:
    """Outputs of every (model, query spec) that has no valid record; returns the seconds."""
    cache = planned.cache
    started = time.perf_counter()
    missing = {job.index: [s for s in planned.cfg.queries
                           if run.output_record(job.index, query_key(job, s)) is None]
               for job in planned.jobs}
    if cache is not None:
        for job in planned.jobs:
            missing[job.index] = [s for s in missing[job.index]
                                  if not fetch_output(cache, run, job, query_key(job, s))]
    todo = [job for job in planned.jobs if missing[job.index]]
    with _progress(console, show_progress and bool(todo)) as bar:
        task = bar.add_task("querying", total=len(todo))
        for job in todo:
            model = load_trained(run, job, planned.pool, planned.device)
            for spec in missing[job.index]:
                key = query_key(job, spec)
                began = time.perf_counter()
                logits = query_outputs(model, planned.pool.x, [spec], planned.device,
                                       query_seed(job.seed, spec))[:, 0]
                run.save_outputs(job.index, key, logits, {
                    "spec": spec, "model": job.identity,
                    "seconds": round(time.perf_counter() - began, 3)})
                if cache is not None:
                    record, data = output_relpaths(key)
                    cache.store(job.identity, record, data, run.model_dir(job.index))
            bar.advance(task)
    return time.perf_counter() - started


def output_relpaths(key: str) -> tuple[str, str]:
    return f"outputs/{key}.json", f"outputs/{key}.safetensors"


def fetch_output(cache: ModelCache, run: RunDir, job: ModelJob, key: str) -> bool:
    record, data = output_relpaths(key)
    return cache.fetch(job.identity, key, record, data, run.model_dir(job.index))


def query_seed(seed: int, spec: str) -> int:
    """Seed of one model's query: stochastic queries are reproducible per (model, spec)."""
    return int(np.random.SeedSequence([seed, zlib.crc32(spec.encode())]).generate_state(1)[0])


# -- evaluate -----------------------------------------------------------------------------------
def evaluate_stage(run: RunDir, planned: Audit) -> None:
    """Robust accuracy of every target model (when configured), keyed by weights + settings."""
    robust = planned.cfg.robust_eval
    if robust is None:
        return
    settings = robust.model_dump()
    for target in planned.plan.targets:
        job = planned.jobs[target]
        path = run.eval_path(target, ids.eval_identity(job.identity, settings))
        if path.exists():
            continue
        model = load_trained(run, job, planned.pool, planned.device)
        write_json(path, {"model": job.identity, "settings": settings,
                          "robust": robust_accuracies(model, planned, target, robust)})


def robust_accuracies(model: torch.nn.Module, planned: Audit, target: int,
                      robust: RobustEvalConfig) -> dict[str, dict[str, float]]:
    """Natural and PGD robust accuracy on (a seeded subset of) members and non-members."""
    from miaudit.recipes.adversarial import natural_and_robust_accuracy

    pool, seed = planned.pool, planned.jobs[target].seed
    member = planned.plan.keep[target]
    audited = np.zeros(len(pool), dtype=bool)
    audited[planned.plan.split.audited] = True
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x524F42]))
    result = {}
    for split, rows in (("train", np.flatnonzero(member)),
                        ("test", np.flatnonzero(~member & audited))):
        chosen = torch.from_numpy(np.sort(rng.permutation(rows)[: robust.max_samples]))
        result[split] = natural_and_robust_accuracy(
            model, pool.x[chosen], pool.y[chosen], eps=robust.eps, step=robust.step,
            steps=robust.steps, device=planned.device, seed=seed)
    return result


# -- score --------------------------------------------------------------------------------------
def load_all_outputs(run: RunDir, planned: Audit) -> np.ndarray:
    """(M, pool, Q, C) float32 logits of every model, filled in place (one copy in memory)."""
    cfg, jobs = planned.cfg, planned.jobs
    first = run.load_outputs(0, query_key(jobs[0], cfg.queries[0])).numpy()
    logits = np.empty((len(jobs), first.shape[0], len(cfg.queries), first.shape[1]),
                      dtype=np.float32)
    for job in jobs:
        for column, spec in enumerate(cfg.queries):
            logits[job.index, :, column] = run.load_outputs(job.index,
                                                            query_key(job, spec)).numpy()
    return logits


def apply_output_defense(logits: np.ndarray, spec: Any, labels: np.ndarray, keep: np.ndarray,
                         holdout: np.ndarray, query_names: list[str]) -> None:
    """Replace every model's released outputs by the defended ones (in place). Each model's
    defender knows its own training set (its keep row) and the holdout set, never the
    evaluated non-members. Boundary-distance columns stay: they are no released vector."""
    defense = build_output_defense(spec)
    reference = np.zeros(keep.shape[1], dtype=bool)
    reference[holdout] = True
    kept = protect_decision_columns(query_names)
    if kept.size and not getattr(defense, "preserves_labels", False):
        raise ConfigError("boundary queries measure the undefended model's decision boundary; "
                          f"output defense {spec!r} may change labels, so drop the boundary "
                          "queries or use memguard_label_only")
    for index in range(len(keep)):
        original = logits[index][:, kept].copy()
        logits[index] = defense.apply(logits[index], labels, keep[index],
                                      **({"holdout_mask": reference}
                                         if getattr(defense, "needs_holdout", False) else {}))
        logits[index][:, kept] = original


def attack_input(run: RunDir, planned: Audit) -> AttackInput:
    """What the attacks see: every model's stored outputs (defended when configured), the
    keep matrix, the population and the attacker's features of the inputs."""
    cfg, plan = planned.cfg, planned.plan
    labels = planned.pool.y.numpy()
    logits = load_all_outputs(run, planned)
    if cfg.output_defense is not None:
        apply_output_defense(logits, cfg.output_defense, labels, plan.keep, plan.split.holdout,
                             list(cfg.queries))
    wants_features = any(getattr(build_attack(spec, f"attacks[{i}]"), "needs_features", False)
                         for i, spec in enumerate(cfg.attacks))
    return AttackInput(logits=logits, labels=labels, keep=plan.keep,
                       query_names=list(cfg.queries), population=plan.split.population,
                       features=input_features(planned.pool.x) if wants_features else None)


def score_stage(run: RunDir, planned: Audit) -> dict[str, Any]:
    """Score every attack on every target over the audited samples; write the scores as one
    generation; return the summary (not yet published)."""
    cfg, plan = planned.cfg, planned.plan
    data = attack_input(run, planned)
    labels, logits = data.labels, data.logits
    targets = list(plan.targets)
    records = [read_json(run.model_dir(t) / MODEL_RECORD) for t in targets]
    privacy = privacy_summary(records)
    with run.new_scores() as folder:
        attacks = score_attacks(data, cfg.attacks, targets, plan.references,
                                plan.split.audited, folder, privacy)
        scores_dir = folder.name.removesuffix(".tmp").lstrip(".")
    if cfg.memorization_attack is not None:
        write_memorization(run, data, plan, cfg.memorization_attack, scores_dir)
    column = cfg.queries.index("identity") if "identity" in cfg.queries else 0
    stats = accuracy_stats(logits, labels, plan.keep, plan.split.audited, targets, column)
    stats["train_seconds_mean"] = float(np.mean([r["train_seconds"] for r in records]))
    return {
        "layout": 2, "name": cfg.run_name(), "run_dir": str(run.root),
        "run_identity": planned.run_identity, "protocol": cfg.protocol, "targets": targets,
        "num_models": len(plan.keep), "pool_size": int(len(labels)),
        "audited_size": int(len(plan.split.audited)),
        "population_size": int(len(plan.split.population)),
        "holdout_size": int(len(plan.split.holdout)), "queries": list(cfg.queries),
        "scores_dir": scores_dir,
        "target_models": {**stats, **robust_summary(run, planned, targets)},
        "attacks": attacks, **({"privacy": privacy} if privacy else {}),
        **({"nsde": nsde} if (nsde := nsde_summary(planned, privacy)) else {}),
        "config": cfg.model_dump(mode="json"),
    }


NSDE_DELTA = 1e-5  # the delta of paper A's NSDE statements (Sec. 5.1-5.2)


def nsde_summary(planned: Audit, privacy: dict[str, Any]) -> dict[str, Any]:
    """For SDE targets: paper A's Theorem 4.1 guarantee of the target architecture (its sigma,
    T and blocks; L from the spectral-norm bound, else an assumed L = 1, recorded as such)
    beside the accountant's epsilon when the targets were also trained with DP-SGD."""
    from miaudit.privacy import nsde

    job = planned.jobs[planned.plan.targets[0]]
    model = build_architecture(job.model, job.train, planned.pool)
    try:
        params = nsde.model_sde_parameters(model)
    except ValueError:
        return {}  # not an SDE model
    if params["sigma_theorem"] <= 0:
        return {}  # an SDE model without noise (k = 0) claims nothing
    assumed = params.get("lipschitz_bound") is None
    delta = privacy.get("delta", NSDE_DELTA)
    guarantee = nsde.model_guarantee(model, delta, lipschitz=1.0 if assumed else None)
    if assumed:
        guarantee["lipschitz_source"] = "assumed L = 1 (the drift is not spectrally normed)"
    guarantee["accountant_epsilon"] = privacy.get("epsilon")
    return guarantee


def privacy_summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The DP guarantee the targets were trained under (dpsgd records epsilon per epoch), or
    {} when any target was trained without one. The claimed epsilon is the largest over
    targets, so a lower bound above it contradicts at least one target's guarantee."""
    logs = [record.get("log", {}) for record in records]
    if not logs or not all(log.get("epsilon") for log in logs):
        return {}
    return {
        "epsilon": max(float(log["epsilon"][-1]) for log in logs),
        "delta": float(logs[0]["delta"][-1]),
        "noise_multiplier": float(logs[0]["noise_multiplier"][-1]),
        "sample_rate": float(logs[0]["sample_rate"][-1]),
        "epsilon_per_epoch": [float(v) for v in logs[0]["epsilon"]],
        "note": "empirical_epsilon per attack: Clopper-Pearson lower bound (95%, Bonferroni over "
                "thresholds) from the pooled (target, sample) decisions; trials within one "
                "model are not independent runs, so read it as an indicator, not a proof "
                "(Jagielski et al. 2020 use one canary per training run: `miaudit privacy "
                "audit` does that).",
    }


def robust_summary(run: RunDir, planned: Audit,
                   targets: list[int]) -> dict[str, float | list[float]]:
    """Mean natural/robust accuracy over targets, when robust evaluation ran."""
    robust = planned.cfg.robust_eval
    if robust is None:
        return {}
    settings = robust.model_dump()
    tables = [read_json(run.eval_path(t, ids.eval_identity(planned.jobs[t].identity,
                                                           settings)))["robust"]
              for t in targets]
    summary: dict[str, float | list[float]] = {}
    for split in ("train", "test"):
        for kind in ("natural_acc", "robust_acc"):
            values = [float(table[split][kind]) for table in tables]
            summary[f"{split}_{kind}"] = float(np.mean(values))
            summary[f"{split}_{kind}_per_target"] = values  # for intervals over the targets
    return summary


def write_memorization(run: RunDir, data: AttackInput, plan: Plan, attack: str,
                       scores_dir: str) -> None:
    """DeMem Figure 1 analysis for the first target, from ``attack``'s scores (audited
    samples only)."""
    from miaudit.analysis.memorization import memorization_analysis, plot_memorization_analysis
    from miaudit.io import read_array

    audited = plan.split.audited
    target = plan.targets[0]
    scores = read_array(run.root / scores_dir / scores_name(attack))[0]
    table = memorization_analysis(data.logits[:, audited], data.labels[audited],
                                  plan.keep[:, audited], scores, target)
    table["attack"] = attack
    write_json(run.root / "memorization.json", table)
    plot_memorization_analysis(table, run.root / "memorization.png")
