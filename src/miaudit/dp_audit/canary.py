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

import time
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from miaudit.data import Pool
from miaudit.dp_audit.analyses import (
    DPAuditReport,
    analyse_one_run,
    claim,
    cpu_timed,
    headline_analysis,
)
from miaudit.dp_audit.settings import CANARY_KINDS, DPAuditConfig
from miaudit.errors import ConfigError
from miaudit.privacy import auditing, gaussian_audit
from miaudit.registry import DATASETS
from miaudit.training import TrainEnv


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
def one_run(setup: Setup) -> DPAuditReport:
    """Steinke et al. 2023: one model, m canaries each in with probability 1/2."""
    cfg, canaries = setup.cfg, setup.canaries
    included = inclusion_bits(len(canaries.y), cfg.seed)
    x = torch.cat([canaries.base_x, canaries.x[torch.from_numpy(included)]])
    y = torch.cat([canaries.base_y, canaries.y[torch.from_numpy(included)]])
    result = train_and_score(setup, x, y, cfg.seed, canaries.x, canaries.y)
    analyses = analyse_one_run(cfg, result.scores, included)
    headline = headline_analysis(analyses)
    claimed, source = claim(cfg, [result.claimed_epsilon])
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
    headline = headline_analysis(analyses)
    claimed, source = claim(cfg, [result.claimed_epsilon])
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
            audit, cpu = cpu_timed(lambda: auditing.multi_run_audit(
                np.array(scores[True]), np.array(scores[False]), cfg.delta, cfg.confidence,
                cfg.selection, cfg.seed).as_dict())
            audit["max_provable"] = auditing.max_multi_run_epsilon(
                cfg.runs, cfg.runs, cfg.delta, cfg.confidence, cfg.selection)
        else:  # gaussian
            audit, cpu = cpu_timed(lambda: gaussian_audit.gaussian_audit(
                scores[True], scores[False], cfg.delta, cfg.confidence).as_dict())
            audit["max_provable"] = None
        analyses[name] = {**audit, "cpu_seconds": round(cpu, 4)}
    headline = headline_analysis(analyses)
    claimed, source = claim(cfg, claims)
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
