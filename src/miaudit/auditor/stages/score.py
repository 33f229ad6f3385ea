"""The score stage: attacks and metrics over stored outputs, never touching a model, written as
one atomic generation. The facts about the targets that other stages own (DP guarantee,
training time, robust accuracy, NSDE guarantee) come in as arguments.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from miaudit._runtime.io import write_json
from miaudit.attacks import AttackInput
from miaudit.auditor.design import Plan
from miaudit.auditor.modality import modality_of
from miaudit.auditor.modeljob import ModelJob
from miaudit.auditor.rundir import RunDir
from miaudit.auditor.specs import parse_component
from miaudit.auditor.stages.evaluate import Evaluated
from miaudit.auditor.stages.plan import Audit, snapshot_job
from miaudit.auditor.stages.query import query_key
from miaudit.auditor.stages.train import Trained
from miaudit.config import build_output_defense
from miaudit.errors import ConfigError
from miaudit.queries import CLEAN_QUERY, clean_column
from miaudit.queries.features import input_features
from miaudit.queries.labels import protect_decision_columns
from miaudit.results import Privacy, Summary
from miaudit.results.scoring import build_summary, score_attacks
from miaudit.results.target_models import TargetModels


def load_all_outputs(run: RunDir, planned: Audit,
                     jobs: list[ModelJob] | None = None) -> np.ndarray:
    """(M, pool, Q, C) float32 logits of every model (``jobs``: of these, e.g. the models at a
    snapshot epoch), filled in place (one copy in memory)."""
    cfg, jobs = planned.cfg, planned.jobs if jobs is None else jobs
    first = run.load_outputs(0, query_key(jobs[0], cfg.queries[0], planned)).numpy()
    # text outputs are stored as float16 (miaudit.auditor.modality.TextModality.stored)
    dtype = np.float16 if first.dtype == np.float16 else np.float32
    logits = np.empty((len(jobs), first.shape[0], len(cfg.queries), first.shape[1]),
                      dtype=dtype)
    for job in jobs:
        for column, spec in enumerate(cfg.queries):
            logits[job.index, :, column] = run.load_outputs(job.index,
                                                            query_key(job, spec,
                                                                      planned)).numpy()
    return logits


def clean_outputs(run: RunDir, planned: Audit, logits: np.ndarray,
                  jobs: list[ModelJob] | None = None) -> tuple[np.ndarray, int, str]:
    """Outputs on clean inputs, their query column and name, for accuracy: the configured clean
    query when there is one, else the extra identity query the query stage stored (with the
    output defense applied like every released output)."""
    cfg = planned.cfg
    column = clean_column(cfg.queries)
    if column is not None:
        return logits, column, cfg.queries[column]
    clean = np.stack([run.load_outputs(job.index, query_key(job, CLEAN_QUERY)).numpy()
                      for job in (planned.jobs if jobs is None else jobs)])[:, :, None]
    if cfg.output_defense is not None:
        apply_output_defense(clean, cfg.output_defense, planned.pool.y.numpy(),
                             planned.plan.keep, planned.plan.split.holdout, [CLEAN_QUERY])
    return clean, 0, CLEAN_QUERY


def apply_output_defense(logits: np.ndarray, spec: Any, labels: np.ndarray, keep: np.ndarray,
                         holdout: np.ndarray, query_names: list[str]) -> None:
    """Replace every model's released outputs by the defended ones (in place). Each model's
    defender knows its own training set (its keep row) and the holdout set, never the
    evaluated non-members. Boundary-distance columns stay: they are no released vector."""
    component = parse_component(spec)
    defense = build_output_defense(component)
    reference = np.zeros(keep.shape[1], dtype=bool)
    reference[holdout] = True
    kept = protect_decision_columns(query_names)
    if kept.size and not defense.preserves_labels:
        raise ConfigError("boundary queries measure the undefended model's decision boundary; "
                          f"output defense {component.written!r} may change labels, so drop "
                          "the boundary queries or use memguard_label_only")
    for index in range(len(keep)):
        original = logits[index][:, kept].copy()
        logits[index] = defense.apply(logits[index], labels, keep[index],
                                      **({"holdout_mask": reference}
                                         if defense.needs_holdout else {}))
        logits[index][:, kept] = original


def attack_input(run: RunDir, planned: Audit, jobs: list[ModelJob] | None = None
                 ) -> AttackInput:
    """What the attacks see: every model's stored outputs (defended when configured), the
    keep matrix, the population and, when an attack needs them, the attacker's features of
    the inputs."""
    cfg, plan = planned.cfg, planned.plan
    labels = planned.pool.y.numpy()
    logits = load_all_outputs(run, planned, jobs)
    if cfg.output_defense is not None:
        apply_output_defense(logits, cfg.output_defense, labels, plan.keep, plan.split.holdout,
                             list(cfg.queries))
    wants_features = cfg.components.needs_features
    return AttackInput(logits=logits, labels=labels, keep=plan.keep,
                       query_names=list(cfg.queries), population=plan.split.population,
                       evaluated=plan.split.audited,
                       features=input_features(planned.pool.x) if wants_features else None,
                       **modality_of(planned.pool).attack_extras(planned.pool))


def score_stage(run: RunDir, planned: Audit, trained: Trained,
                evaluated: Evaluated) -> Summary:
    """Score every attack on every target over the audited samples; write the scores as one
    generation; return the summary (not yet published)."""
    cfg, plan = planned.cfg, planned.plan
    data = attack_input(run, planned)
    targets = list(plan.targets)
    claim = trained.privacy  # the claimed guarantee: empirical bounds need it
    blind: dict[str, Any] = {}
    with run.new_scores() as folder:
        attacks = score_attacks(data, cfg.attacks, targets, plan.references,
                                plan.split.audited, folder, claim, blind=blind,
                                built=cfg.components.attacks)
        scores_dir = folder.name.removesuffix(".tmp").lstrip(".")
    if cfg.memorization_attack is not None:
        write_memorization(run, data, plan, cfg.memorization_attack, scores_dir,
                           cfg.memorization_models,
                           cfg.components.attacks[cfg.memorization_attack])
    stats = target_stats(run, planned, data, planned.jobs).with_facts(
        train_seconds_mean=trained.train_seconds_mean, **evaluated.robust)
    return build_summary(
        name=cfg.run_name(), run_dir=str(run.root), protocol=cfg.protocol, targets=targets,
        keep=plan.keep, audited=plan.split.audited, population=plan.split.population,
        holdout_size=int(len(plan.split.holdout)), queries=list(cfg.queries),
        scores_dir=scores_dir, target_models=stats, attacks=attacks,
        caveats=modality_of(planned.pool).caveats(stats, data.logits),
        config=cfg.model_dump(mode="json"), run_identity=planned.run_identity,
        privacy=claim, blind_baseline=blind, nsde=evaluated.nsde,
        snapshots=snapshot_scores(run, planned, claim) if cfg.train.snapshots else None)


def snapshot_scores(run: RunDir, planned: Audit, claim: Privacy | None) -> dict[str, Any]:
    """train.snapshots: every attack's pooled metrics (with intervals) and the targets'
    accuracy at each snapshot epoch and at the final one, scored as the final models are
    (targets and references at that epoch). Keyed by the epoch (a JSON string)."""
    cfg, plan = planned.cfg, planned.plan
    by_epoch = {}
    for epoch in (*cfg.train.snapshots, cfg.train.epochs):
        jobs = planned.jobs if epoch == cfg.train.epochs else \
            [snapshot_job(job, epoch) for job in planned.jobs]
        data = attack_input(run, planned, jobs)
        attacks = score_attacks(data, cfg.attacks, list(plan.targets), plan.references,
                                plan.split.audited, None, claim, built=cfg.components.attacks)
        by_epoch[str(epoch)] = {
            "attacks": {label: {"pooled": attack["pooled"]} for label, attack in attacks.items()},
            "target_models": target_stats(run, planned, data, jobs).model_dump(
                exclude_unset=True)}
    return by_epoch


def target_stats(run: RunDir, planned: Audit, data: AttackInput,
                 jobs: list[ModelJob]) -> TargetModels:
    """The targets' statistics from ``jobs``' outputs (:mod:`miaudit.results.target_models`):
    next-token accuracy and perplexity of language models, else class accuracy on the clean
    query (and which query that was)."""
    plan = planned.plan
    clean, column, query = clean_outputs(run, planned, data.logits, jobs)
    return modality_of(planned.pool).target_stats(clean, data.labels, plan.keep,
                                                  plan.split.audited, list(plan.targets),
                                                  column, query)


def write_memorization(run: RunDir, data: AttackInput, plan: Plan, attack: str,
                       scores_dir: str, family: int | None = None,
                       built_attack: Any = None) -> None:
    """DeMem Figure 1 analysis for the first target, from ``attack``'s scores (audited
    samples only). With ``family`` (K): memorization from the last K models only, and the
    target re-scored by ``built_attack`` with references that exclude them, so the estimate
    is independent of both the target and the attack's references."""
    from miaudit._runtime.io import record_digests
    from miaudit.analysis.memorization import memorization_analysis, plot_memorization_analysis
    from miaudit.auditor.rundir import read_scores

    audited = plan.split.audited
    target = plan.targets[0]
    models = None
    if family is None:
        scores = read_scores(run.root, scores_dir, attack)[0]
    else:
        models = list(range(len(plan.keep) - family, len(plan.keep)))
        references = np.array([r for r in plan.references(target) if r not in models])
        outcome = built_attack.evaluate(data, target, references)
        scores = np.asarray(outcome.scores)[audited]
    table = memorization_analysis(data.logits[:, audited], data.labels[audited],
                                  plan.keep[:, audited], scores, target,
                                  memorization_models=models)
    table["attack"], table["scores_dir"] = attack, scores_dir  # the generation it belongs to
    if models is not None:
        table["attack_references"] = len(plan.keep) - 1 - family
    write_json(run.root / "memorization.json", table)
    plot_memorization_analysis(table, run.root / "memorization.png")
    record_digests(run.root, ["memorization.json", "memorization.png"])
