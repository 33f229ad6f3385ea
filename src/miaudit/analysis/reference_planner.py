"""The attack-power planner: how many reference models does an audit need?

From a finished audit's own outputs, every reference-based attack is re-scored with 2, 4, 8,
... of each target's references (and with all of them, the audit's own number), giving AUC and
TPR at 0.1% and 1% FPR with their intervals (the audit's own crossed bootstrap over targets and
samples, :mod:`miaudit.stats.intervals`) against the number of references. The steps of TPR@0.1%
between
doublings are fitted by a power law in the count (log-linear least squares), and
the planner reports the smallest number of references at which the next doubling is expected
to change TPR@0.1% by less than the half-width of its interval at the audit's own number: more
references than that buy less than the measurement can resolve.

Reference subsets are nested and balanced: whole complementary pairs of the family first (the
target's own partner last), so that with 2k references every sample is a member of exactly k
of them, as in the paper designs the attacks come from.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from miaudit.attacks import AttackInput
from miaudit.auditor.runfiles import RESULTS_FILE
from miaudit.config import Spec, attack_label, build_attack
from miaudit.stats import intervals, metrics

#: the FPR levels the planner follows; the first is the one it extrapolates
PLANNER_LEVELS = (1e-3, 1e-2)


def reference_counts(available: int, minimum: int) -> list[int]:
    """2, 4, 8, ... below ``available``, then ``available`` itself (the audit's own number);
    counts below the attack's ``minimum`` are left out."""
    counts = [2 ** j for j in range(1, 64) if 2 ** j < available]
    return [k for k in [*counts, available] if k >= max(minimum, 1)]


def nested_order(references: np.ndarray, pair_of: Callable[[int], int]) -> np.ndarray:
    """References ordered by complementary pair, complete pairs first, so that every prefix
    of even length is balanced (each sample IN for exactly half of it)."""
    pairs: dict[int, list[int]] = {}
    for model in references.tolist():
        pairs.setdefault(pair_of(model), []).append(model)
    complete = [m for p in sorted(pairs) if len(pairs[p]) == 2 for m in pairs[p]]
    single = [m for p in sorted(pairs) if len(pairs[p]) != 2 for m in pairs[p]]
    return np.array(complete + single, dtype=np.int64)


def enough_references(counts: list[int], tpr: list[float],
                      half_width: float) -> dict[str, Any]:
    """The smallest count whose next doubling is expected to change TPR by < ``half_width``.

    The steps between consecutive counts, d_j = |tpr[j+1] - tpr[j]| (each count about double
    the one before; the audit's own count ends the list), are fitted as
    log d_j = a + b log2(counts[j]) by least squares. "observed": from some measured count on,
    every later step is already below ``half_width``; "extrapolated": with b < 0, the first
    power of two 2^m at which the fitted step falls below it."""
    if len(counts) < 3:
        return {"references": None, "how": "fewer than two doublings measured"}
    steps = np.abs(np.diff(np.asarray(tpr, dtype=np.float64)))
    small = steps < half_width
    settled = [j for j in range(len(steps)) if small[j:].all()]
    if settled:
        return {"references": int(counts[settled[0]]), "how": "observed"}
    x = np.log2(np.asarray(counts[:-1], dtype=np.float64))
    slope, intercept = np.polyfit(x, np.log(np.maximum(steps, 1e-12)), 1)
    if slope >= 0:
        return {"references": None, "how": "steps do not shrink with doubling: no "
                                          "extrapolation"}
    power = int(np.ceil((np.log(half_width) - intercept) / slope))
    return {"references": int(2 ** max(power, 1)), "how": "extrapolated",
            "fit": {"log_step_intercept": float(intercept),
                    "log_step_per_doubling": float(slope)}}


def references_at(count: int, ordered: np.ndarray, own: np.ndarray) -> np.ndarray:
    """The first ``count`` of the nested order; at the audit's own count the references
    exactly as the audit passed them (same order), so that row reproduces its table."""
    return own if count == len(own) else ordered[:count]


def plan_attack(attack: Any, data: AttackInput, targets: list[int],
                references: Callable[[int], np.ndarray], audited: np.ndarray,
                pair_of: Callable[[int], int]) -> dict[str, Any]:
    """Pooled metrics of one attack at each reference count, and the planner's verdict. A
    count at which the attack cannot score (e.g. Shokri's folds leave no member/non-member
    contrast) is listed in ``skipped`` with the attack's reason; the row at the audit's own
    count is scored exactly as the audit scored it. ``references`` holds the counts the attack
    says it used (Shokri with folds trains on the references outside the target's fold)."""
    own = {t: np.asarray(references(t)) for t in targets}
    ordered = {t: nested_order(own[t], pair_of) for t in targets}
    available = min(len(r) for r in ordered.values())
    counts = reference_counts(available, attack.min_references)
    members = data.keep[targets][:, audited]
    # the audit's own intervals: the crossed bootstrap over targets and samples, the same
    # resamples at every count (miaudit.stats.intervals, as the score stage computes them)
    resamples = intervals.Resamples.draw(len(targets), len(audited))
    rows: dict[str, list[Any]] = {"references": [], "references_passed": [], "auc": []}
    keys = [metrics.tpr_key(level) for level in PLANNER_LEVELS]
    for key in keys:
        names = metrics.MetricKeys(key)
        rows[names.value], rows[names.ci], rows[names.measurable] = [], [], []
    skipped: dict[str, str] = {}
    for count in counts:
        try:
            outcomes = [attack.evaluate(data, t, references_at(count, ordered[t], own[t]))
                        for t in targets]
        except ValueError as error:
            skipped[str(count)] = str(error)
            continue
        scores = np.stack([np.asarray(o.scores)[audited] for o in outcomes])
        summary = intervals.pooled_intervals(
            metrics.summarize(scores.ravel(), members.ravel(), fpr_levels=PLANNER_LEVELS),
            intervals.replicate_metrics(scores, members, resamples, PLANNER_LEVELS),
            resamples.method)
        used = {o.info.get("training_models", count) for o in outcomes}
        rows["references"].append(int(min(used)))
        rows["references_passed"].append(count)
        rows["auc"].append(summary["auc"])
        for key in keys:
            names = metrics.MetricKeys(key)
            for name in (names.value, names.ci, names.measurable):
                rows[name].append(summary[name])
    if not rows["references"]:
        return {**rows, "enough_references": None, "skipped": skipped,
                "how": "cannot be planned: " + "; ".join(sorted(set(skipped.values())))}
    headline = metrics.MetricKeys(keys[0])
    low, high = rows[headline.ci][-1]
    if not all(rows[headline.measurable]):
        verdict = {"references": None, "how": f"{keys[0]} not measurable at some count (tied "
                                              "top scores or too few non-members)"}
    else:
        verdict = enough_references(rows["references"], rows[keys[0]], (high - low) / 2)
    return {**rows, "enough_references": verdict["references"], "how": verdict["how"],
            **({"skipped": skipped} if skipped else {}),
            **({"fit": verdict["fit"]} if "fit" in verdict else {})}


def enough_sentence(rows: dict[str, Any]) -> str:
    """"enough references: 8 (observed)", or a sentence saying why there is no number."""
    if rows["enough_references"] is not None:
        return f"enough references: {rows['enough_references']} ({rows['how']})"
    return f"enough references: not determined ({rows['how']})"


def plan_references(data: AttackInput, specs: list[Spec], targets: list[int],
                    references: Callable[[int], np.ndarray], audited: np.ndarray,
                    pair_of: Callable[[int], int] = lambda m: m // 2,
                    built: dict[str, Any] | None = None) -> dict[str, Any]:
    """The planner over every attack spec that uses reference models (the others are listed
    as reference-free). ``built``: the attacks already built, by label (a config's
    :attr:`~miaudit.config.AuditConfig.components`)."""
    planned: dict[str, Any] = {}
    reference_free = []
    for index, spec in enumerate(specs):
        label, _, _ = attack_label(spec)
        attack = built[label] if built is not None else build_attack(spec, f"attacks[{index}]")
        if attack.min_references == 0:  # LOSS, Attack-P, QMIA, uncalibrated label attacks
            reference_free.append(label)
            continue
        planned[label] = plan_attack(attack, data, targets, references, audited, pair_of)
    return {
        "attacks": planned, "reference_free": reference_free, "targets": list(targets),
        "levels": list(PLANNER_LEVELS),
        "interval": "95% crossed-bootstrap interval of the pooled TPR (targets and samples "
                    "resampled, as the audit's own; miaudit.stats.intervals); "
                    "enough_references: the smallest count whose next doubling is expected to "
                    "change TPR@0.1% by less than half that interval at the audit's own count",
    }


def format_plan(plan: dict[str, Any]) -> list[str]:
    """Plain-text lines of the planner's table (for ``miaudit plan``)."""
    lines = []
    for label, rows in plan["attacks"].items():
        lines.append(f"{label}: {enough_sentence(rows)}")
        for count, reason in rows.get("skipped", {}).items():
            lines.append(f"  {int(count):5d} references: not scored ({reason})")
        if not rows["references"]:
            continue
        lines.append(f"  {'refs':>5s} {'AUC':>7s} "
                     + " ".join(f"{'TPR@' + metrics.level_name(v) + ' [interval]':>24s}"
                                for v in PLANNER_LEVELS))
        for i, count in enumerate(rows["references"]):
            cells = [f"{100 * rows[k][i]:6.2f}% [{100 * rows[k + '_ci'][i][0]:.2f}, "
                     f"{100 * rows[k + '_ci'][i][1]:.2f}]"
                     if rows[metrics.MetricKeys(k).measurable][i] else "n/m"
                     for k in map(metrics.tpr_key, PLANNER_LEVELS)]
            lines.append(f"  {count:5d} {100 * rows['auc'][i]:6.2f}% {cells[0]:>24s} "
                         f"{cells[1]:>24s}")
    if plan["reference_free"]:
        lines.append(f"reference-free (not planned): {', '.join(plan['reference_free'])}")
    lines.append("intervals: " + plan["interval"] + "; n/m: not measurable")
    return lines


def plan_run(run_dir: Path) -> dict[str, Any]:
    """The planner over a finished audit's directory: re-plans the audit from the config in
    its results.json (the data must be where the audit found it), reloads the stored outputs
    (no model is trained or queried), and adds ``reference_planner`` to results.json."""
    from miaudit.auditor.rundir import RunDir
    from miaudit.auditor.stages.plan import plan_audit
    from miaudit.auditor.stages.score import attack_input
    from miaudit.config import validate_config
    from miaudit.errors import RunDirError
    from miaudit.results import load_summary, read_results, write_results

    summary = load_summary(run_dir)
    if summary.external:
        raise RunDirError(f"{run_dir} was scored from outputs made elsewhere; the planner "
                          "re-scores an audit's own outputs (run `miaudit audit`)")
    planned = plan_audit(validate_config(summary.config))
    run = RunDir(Path(run_dir))
    if not np.array_equal(run.read_keep(), planned.plan.keep):
        raise RunDirError(f"{run_dir}: its stored memberships differ from its config's plan; "
                          "rerun the audit")
    with run.lock():
        data = attack_input(run, planned)
        plan = planned.plan
        result = plan_references(data, list(planned.cfg.attacks), list(summary.targets),
                                 plan.references, plan.split.audited,
                                 pair_of=lambda m: plan.family_index(m) // 2,
                                 built=planned.cfg.components.attacks)
        path = Path(run_dir) / RESULTS_FILE
        record = read_results(path)  # the record as written: only the planner's key is added
        record["reference_planner"] = result
        write_results(path, record)  # with its digest
    return result
