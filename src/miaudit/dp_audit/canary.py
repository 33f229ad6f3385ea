"""Canaries and the training harness of an empirical DP audit (``miaudit dp-audit``).

A canary is a training sample whose membership the auditor controls and then tries to detect:

- ``natural``: held-out samples of the data set (taken out of the training split), the
  weakest canary: a DP bound from them says how well ordinary data are protected;
- ``mislabelled``: held-out samples with their label replaced by a different, random one; a
  model that fits them memorizes them, which a per-example guarantee must prevent;
- ``ood``: crafted out-of-distribution inputs, i.i.d. uniform-noise images with random labels
  (Jagielski et al. 2020 and Nasr et al. 2021 show such inputs are far easier to detect than
  natural ones, so they bring an empirical bound much closer to the worst case the DP
  guarantee covers).

Two protocols (the bounds are in :mod:`miaudit.privacy.auditing`):

- one run (``runs = 0``, Steinke, Nasr & Jagielski 2023): m canaries, each included with
  probability 1/2 (seeded), one model trained on the base set plus the included canaries;
- multi-run (``runs = R``, Jagielski et al. 2020): one canary; R models trained with it and R
  without (seeds differ, the base set is the same).

The signal is the canary's negative cross-entropy loss at its (possibly flipped) label, from one
forward pass of the released model in eval mode (SDENet keeps its noise on in eval mode).
Everything is validated (:class:`DPAuditConfig`, model and recipe built once) before training.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from miaudit._runtime.io import write_json
from miaudit._runtime.machine import work_limit
from miaudit.config import DataConfig, ModelConfig, TrainConfig
from miaudit.data import Pool
from miaudit.errors import ConfigError
from miaudit.privacy import auditing
from miaudit.registry import DATASETS
from miaudit.training import TrainEnv

CANARY_KINDS = ("natural", "mislabelled", "ood")
CanaryKind = Literal["natural", "mislabelled", "ood"]


# -- configuration -------------------------------------------------------------------------------
class DPAuditConfig(BaseModel):
    """One empirical DP audit: data, model, recipe, canaries, protocol and statistics."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    name: str = Field(default="dp_audit", pattern=r"^[A-Za-z0-9_.-]+$")
    seed: int = 0
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=lambda: ModelConfig(name="mlp"))
    train: TrainConfig = Field(default_factory=lambda: TrainConfig(epochs=20, batch_size=64))
    canary_kind: CanaryKind = "mislabelled"
    canaries: int = Field(default=256, ge=1)  # m (one run; multi-run uses the first only)
    runs: int = Field(default=0, ge=0)  # 0: one-run audit; R >= 2: R runs in + R runs out
    # one run: (k+, k-) pairs searched with Bonferroni; default: k+ = k- in {5, 10, 25, 50}% of m
    guesses: list[tuple[int, int]] | None = None
    selection: Literal["split", "bonferroni"] = "split"  # multi-run threshold selection
    confidence: float = Field(default=0.95, gt=0, lt=1)
    delta: float = Field(default=1e-5, ge=0, lt=1)
    # a claimed epsilon to print beside the bound when the recipe records none (e.g. NSDE's)
    claimed_epsilon: float | None = Field(default=None, ge=0)
    device: str = "cpu"

    @field_validator("runs")
    @classmethod
    def _runs(cls, runs: int) -> int:
        if runs == 1:
            raise ConfigError("runs must be 0 (one-run audit) or >= 2 (multi-run)")
        return runs

    @field_validator("device")
    @classmethod
    def _device(cls, device: str) -> str:
        from miaudit.auditor.stages.plan import resolve_device

        resolve_device(device)  # one line now, not a traceback after the data is read
        return device

    @model_validator(mode="after")
    def _consistent(self) -> DPAuditConfig:
        if self.train.penalties:
            raise ConfigError("penalties are not supported by the DP audit harness")
        recipe_delta = self.train.recipe_options.get("delta")
        if self.train.recipe == "dpsgd" and recipe_delta is not None \
                and not math.isclose(recipe_delta, self.delta):
            raise ConfigError(f"delta ({self.delta}) differs from the dpsgd recipe's delta "
                             f"({recipe_delta}): audit the guarantee that was claimed")
        for k_pos, k_neg in self.guesses or []:
            if k_pos < 0 or k_neg < 0 or not 0 < k_pos + k_neg <= self.canaries:
                raise ConfigError(f"guesses ({k_pos}, {k_neg}) must be >= 0 with "
                                 f"0 < k+ + k- <= canaries ({self.canaries})")
        if self.runs and self.guesses:
            raise ValueError("guesses apply to the one-run audit (runs 0); the multi-run audit "
                             "(runs >= 2) chooses its threshold by selection "
                             f"({self.selection}): drop guesses or set runs 0")
        trainings = 2 * self.runs * self.train.epochs  # R runs with the canary, R without
        if trainings > (limit := work_limit("dp_audit_epochs", 100_000)):
            raise ValueError(f"runs {self.runs} trains {2 * self.runs:,} models of "
                             f"{self.train.epochs} epochs ({trainings:,} epochs), more than "
                             f"{limit:,.0f}; lower runs (Jagielski et al. use hundreds), or "
                             "raise the bound with MIAUDIT_MAX_DP_AUDIT_EPOCHS")
        if self.runs and self.selection == "split" and self.runs < 2:
            raise ConfigError("selection 'split' needs runs >= 2")
        return self

    def recipe_options(self) -> dict[str, Any]:
        """The recipe's options, with the audit's delta for dpsgd (one delta throughout)."""
        options = dict(self.train.recipe_options)
        if self.train.recipe == "dpsgd":
            options.setdefault("delta", self.delta)
        return options

    def guess_grid(self) -> list[tuple[int, int]]:
        if self.guesses:
            return [tuple(g) for g in self.guesses]
        sizes = sorted({max(1, int(round(f * self.canaries / 2))) for f in (0.05, 0.1, 0.25)})
        grid = [(k, k) for k in sizes if 2 * k <= self.canaries]
        grid.append((self.canaries - self.canaries // 2, self.canaries // 2))  # guess all
        return list(dict.fromkeys(grid))


# -- canaries ------------------------------------------------------------------------------------
@dataclass
class Canaries:
    """m canaries and the training base that never contains them."""

    x: torch.Tensor
    y: torch.Tensor
    kind: str
    base_x: torch.Tensor
    base_y: torch.Tensor
    source: np.ndarray  # index into the training split (-1 for crafted canaries)


def make_canaries(x: torch.Tensor, y: torch.Tensor, count: int, kind: str, num_classes: int,
                  seed: int) -> Canaries:
    """Draw ``count`` canaries of ``kind`` (seeded); natural and mislabelled ones are removed
    from the base training set, so "out" really means out."""
    if kind not in CANARY_KINDS:
        raise ConfigError(f"canary kind must be one of {', '.join(CANARY_KINDS)}; got {kind!r}")
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0xCA7A]))
    if kind == "ood":
        generator = torch.Generator().manual_seed(int(rng.integers(2**31)))
        cx = torch.rand((count, *x.shape[1:]), generator=generator, dtype=x.dtype)
        cy = torch.from_numpy(rng.integers(num_classes, size=count)).long()
        return Canaries(cx, cy, kind, x, y, np.full(count, -1))
    if count >= len(y):
        raise ConfigError(f"{count} canaries leave no base training data ({len(y)} samples)")
    order = rng.permutation(len(y))
    chosen, rest = np.sort(order[:count]), np.sort(order[count:])
    cx, cy = x[chosen], y[chosen].clone()
    if kind == "mislabelled":  # a uniformly random label different from the true one
        shift = torch.from_numpy(rng.integers(1, num_classes, size=count)).long()
        cy = (cy + shift) % num_classes
    return Canaries(cx, cy, kind, x[rest], y[rest], chosen)


def inclusion_bits(count: int, seed: int) -> np.ndarray:
    """Each canary included independently with probability 1/2 (Steinke et al. 2023, Alg. 1)."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0x1B175]))
    return rng.random(count) < 0.5


@torch.no_grad()
def canary_scores(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor,
                  device: torch.device, batch_size: int = 512) -> np.ndarray:
    """Negative cross-entropy of each canary at its label (higher = "member")."""
    model.eval()
    losses = [F.cross_entropy(model(x[i:i + batch_size].to(device)),
                              y[i:i + batch_size].to(device), reduction="none").cpu()
              for i in range(0, len(y), batch_size)]
    return -torch.cat(losses).double().numpy()


@torch.no_grad()
def accuracy(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, device: torch.device,
             batch_size: int = 512) -> float:
    model.eval()
    correct = sum(int((model(x[i:i + batch_size].to(device)).argmax(1).cpu()
                       == y[i:i + batch_size]).sum()) for i in range(0, len(y), batch_size))
    return correct / max(1, len(y))


# -- training ------------------------------------------------------------------------------------
@dataclass
class Setup:
    """What every run of an audit shares: data splits, canaries, template pool."""

    cfg: DPAuditConfig
    canaries: Canaries
    x_test: torch.Tensor
    y_test: torch.Tensor
    pool: Pool
    device: torch.device


def prepare(cfg: DPAuditConfig) -> Setup:
    """Load the data, draw the canaries and build model and recipe once, so that every option
    is checked before any training starts."""
    splits = DATASETS.create(cfg.data.name, {"data_dir": cfg.data.data_dir, **cfg.data.options},
                             where=f"data set {cfg.data.name!r}")
    canaries = make_canaries(splits.x_train, splits.y_train, cfg.canaries, cfg.canary_kind,
                             splits.num_classes, cfg.seed)
    pool = Pool(splits.x_train, splits.y_train, splits.num_classes, list(splits.class_names))
    setup = Setup(cfg, canaries, splits.x_test, splits.y_test, pool, torch.device(cfg.device))
    recipe = _recipe(cfg)
    if recipe.needs_validation:
        raise ConfigError(f"recipe {cfg.train.recipe!r} needs validation data, which the DP "
                         "audit harness does not provide")
    recipe.architecture(_architecture(setup))
    return setup


def _recipe(cfg: DPAuditConfig) -> Any:
    from miaudit.config import build_recipe

    return build_recipe(cfg.train.model_copy(update={"recipe_options": cfg.recipe_options()}))


def _architecture(setup: Setup) -> torch.nn.Module:
    from miaudit.auditor.modeljob import build_registry_model

    return build_registry_model(setup.cfg.model, setup.pool)


@dataclass
class RunResult:
    scores: np.ndarray
    test_accuracy: float
    claimed_epsilon: float | None  # what the recipe's accountant recorded (dpsgd)
    seconds: float


def train_and_score(setup: Setup, x: torch.Tensor, y: torch.Tensor, seed: int,
                    score_x: torch.Tensor, score_y: torch.Tensor) -> RunResult:
    """Train one model on (x, y) with the configured recipe and score (score_x, score_y)."""
    started = time.perf_counter()
    torch.manual_seed(seed)
    recipe = _recipe(setup.cfg)
    model = _architecture(setup)
    env = TrainEnv(device=setup.device, seed=seed)
    model, log = recipe.train(model, x, y, setup.cfg.train.params(), env)
    epsilons = log.get("epsilon")
    return RunResult(
        scores=canary_scores(model, score_x, score_y, setup.device),
        test_accuracy=accuracy(model, setup.x_test, setup.y_test, setup.device),
        claimed_epsilon=float(epsilons[-1]) if epsilons else None,
        seconds=time.perf_counter() - started)


# -- the audits ----------------------------------------------------------------------------------
@dataclass
class DPAuditReport:
    """Everything one audit produced (JSON-able through :meth:`as_dict`)."""

    mode: str  # "one_run" | "multi_run"
    audit: dict[str, Any]
    claimed_epsilon: float | None
    claimed_source: str | None
    test_accuracy: float
    test_accuracy_std: float
    train_seconds: float
    config: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def epsilon_lower(self) -> float:
        return float(self.audit["epsilon_lower"])

    @property
    def verdict(self) -> str | None:
        if self.claimed_epsilon is None:
            return None
        return "contradicted" if self.epsilon_lower > self.claimed_epsilon else "consistent"

    def as_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "epsilon_lower": self.epsilon_lower,
                "claimed_epsilon": self.claimed_epsilon, "claimed_source": self.claimed_source,
                "verdict": self.verdict, "test_accuracy": self.test_accuracy,
                "test_accuracy_std": self.test_accuracy_std,
                "train_seconds": round(self.train_seconds, 2), "audit": self.audit,
                **self.extra, "config": self.config}

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        write_json(path, self.as_dict())
        return path


def _claim(cfg: DPAuditConfig, recorded: list[float | None]) -> tuple[float | None, str | None]:
    if all(value is not None for value in recorded) and recorded:
        return max(v for v in recorded if v is not None), f"{cfg.train.recipe} accountant"
    if cfg.claimed_epsilon is not None:
        return cfg.claimed_epsilon, "config (claimed_epsilon)"
    return None, None


def one_run(setup: Setup) -> DPAuditReport:
    """Steinke et al. 2023: one model, m canaries each in with probability 1/2."""
    cfg, canaries = setup.cfg, setup.canaries
    included = inclusion_bits(len(canaries.y), cfg.seed)
    x = torch.cat([canaries.base_x, canaries.x[torch.from_numpy(included)]])
    y = torch.cat([canaries.base_y, canaries.y[torch.from_numpy(included)]])
    result = train_and_score(setup, x, y, cfg.seed, canaries.x, canaries.y)
    audit = auditing.one_run_audit(result.scores, included, cfg.guess_grid(), cfg.delta,
                                   cfg.confidence)
    claimed, source = _claim(cfg, [result.claimed_epsilon])
    return DPAuditReport(
        "one_run", audit.as_dict(), claimed, source, result.test_accuracy, 0.0, result.seconds,
        cfg.model_dump(mode="json"),
        {"included": int(included.sum()), "train_size": len(y),
         "max_provable": auditing.max_one_run_epsilon(cfg.guess_grid(), cfg.delta,
                                                      cfg.confidence, audit.canaries)})


def multi_run(setup: Setup) -> DPAuditReport:
    """Jagielski et al. 2020: R models with the first canary, R without."""
    cfg, canaries = setup.cfg, setup.canaries
    cx, cy = canaries.x[:1], canaries.y[:1]
    scores = {True: [], False: []}
    accuracies, claims, seconds = [], [], 0.0
    for run in range(cfg.runs):
        for inside in (True, False):
            x = torch.cat([canaries.base_x, cx]) if inside else canaries.base_x
            y = torch.cat([canaries.base_y, cy]) if inside else canaries.base_y
            seed = cfg.seed + 1000 + 2 * run + int(inside)
            result = train_and_score(setup, x, y, seed, cx, cy)
            scores[inside].append(float(result.scores[0]))
            accuracies.append(result.test_accuracy)
            claims.append(result.claimed_epsilon)
            seconds += result.seconds
    audit = auditing.multi_run_audit(np.array(scores[True]), np.array(scores[False]),
                                     cfg.delta, cfg.confidence, cfg.selection, cfg.seed)
    claimed, source = _claim(cfg, claims)
    return DPAuditReport(
        "multi_run", audit.as_dict(), claimed, source, float(np.mean(accuracies)),
        float(np.std(accuracies)), seconds, cfg.model_dump(mode="json"),
        {"scores_in": scores[True], "scores_out": scores[False],
         "max_provable": auditing.max_multi_run_epsilon(cfg.runs, cfg.runs, cfg.delta,
                                                        cfg.confidence, cfg.selection)})


def run_dp_audit(cfg: DPAuditConfig | dict[str, Any]) -> DPAuditReport:
    """Validate, train, score and bound: the entry point of ``miaudit dp-audit``."""
    if not isinstance(cfg, DPAuditConfig):
        cfg = DPAuditConfig.model_validate(cfg)
    setup = prepare(cfg)
    return multi_run(setup) if cfg.runs else one_run(setup)
