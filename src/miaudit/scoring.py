"""The score stage's core, shared by audits and by ``miaudit score`` (outputs made elsewhere):
every attack on every target over stored outputs, per-target and pooled metrics, written as
one atomic scores generation. Never touches a model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from miaudit import intervals, metrics
from miaudit.attacks import AttackInput
from miaudit.config import Spec, attack_label, build_attack
from miaudit.errors import ConfigError
from miaudit.identity import array_digest
from miaudit.io import text_digest, write_array, write_json
from miaudit.privacy.bounds import empirical_epsilon
from miaudit.results import Results, Summary
from miaudit.rundir import RunDir, scores_name

#: the metrics the report names the strongest attack by, each with a band over all attacks
SIMULTANEOUS_KEYS = (metrics.tpr_key(1e-3), metrics.tpr_key(1e-2), "auc")


def score_attacks(data: AttackInput, specs: list[Spec], targets: list[int],
                  references: Callable[[int], np.ndarray], audited: np.ndarray,
                  folder: Path, privacy: dict[str, Any] | None = None) -> dict[str, Any]:
    """{label: attack summary} for every attack spec; writes (targets x audited) scores of each
    attack into ``folder``. ``privacy`` (claimed epsilon, delta) adds empirical bounds."""
    members = data.keep[targets][:, audited]
    labels = data.labels[audited]
    # one set of resamples for every attack: the simultaneous band needs them shared
    resamples = intervals.Resamples.draw(len(targets), len(audited))
    attacks: dict[str, Any] = {}
    replicates: dict[str, dict[str, np.ndarray]] = {}
    for index, spec in enumerate(specs):
        label, name, options = attack_label(spec)
        attack = build_attack(spec, f"attacks[{index}]")
        outcomes = [attack.evaluate(data, t, references(t)) for t in targets]
        scores = np.stack([np.asarray(o.scores)[audited] for o in outcomes])
        attacks[label] = attack_summary(name, options, scores, members, labels, privacy)
        replicates[label] = intervals.replicate_metrics(scores, members, resamples,
                                                        metrics.DEFAULT_FPR_LEVELS)
        attacks[label]["pooled"] = intervals.pooled_intervals(
            attacks[label]["pooled"], replicates[label], resamples.method)
        if any(o.info for o in outcomes):
            attacks[label]["info"] = [o.info for o in outcomes]
        write_array(folder / scores_name(label), scores)
    intervals.add_simultaneous_bands(attacks, replicates, SIMULTANEOUS_KEYS)
    return attacks


def attack_summary(name: str, options: dict[str, Any], scores: np.ndarray, members: np.ndarray,
                   labels: np.ndarray, privacy: dict[str, Any] | None) -> dict[str, Any]:
    per_target = [metrics.summarize(s, m) for s, m in zip(scores, members)]
    summary = {
        "attack": name, "options": options,
        "pooled": metrics.summarize(scores.ravel(), members.ravel()),
        **metrics.aggregate(per_target),
        "per_target": per_target,
        "per_class": metrics.per_class(scores.ravel(), members.ravel(),
                                       np.tile(labels, len(scores))),
    }
    if privacy:
        summary["empirical_epsilon"] = empirical_epsilon(
            scores, members, privacy["delta"], claimed_epsilon=privacy["epsilon"]).as_dict()
    return summary


def accuracy_stats(logits: np.ndarray, labels: np.ndarray, keep: np.ndarray,
                   audited: np.ndarray, targets: list[int], column: int) -> dict[str, Any]:
    """Train (members) and test (audited non-members) accuracy of the targets, with an exact
    95% interval for the mean test accuracy."""
    in_audit = np.zeros(len(labels), dtype=bool)
    in_audit[audited] = True
    train_acc, test_acc, tested, correct_total = [], [], 0, 0
    for target in targets:
        correct = logits[target, :, column].argmax(-1) == labels
        member = keep[target]
        train_acc.append(correct[member].mean())
        test_acc.append(correct[~member & in_audit].mean())
        tested += int((~member & in_audit).sum())
        correct_total += int(correct[~member & in_audit].sum())
    train, test = np.array(train_acc), np.array(test_acc)
    return {
        "train_accuracy": float(train.mean()), "test_accuracy": float(test.mean()),
        "generalization_gap": float((train - test).mean()),
        "train_accuracy_std": float(train.std()), "test_accuracy_std": float(test.std()),
        "test_accuracy_ci": metrics.clopper_pearson(correct_total, tested),
        "per_target_train": [float(v) for v in train],
        "per_target_test": [float(v) for v in test],
    }


def publish(run: RunDir, summary: dict[str, Any]) -> Results:
    """Validate the summary against the results schema, write results.json (naming its scores
    generation), then drop older generations."""
    checked = Summary.model_validate(summary)
    write_json(run.root / "results.json", summary)
    run.drop_old_scores(checked.scores_dir)
    return Results(run_dir=run.root, summary=summary)


def score_outputs(outputs: Any, specs: list[Spec], out_dir: Path, *,
                  population: np.ndarray | None = None, targets: list[int] | None = None,
                  name: str = "scored") -> Results:
    """The score and report stages over outputs made elsewhere (``miaudit score``): every
    model in turn the target (or ``targets``), every other model its references, the
    population samples (never scored) for attacks that need them. Writes a run directory
    that ``miaudit report`` reads like an audit's."""
    from miaudit.report import render_plots
    from miaudit.text_audit import fitting_attacks, text_model_stats

    population = np.zeros(0, dtype=np.int64) if population is None else \
        np.unique(np.asarray(population, dtype=np.int64))
    samples = outputs.keep.shape[1]
    if population.size and (population.min() < 0 or population.max() >= samples):
        raise ConfigError(f"population indices must lie in 0..{samples - 1}")
    audited = np.setdiff1d(np.arange(samples), population)
    targets = list(range(outputs.num_models)) if targets is None else list(targets)
    for index, spec in enumerate(specs):  # option errors before any work
        attack = build_attack(spec, f"attacks[{index}]")
        if outputs.modality not in getattr(attack, "modalities", ("classes",)):
            raise ConfigError(f"attacks[{index}] ({spec}) does not apply to {outputs.modality} "
                              f"outputs; {fitting_attacks(outputs.modality)}")
        if attack.min_references > outputs.num_models - 1:
            raise ConfigError(f"attacks[{index}] needs {attack.min_references} reference "
                              f"models; the outputs hold {outputs.num_models} models")
        if attack.needs_features:
            raise ConfigError(f"attacks[{index}] regresses on the inputs, which outputs made "
                              "elsewhere lack: run it in an audit")
        if attack.needs_population and not population.size:
            raise ConfigError(f"attacks[{index}] needs population data: pass --population "
                              "(indices of samples no model trained on)")
    data = outputs.attack_input(population=population)
    identity = text_digest({name: array_digest(array) for name, array in (
        ("keep", outputs.keep), ("logits", outputs.logits), ("labels", outputs.labels))})
    run = RunDir(Path(out_dir))
    with run.lock():
        run.sweep()
        run.claim(identity, {"scored": name, "attacks": specs})
        run.write_plan(outputs.keep, {"audited": audited, "population": population,
                                      "holdout": np.zeros(0, dtype=np.int64)})

        def references(target: int) -> np.ndarray:
            return np.array([m for m in range(outputs.num_models) if m != target])

        with run.new_scores() as folder:
            attacks = score_attacks(data, specs, targets, references, audited, folder)
            scores_dir = folder.name.removesuffix(".tmp").lstrip(".")
        summary = {
            "layout": 2, "name": name, "run_dir": str(run.root), "protocol": "rotation",
            "targets": targets, "num_models": outputs.num_models, "pool_size": samples,
            "audited_size": int(len(audited)), "population_size": int(len(population)),
            "holdout_size": 0, "queries": list(outputs.query_names), "scores_dir": scores_dir,
            "target_models": text_model_stats(outputs.logits, outputs.keep, audited, targets)
            if outputs.modality == "text" else accuracy_stats(
                outputs.logits, outputs.labels, outputs.keep, audited, targets, 0),
            "attacks": attacks,
            "config": {"source": "external outputs", "attacks": specs,
                       "models": list(outputs.model_names)},
        }
        results = publish(run, summary)
        render_plots(run.root, summary)
    return results
