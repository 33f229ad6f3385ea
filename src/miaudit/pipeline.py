"""The audit pipeline: plan memberships, train every model (resumably), query, attack, report.

``audit(config) -> Results`` is the public entry point; the CLI's ``miaudit audit`` calls it.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from miaudit import metrics
from miaudit.attacks import AttackInput
from miaudit.config import (
    AuditConfig,
    ModelConfig,
    RobustEvalConfig,
    TrainConfig,
    attack_label,
    load_config,
    validate_config,
)
from miaudit.data import Pool, make_pool
from miaudit.models import build_model
from miaudit.planning import Plan, make_plan, model_seed
from miaudit.privacy.bounds import empirical_epsilon
from miaudit.queries import query_outputs
from miaudit.registry import ATTACKS, DATASETS, OUTPUT_DEFENSES, PENALTIES, RECIPES, parse_spec
from miaudit.rundir import (
    ModelCache,
    RunDir,
    RunDirError,
    read_array,
    scores_path,
    write_array,
    write_json,
)
from miaudit.training import Recipe, TrainEnv, TrainParams


@dataclass
class Results:
    """What an audit produced: the run directory and the contents of its results.json."""

    run_dir: Path
    summary: dict[str, Any]

    @property
    def attacks(self) -> dict[str, Any]:
        return self.summary["attacks"]

    def metric(self, attack: str, key: str, view: str = "pooled") -> float:
        """E.g. ``results.metric("lira", "tpr@0.1%")``; view is pooled, mean or std."""
        return self.attacks[attack][view][key]


def audit(config: AuditConfig | dict[str, Any] | str | Path | None = None, *,
          console: Console | None = None, show_progress: bool = True) -> Results:
    """Run (or resume) the audit described by ``config`` and return its results."""
    cfg = _coerce_config(config)
    console = console or Console(stderr=True)
    device = resolve_device(cfg.device)
    run = RunDir(cfg.run_dir())
    run.claim(cfg.training_hash(), cfg.model_dump(mode="json"))
    started = time.perf_counter()
    pool = load_pool(cfg)
    plan = load_or_make_plan(run, cfg, len(pool))
    train_seconds = train_all(run, cfg, plan, pool, device, console, show_progress)
    attack_started = time.perf_counter()
    summary = evaluate(run, cfg, plan, pool.y.numpy())
    summary["timing"] = {
        "train_seconds_this_run": round(train_seconds, 2),
        "attack_seconds": round(time.perf_counter() - attack_started, 2),
        "total_seconds_this_run": round(time.perf_counter() - started, 2),
        "device": str(device),
    }
    write_json(run.root / "results.json", summary)
    from miaudit.report import render_plots

    render_plots(run.root, summary)
    return Results(run_dir=run.root, summary=summary)


def _coerce_config(config: AuditConfig | dict[str, Any] | str | Path | None) -> AuditConfig:
    if isinstance(config, AuditConfig):
        return config
    if isinstance(config, dict):
        return validate_config(config)
    return load_config(None if config is None else Path(config))


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(name)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {name!r} requested but CUDA is not available")
    return device


def load_pool(cfg: AuditConfig) -> Pool:
    splits = DATASETS.build(cfg.data.name, data_dir=cfg.data.data_dir, **cfg.data.options)
    return make_pool(splits, cfg.data.pool, cfg.data.pool_size, cfg.seed)


def load_or_make_plan(run: RunDir, cfg: AuditConfig, num_samples: int) -> Plan:
    plan = make_plan(cfg.protocol, cfg.num_models, num_samples, cfg.seed, cfg.num_targets)
    path = run.root / "keep.npy"
    if path.exists():
        stored = read_array(path)
        if not np.array_equal(stored, plan.keep):
            raise RunDirError(f"{path} differs from the keep matrix this config plans")
    else:
        write_array(path, plan.keep)
    return plan


# -- training ----------------------------------------------------------------------------------
def model_configs(cfg: AuditConfig, plan: Plan, index: int) -> tuple[ModelConfig, TrainConfig]:
    """Architecture and recipe of model ``index`` (references may differ under fixed_target)."""
    if plan.is_reference_architecture(index):
        return cfg.reference_model or cfg.model, cfg.reference_train or cfg.train
    return cfg.model, cfg.train


def build_recipe(train: TrainConfig) -> Recipe:
    penalties = []
    for spec in train.penalties:
        name, options = parse_spec(spec)
        penalties.append(PENALTIES.build(name, **options))
    return RECIPES.build(train.recipe, penalties=penalties, **train.recipe_options)


def train_params(train: TrainConfig) -> TrainParams:
    fields = TrainParams.__dataclass_fields__
    return TrainParams(**{k: v for k, v in train.model_dump().items() if k in fields})


def build_architecture(model_cfg: ModelConfig, pool: Pool) -> torch.nn.Module:
    return build_model(model_cfg.name, input_shape=pool.input_shape,
                       num_classes=pool.num_classes, width=model_cfg.width, **model_cfg.options)


def validation_split(plan: Plan, index: int, fraction: float, seed: int) -> np.ndarray:
    """Indices of held-out samples for recipes that need validation data (early stopping,
    MMD): a seeded subset of the model's OUT samples. They stay non-members for the attack;
    the model never trains on them, only selects or regularizes with them."""
    out = np.flatnonzero(~plan.keep[index])
    rng = np.random.default_rng(np.random.SeedSequence([seed, index, 0x56414C]))
    return np.sort(rng.permutation(out)[: max(1, int(round(fraction * len(out))))])


def model_key(cfg: AuditConfig, plan: Plan, index: int) -> str:
    """Everything that determines model ``index`` and its stored outputs, hashed: two audits
    (or two run directories) that agree on it would train the very same model."""
    model_cfg, train_cfg = model_configs(cfg, plan, index)
    fingerprint = {
        "data": cfg.data.model_dump(mode="json"), "pool_seed": cfg.seed,
        "model": model_cfg.model_dump(mode="json"), "train": train_cfg.model_dump(mode="json"),
        "model_seed": model_seed(cfg.seed, index), "queries": list(cfg.queries),
        "validation_fraction": cfg.validation_fraction,
        "robust_eval": None if cfg.robust_eval is None else cfg.robust_eval.model_dump(),
        "keep": hashlib.sha256(np.packbits(plan.keep[index]).tobytes()).hexdigest(),
        "pool_size": int(plan.keep.shape[1]),
    }
    return hashlib.sha256(json.dumps(fingerprint, sort_keys=True).encode()).hexdigest()[:32]


def train_or_fetch(run: RunDir, cfg: AuditConfig, plan: Plan, pool: Pool, index: int,
                   device: torch.device, progress: Any = None) -> bool:
    """Model ``index`` from the shared model cache when an identical one was trained before
    (True), else trained here and added to the cache (False)."""
    if not cfg.share_models:
        train_one(run, cfg, plan, pool, index, device, progress)
        return False
    cache = ModelCache(cfg.output_dir / "model_cache")
    key = model_key(cfg, plan, index)
    if cache.fetch(key, run.model_dir(index)):
        return True
    train_one(run, cfg, plan, pool, index, device, progress)
    cache.store(key, run.model_dir(index))
    return False


def train_one(run: RunDir, cfg: AuditConfig, plan: Plan, pool: Pool, index: int,
              device: torch.device, progress: Any = None) -> None:
    """Train model ``index`` on its IN half, query it on the whole pool, save atomically."""
    model_cfg, train_cfg = model_configs(cfg, plan, index)
    seed = model_seed(cfg.seed, index)
    recipe = build_recipe(train_cfg)
    torch.manual_seed(seed)
    model = build_architecture(model_cfg, pool)
    member = torch.from_numpy(plan.keep[index])
    x_val = y_val = None
    if recipe.needs_validation:
        held_out = torch.from_numpy(validation_split(plan, index, cfg.validation_fraction, seed))
        x_val, y_val = pool.x[held_out], pool.y[held_out]
    started = time.perf_counter()
    env = TrainEnv(device=device, seed=seed, progress=progress)
    model, log = recipe.train(model, pool.x[member], pool.y[member], train_params(train_cfg),
                              env, x_val, y_val)
    train_seconds = time.perf_counter() - started
    logits = query_outputs(model, pool.x, cfg.queries, device, seed)
    correct = (logits[:, 0].argmax(1) == pool.y).numpy()
    meta = {
        "index": index, "seed": seed, "model": model_cfg.model_dump(mode="json"),
        "recipe": train_cfg.recipe, "train_seconds": round(train_seconds, 3),
        "query_seconds": round(time.perf_counter() - started - train_seconds, 3),
        "train_accuracy": float(correct[plan.keep[index]].mean()),
        "test_accuracy": float(correct[~plan.keep[index]].mean()),
        "log": _jsonable(log),
    }
    if cfg.robust_eval is not None:
        meta["robust"] = robust_accuracies(model, pool, plan.keep[index], cfg.robust_eval,
                                           device, seed)
    run.save_model(index, model.state_dict(), logits, meta)


def robust_accuracies(model: torch.nn.Module, pool: Pool, member: np.ndarray,
                      robust: RobustEvalConfig, device: torch.device,
                      seed: int) -> dict[str, dict[str, float]]:
    """Natural and PGD robust accuracy on (a seeded subset of) members and non-members."""
    from miaudit.defenses.adversarial import natural_and_robust_accuracy

    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x524F42]))
    result = {}
    for split, rows in (("train", np.flatnonzero(member)), ("test", np.flatnonzero(~member))):
        chosen = torch.from_numpy(np.sort(rng.permutation(rows)[: robust.max_samples]))
        result[split] = natural_and_robust_accuracy(
            model, pool.x[chosen], pool.y[chosen], eps=robust.eps, step=robust.step,
            steps=robust.steps, device=device, seed=seed)
    return result


def train_all(run: RunDir, cfg: AuditConfig, plan: Plan, pool: Pool, device: torch.device,
              console: Console, show_progress: bool) -> float:
    """Train the models that are not complete yet; returns the seconds spent."""
    todo = [m for m in range(len(plan.keep)) if not run.is_complete(m)]
    done = len(plan.keep) - len(todo)
    if done:
        console.print(f"[dim]resuming: {done} of {len(plan.keep)} models already trained[/dim]")
    started = time.perf_counter()
    reused = 0
    with _progress(console, show_progress) as bar:
        overall = bar.add_task("models", total=len(plan.keep), completed=done)
        for index in todo:
            epochs = bar.add_task(f"model {index}", total=None)

            def on_epoch(epoch: int, total: int, stats: dict[str, float], task: Any = epochs,
                         index: int = index) -> None:
                loss = stats.get("loss", float("nan"))
                bar.update(task, completed=epoch, total=total,
                           description=f"model {index} loss {loss:.3f}")

            reused += train_or_fetch(run, cfg, plan, pool, index, device, on_epoch)
            bar.remove_task(epochs)
            bar.advance(overall)
    seconds = time.perf_counter() - started
    if reused:
        console.print(f"reused {reused} identical models from {cfg.output_dir / 'model_cache'}")
    if len(todo) > reused:
        trained = len(todo) - reused
        console.print(f"trained {trained} models in {seconds:.1f} s "
                      f"({seconds / trained:.1f} s per model, device {device})")
    return seconds


@contextmanager
def _progress(console: Console, enabled: bool) -> Iterator[Progress]:
    progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console, disable=not enabled, transient=False)
    with progress:
        yield progress


def _jsonable(log: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {key: [float(v) if isinstance(v, (int, float, np.floating)) else str(v) for v in values]
            for key, values in log.items()}


# -- attacks -----------------------------------------------------------------------------------
def load_outputs(run: RunDir, plan: Plan) -> np.ndarray:
    """(M, N, Q, C) float32 logits of every model, filled in place (one copy in memory)."""
    first = run.load_logits(0).numpy()
    logits = np.empty((len(plan.keep), *first.shape), dtype=np.float32)
    logits[0] = first
    for index in range(1, len(plan.keep)):
        logits[index] = run.load_logits(index).numpy()
    return logits


def apply_output_defense(logits: np.ndarray, spec: Any, labels: np.ndarray,
                         keep: np.ndarray) -> None:
    """Replace every model's released outputs by the defended ones (in place). Each model's
    defender knows only its own training set (its keep row)."""
    name, options = parse_spec(spec)
    defense = OUTPUT_DEFENSES.build(name, **options)
    for index in range(len(keep)):
        logits[index] = defense.apply(logits[index], labels, keep[index])


def evaluate(run: RunDir, cfg: AuditConfig, plan: Plan, labels: np.ndarray) -> dict[str, Any]:
    """Score every attack on every target; write per-sample scores; return the summary."""
    logits = load_outputs(run, plan)
    if cfg.output_defense is not None:
        apply_output_defense(logits, cfg.output_defense, labels, plan.keep)
    data = AttackInput(logits=logits, labels=labels, keep=plan.keep,
                       query_names=list(cfg.queries))
    targets = list(plan.targets)
    members = plan.keep[targets]
    metas = [run.load_meta(t) for t in targets]
    privacy = privacy_summary(metas)
    attacks: dict[str, Any] = {}
    for spec in cfg.attacks:
        label, name, options = attack_label(spec)
        attack = ATTACKS.build(name, **options)
        scores, infos = [], []
        for target in targets:
            scores.append(attack.score(data, target, plan.references(target)))
            infos.append(getattr(attack, "last_info", None))
        scores = np.stack(scores)
        per_target = [metrics.summarize(s, m) for s, m in zip(scores, members)]
        attacks[label] = {
            "attack": name, "options": options,
            "pooled": metrics.summarize(scores.ravel(), members.ravel()),
            **metrics.aggregate(per_target),
            "per_target": per_target,
            "per_class": metrics.per_class(scores.ravel(), members.ravel(),
                                           np.tile(labels, len(targets))),
        }
        if any(info is not None for info in infos):
            attacks[label]["info"] = infos
        if privacy:
            attacks[label]["empirical_epsilon"] = empirical_epsilon(
                scores, members, privacy["delta"], claimed_epsilon=privacy["epsilon"]).as_dict()
        write_array(scores_path(run.root, label), scores)
    if cfg.memorization_attack is not None:
        write_memorization(run, data, plan, cfg.memorization_attack)
    train_acc = np.array([m["train_accuracy"] for m in metas])
    test_acc = np.array([m["test_accuracy"] for m in metas])
    return {
        "name": cfg.name, "run_dir": str(run.root), "training_hash": cfg.training_hash(),
        "protocol": cfg.protocol, "targets": targets, "num_models": len(plan.keep),
        "pool_size": int(len(labels)), "queries": list(cfg.queries),
        "target_models": {
            "train_accuracy": float(train_acc.mean()), "test_accuracy": float(test_acc.mean()),
            "generalization_gap": float((train_acc - test_acc).mean()),
            "train_accuracy_std": float(train_acc.std()),
            "test_accuracy_std": float(test_acc.std()),
            "train_seconds_mean": float(np.mean([m["train_seconds"] for m in metas])),
            **robust_summary(metas),
        },
        "attacks": attacks,
        **({"privacy": privacy} if privacy else {}),
        "config": cfg.model_dump(mode="json"),
    }


def privacy_summary(metas: list[dict[str, Any]]) -> dict[str, Any]:
    """The DP guarantee the targets were trained under (dpsgd records epsilon per epoch), or
    {} when any target was trained without one. The claimed epsilon is the largest over
    targets, so a lower bound above it contradicts at least one target's guarantee."""
    logs = [meta.get("log", {}) for meta in metas]
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
                "(Jagielski et al. 2020 use one canary per training run).",
    }


def robust_summary(metas: list[dict[str, Any]]) -> dict[str, float]:
    """Mean natural/robust accuracy over targets, when robust evaluation ran."""
    if not all("robust" in meta for meta in metas):
        return {}
    return {f"{split}_{kind}": float(np.mean([m["robust"][split][kind] for m in metas]))
            for split in ("train", "test") for kind in ("natural_acc", "robust_acc")}


def write_memorization(run: RunDir, data: AttackInput, plan: Plan, attack: str) -> None:
    """DeMem Figure 1 analysis for the first target, from ``attack``'s scores."""
    from miaudit.analysis.memorization import memorization_analysis, plot_memorization_analysis

    target = plan.targets[0]
    scores = read_array(scores_path(run.root, attack))[0]
    table = memorization_analysis(data.logits, data.labels, plan.keep, scores, target)
    table["attack"] = attack
    write_json(run.root / "memorization.json", table)
    plot_memorization_analysis(table, run.root / "memorization.png")
