"""The evaluate stage: properties of the target models beyond their outputs. Robust accuracy
(keyed by the weights and its settings) and, for SDE targets, paper A's NSDE guarantee.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from miaudit.auditor import identity as ids
from miaudit.auditor.modeljob import build_architecture, load_trained
from miaudit.auditor.rundir import RunDir
from miaudit.auditor.stages.plan import Audit
from miaudit.config import RobustEvalConfig
from miaudit.results import NsdeGuarantee, Privacy


@dataclass(frozen=True)
class Evaluated:
    """What the evaluate stage hands on to scoring."""

    robust: dict[str, float | list[float]]  # mean natural/robust accuracy over targets, or {}
    nsde: NsdeGuarantee | None  # the targets' NSDE guarantee (None: not an SDE with noise)


def evaluate_stage(run: RunDir, planned: Audit, privacy: Privacy | None) -> Evaluated:
    """Robust accuracy of the targets (when configured) and their NSDE guarantee (given the
    DP guarantee ``privacy`` they were trained under, if any)."""
    evaluate_robust(run, planned)
    return Evaluated(robust_summary(run, planned, list(planned.plan.targets)),
                     nsde_summary(planned, privacy))


def evaluate_robust(run: RunDir, planned: Audit) -> None:
    """Robust accuracy of every target model (when configured), keyed by weights + settings."""
    robust = planned.cfg.robust_eval
    if robust is None:
        return
    settings = robust.model_dump()
    for target in planned.plan.targets:
        job = planned.jobs[target]
        key = ids.eval_identity(job.identity, settings)
        if run.eval_record(target, key) is not None:
            continue
        model = load_trained(run, job, planned.pool, planned.device)
        run.save_eval(target, key, {"model": job.identity, "settings": settings,
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


def robust_summary(run: RunDir, planned: Audit,
                   targets: list[int]) -> dict[str, float | list[float]]:
    """Mean natural/robust accuracy over targets, when robust evaluation ran."""
    robust = planned.cfg.robust_eval
    if robust is None:
        return {}
    settings = robust.model_dump()
    tables = [run.eval_record(t, ids.eval_identity(planned.jobs[t].identity,
                                                   settings))["robust"] for t in targets]
    summary: dict[str, float | list[float]] = {}
    for split in ("train", "test"):
        for kind in ("natural_acc", "robust_acc"):
            values = [float(table[split][kind]) for table in tables]
            summary[f"{split}_{kind}"] = float(np.mean(values))
            summary[f"{split}_{kind}_per_target"] = values  # for intervals over the targets
    return summary


NSDE_DELTA = 1e-5  # the delta of paper A's NSDE statements (Sec. 5.1-5.2)


def nsde_summary(planned: Audit, privacy: Privacy | None) -> NsdeGuarantee | None:
    """For SDE targets: paper A's Theorem 4.1 guarantee of the target architecture (its sigma,
    T and blocks; L from the spectral-norm bound, else an assumed L = 1, recorded as such)
    beside the accountant's epsilon when the targets were also trained with DP-SGD."""
    from miaudit.privacy import nsde

    job = planned.jobs[planned.plan.targets[0]]
    model = build_architecture(job.model, job.train, planned.pool)
    try:
        params = nsde.model_sde_parameters(model)
    except ValueError:
        return None  # not an SDE model
    if params["sigma_theorem"] <= 0:
        return None  # an SDE model without noise (k = 0) claims nothing
    assumed = params.get("lipschitz_bound") is None
    delta = NSDE_DELTA if privacy is None else privacy.delta
    guarantee = nsde.model_guarantee(model, delta, lipschitz=1.0 if assumed else None)
    if assumed:
        guarantee["lipschitz_source"] = "assumed L = 1 (the drift is not spectrally normed)"
    guarantee["accountant_epsilon"] = None if privacy is None else privacy.epsilon
    return NsdeGuarantee.model_validate(guarantee)
