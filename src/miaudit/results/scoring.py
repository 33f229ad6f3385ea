"""The score stage's core, shared by audits and by ``miaudit score`` (outputs made elsewhere):
every attack on every target over stored outputs, per-target and pooled metrics, written as
one atomic scores generation. Never touches a model."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from miaudit._runtime.io import text_digest, write_array
from miaudit.attacks import AttackInput
from miaudit.attacks.suite import rotation_references, run_attack
from miaudit.auditor.components import Spec, attack_label, build_attack
from miaudit.auditor.identity import array_digest
from miaudit.auditor.modality import MODALITIES
from miaudit.auditor.rundir import RunDir, check_scores_names, scores_name
from miaudit.auditor.runfiles import LAYOUT, RESULTS_FILE
from miaudit.errors import ConfigError
from miaudit.privacy.bounds import empirical_epsilon
from miaudit.results import EXTERNAL_SOURCE, Privacy, Results, Summary, write_results
from miaudit.results.target_models import TargetModels
from miaudit.stats import intervals, metrics


def score_attacks(data: AttackInput, specs: list[Spec], targets: list[int],
                  references: Callable[[int], np.ndarray], audited: np.ndarray,
                  folder: Path | None, privacy: Privacy | None = None,
                  kept: dict[str, np.ndarray] | None = None,
                  blind: dict[str, Any] | None = None,
                  built: dict[str, Any] | None = None) -> dict[str, Any]:
    """{label: attack summary} for every attack spec; writes (targets x audited) scores of each
    attack into ``folder`` (None: no files) and into ``kept`` when given. ``privacy`` (claimed
    epsilon, delta) adds empirical bounds. ``blind`` (a dict, filled in) asks for the blind
    baseline of text outputs with their texts (:mod:`miaudit.analysis.blind_baseline`): its
    record, and each attack's advantage over it (``over_blind``). ``built``: the attacks
    already built, by label (a config's :attr:`~miaudit.config.AuditConfig.components`)."""
    members = data.keep[targets][:, audited]
    labels = data.labels[audited]
    # one set of resamples for every attack: the simultaneous band needs them shared
    resamples = intervals.Resamples.draw(len(targets), len(audited))
    attacks: dict[str, Any] = {}
    replicates: dict[str, dict[str, np.ndarray]] = {}
    for index, spec in enumerate(specs):
        label, name, options = attack_label(spec)
        attack = built[label] if built is not None else build_attack(spec, f"attacks[{index}]")
        outcomes = run_attack(attack, data, targets, references)
        scores = np.stack([np.asarray(o.scores)[audited] for o in outcomes])
        attacks[label] = attack_summary(name, options, scores, members, labels, privacy)
        replicates[label] = intervals.replicate_metrics(scores, members, resamples,
                                                        metrics.DEFAULT_FPR_LEVELS)
        attacks[label]["pooled"] = intervals.pooled_intervals(
            attacks[label]["pooled"], replicates[label], resamples.method)
        if any(o.info for o in outcomes):
            attacks[label]["info"] = [o.info for o in outcomes]
        if caveats := attack.caveats(len(references(targets[0]))):  # beside the resolution one
            attacks[label]["caveats"] = [*attacks[label].get("caveats", []), *caveats]
        if folder is not None:
            write_array(folder / scores_name(label), scores)
        if kept is not None:
            kept[label] = scores
    # the report names the strongest attack by these metrics, each with a band over all attacks
    intervals.add_simultaneous_bands(attacks, replicates, metrics.HEADLINE_KEYS)
    intervals.add_paired_differences(attacks, replicates, metrics.HEADLINE_KEYS)
    if blind is not None and data.texts is not None:  # text outputs with their texts
        from miaudit.analysis.blind_baseline import advantages, blind_baseline

        texts = [data.texts[i] for i in audited]
        record, blind_replicates = blind_baseline(texts, members, resamples)
        advantages(attacks, replicates, record["pooled"], blind_replicates)
        blind.update(record)
    return attacks


def attack_summary(name: str, options: dict[str, Any], scores: np.ndarray, members: np.ndarray,
                   labels: np.ndarray, privacy: Privacy | None) -> dict[str, Any]:
    """The record of one attack: pooled metrics, mean / std / min / max over targets, per
    target and per class, and empirical DP indicators when ``privacy`` is given."""
    per_target = [metrics.summarize(s, m) for s, m in zip(scores, members)]
    summary = {
        "attack": name, "options": options,
        "pooled": metrics.summarize(scores.ravel(), members.ravel()),
        **metrics.aggregate(per_target),
        "per_target": per_target,
        "per_class": metrics.per_class(scores.ravel(), members.ravel(),
                                       np.tile(labels, len(scores))),
    }
    caveats = [resolution_caveat(int((~members).sum())), saturation_caveat(scores)]
    if caveats := [caveat for caveat in caveats if caveat]:
        summary["caveats"] = caveats
    if privacy is not None:
        summary["empirical_epsilon"] = empirical_epsilon(
            scores, members, privacy.delta, claimed_epsilon=privacy.epsilon).as_dict()
    return summary


def resolution_caveat(nonmembers: int) -> str | None:
    """A warning when the pooled non-members are too few to resolve even the coarsest FPR
    level of the table: an FPR of alpha is only seen with at least 1/alpha non-members."""
    coarsest = max(metrics.DEFAULT_FPR_LEVELS)
    needed = int(np.ceil(1 / coarsest))
    if nonmembers >= needed:
        return None
    return (f"only {nonmembers} non-members in all: an FPR of {coarsest:.0%} needs at least "
            f"{needed}, so the TPR columns rest on too few samples; score more samples "
            "(data.pool_size)")


SATURATED = 0.5  # share of (target, sample) scores at one tied value that makes an attack saturated


def saturation_caveat(scores: np.ndarray) -> str | None:
    """A warning when one tied value holds most scores: the attack cannot rank those samples
    (e.g. RMIA whose gamma exceeds every likelihood ratio these models produce scores 0 for
    nearly all), so its low TPR and AUC near 0.5 say more about the attack's setting than
    about the models' leakage."""
    values, counts = np.unique(np.asarray(scores).ravel(), return_counts=True)
    share = counts.max() / counts.sum()
    if share < SATURATED:
        return None
    return (f"saturated: {share:.0%} of the scores share one value ({values[counts.argmax()]:.4g};"
            f" {len(values)} distinct values in all), so the attack ranks few samples and its "
            "TPR and AUC understate what a tuned attack finds (for RMIA: lower gamma)")


def check_targets_have_both(members: np.ndarray, targets: list[int]) -> None:
    """Every target needs members and non-members among the scored samples (a TPR and an
    FPR to measure), before any work."""
    for target in targets:
        count = int(members[target].sum())
        if count in (0, members.shape[1]):
            raise ConfigError(f"model {target} has {count} members among the "
                              f"{members.shape[1]} scored samples: a target needs both "
                              "members and non-members (check keep, or --population)")


def build_summary(*, name: str, run_dir: str, protocol: str, targets: list[int],
                  keep: np.ndarray, audited: np.ndarray, population: np.ndarray,
                  holdout_size: int, queries: list[str], scores_dir: str,
                  target_models: TargetModels, attacks: dict[str, Any], caveats: list[str],
                  config: dict[str, Any], **optional: Any) -> Summary:
    """The one constructor of results.json's record, for audits and for outputs scored
    elsewhere. ``optional``: the fields a run may lack (``run_identity``, ``privacy``,
    ``blind_baseline``, ``nsde``, ``snapshots``), given only when it has them: a field
    not given is absent from results.json."""
    return Summary(
        layout=LAYOUT, name=name, run_dir=run_dir, protocol=protocol, targets=targets,
        num_models=len(keep), pool_size=int(keep.shape[1]), audited_size=int(len(audited)),
        population_size=int(len(population)), holdout_size=holdout_size, queries=queries,
        scores_dir=scores_dir, target_models=target_models, attacks=attacks, caveats=caveats,
        config=config, **{key: value for key, value in optional.items() if value})


def publish(run: RunDir, summary: Summary) -> Results:
    """Drop the report files of the previous results, write results.json (the fields the
    record was given, naming its scores generation), then drop older generations."""
    run.drop_report_files()
    write_results(run.root / RESULTS_FILE, summary.model_dump(exclude_unset=True))
    run.drop_old_scores(summary.scores_dir)
    return Results(run_dir=run.root, summary=summary)


def score(outputs: Any, attacks: list[Spec] | None = None, *,
          out_dir: str | Path | None = None, population: np.ndarray | None = None,
          targets: list[int] | None = None, balance: str = "warn",
          name: str = "scored") -> Results:
    """What ``miaudit score`` does, as a function: every attack over the outputs of models
    trained elsewhere, each model in turn the target (or ``targets``), the others its
    references.

    ``outputs``: an :class:`miaudit.results.external.ExternalOutputs`, or the path of a LiRA
    experiment folder or a bundle file; ``attacks``: specs as in a config (default: the
    default audit's suite); ``population``: indices of samples no model trained on (never
    scored); ``balance`` (a path only): samples IN for all or no models are an "error", "warn"
    or "ignore"; ``out_dir``: the run directory to write (results.json, per-sample scores,
    plots), or None to write nothing and keep the scores in the returned :class:`Results`.
    """
    from miaudit.config import DEFAULT_ATTACKS
    from miaudit.results.external import read_any

    if isinstance(outputs, (str, Path)):
        outputs = read_any(outputs, population=population, balance=balance)
    specs = list(DEFAULT_ATTACKS) if attacks is None else list(attacks)
    return score_outputs(outputs, specs, None if out_dir is None else Path(out_dir),
                         population=population, targets=targets, name=name)


def score_outputs(outputs: Any, specs: list[Spec], out_dir: Path | None, *,
                  population: np.ndarray | None = None, targets: list[int] | None = None,
                  name: str = "scored") -> Results:
    """The score and report stages over outputs made elsewhere (``miaudit score``): every
    model in turn the target (or ``targets``), every other model its references, the
    population samples (never scored) for attacks that need them. Writes a run directory
    that ``miaudit report`` reads like an audit's; with ``out_dir`` None it writes nothing and
    the Results hold the scores in memory (``run_dir`` None)."""
    population, audited, targets, built = _score_plan(outputs, specs, population, targets)
    data = outputs.attack_input(population=population)
    data.evaluated = audited
    references = rotation_references(outputs.num_models)
    if out_dir is None:
        kept: dict[str, np.ndarray] = {}
        blind: dict[str, Any] = {}
        attacks = score_attacks(data, specs, targets, references, audited, None, kept=kept,
                                blind=blind, built=built)
        summary = _outputs_summary(outputs, specs, name, "", "", targets, audited, population,
                                   attacks, blind)
        members = outputs.keep[targets][:, audited]
        return Results(run_dir=None, summary=summary, memory_scores=kept,
                       memory_members=members)
    from miaudit.reporting.terminal import render_plots

    identity = text_digest({name: array_digest(array) for name, array in (
        ("keep", outputs.keep), ("logits", outputs.logits), ("labels", outputs.labels))})
    run = RunDir(Path(out_dir))
    with run.lock():
        run.sweep()
        run.claim(identity, {"scored": name, "attacks": specs})
        run.write_plan(outputs.keep, {"audited": audited, "population": population,
                                      "holdout": np.zeros(0, dtype=np.int64)})
        blind = {}
        with run.new_scores() as folder:
            attacks = score_attacks(data, specs, targets, references, audited, folder,
                                    blind=blind, built=built)
            scores_dir = folder.name.removesuffix(".tmp").lstrip(".")
        summary = _outputs_summary(outputs, specs, name, str(run.root), scores_dir, targets,
                                   audited, population, attacks, blind)
        results = publish(run, summary)
        render_plots(run.root, results.summary)
        from miaudit.auditor.stages.report import write_run_records, write_run_usage

        write_run_records(run.root, results.summary, np.asarray(outputs.labels)[audited], None)
        write_run_usage(run.root, results.summary)
    return results


def _score_plan(outputs: Any, specs: list[Spec], population: np.ndarray | None,
                targets: list[int] | None
                ) -> tuple[np.ndarray, np.ndarray, list[int], dict[str, Any]]:
    """(population, audited samples, targets, the attacks built by label), every attack
    option checked before any work."""
    from miaudit.auditor.text_audit import fitting_attacks
    from miaudit.results.external import population_indices

    samples = outputs.keep.shape[1]
    population = population_indices(np.zeros(0, np.int64) if population is None
                                     else population, samples, "population")
    audited = np.setdiff1d(np.arange(samples), population)
    targets = list(range(outputs.num_models)) if targets is None else list(targets)
    check_targets_have_both(outputs.keep[:, audited], targets)
    labels = [attack_label(spec)[0] for spec in specs]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"attack labels must be distinct, got {labels}")
    check_scores_names(labels)
    built = {label: build_attack(spec, f"attack {label!r}")  # option errors before any work
             for label, spec in zip(labels, specs)}
    for label, attack in built.items():
        if outputs.modality not in attack.modalities:
            raise ConfigError(f"attack {label!r} does not apply to {outputs.modality} "
                              f"outputs; {fitting_attacks(outputs.modality)}")
        if attack.min_references > outputs.num_models - 1:
            raise ConfigError(f"attack {label!r} needs {attack.min_references} reference "
                              f"models; the outputs hold {outputs.num_models} models")
        if attack.needs_features:
            raise ConfigError(f"attack {label!r} regresses on the inputs, which outputs made "
                              "elsewhere lack: run it in an audit")
        if attack.needs_population and not population.size:
            raise ConfigError(f"attack {label!r} needs population data: pass --population "
                              "(indices of samples no model trained on)")
        try:
            attack.check_queries(list(outputs.query_names))
        except ValueError as error:
            raise ConfigError(f"attack {label!r}: {error}") from None
    return population, audited, targets, built


def _outputs_summary(outputs: Any, specs: list[Spec], name: str, run_dir: str,
                     scores_dir: str, targets: list[int], audited: np.ndarray,
                     population: np.ndarray, attacks: dict[str, Any],
                     blind: dict[str, Any]) -> Summary:
    """The results.json record of scored outputs (the layout of an audit's)."""
    modality = MODALITIES[outputs.modality]
    stats = modality.external_stats(outputs, audited, targets)
    caveats = modality.caveats(stats, outputs.logits)
    return build_summary(
        name=name, run_dir=run_dir, protocol="rotation", targets=targets, keep=outputs.keep,
        audited=audited, population=population, holdout_size=0,
        queries=list(outputs.query_names), scores_dir=scores_dir, target_models=stats,
        attacks=attacks, caveats=caveats, blind_baseline=blind,
        config={"source": EXTERNAL_SOURCE, "attacks": specs,
                "models": list(outputs.model_names)})
