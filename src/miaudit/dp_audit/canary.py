"""Canaries and the training harness of an empirical DP audit (``miaudit dp-audit``).

A canary is a training sample whose membership the auditor controls and then tries to detect:

- ``natural``: held-out samples of the data set (taken out of the training split), the
  weakest canary: a DP bound from them says how well ordinary data are protected;
- ``mislabelled``: held-out samples with their label replaced by a different, random one; a
  model that fits them memorizes them, which a per-example guarantee must prevent;
- ``ood``: crafted out-of-distribution inputs, i.i.d. uniform-noise images with random labels
  (Jagielski et al. 2020 and Nasr et al. 2021 show such inputs are far easier to detect than
  natural ones, so they bring an empirical bound much closer to the worst case the DP
  guarantee covers);
- ``adversarial``: ``ood`` inputs whose loss at their label is then raised on reference models
  trained without canaries (:func:`craft_adversarial`, after Yoon, Jeung & No 2024).

Two protocols (the bounds are in :mod:`miaudit.privacy.auditing`):

- one run (``runs = 0``, Steinke, Nasr & Jagielski 2023): m canaries, each included with
  probability 1/2 (seeded), one model trained on the base set plus the included canaries;
- multi-run (``runs = R``, Jagielski et al. 2020): one canary; R models trained with it and R
  without (seeds differ, the base set is the same).

Two threat models (``threat_model``):

- ``final_model`` (default): the auditor sees the released model only; input-space canaries
  above, scored by their loss;
- ``all_iterates`` (Nasr et al. 2023, Sec. 4; dpsgd only): the auditor sees every privatized
  update; m Dirac gradient canaries (:mod:`miaudit.recipes.gradient_canaries`) each in with
  probability 1/2, one run; each canary's statistic is the log-likelihood ratio of its per-step
  observations (:func:`miaudit.privacy.gaussian_audit.subsampled_gaussian_llr`).

Analyses (``analyses``; each a (1 - beta)-confidence lower bound, see its module): ``steinke``
and ``fdp`` (one run; :mod:`auditing`, :mod:`fdp_audit`), ``gaussian`` (the Gaussian-DP
estimate, :mod:`gaussian_audit`) and ``clopper_pearson`` (R runs, or the m independent
gradient canaries of an all-iterates run as m trials).

The signal is the canary's negative cross-entropy loss at its (possibly flipped) label, from one
forward pass of the released model in eval mode (SDENet keeps its noise on in eval mode).
Everything is validated (:class:`DPAuditConfig`, model and recipe built once) before training.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
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
from miaudit.privacy import auditing, fdp_audit, gaussian_audit
from miaudit.registry import DATASETS
from miaudit.training import TrainEnv

CANARY_KINDS = ("natural", "mislabelled", "ood", "adversarial")
CanaryKind = Literal["natural", "mislabelled", "ood", "adversarial"]
THREAT_MODELS = ("final_model", "all_iterates")
ANALYSES = ("steinke", "fdp", "gaussian", "clopper_pearson")
Analysis = Literal["steinke", "fdp", "gaussian", "clopper_pearson"]
#: the analyses each protocol supports, in the order reported (the first is the headline)
SUPPORTED = {"one_run": ("steinke", "fdp", "gaussian"),
             "multi_run": ("clopper_pearson", "gaussian"),
             "all_iterates": ("gaussian", "fdp", "steinke", "clopper_pearson")}


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
    # the claim audited: if given it is used (e.g. an epsilon stated elsewhere, NSDE's theorem,
    # a claim from a mis-configured accountant); otherwise the recipe's accountant's epsilon
    claimed_epsilon: float | None = Field(default=None, ge=0)
    device: str = "cpu"
    threat_model: Literal["final_model", "all_iterates"] = "final_model"
    analyses: list[Analysis] | None = None  # default: every analysis the protocol supports
    gradient_canary: Literal["coordinate", "direction"] = "coordinate"  # all_iterates
    gradient_canary_norm: float = Field(default=1.0, gt=0)  # inserted norm / clipping norm
    fdp_family: Literal["gdp", "dp"] = "gdp"  # trade-off family of the f-DP analysis
    # adversarial canaries (final_model): crafted on this many reference models
    reference_models: int = Field(default=2, ge=1)
    craft_steps: int = Field(default=50, ge=1)
    craft_step_size: float = Field(default=0.02, gt=0)  # a fraction of the data's range
    # audit demonstrations only: a bug planted in DP-SGD (recipes.gradient_canaries)
    planted_bug: Literal["noise_over_batch", "unclipped_layer"] | None = None

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
        if self.threat_model == "all_iterates":
            if self.train.recipe != "dpsgd":
                raise ValueError("threat_model all_iterates observes DP-SGD's privatized "
                                 f"updates: it needs recipe dpsgd, not {self.train.recipe!r}")
            if self.runs:
                raise ValueError("threat_model all_iterates is a one-run audit (its m gradient "
                                 "canaries are independent trials): set runs 0")
        elif self.planted_bug is not None:
            raise ValueError("planted_bug is inserted by the all_iterates hook: set "
                             "threat_model all_iterates")
        if self.delta == 0 and "gaussian" in (self.analyses or ()):
            raise ValueError("the gaussian analysis converts mu to eps at delta > 0 (at delta "
                             "= 0 a Gaussian curve has eps = inf): set delta > 0")
        unsupported = sorted(set(self.analyses or ()) - set(SUPPORTED[self.protocol]))
        if unsupported:
            raise ValueError(f"analyses {', '.join(unsupported)} do not apply to the "
                             f"{self.protocol.replace('_', '-')} protocol (it supports "
                             f"{', '.join(SUPPORTED[self.protocol])})")
        return self

    @property
    def protocol(self) -> str:
        if self.threat_model == "all_iterates":
            return "all_iterates"
        return "multi_run" if self.runs else "one_run"

    def analysis_names(self) -> list[str]:
        names = self.analyses or [name for name in SUPPORTED[self.protocol]
                                  if self.delta > 0 or name != "gaussian"]
        return list(dict.fromkeys(names))

    def fdp_families(self) -> list[str]:
        """The f-DP analysis's family first, the other one beside it (GDP needs delta > 0)."""
        if self.delta == 0:
            return ["dp"]
        return [self.fdp_family, "dp" if self.fdp_family == "gdp" else "gdp"]

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
    if kind in ("ood", "adversarial"):  # adversarial ones are crafted from these (prepare)
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
    if not len(y):
        return np.zeros(0)
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
    if cfg.threat_model == "all_iterates":  # gradient canaries: the data stay whole
        canaries = Canaries(splits.x_train[:0], splits.y_train[:0], "gradient", splits.x_train,
                            splits.y_train, np.zeros(0, dtype=int))
    else:
        canaries = make_canaries(splits.x_train, splits.y_train, cfg.canaries, cfg.canary_kind,
                                 splits.num_classes, cfg.seed)
    pool = Pool(splits.x_train, splits.y_train, splits.num_classes, list(splits.class_names))
    setup = Setup(cfg, canaries, splits.x_test, splits.y_test, pool, torch.device(cfg.device))
    recipe = _recipe(cfg)
    if recipe.needs_validation:
        raise ConfigError(f"recipe {cfg.train.recipe!r} needs validation data, which the DP "
                         "audit harness does not provide")
    recipe.architecture(_architecture(setup))
    if cfg.canary_kind == "adversarial" and cfg.threat_model == "final_model":
        setup.canaries = craft_adversarial(setup)
    return setup


def craft_adversarial(setup: Setup) -> Canaries:
    """Input-space canaries crafted on reference models, after Yoon, Jeung & No 2024 ("tighter
    privacy auditing in final model-only scenarios"): from uniform-noise inputs with random
    labels, ``craft_steps`` signed-gradient steps *raise* each canary's loss at its label on
    ``reference_models`` models trained (with the audited recipe) on the base data without any
    canary, projected to the data's range. A canary the model gets most wrong when it is out
    is one whose inclusion moves its loss most. A simplification: Yoon et al. optimise the
    in/out loss gap, which needs models trained with each canary. The reference models use
    seeds the audited run never uses, and the canaries' coins are drawn after crafting from
    their own seed stream, so the audit's statistics are unaffected."""
    cfg, canaries = setup.cfg, setup.canaries
    models = []
    for index in range(cfg.reference_models):
        seed = cfg.seed + 7919 * (index + 1)
        torch.manual_seed(seed)
        model, _ = _recipe(cfg).train(_architecture(setup), canaries.base_x, canaries.base_y,
                                      cfg.train.params(), TrainEnv(device=setup.device,
                                                                   seed=seed))
        model.eval().requires_grad_(False)
        models.append(model)
    low, high = float(canaries.base_x.min()), float(canaries.base_x.max())
    x, y = canaries.x.clone().to(setup.device), canaries.y.to(setup.device)
    for _ in range(cfg.craft_steps):
        x.requires_grad_(True)
        loss = sum(F.cross_entropy(model(x), y, reduction="sum") for model in models)
        (gradient,) = torch.autograd.grad(loss, x)
        x = (x.detach() + cfg.craft_step_size * (high - low) * gradient.sign()).clamp(low, high)
    return replace(canaries, x=x.detach().cpu(), kind="adversarial")


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
                    score_x: torch.Tensor, score_y: torch.Tensor,
                    observer: Any = None) -> RunResult:
    """Train one model on (x, y) with the configured recipe and score (score_x, score_y);
    ``observer`` (all_iterates) is handed the private optimizer by the dpsgd recipe."""
    started = time.perf_counter()
    torch.manual_seed(seed)
    recipe = _recipe(setup.cfg)
    if observer is not None:
        recipe.observer = observer
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

    mode: str  # "one_run" | "multi_run" | "all_iterates"
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
    if cfg.claimed_epsilon is not None:
        return cfg.claimed_epsilon, "config (claimed_epsilon)"
    if all(value is not None for value in recorded) and recorded:
        return max(v for v in recorded if v is not None), f"{cfg.train.recipe} accountant"
    return None, None


def _timed(compute: Any) -> tuple[dict[str, Any], float]:
    started = time.process_time()
    result = compute()
    return result, time.process_time() - started


def _one_run_analysis(name: str, cfg: DPAuditConfig, scores: np.ndarray,
                      included: np.ndarray) -> dict[str, Any]:
    """One analysis of m canaries' scores (higher = "in") and their coins: its bound, what a
    perfect attack could prove with the same canaries, and the CPU seconds it took."""
    grid, m = cfg.guess_grid(), scores.size
    if name == "steinke":
        audit = auditing.one_run_audit(scores, included, grid, cfg.delta, cfg.confidence)
        best = auditing.max_one_run_epsilon(grid, cfg.delta, cfg.confidence, m)
        return {**audit.as_dict(), "max_provable": best}
    if name == "fdp":
        family, *others = cfg.fdp_families()
        audit = fdp_audit.fdp_one_run_audit(scores, included, grid, cfg.delta, cfg.confidence,
                                            family)
        extra = {f"epsilon_lower_{other}_family": fdp_audit.fdp_one_run_audit(
            scores, included, grid, cfg.delta, cfg.confidence, other).epsilon_lower
            for other in others}
        best = fdp_audit.max_fdp_epsilon(m, grid, cfg.delta, cfg.confidence, family)
        return {**audit.as_dict(), **extra, "max_provable": best}
    if name == "gaussian":
        audit = gaussian_audit.one_run_gaussian_audit(scores, included, cfg.delta,
                                                      cfg.confidence)
        return {**audit.as_dict(), "max_provable": None}  # unbounded: mu_hat can grow freely
    if name == "clopper_pearson":  # the m canaries as independent trials (all_iterates)
        audit = auditing.multi_run_audit(scores[included], scores[~included], cfg.delta,
                                         cfg.confidence, cfg.selection, cfg.seed)
        best = auditing.max_multi_run_epsilon(int(included.sum()), int((~included).sum()),
                                              cfg.delta, cfg.confidence, cfg.selection)
        return {**audit.as_dict(), "max_provable": best}
    raise ValueError(f"unknown analysis {name!r}")


def analyse_one_run(cfg: DPAuditConfig, scores: np.ndarray,
                    included: np.ndarray) -> dict[str, dict[str, Any]]:
    """Every configured analysis of one run's canary scores, with its CPU seconds."""
    results = {}
    for name in cfg.analysis_names():
        result, seconds = _timed(lambda n=name: _one_run_analysis(n, cfg, scores, included))
        results[name] = {**result, "cpu_seconds": round(seconds, 4)}
    return results


def _headline(analyses: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return next(iter(analyses.values()))


def one_run(setup: Setup) -> DPAuditReport:
    """Steinke et al. 2023: one model, m canaries each in with probability 1/2."""
    cfg, canaries = setup.cfg, setup.canaries
    included = inclusion_bits(len(canaries.y), cfg.seed)
    x = torch.cat([canaries.base_x, canaries.x[torch.from_numpy(included)]])
    y = torch.cat([canaries.base_y, canaries.y[torch.from_numpy(included)]])
    result = train_and_score(setup, x, y, cfg.seed, canaries.x, canaries.y)
    analyses = analyse_one_run(cfg, result.scores, included)
    headline = _headline(analyses)
    claimed, source = _claim(cfg, [result.claimed_epsilon])
    return DPAuditReport(
        "one_run", headline, claimed, source, result.test_accuracy, 0.0, result.seconds,
        cfg.model_dump(mode="json"),
        {"included": int(included.sum()), "train_size": len(y), "threat_model": "final_model",
         "max_provable": headline["max_provable"], "analyses": analyses})


def all_iterates(setup: Setup) -> DPAuditReport:
    """Nasr et al. 2023's white-box threat model: m Dirac gradient canaries, each in with
    probability 1/2, observed on every privatized update of one DP-SGD run."""
    from miaudit.recipes.gradient_canaries import GradientCanaries

    cfg, canaries = setup.cfg, setup.canaries
    included = inclusion_bits(cfg.canaries, cfg.seed)
    observer = GradientCanaries(included, cfg.seed, cfg.gradient_canary,
                                cfg.gradient_canary_norm, cfg.planted_bug)
    result = train_and_score(setup, canaries.base_x, canaries.base_y, cfg.seed,
                             canaries.x[:0], canaries.y[:0], observer)
    observations = observer.observations
    stats = gaussian_audit.subsampled_gaussian_llr(observations, observer.noise_multiplier,
                                                   observer.sample_rate)
    analyses = analyse_one_run(cfg, stats, included)
    headline = _headline(analyses)
    claimed, source = _claim(cfg, [result.claimed_epsilon])
    sampled = np.stack(observer.sampled) if observer.sampled else np.zeros((0, included.size))
    return DPAuditReport(
        "all_iterates", headline, claimed, source, result.test_accuracy, 0.0, result.seconds,
        cfg.model_dump(mode="json"),
        {"included": int(included.sum()), "train_size": len(canaries.base_y),
         "threat_model": "all_iterates", "steps": int(observations.shape[0]),
         "noise_multiplier": observer.noise_multiplier, "sample_rate": observer.sample_rate,
         "observed_noise_std": float(np.std(observations[~sampled])) if sampled.size else None,
         "max_provable": headline["max_provable"], "analyses": analyses})


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
    analyses = {}
    for name in cfg.analysis_names():
        if name == "clopper_pearson":
            audit, cpu = _timed(lambda: auditing.multi_run_audit(
                np.array(scores[True]), np.array(scores[False]), cfg.delta, cfg.confidence,
                cfg.selection, cfg.seed).as_dict())
            audit["max_provable"] = auditing.max_multi_run_epsilon(
                cfg.runs, cfg.runs, cfg.delta, cfg.confidence, cfg.selection)
        else:  # gaussian
            audit, cpu = _timed(lambda: gaussian_audit.gaussian_audit(
                scores[True], scores[False], cfg.delta, cfg.confidence).as_dict())
            audit["max_provable"] = None
        analyses[name] = {**audit, "cpu_seconds": round(cpu, 4)}
    headline = _headline(analyses)
    claimed, source = _claim(cfg, claims)
    return DPAuditReport(
        "multi_run", headline, claimed, source, float(np.mean(accuracies)),
        float(np.std(accuracies)), seconds, cfg.model_dump(mode="json"),
        {"scores_in": scores[True], "scores_out": scores[False], "threat_model": "final_model",
         "max_provable": headline["max_provable"], "analyses": analyses})


def run_dp_audit(cfg: DPAuditConfig | dict[str, Any]) -> DPAuditReport:
    """Validate, train, score and bound: the entry point of ``miaudit dp-audit``."""
    if not isinstance(cfg, DPAuditConfig):
        cfg = DPAuditConfig.model_validate(cfg)
    setup = prepare(cfg)
    runners = {"one_run": one_run, "multi_run": multi_run, "all_iterates": all_iterates}
    return runners[cfg.protocol](setup)
