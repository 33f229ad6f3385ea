"""The three studies' claims, checked against the committed experiment outputs (issue 17).

    python experiments/claims.py          # appends to every experiment's outputs/summary.md the
                                          # rows beside the paper's and the verdicts, and writes
                                          # the claims table at the top of experiments/README.md
    python experiments/claims.py --queue  # the experiments to run, in order (queue.sh)
    python experiments/claims.py --plan   # what each still has to run, and the claims waiting

The paper numbers, rows, claims, accuracy floors and the run queue are data:
``experiments/claims.yaml`` (its header gives the schema). Reads only committed files
(``<experiment>/outputs/*.results.json`` and ``*.memorization.json``, experiments under
``papers/`` and ``archive/``); nothing is retrained. Every claim compares two rows (a model
under one attack) on one metric. Intervals (95%) for TPR at a fixed FPR and AUC (issue 23: they
must cover what a rerun with new models would see):

- results.json written with the crossed bootstrap (``pooled["ci_method"]`` present): its
  ``tpr@X_ci`` / ``auc_ci`` (bootstrap over samples and targets; one fixed target: over
  samples only, conditional on that model).
- Older results.json files (every committed output so far: they keep per-target summaries,
  not per-sample scores, so the bootstrap cannot be recomputed), rotation protocol: the
  pooled value +- z * sqrt(between-target variance / T + mean per-target sampling variance)
  (``miaudit.stats.intervals.target_summary_interval``: binomial for TPR, Hanley-McNeil for AUC;
  the second term counts the sample draw as fully shared by the targets, an upper bound, so
  the interval errs wide: 100% coverage where the bootstrap has 95% in the synthetic world of
  ``benchmarks/interval_coverage.py``). One fixed target: the exact Clopper-Pearson interval
  of the TPR and the Hanley & McNeil (1982, Radiology 143, Eq. 2) interval of the AUC, over
  samples only: conditional on the trained target, model randomness not covered.
- A TPR level that is not measurable (below 1/non-members, or tied top scores) is "n/m" and
  decides nothing.
- Accuracy gap (train - test): mean over the rotation targets +- t(0.975, n - 1) * std /
  sqrt(n).
- Spearman's rho: Fisher's z with Bonett & Wright's (2000) variance (1 + rho^2 / 2) / (n - 3).

Verdicts, as issue 17 defines them: *reproduced* when the two intervals separate in the paper's
direction, *not reproduced* when they separate the other way, *inconclusive* when they overlap.
Two attacks of one run (same targets, same samples; results.json written since the paired
differences were added) are compared by the paired-bootstrap interval of their difference
instead (``differences`` in results.json, :func:`miaudit.stats.intervals.add_paired_differences`):
reproduced when it excludes 0 in the paper's direction (an inconclusive "greater" claim says
what scale would decide it: :func:`scale_to_decide`). So are two runs with the same
memberships (same data, seed, number of models, protocol), from the entries that
``experiments/paired.py`` computed from their run directories' scores into ``paired.json``
(:mod:`miaudit.analysis.paired_runs`; used only while both results.json are unchanged). A
"similar" claim (the paper reports no difference) is an equivalence test: *reproduced* when the
interval of the difference (where the runs share memberships: paired over targets for
accuracies, the paired bootstrap for leakage; else the two intervals combined by MOVER) lies
within a margin (:data:`EQUIVALENCE_MARGINS`, the largest differences the papers themselves
call comparable), *not reproduced* when it lies outside; an
"at_least" claim (high >= low: a control held to no more accuracy) unless low separates above. A
claim whose metrics disagree is *mixed* (each metric's verdict named). A row whose models fall
below their family's test-accuracy floor (:data:`FLOORS`, issue 26) is a *failed run* and
decides nothing. A claim that lists seeds (issue 26 item 5: its rows rerun in one experiment per
seed) is decided at each: its verdict stands only when two seeds or more ran and agree
("reproduced (seeds 0, 1)"); one seed says "(one seed)", disagreement "seeds disagree".
"""

from __future__ import annotations

import argparse
import json
import math
import re
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

import yaml
from scipy.stats import norm, t

from miaudit._runtime.io import DIGEST_KEY
from miaudit.privacy.bounds import roc_bound
from miaudit.results import reference_models
from miaudit.stats.intervals import hanley_mcneil_variance, target_summary_interval
from miaudit.stats.metrics import clopper_pearson

HERE = Path(__file__).resolve().parent
README = HERE / "README.md"
DATA = HERE / "claims.yaml"  # floors, queue, rows and claims (its header gives the schema)
PAIRED = HERE / "paired.json"  # cross-run paired differences, written by paired.py
ODE_MODELS = ("odenet", "odenet64", "sdenet", "sonode", "anode", "hbnode")
ADVERSARIAL_RECIPES = ("pgd_at", "trades")
NAN = float("nan")
Z95 = float(norm.ppf(0.975))  # two-sided 95% normal quantile
METRIC_NAMES = {"tpr@0.1%": "TPR@0.1%", "tpr@1%": "TPR@1%", "auc": "AUC", "gap": "gap",
                "rho_members": "rho (members)", "rho_nonmembers": "rho (non-members)",
                "bin_tpr_low": "TPR@0.1%, memorization 0", "bin_tpr_high":
                "TPR@0.1%, memorization > 0.5", "test_accuracy": "test acc",
                "robust_accuracy": "robust acc"}
ACCURACIES = ("train_accuracy", "test_accuracy", "robust_accuracy")  # printed in percent
PAPER_METRICS = ("tpr@0.1%", "tpr@1%", "auc", "rho_members", "rho_nonmembers", *ACCURACIES)
KINDS = ("greater", "at_least", "similar", "under_bound", "exceeds_bound", "near_zero", "positive",
         "within")
DEFAULT_METRICS = ("tpr@0.1%", "tpr@1%", "auc")


@dataclass(frozen=True)
class Row:
    """One model family under one attack, with the paper's numbers (fractions)."""
    label: str
    experiment: str
    stem: str
    attack: str = "lira"
    paper: dict[str, float] = field(default_factory=dict)
    paper_accuracy: tuple[float, float] | None = None  # train, test (percent)
    planned: bool = False  # its config is not committed yet
    floor: str = ""  # the floor family, when not the one of its model (a matched-accuracy control)

    def paper_values(self) -> dict[str, float]:
        """The paper's numbers, with the train - test gap derived from its accuracies."""
        values = dict(self.paper)
        if self.paper_accuracy and not math.isnan(self.paper_accuracy[0]):
            values.setdefault("gap", (self.paper_accuracy[0] - self.paper_accuracy[1]) / 100)
        return values


@dataclass(frozen=True)
class Claim:
    source: str  # "A, Tab. 1"
    high: str  # row label claimed higher (for "similar": either)
    low: str
    metrics: tuple[str, ...] = DEFAULT_METRICS
    kind: str = "greater"  # one of KINDS
    epsilon: float = 1.0  # the bound claims' (epsilon, 1e-5)
    note: str = ""
    seeds: dict[int, str] = field(default_factory=dict)  # seed -> experiment of the rows


# -- the data file ---------------------------------------------------------------------------------
def checked_keys(entry: dict, allowed: set[str], what: str) -> dict:
    """``entry`` if its keys are known; a data-file typo fails loudly, naming the entry."""
    unknown = set(entry) - allowed
    if unknown:
        raise ValueError(f"{DATA.name}: {what} {entry!r} has unknown keys {sorted(unknown)}")
    return entry


def parse_row(entry: dict, percent: list[str]) -> Row:
    """A row of the data file: paper numbers as printed -> fractions (accuracies also kept in
    percent, as the paper's (train, test) accuracy)."""
    checked_keys(entry, {"label", "run", "attack", "paper", "planned", "floor"}, "row")
    printed = checked_keys(entry.get("paper", {}), set(PAPER_METRICS), "paper numbers of")
    experiment, stem = entry["run"].rsplit("/", 1)
    paper = {metric: value / 100 if metric in percent or metric in ACCURACIES else value
             for metric, value in printed.items()}
    accuracy = None
    if "train_accuracy" in printed or "test_accuracy" in printed:
        accuracy = (printed.get("train_accuracy", NAN), printed.get("test_accuracy", NAN))
    return Row(entry["label"], experiment, stem, entry.get("attack", "lira"), paper, accuracy,
               entry.get("planned", False), entry.get("floor", ""))


def parse_claim(entry: dict) -> Claim:
    checked_keys(entry, {"source", "high", "low", "metrics", "kind", "epsilon", "note",
                         "seeds"}, "claim")
    claim = Claim(entry["source"], entry["high"], entry.get("low", ""),
                  tuple(entry.get("metrics", DEFAULT_METRICS)), entry.get("kind", "greater"),
                  float(entry.get("epsilon", 1.0)), entry.get("note", ""),
                  {int(seed): experiment for seed, experiment in entry.get("seeds", {}).items()})
    if claim.kind not in KINDS or not set(claim.metrics) <= set(METRIC_NAMES):
        raise ValueError(f"{DATA.name}: claim {entry!r}: kind one of {KINDS}, metrics of "
                         f"{sorted(METRIC_NAMES)}")
    return claim


def load_data(path: Path = DATA) -> tuple[dict[str, float], list[str], dict[str, Row],
                                          list[Claim]]:
    """(floors as fractions, queue, rows by label, claims) from the data file."""
    data = checked_keys(yaml.safe_load(path.read_text()),
                        {"floors", "percent", "queue", "rows", "claims"}, "file")
    floors = {family: percent / 100 for family, percent in data["floors"].items()}
    rows = [parse_row(entry, data["percent"][paper])
            for paper, entries in data["rows"].items() for entry in entries]
    by_label = {row.label: row for row in rows}
    if len(by_label) != len(rows):
        raise ValueError(f"{DATA.name}: row labels must be unique")
    for row in rows:
        if row.floor and row.floor not in floors:
            raise ValueError(f"{DATA.name}: row {row.label!r}: floor {row.floor!r} is not one of "
                             f"{sorted(floors)}")
    claims = [parse_claim(entry) for entry in data["claims"]]
    for claim in claims:
        if not {claim.high, claim.low} - {""} <= set(by_label):
            raise ValueError(f"{DATA.name}: claim {claim.source!r} names a row that is not in "
                             f"rows: {claim.high!r} / {claim.low!r}")
    return floors, list(data["queue"]), by_label, claims


FLOORS, QUEUE, ROWS, CLAIMS = load_data()


def rows_of(claim: Claim, seed: int | None = None) -> tuple[Row, Row | None]:
    """The claim's (high, low) rows; at ``seed``, read from that seed's experiment."""
    rows = (ROWS[claim.high], ROWS[claim.low] if claim.low else None)
    if seed is None:
        return rows
    return tuple(row and replace(row, experiment=claim.seeds[seed]) for row in rows)


# -- reading the committed outputs ---------------------------------------------------------------
def load(experiment: str, stem: str, suffix: str = "results.json") -> dict | None:
    path = HERE / experiment / "outputs" / f"{stem}.{suffix}"
    return json.loads(path.read_text()) if path.exists() else None


Interval = tuple[float, float, float]  # value, low, high


def t_interval(values: list[float]) -> Interval:
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, float("nan"), float("nan")
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t.ppf(0.975, n - 1) * std / math.sqrt(n)
    return mean, mean - half, mean + half


def hanley_mcneil(auc: float, n_pos: int, n_neg: int) -> Interval:
    half = Z95 * math.sqrt(hanley_mcneil_variance(auc, n_pos, n_neg))
    return auc, auc - half, auc + half


def spearman_interval(rho: float, n: int) -> Interval:
    z, se = math.atanh(rho), math.sqrt((1 + rho ** 2 / 2) / (n - 3))
    return rho, math.tanh(z - Z95 * se), math.tanh(z + Z95 * se)


def memorization_interval(row: Row, metric: str) -> Interval | None:
    table = load(row.experiment, row.stem, "memorization.json")
    if table is None:
        return None
    if metric.startswith("rho"):
        side = table["spearman_loss_mem"]["train" if metric == "rho_members" else "test"]
        return spearman_interval(side["rho"], side["n"])
    bins = [b for b in table["bins"] if b["n_members"]]
    chosen = [b for b in bins if (b["bin"] == 0 if metric == "bin_tpr_low" else b["low"] >= 0.5)]
    n = sum(b["n_members"] for b in chosen)
    k = sum(round(b["tpr@0.1%"] * b["n_members"]) for b in chosen)
    return (k / n, *clopper_pearson(k, n)) if n else None


def interval(row: Row, metric: str) -> Interval | None:
    """Our value of ``metric`` for ``row`` with its 95% interval; None when not run."""
    if metric.startswith(("rho", "bin_")):
        return memorization_interval(row, metric)
    summary = load(row.experiment, row.stem)
    if summary is None:
        return None
    stats = summary["target_models"]
    if metric == "gap":
        gaps = [a - b for a, b in zip(stats["per_target_train"], stats["per_target_test"])]
        return t_interval(gaps)
    if metric == "test_accuracy":
        return (stats["test_accuracy"], *stats["test_accuracy_ci"])
    if metric == "robust_accuracy":
        values = stats.get("test_robust_acc_per_target")
        return t_interval(values) if values else None
    attack = summary["attacks"].get(row.attack)
    if attack is None:
        return None
    pooled = attack["pooled"]
    if not measurable(pooled, metric):
        return NOT_MEASURABLE
    if "ci_method" in pooled:  # the crossed bootstrap (or one target's sample bootstrap)
        return (pooled[metric], *pooled[f"{metric}_ci"])
    per_target = attack["per_target"] if isinstance(attack["per_target"], list) else []
    if len(summary["targets"]) > 1 and len(per_target) > 1:
        return (pooled[metric], *target_summary_interval(pooled, per_target, metric))
    if metric == "auc":
        return hanley_mcneil(pooled["auc"], pooled["n_members"], pooled["n_nonmembers"])
    return (pooled[metric], *pooled[f"{metric}_ci"])  # one target: Clopper-Pearson


NOT_MEASURABLE: Interval = (NAN, NAN, NAN)


def measurable(pooled: dict, metric: str) -> bool:
    """False for a TPR level the run cannot measure: flagged so, or below 1/non-members
    (results written before that rule flagged only tied top scores)."""
    if not metric.startswith("tpr@"):
        return True
    level = float(metric.removeprefix("tpr@").removesuffix("%")) / 100
    return pooled.get(f"{metric}_measurable") is not False \
        and level * pooled["n_nonmembers"] >= 1


def target_test_accuracy(row: Row) -> float | None:
    summary = load(row.experiment, row.stem)
    return None if summary is None else summary["target_models"]["test_accuracy"]


# -- verdicts ------------------------------------------------------------------------------------
# A "similar" claim is an equivalence claim: the papers call these differences comparable (B Tab.
# 2, DeMem: natural -1.2, robust -0.9 points; A Tab. 6, solvers "marginal": AUC within 0.008,
# TPR@0.1% 0.33, TPR@1% 0.82 points); each margin is the largest such difference rounded up.
# Overlapping intervals are not evidence of equality (wide intervals would "reproduce" anything,
# narrow ones refute any difference), so the difference's interval must lie within +-margin.
EQUIVALENCE_MARGINS = {"test_accuracy": 0.02, "robust_accuracy": 0.02, "gap": 0.02,
                       "auc": 0.01, "tpr@1%": 0.01, "tpr@0.1%": 0.005}


def difference_interval(high: Interval, low: Interval) -> Interval:
    """high - low with its 95% interval from the two intervals by MOVER (Zou & Donner 2008,
    Stat. Med. 27(10), eq. 7): exact for independent estimates, conservative when the two are
    positively correlated (e.g. the same memberships)."""
    value = high[0] - low[0]
    return (value, value - math.hypot(high[0] - high[1], low[2] - low[0]),
            value + math.hypot(high[2] - high[0], low[0] - low[1]))


PER_TARGET = {"test_accuracy": "per_target_test", "robust_accuracy": "test_robust_acc_per_target"}


def same_memberships(first: dict, second: dict) -> bool:
    """Whether two audits trained target i on the same samples, for every i: same data, seed,
    number of models, protocol and targets (the membership draw depends on nothing else; where
    the data were read from does not count)."""
    def data(summary: dict) -> dict:
        return {k: v for k, v in summary["config"].get("data", {}).items() if k != "data_dir"}
    return all(first.get(key) == second.get(key)
               for key in ("targets", "num_models", "protocol", "pool_size")) \
        and first["config"].get("seed") == second["config"].get("seed") \
        and data(first) == data(second)


def paired_accuracy_difference(high: Row, low: Row, metric: str) -> Interval | None:
    """high - low as the t-interval of the per-target differences, when the two runs share
    their memberships (target i of one trained on the same samples as target i of the other):
    it counts the correlation MOVER leaves out (PGD-20 accuracy of fast AT and of DeMem on
    one training set: r = 0.74 over paper B's ResNet-14 targets). None otherwise."""
    first, second = load(high.experiment, high.stem), load(low.experiment, low.stem)
    key = PER_TARGET.get(metric)
    if not (first and second and key) or not same_memberships(first, second):
        return None
    ours, theirs = first["target_models"].get(key), second["target_models"].get(key)
    if not ours or not theirs or len(ours) != len(theirs) or len(ours) < 2:
        return None
    return t_interval([a - b for a, b in zip(ours, theirs)])


def equivalence(difference: Interval, margin: float) -> str:
    """The verdict of "similar" (a 95% interval inside +-margin: two one-sided tests at 2.5%)."""
    if -margin <= difference[1] and difference[2] <= margin:
        return "reproduced"
    if difference[1] > margin or difference[2] < -margin:
        return "not reproduced"
    return "inconclusive"


def compare(high: Interval, low: Interval, kind: str) -> str:
    """The verdict of two rows' intervals for "greater" and "at_least" ("similar" is
    :func:`equivalence`)."""
    separate_up, separate_down = high[1] > low[2], low[1] > high[2]
    if kind == "at_least":  # high >= low: only low lying wholly above high refutes it
        return "not reproduced" if separate_down else "reproduced"
    if separate_up:
        return "reproduced"
    return "not reproduced" if separate_down else "inconclusive"


BOUND_FPR = {"tpr@0.1%": 0.001, "tpr@1%": 0.01}


def metric_verdict(claim: Claim, metric: str, seed: int | None = None) -> tuple[str, str]:
    """(verdict, our numbers as text) for one metric of a claim (at one seed's experiment)."""
    high, low = rows_of(claim, seed)
    ours = interval(high, metric)
    if ours is None:
        return "not run", "-"
    if ours is NOT_MEASURABLE:
        return "not measurable", "n/m"
    if claim.kind in ("under_bound", "exceeds_bound"):
        bound = float(roc_bound(BOUND_FPR[metric], claim.epsilon, 1e-5))
        text = f"{fmt(metric, ours)} vs bound {fmt(metric, (bound,))}"
        under, over = ours[2] < bound, ours[1] > bound
        wanted, other = (under, over) if claim.kind == "under_bound" else (over, under)
        return ("reproduced" if wanted else "not reproduced" if other else "inconclusive"), text
    if claim.kind == "near_zero":  # "gap ~ 0": within the gap's margin (2 points) of zero
        return equivalence(ours, EQUIVALENCE_MARGINS["gap"]), fmt(metric, ours)
    if claim.kind == "positive":
        return ("reproduced" if ours[1] > 0 else "not reproduced" if ours[2] < 0
                else "inconclusive"), fmt(metric, ours)
    if claim.kind == "within":  # metrics[0] > metrics[1] within one row
        other = interval(high, claim.metrics[1])
        if other is None:
            return "not run", "-"
        if other is NOT_MEASURABLE:
            return "not measurable", f"{fmt(metric, ours)} vs n/m"
        return compare(ours, other, "greater"), f"{fmt(metric, ours)} vs {fmt(metric, other)}"
    theirs = interval(low, metric)
    if theirs is None:
        return "not run", "-"
    if theirs is NOT_MEASURABLE:
        return "not measurable", f"{fmt(metric, ours)} vs n/m"
    text = f"{fmt(metric, ours)} vs {fmt(metric, theirs)}"
    if claim.kind == "greater" and (difference := paired_difference(high, low, metric)):
        low_end, high_end = difference["ci"]
        verdict = ("reproduced" if low_end > 0 else "not reproduced" if high_end < 0
                   else "inconclusive")
        text = f"{text}, paired {fmt_difference(metric, difference)}"
        if verdict == "inconclusive":
            text += f" ({scale_to_decide(difference['value'], difference['value'] - low_end)})"
        return verdict, text
    if claim.kind == "similar":
        difference, how = paired_accuracy_difference(high, low, metric), "paired over targets"
        if difference is None and (entry := paired_difference(high, low, metric)):
            difference, how = (entry["value"], *entry["ci"]), "paired"
        if difference is None:
            difference, how = difference_interval(ours, theirs), "MOVER"
        margin = EQUIVALENCE_MARGINS[metric]
        scale, digits = scale_digits(metric)
        as_entry = {"value": difference[0], "ci": difference[1:]}
        text += (f", difference {fmt_difference(metric, as_entry)} ({how}; margin "
                 f"+-{scale * margin:.{digits}f})")
        return equivalence(difference, margin), text
    verdict = compare(ours, theirs, claim.kind)
    facing = ours[0] - ours[1] + theirs[2] - theirs[0]  # the half-widths that must part
    if verdict == "inconclusive" and claim.kind == "greater" and not math.isnan(facing):
        text += f" ({scale_to_decide(ours[0] - theirs[0], facing)})"
    return verdict, text


def scale_to_decide(effect: float, reach: float) -> str:
    """What scale would decide an inconclusive "greater" claim (issue 26: say it from the
    measured effect and interval width). ``reach`` is how far the decision rule's interval
    extends below the effect (paired: effect - lower end; two intervals: the two half-widths
    that face each other). The crossed bootstrap's variance is ~ a / targets + b / samples +
    c / (targets x samples), so scaling both by f narrows the interval by sqrt(f) or more (the
    synthetic world: 2.4-3.0x at f = 4, ``tests/test_experiment_claims.py``): f = (reach /
    effect)^2 is enough to exclude 0, an upper bound, if the effect stays what was measured.
    """
    if effect <= 0:
        return "estimate against the claim: no scale decides it"
    factor = math.ceil(10 * (reach / effect) ** 2) / 10  # rounded up: 1.01 is not "1.0x"
    if factor > 100:
        return "effect ~0: > 100x the targets and samples"
    return f"<= {factor:.1f}x the targets and samples decides it"


def paired_difference(high: Row, low: Row, metric: str) -> dict | None:
    """high - low on ``metric`` with its paired-bootstrap interval: for two attacks of one run
    results.json's ``differences``; for two runs with the same memberships the entry that
    paired.py computed from their scores, while both results.json are the ones it read."""
    summary = load(high.experiment, high.stem) or {}
    if (high.experiment, high.stem) == (low.experiment, low.stem):
        record = summary.get("attacks", {}).get(high.attack, {})
        return (record.get("differences") or {}).get(low.attack, {}).get(metric)
    entry = paired_entries().get(paired_key(high, low))
    if entry is None or entry["digests"] != committed_digests(high, low):
        return None
    return entry.get(metric)


def committed_digests(high: Row, low: Row) -> list[str | None]:
    """The digests of the two rows' committed results.json (None where not run): a paired.json
    entry counts only while it was computed from exactly these."""
    return [(load(row.experiment, row.stem) or {}).get(DIGEST_KEY) for row in (high, low)]


def paired_key(high: Row, low: Row) -> str:
    return (f"{high.experiment}/{high.stem}:{high.attack} - "
            f"{low.experiment}/{low.stem}:{low.attack}")


@cache
def paired_entries() -> dict[str, dict]:
    return json.loads(PAIRED.read_text()) if PAIRED.exists() else {}


def fmt_difference(metric: str, difference: dict) -> str:
    scale, digits = scale_digits(metric)
    low_end, high_end = (scale * v for v in difference["ci"])
    return (f"{scale * difference['value']:+.{digits}f} "
            f"[{low_end:+.{digits}f}, {high_end:+.{digits}f}]")


def floor_family(row: Row) -> str:
    """Which of :data:`FLOORS` applies to a row: its own ``floor`` (a control trained to
    another row's accuracy is held to that row's floor), else from its run's model and recipe."""
    if row.floor:
        return row.floor
    summary = load(row.experiment, row.stem)
    config = summary["config"] if summary else {}
    model = config.get("model", {}).get("name", "")
    recipe = config.get("train", {}).get("recipe", "standard")
    if recipe in ADVERSARIAL_RECIPES:
        return "adversarial"
    if model in ODE_MODELS or recipe == "replace_finetune":  # ResNet-14 with an SDE block
        return "ODE/SDE"
    if model.startswith(("snn_", "ann_")):
        return "SNN/ANN twin"
    return "ResNet-14"


def failed_rows(claim: Claim, seed: int | None = None) -> list[str]:
    out = []
    for row in rows_of(claim, seed):
        if row is None or (accuracy := target_test_accuracy(row)) is None:
            continue
        family = floor_family(row)
        if accuracy < FLOORS[family]:
            out.append(f"{row.label} ({100 * accuracy:.1f}% test, floor "
                       f"{100 * FLOORS[family]:.0f}%)")
    return out


def row_references(row: Row) -> int | None:
    """How many reference models row's attack calibrated each target's scores with (None: not
    run, or an attack that uses none, e.g. LOSS or Attack-P)."""
    summary = load(row.experiment, row.stem)
    record = (summary or {}).get("attacks", {}).get(row.attack) or {}
    if "attack" not in record or "num_models" not in summary:
        return None
    return reference_models(record["attack"], record.get("options", {}), summary["num_models"])


def unequal_references(claim: Claim, seed: int | None = None) -> str:
    """Why the claim's two runs cannot be compared on leakage ('' when they can): an attack
    calibrated on more reference models is stronger (:func:`miaudit.results.reference_models`),
    so rows at different numbers of references differ by that too."""
    high, low = rows_of(claim, seed)
    if low is None or not set(claim.metrics) & set(DEFAULT_METRICS):
        return ""
    counts = [row_references(row) for row in (high, low)]
    if None in counts or counts[0] == counts[1]:
        return ""
    return (f"not comparable: {high.label} {counts[0]} reference models per target, "
            f"{low.label} {counts[1]} (compare at equal numbers)")


FAILED, BELOW = "failed run: ", "; below the floor: "  # how a failed run's verdict reads


def claim_verdicts(claim: Claim, seed: int | None = None
                   ) -> tuple[str, list[tuple[str, str, str]]]:
    """(overall verdict, [(metric, verdict, our numbers)]) at one seed (None: the rows' own
    experiments)."""
    metrics = claim.metrics[:1] if claim.kind == "within" else claim.metrics
    per_metric = [(metric, *metric_verdict(claim, metric, seed)) for metric in metrics]
    failed = failed_rows(claim, seed)
    overall = interval_verdict(per_metric)
    if failed:  # decides nothing; what the intervals say below the floor is shown, not counted
        return f"{FAILED}{', '.join(failed)}{BELOW}{overall}", per_metric
    if unequal := unequal_references(claim, seed):  # shown, not counted, as a failed run
        return f"{unequal}; as measured: {overall}", per_metric
    return overall, per_metric


def decide(claim: Claim) -> tuple[str, str]:
    """(verdict, our numbers as text). A claim with seeds (issue 26 item 5) is decided at each
    seed; the verdict stands when two seeds or more ran and agree, "one seed" marks a verdict
    from one, and seeds that disagree say so."""
    if not claim.seeds:
        overall, per_metric = claim_verdicts(claim)
        return overall, ours_text(per_metric)
    by_seed = {seed: claim_verdicts(claim, seed) for seed in sorted(claim.seeds)}
    ran = {seed: found for seed, found in by_seed.items() if found[0] != "not run"}
    if not ran:
        return "not run", ours_text(next(iter(by_seed.values()))[1])
    if len(ran) == 1:
        overall, per_metric = next(iter(ran.values()))
        return f"{overall} (one seed)", ours_text(per_metric)
    text = "; ".join(f"seed {seed}: {ours_text(per_metric)}"
                     for seed, (_, per_metric) in ran.items())
    verdicts = {overall for overall, _ in ran.values()}
    if len(verdicts) == 1:
        return f"{verdicts.pop()} (seeds {', '.join(map(str, ran))})", text
    if all(overall.startswith(FAILED) for overall, _ in ran.values()):
        return failed_at_every_seed({seed: overall for seed, (overall, _) in ran.items()}), text
    return "seeds disagree: " + "; ".join(f"seed {seed} {overall}" for seed, (overall, _)
                                          in ran.items()), text


def failed_at_every_seed(verdicts: dict[int, str]) -> str:
    """One failed-run verdict for a claim whose rows failed the floor at every seed (at
    different accuracies, so the seeds' texts differ): a failed run, not a disagreement."""
    rows = "; ".join(f"seed {seed} {v.removeprefix(FAILED).split(BELOW)[0]}"
                     for seed, v in verdicts.items())
    below = {seed: v.split(BELOW, 1)[1] for seed, v in verdicts.items()}
    shown = (next(iter(below.values())) if len(set(below.values())) == 1 else
             "seeds disagree (" + "; ".join(f"seed {s} {v}" for s, v in below.items()) + ")")
    return f"{FAILED}{rows}{BELOW}{shown}"


def interval_verdict(per_metric: list[tuple[str, str, str]]) -> str:
    """The verdict the intervals give over the claim's metrics (mixed when they disagree)."""
    verdicts = {verdict for _, verdict, _ in per_metric}
    if verdicts == {"not run"}:
        return "not run"
    if len(verdicts) == 1:
        return verdicts.pop()
    parts = [f"{verdict} ({', '.join(METRIC_NAMES[m] for m, v, _ in per_metric if v == verdict)})"
             for verdict in ("reproduced", "inconclusive", "not reproduced", "not measurable",
                             "not run")
             if verdict in verdicts]
    return "mixed: " + "; ".join(parts)


def scale_digits(metric: str) -> tuple[int, int]:
    """How a metric is printed: (factor, decimals); AUC and rho as fractions, the rest in %."""
    if metric.startswith("rho") or metric == "auc":
        return 1, 3
    return 100, 2 if metric.startswith(("tpr", "bin")) else 1


def fmt(metric: str, value: tuple[float, ...]) -> str:
    scale, digits = scale_digits(metric)
    if len(value) == 1 or math.isnan(value[1]):
        return f"{scale * value[0]:.{digits}f}"
    return (f"{scale * value[0]:.{digits}f} [{scale * value[1]:.{digits}f}, "
            f"{scale * value[2]:.{digits}f}]")


def claim_text(claim: Claim) -> str:
    names = ", ".join(METRIC_NAMES[m] for m in claim.metrics)
    if claim.kind == "greater":
        return f"{claim.high} > {claim.low} ({names})"
    if claim.kind == "similar":
        return f"{claim.high} ~ {claim.low} ({names})"
    if claim.kind == "at_least":
        return f"{claim.high} >= {claim.low} ({names})"
    if claim.kind == "under_bound":
        return f"{claim.high}: LiRA ROC under the (eps = {claim.epsilon:g}, 1e-5) bound"
    if claim.kind == "exceeds_bound":
        return (f"{claim.high}: LiRA ROC above the (eps = {claim.epsilon:g}, 1e-5) bound at "
                "0.1-1% FPR")
    if claim.kind == "near_zero":
        return f"{claim.high}: train - test accuracy gap ~ 0 (within 2 points)"
    if claim.kind == "positive":
        return f"{claim.high}: Spearman(loss, memorization) > 0 ({names})"
    first, second = (METRIC_NAMES[m] for m in claim.metrics)  # "within"
    return f"{claim.high}: {first} > {second}"


def paper_text(claim: Claim) -> str:
    high = ROWS[claim.high].paper_values()
    if not claim.low:  # a claim about one row
        return "; ".join(f"{METRIC_NAMES[m]} {fmt(m, (high[m],))}" for m in claim.metrics
                         if m in high) or "direction (figure)"
    low = ROWS[claim.low].paper_values()
    cells = [f"{METRIC_NAMES[m]} {fmt(m, (high[m],))} vs {fmt(m, (low[m],))}"
             for m in claim.metrics if m in high and m in low]
    return "; ".join(cells) or "direction (figure / text)"


def ours_text(per_metric: list[tuple[str, str, str]]) -> str:
    return "; ".join(f"{METRIC_NAMES[metric]} {text}" for metric, _, text in per_metric)


def experiments_of(claim: Claim) -> list[str]:
    rows = [row for row in rows_of(claim) if row is not None]
    return sorted({row.experiment for row in rows} | set(claim.seeds.values()))


def claims_table() -> str:
    lines = ["| paper, table | claim | paper | ours (95% CI) | verdict | experiment |",
             "| --- | --- | --- | --- | --- | --- |"]
    counts: dict[str, int] = {}
    below_floor: dict[str, int] = {}
    for claim in CLAIMS:
        overall, ours = decide(claim)
        note = f" ({claim.note})" if claim.note else ""
        lines.append(f"| {claim.source} | {claim_text(claim)} | {paper_text(claim)} | "
                     f"{ours} | **{overall}**{note} | "
                     f"{', '.join(experiments_of(claim))} |")
        category = overall.split(":")[0]  # "failed run: ...", "mixed: ..." or the verdict
        counts[category] = counts.get(category, 0) + 1
        if category == "failed run":
            below = re.split(r":| \(", overall.split(BELOW, 1)[1])[0]
            below_floor[below] = below_floor.get(below, 0) + 1
    tally = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
    if below_floor:
        tally += " (below the floors, not counted: " + ", ".join(
            f"{n} {verdict}" for verdict, n in sorted(below_floor.items())) + ")"
    return "\n".join(lines) + f"\n\n{len(CLAIMS)} claims: {tally}.\n"


def rows_table(experiment: str) -> str:
    """Per experiment: every row, ours beside the paper's (accuracy, LiRA-style metrics)."""
    lines = ["| row | attack | train / test acc (ours) | paper | TPR@0.1% [95% CI] | paper | "
             "TPR@1% [95% CI] | paper | AUC [95% CI] | paper |", "|" + " --- |" * 10]
    for row in (r for r in ROWS.values() if r.experiment == experiment):
        summary = load(row.experiment, row.stem)
        if summary is None or row.attack not in summary["attacks"]:
            continue
        stats = summary["target_models"]
        acc = f"{100 * stats['train_accuracy']:.1f} / {100 * stats['test_accuracy']:.1f}"
        paper_acc = " / ".join("-" if math.isnan(v) else f"{v:g}"
                               for v in row.paper_accuracy) if row.paper_accuracy else "-"
        cells = [acc, paper_acc]
        for metric in ("tpr@0.1%", "tpr@1%", "auc"):
            value = interval(row, metric)
            cells += ["n/m" if value is NOT_MEASURABLE else fmt(metric, value) if value else "-",
                      fmt(metric, (row.paper[metric],)) if metric in row.paper else "-"]
        lines.append(f"| {row.label} | {row.attack} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def floors_text() -> str:
    return ", ".join(f"{family} {100 * floor:.0f}%" for family, floor in FLOORS.items())


def write_verdicts() -> list[Path]:
    written = []
    experiments = {row.experiment for row in ROWS.values()}
    for experiment in sorted(experiments.union(*(claim.seeds.values() for claim in CLAIMS))):
        outputs = HERE / experiment / "outputs"
        if not outputs.is_dir():
            continue
        claims = [c for c in CLAIMS if experiment in experiments_of(c)]
        text = [f"## {experiment}: ours beside the paper, and the claimed directions", "",
                "Generated by `python experiments/claims.py` from the committed outputs; "
                "intervals and verdicts as that script's docstring defines them. Test-accuracy "
                f"floors: {floors_text()}.", "", rows_table(experiment), "",
                "| paper, table | claim | verdict | ours |", "| --- | --- | --- | --- |"]
        for claim in claims:
            overall, ours = decide(claim)
            text.append(f"| {claim.source} | {claim_text(claim)} | {overall} | {ours} |")
        path = outputs / "summary.md"
        replace_block(path, "\n".join(text) + "\n", "verdicts")
        written.append(path)
    return written


def replace_block(path: Path, text: str, name: str) -> None:
    """Put ``text`` between ``<!-- name:start -->`` and ``<!-- name:end -->`` in ``path``
    (appended with its markers when absent; run.py rewrites summary.md's first part)."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    current = path.read_text() if path.exists() else ""
    if start in current and end in current:
        head, rest = current.split(start, 1)
        tail = rest.split(end, 1)[1]
    else:
        head, tail = current.rstrip("\n") + "\n\n", "\n"
    path.write_text(f"{head}{start}\n{text}{end}{tail}")


def plan_text() -> str:
    """The queue, per experiment: its configs without results, its planned configs, and the
    claims waiting for them (``--plan``)."""
    lines = []
    for experiment in QUEUE:
        configs = sorted(path.stem for path in (HERE / experiment).glob("*.yaml"))
        to_run = [stem for stem in configs if load(experiment, stem) is None]
        planned = sorted({row.stem for row in ROWS.values()
                          if row.planned and row.experiment == experiment})
        claims = [claim for claim in CLAIMS if experiment in experiments_of(claim)]
        waiting = [claim for claim in claims if any(
            row and row.experiment == experiment and row.stem in to_run + planned
            for seed in (None, *claim.seeds) for row in rows_of(claim, seed))]
        lines.append(f"{experiment}: configs {len(configs)}; without results: "
                     f"{', '.join(to_run) or 'none'}; planned: {', '.join(planned) or 'none'}; "
                     f"decides {len(claims)} claims, {len(waiting)} waiting for these runs")
        lines += [f"    {claim.source}: {claim_text(claim)}" for claim in waiting]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", action="store_true",
                        help=f"print the experiments of {DATA.name}'s queue in order and exit")
    parser.add_argument("--plan", action="store_true",
                        help="print what each queued experiment still has to run, and the "
                             "claims waiting for it, and exit")
    args = parser.parse_args(argv)
    if args.queue or args.plan:
        print("\n".join(QUEUE) if args.queue else plan_text())
        return
    for path in write_verdicts():
        print(f"wrote {path.relative_to(HERE.parent)}")
    replace_block(README, claims_table(), "claims")
    print(claims_table())


if __name__ == "__main__":
    main()
