"""The three studies' claims, checked against the committed experiment outputs (issues 17, 79).

    python experiments/claims.py          # every experiment's outputs/summary.md verdict block,
                                          # experiments/CLAIMS.md (the claims table) and
                                          # experiments/FINDINGS.md (the central claims)
    python experiments/claims.py --out D  # CLAIMS.md and FINDINGS.md into folder D only
    python experiments/claims.py --queue  # the experiments to run, in order (queue.sh)
    python experiments/claims.py --plan   # what each still has to run, and the claims waiting

The paper numbers, rows, claims, accuracy floors, the run queue and the findings page's
central claims are data: ``experiments/claims.yaml`` (its header gives the schema). Reads only
committed files (``<experiment>/outputs/*.results.json`` and ``*.memorization.json``,
``paired.json``); nothing is retrained. Every claim compares two rows (a model under one
attack) on some metrics, or one row with a bound. Intervals (95%) for TPR at a fixed FPR and
AUC (issue 23: they must cover what a rerun with new models would see):

- results.json written with the crossed bootstrap (``pooled["ci_method"]`` present): its
  ``tpr@X_ci`` / ``auc_ci`` (bootstrap over samples and targets; one fixed target: over
  samples only, conditional on that model). CLAIMS.md counts how many of the table's
  results.json carry it.
- results.json written before it (they keep per-target summaries, not per-sample scores),
  rotation protocol: the pooled value +- z * sqrt(between-target variance / T + mean
  per-target sampling variance)
  (``miaudit.stats.summary_intervals.target_summary_interval``; errs wide).
  One fixed target: Clopper-Pearson for the TPR, Hanley & McNeil (1982, Radiology 143, Eq. 2)
  for the AUC, over samples only.
- A TPR level that is not measurable (below 1/non-members, or tied top scores) is "n/m" and
  decides nothing.
- Accuracy gap (train - test): mean over the rotation targets +- t(0.975, n - 1) * std /
  sqrt(n). Spearman's rho: Fisher's z with Bonett & Wright's (2000) variance.

Decision rules (issue 79; :data:`METHOD` says them in CLAIMS.md, the maths is
:mod:`miaudit.analysis.decision_rules`): each metric of a claim is one test of a decision
statistic (the paired-bootstrap difference where the rows share targets and samples, else the
MOVER difference of the two intervals; the distance to a bound; rho), its p-value read off its
interval; Holm's step-down procedure controls the family-wise error over every decidable test
of the table; seeds are pooled by a fixed-effects combination; "similar" is two one-sided tests
with margins relative to the measured level; "at_least" entries are conditions (accuracy
matches), not claims. A row below its family's test-accuracy floor (:data:`FLOORS`, issue 26)
is a failed run and decides nothing; rows calibrated on different numbers of reference models
are not compared.
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

from miaudit import Results, Summary
from miaudit.analysis import (
    beyond_margin_p,
    by_a_hair,
    fixed_effects,
    holm,
    interval_p,
    jackknife_quantile,
    scale_for_power,
    side_se,
    tost_p,
)
from miaudit.privacy import bounds
from miaudit.stats import metrics, summary_intervals

HERE = Path(__file__).resolve().parent
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
                        {"floors", "percent", "queue", "rows", "claims", "findings"}, "file")
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
CLAIMS_FROM_DATA = CLAIMS  # the table's family (a test may swap CLAIMS for its own)


def rows_of(claim: Claim, seed: int | None = None) -> tuple[Row, Row | None]:
    """The claim's (high, low) rows; at ``seed``, read from that seed's experiment."""
    rows = (ROWS[claim.high], ROWS[claim.low] if claim.low else None)
    if seed is None:
        return rows
    return tuple(row and replace(row, experiment=claim.seeds[seed]) for row in rows)


# -- reading the committed outputs ---------------------------------------------------------------
def load(experiment: str, stem: str, suffix: str = "results.json") -> Summary | dict | None:
    """A committed output of the row (None where not run): results.json as its typed record
    (:meth:`miaudit.Results.load`: schema and digest checked), other files as JSON."""
    if suffix == "results.json":
        results = load_results(experiment, stem)
        return results and results.summary
    path = HERE / experiment / "outputs" / f"{stem}.{suffix}"
    return json.loads(path.read_text()) if path.exists() else None


@cache
def load_results(experiment: str, stem: str) -> Results | None:
    path = HERE / experiment / "outputs" / f"{stem}.results.json"
    return Results.load(path) if path.exists() else None


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
    half = Z95 * math.sqrt(summary_intervals.hanley_mcneil_variance(auc, n_pos, n_neg))
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
        found = spearman_interval(side["rho"], side["n"])
        return widened(found, table, "rho_train" if metric == "rho_members" else "rho_test")
    bins = [b for b in table["bins"] if b["n_members"]]
    chosen = [b for b in bins if (b["bin"] == 0 if metric == "bin_tpr_low" else b["low"] >= 0.5)]
    n = sum(b["n_members"] for b in chosen)
    k = sum(round(b["tpr@0.1%"] * b["n_members"]) for b in chosen)
    key = "tpr@0.1%_memorization_" + ("0" if metric == "bin_tpr_low" else "above_0.5")
    if not n:
        return None
    value, low, high = widened((k / n, *metrics.clopper_pearson(k, n)), table, key)
    return value, max(low, 0.0), high  # a rate


def widened(found: Interval, table: dict, key: str) -> Interval:
    """An interval over samples widened by the memorization estimate's own uncertainty where
    memorization came from an independent family (issue 79: memorization.json's jackknife over
    those models): the two half-widths, per side, added in quadrature."""
    block = table.get("independent") or {}
    se = block.get("jackknife_se", {}).get(key)
    if se is None or math.isnan(se):
        return found
    value, low, high = found
    spread = jackknife_quantile(len(block["memorization_models"])) * se
    return (value, value - math.hypot(value - low, spread),
            value + math.hypot(high - value, spread))


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
        interval = summary_intervals.target_summary_interval(pooled, per_target, metric)
        return (pooled[metric], *interval)
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


def relative_margin(claim: Claim, metric: str, ours: Interval, theirs: Interval
                    ) -> tuple[float, float]:
    """(margin at our level, the paper's absolute margin) of a "similar" claim: the papers'
    largest difference they call comparable (:data:`EQUIVALENCE_MARGINS`) as a fraction of the
    paper's level of that metric, applied to our measured level (AUC's level: AUC - 0.5). At a
    tenth of the paper's TPR, a tenth of its margin: "equivalent" must follow from the data,
    not from a margin copied across scales. Without the paper's level: its absolute margin."""
    absolute = EQUIVALENCE_MARGINS[metric]
    paper = [ROWS[label].paper_values().get(metric) for label in (claim.high, claim.low)]
    if None in paper:
        return absolute, absolute
    def level(values):
        mean = sum(values) / len(values)
        return mean - 0.5 if metric == "auc" else mean
    paper_level, our_level = level(paper), level([ours[0], theirs[0]])
    if paper_level <= 0 or our_level <= 0:
        return absolute, absolute
    return absolute * our_level / paper_level, absolute


BOUND_FPR = {"tpr@0.1%": 0.001, "tpr@1%": 0.01}
ALPHA = 0.05  # the family-wise error rate the table controls (Holm)


@dataclass
class Test:
    """One per-metric decision of a claim: the decision statistic (its direction: positive
    supports the claim; null 0), its 95% interval, the p-value and how it was made."""
    metric: str
    text: str  # our numbers as shown
    status: str = ""  # "" when decidable, else "not run" / "not measurable"
    stat: Interval | None = None  # (value, low, high); for "similar" the difference itself
    how: str = ""  # "paired bootstrap", "MOVER", "paired over targets", ...
    margin: float = 0.0  # "similar": the equivalence margin at our level (0: directional)
    p: float = NAN  # the decision's p-value (directional: two-sided; similar: the smaller of
    # TOST's and beyond-the-margin's)
    adjusted_p: float = NAN  # Holm's, over the table's family
    family: int = 1  # the family's size (the power figure is at its Bonferroni level)

    @property
    def decidable(self) -> bool:
        return not self.status and self.stat is not None and not any(
            math.isnan(v) for v in self.stat)

    def compute_p(self) -> None:
        if not self.decidable:
            return
        value, low, high = self.stat
        if self.margin:
            self.p = min(tost_p(value, low, high, self.margin),
                         beyond_margin_p(value, low, high, self.margin))
        else:
            self.p = interval_p(value, low, high)

    def verdict(self, adjusted: bool = False) -> str:
        if not self.decidable:
            return self.status or "not measurable"
        p = self.adjusted_p if adjusted else self.p
        if math.isnan(p) or p >= ALPHA:
            return "inconclusive"
        value, low, high = self.stat
        if self.margin:  # which of the two hypotheses was rejected
            equivalent = tost_p(value, low, high, self.margin) <= beyond_margin_p(
                value, low, high, self.margin)
            return "reproduced" if equivalent else "not reproduced"
        return "reproduced" if value > 0 else "not reproduced"

    def sign(self) -> int:
        return 0 if not self.decidable else (1 if self.stat[0] > 0 else -1)

    def hair(self) -> bool:
        """Decided (unadjusted) by less than a tenth of its interval's width."""
        if not self.decidable or self.verdict() == "inconclusive":
            return False
        value, low, high = self.stat
        if not self.margin:
            return by_a_hair(low, high, 0.0)
        if self.verdict() == "reproduced":  # inside +-margin: how far inside
            distance = min(low + self.margin, self.margin - high)
        else:  # beyond the margin: how far beyond
            distance = low - self.margin if value > 0 else -self.margin - high
        return distance < 0.1 * (high - low)

    def to_decide(self) -> str:
        """What scale would decide an inconclusive directional test at 80% power, at the
        family's Bonferroni level (where Holm's last step tests; a conservative figure)."""
        if not self.decidable or self.margin or self.verdict(True) != "inconclusive":
            return ""
        value, low, high = self.stat
        if value <= 0:
            return "estimate against the claim: no scale decides it"
        factor = self.power_scale()
        if factor > 100:
            return "effect ~0: > 100x the targets and samples for 80% power"
        return (f"~{math.ceil(10 * factor) / 10:.1f}x the targets and samples for 80% power "
                f"at the family's level (5% / {self.family}), the measured effect held")

    def power_scale(self) -> float:
        value, low, high = self.stat
        return scale_for_power(value, side_se(value, low, high, 0.0),
                               alpha=ALPHA / self.family)


def test_for(claim: Claim, metric: str, seed: int | None = None) -> Test:
    """The decision of one metric of a claim (at one seed's experiment), before adjustment."""
    high, low = rows_of(claim, seed)
    ours = interval(high, metric)
    if ours is None:
        return Test(metric, "-", "not run")
    if ours is NOT_MEASURABLE:
        return Test(metric, "n/m", "not measurable")
    if claim.kind in ("under_bound", "exceeds_bound"):
        bound = float(bounds.roc_bound(BOUND_FPR[metric], claim.epsilon, 1e-5))
        text = f"{fmt(metric, ours)} vs bound {fmt(metric, (bound,))}"
        below = (bound - ours[0], bound - ours[2], bound - ours[1])
        stat = below if claim.kind == "under_bound" else tuple(-v for v in below[::-1])
        stat = (stat[0], min(stat[1:]), max(stat[1:]))
        return done(Test(metric, text, stat=stat, how="interval vs bound"))
    if claim.kind == "near_zero":  # "gap ~ 0": within the gap's margin (2 points) of zero
        return done(Test(metric, fmt(metric, ours), stat=ours, how="t over targets",
                         margin=EQUIVALENCE_MARGINS["gap"]))
    if claim.kind == "positive":
        return done(Test(metric, fmt(metric, ours), stat=ours, how="Fisher z"))
    if claim.kind == "within":  # metrics[0] > metrics[1] within one row
        other = interval(high, claim.metrics[1])
        if other is None:
            return Test(metric, "-", "not run")
        if other is NOT_MEASURABLE:
            return Test(metric, f"{fmt(metric, ours)} vs n/m", "not measurable")
        return done(Test(metric, f"{fmt(metric, ours)} vs {fmt(metric, other)}",
                         stat=difference_interval(ours, other), how="MOVER"))
    theirs = interval(low, metric)
    if theirs is None:
        return Test(metric, "-", "not run")
    if theirs is NOT_MEASURABLE:
        return Test(metric, f"{fmt(metric, ours)} vs n/m", "not measurable")
    text = f"{fmt(metric, ours)} vs {fmt(metric, theirs)}"
    difference, how = None, ""
    if claim.kind == "similar":
        difference, how = paired_accuracy_difference(high, low, metric), "paired over targets"
    if difference is None and (entry := paired_difference(high, low, metric)):
        difference, how = (entry["value"], *entry["ci"]), "paired bootstrap"
    if difference is None:
        difference, how = difference_interval(ours, theirs), "MOVER"
    test = Test(metric, text, stat=difference, how=how)
    as_entry = {"value": difference[0], "ci": difference[1:]}
    if claim.kind == "similar":
        test.margin, absolute = relative_margin(claim, metric, ours, theirs)
        scale, digits = scale_digits(metric)
        said = (f"+-{scale * test.margin:.{digits + 1}f} at our level, paper's "
                f"+-{scale * absolute:.{digits}f}" if test.margin != absolute else
                f"+-{scale * absolute:.{digits}f}, the paper's absolute: no paper level here")
        test.text += f", difference {fmt_difference(metric, as_entry)} ({how}; margin {said})"
    else:
        test.text += f", {how} {fmt_difference(metric, as_entry)}"
    return done(test)


def done(test: Test) -> Test:
    test.compute_p()
    return test


def condition_for(claim: Claim, seed: int | None = None) -> list[tuple[str, str]]:
    """An "at_least" entry is a condition of the claim it serves (a control held to no more
    accuracy than what it is matched to), not a paper claim: per metric (state, our numbers).
    Met when the control is significantly less accurate, or within the margin (the lower end
    of high - low above -margin); violated when significantly more accurate by more than the
    margin; else not shown."""
    out = []
    high, low = rows_of(claim, seed)
    for metric in claim.metrics:
        ours, theirs = interval(high, metric), interval(low, metric)
        if ours is None or theirs is None:
            out.append((metric, "not run"))
            continue
        difference = paired_accuracy_difference(high, low, metric) or \
            difference_interval(ours, theirs)
        margin = EQUIVALENCE_MARGINS[metric]
        state = ("met" if difference[1] > 0 else "met within the margin"
                 if difference[1] > -margin else "violated" if difference[2] < -margin
                 else "not shown")
        scale, digits = scale_digits(metric)
        out.append((metric, f"{state}: {fmt(metric, ours)} vs {fmt(metric, theirs)}, difference "
                    f"{fmt_difference(metric, {'value': difference[0], 'ci': difference[1:]})} "
                    f"(margin -{scale * margin:.{digits}f})"))
    return out


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
    return [(results := load_results(row.experiment, row.stem)) and results.digest
            for row in (high, low)]


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
    if summary is None or row.attack not in summary.attacks:
        return None
    return summary.reference_models(row.attack)


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


@dataclass
class Assessment:
    """A claim's decisions before and after the family's adjustment."""
    claim: Claim
    by_seed: dict[int | None, list[Test]]  # the per-metric tests at each seed that ran
    blocked: dict[int | None, str]  # seed -> why it decides nothing (failed run, not comparable)
    pooled: list[Test] = field(default_factory=list)  # the family's tests (pooled over seeds)
    disagree: bool = False  # two seeds significant in opposite directions

    @property
    def condition(self) -> bool:
        return self.claim.kind == "at_least"


def assess(claim: Claim) -> Assessment:
    """The claim's tests at each seed (None: its rows' own experiments) and the tests it brings
    to the family: one per metric, at one seed, or pooled by fixed effects over seeds that ran
    (the seeds' targets are disjoint draws of one design: independent estimates)."""
    tested = claim.metrics[:1] if claim.kind == "within" else claim.metrics
    seeds = sorted(claim.seeds) or [None]
    by_seed, blocked = {}, {}
    for seed in seeds:
        tests = [test_for(claim, metric, seed) for metric in tested]
        if all(test.status == "not run" for test in tests):
            continue
        by_seed[seed] = tests
        if failed := failed_rows(claim, seed):
            blocked[seed] = f"{FAILED}{', '.join(failed)}"
        elif unequal := unequal_references(claim, seed):
            blocked[seed] = unequal
    found = Assessment(claim, by_seed, blocked)
    if claim.kind == "at_least":
        return found
    usable = {seed: tests for seed, tests in by_seed.items() if seed not in blocked}
    if len(usable) == 1:
        found.pooled = next(iter(usable.values()))
    elif usable:
        found.disagree = any(
            {t.sign() for t in column if t.verdict() != "inconclusive" and t.decidable} ==
            {1, -1} and not column[0].margin for column in zip(*usable.values()))
        if not found.disagree:
            found.pooled = [pool(list(column)) for column in zip(*usable.values())]
    return found


def pool(column: list[Test]) -> Test:
    """One metric's tests at several seeds as one: the fixed-effects combination of their
    decision statistics (undecidable when any seed's is)."""
    if not all(test.decidable for test in column):
        status = next((t.status for t in column if t.status), "not measurable")
        return Test(column[0].metric, "", status or "not measurable")
    stat = fixed_effects([test.stat for test in column])
    margin = sum(test.margin for test in column) / len(column)
    hows = sorted({test.how for test in column})
    test = Test(column[0].metric, "", stat=stat, margin=margin,
                how=f"fixed effects over seeds ({', '.join(hows)})")
    return done(test)


def adjust(assessments: list[Assessment]) -> int:
    """Holm over every decidable test the assessments bring to the family (in place); returns
    the family's size."""
    family = [test for found in assessments for test in found.pooled if test.decidable]
    for test, adjusted in zip(family, holm([test.p for test in family])):
        test.adjusted_p, test.family = float(adjusted), len(family)
    return len(family)


def combine(verdicts: list[tuple[str, str]]) -> str:
    """One verdict over a claim's metrics, [(metric, verdict)] (mixed when they disagree)."""
    found = {verdict for _, verdict in verdicts}
    if found == {"not run"}:
        return "not run"
    if len(found) == 1:
        return found.pop()
    parts = [f"{verdict} ({', '.join(METRIC_NAMES[m] for m, v in verdicts if v == verdict)})"
             for verdict in ("reproduced", "inconclusive", "not reproduced", "not measurable",
                             "not run") if verdict in found]
    return "mixed: " + "; ".join(parts)


def seed_verdict(tests: list[Test]) -> str:
    return combine([(t.metric, t.verdict()) for t in tests])


def seeds_said(found: Assessment) -> str:
    """What the seeds say, unadjusted: agreement, or which seed reproduced it and whether the
    other points the same way ("reproduced at seed 1; seed 0 inconclusive, same direction")."""
    seeds = [seed for seed in found.by_seed if seed not in found.blocked]
    if len(seeds) < 2:
        return ""
    verdicts = {seed: seed_verdict(found.by_seed[seed]) for seed in seeds}
    if len(set(verdicts.values())) == 1:
        return f"seeds {', '.join(map(str, seeds))} each {verdicts[seeds[0]]}"
    signs = {seed: tuple(t.sign() for t in found.by_seed[seed]) for seed in seeds}
    direction = "same direction" if len(set(signs.values())) == 1 else "other direction"
    decided = [s for s in seeds if verdicts[s] != "inconclusive"]
    rest = [s for s in seeds if s not in decided]
    said = "; ".join(f"{verdicts[s]} at seed {s}" for s in decided)
    if rest:
        said += "; " + ", ".join(f"seed {s}" for s in rest) + f" inconclusive, {direction}"
    return said


def verdict_of(found: Assessment) -> str:
    """The claim's verdict after the family's adjustment, with what qualifies it."""
    claim = found.claim
    if not found.by_seed:
        return "not run"
    if found.condition:
        states = [state.split(":")[0] for seed in found.by_seed
                  for _, state in condition_for(claim, seed)]
        worst = next((s for s in ("violated", "not run", "not shown", "met within the margin")
                      if s in states), "met")
        return f"condition {worst}"
    usable = [seed for seed in found.by_seed if seed not in found.blocked]
    if not usable:
        seen = "; ".join(f"seed {seed} {why.removeprefix(FAILED)}" if seed is not None else
                         why.removeprefix(FAILED) for seed, why in found.blocked.items())
        below_by_seed = {seed: seed_verdict(tests) for seed, tests in found.by_seed.items()}
        below = (next(iter(below_by_seed.values())) if len(set(below_by_seed.values())) == 1
                 else "seeds differ (" + "; ".join(f"seed {seed} {v}" for seed, v in
                                                   below_by_seed.items()) + ")")
        if all(why.startswith(FAILED) for why in found.blocked.values()):
            return f"{FAILED}{seen}{BELOW}{below}"
        return f"{seen}; as measured: {below}"
    if found.disagree:
        return "seeds disagree: " + "; ".join(
            f"seed {seed} {seed_verdict(found.by_seed[seed])}" for seed in usable)
    adjusted = combine([(t.metric, t.verdict(True)) for t in found.pooled])
    notes = []
    if len(usable) > 1:
        notes.append("seeds pooled")
    elif claim.seeds:
        notes.append("one seed" + (f": seed {usable[0]}" if len(claim.seeds) > 1 else ""))
    if said := seeds_said(found):
        notes.append(said)
    if found.blocked:
        notes.append("; ".join(f"seed {seed} decides nothing ({why})"
                               for seed, why in found.blocked.items()))
    unadjusted = combine([(t.metric, t.verdict()) for t in found.pooled])
    if unadjusted != adjusted:
        notes.append(f"unadjusted: {unadjusted}")
    hairs = [METRIC_NAMES[t.metric] for t in found.pooled if t.hair()]
    if hairs:
        notes.append(f"decided by less than a tenth of the interval's width: {', '.join(hairs)}")
    return adjusted + (f" ({'; '.join(notes)})" if notes else "")


def tests_text(found: Assessment) -> str:
    """Our numbers: each seed's, then the pooled decision with its p-values."""
    claim = found.claim
    parts = []
    for seed, tests in found.by_seed.items():
        if found.condition:
            body = "; ".join(f"{METRIC_NAMES[m]} {state}" for m, state in condition_for(claim,
                                                                                       seed))
        else:
            body = "; ".join(f"{METRIC_NAMES[t.metric]} {t.text}" + (
                " (decided by less than a tenth of its interval's width)" if t.hair() else "")
                for t in tests)
        parts.append(body if seed is None else f"seed {seed}: {body}")
    for test in found.pooled:
        if not test.decidable:
            continue
        pooled = "pooled " if len(found.by_seed) - len(found.blocked) > 1 else ""
        statistic = {"value": test.stat[0], "ci": test.stat[1:]}
        decision = (f"{METRIC_NAMES[test.metric]} {pooled}"
                    f"{fmt_difference(test.metric, statistic)}" if pooled
                    else METRIC_NAMES[test.metric])
        decision += f" p {fmt_p(test.p)}, Holm p {fmt_p(test.adjusted_p)}"
        if scale := test.to_decide():
            decision += f" ({scale})"
        parts.append(decision)
    return "; ".join(parts) if parts else "-"


def fmt_p(p: float) -> str:
    if math.isnan(p):
        return "-"
    return "< 0.0001" if p < 1e-4 else f"{p:.4f}" if p < 0.01 else f"{p:.3f}"


def decide_all(claims: list[Claim]) -> tuple[list[tuple[str, str]], int]:
    """(verdict, our numbers) of every claim, the family adjusted together; and its size."""
    assessments, size = assess_all(claims)
    return [(verdict_of(found), tests_text(found)) for found in assessments], size


def assess_all(claims: list[Claim]) -> tuple[list[Assessment], int]:
    assessments = [assess(claim) for claim in claims]
    return assessments, adjust(assessments)


def decide(claim: Claim) -> tuple[str, str]:
    """(verdict, our numbers) of a claim decided on its own (a family of its tests)."""
    return decide_all([claim])[0][0]


@cache
def table_assessments() -> tuple[list[Assessment], int]:
    """The whole table's assessments, adjusted over the family of all its claims."""
    return assess_all(CLAIMS_FROM_DATA)


@cache
def table_decisions() -> tuple[tuple[tuple[str, str], ...], int]:
    assessments, size = table_assessments()
    return tuple((verdict_of(found), tests_text(found)) for found in assessments), size


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


def experiments_of(claim: Claim) -> list[str]:
    rows = [row for row in rows_of(claim) if row is not None]
    return sorted({row.experiment for row in rows} | set(claim.seeds.values()))


def scale_of(row: Row) -> str:
    """A row's scale as run: pool, width, epochs, models, where it trained."""
    summary = load(row.experiment, row.stem)
    if summary is None:
        return "not run"
    config = summary["config"]
    pool = summary.get("pool_size") or config.get("data", {}).get("pool_size")
    pool_text = f"{pool / 1000:g}k" if isinstance(pool, int | float) else str(pool)
    device = (summary.get("timing") or {}).get("device") or config.get("device", "cpu")
    epochs = config.get("train", {}).get("epochs", "?")
    return (f"{config.get('data', {}).get('name', '?')} pool {pool_text}, width "
            f"{config.get('model', {}).get('width', 1):g}, {epochs} epochs, "
            f"{summary.get('num_models', '?')} models, trained on {device}")


PAIR_GAP_POINTS = 5.0  # a pair's test-accuracy gap this far from the paper's is said


def accuracy_text(claim: Claim, seed: int | None = None) -> str:
    """The rows' test accuracies beside the paper's, and the pair-accuracy condition: where
    our pair's accuracy gap is more than PAIR_GAP_POINTS from the paper's, the comparison is
    not accuracy-matched as the paper's was (a less accurate model also leaks less)."""
    rows = [row for row in rows_of(claim, seed) if row is not None]
    ours = [target_test_accuracy(row) for row in rows]
    paper = [row.paper_values().get("test_accuracy") for row in rows]
    if None in ours:
        return ""
    text = "test " + " vs ".join(f"{100 * a:.1f}" for a in ours)
    if None not in paper:
        text += " (paper " + " vs ".join(f"{100 * a:.1f}" for a in paper) + ")"
    if len(rows) == 2 and rows[0].label != rows[1].label and None not in paper \
            and claim.kind in ("greater", "similar"):
        gap, paper_gap = 100 * (ours[0] - ours[1]), 100 * (paper[0] - paper[1])
        if abs(gap - paper_gap) > PAIR_GAP_POINTS:
            text += (f"; not accuracy-matched as in the paper: gap {gap:+.1f} vs the paper's "
                     f"{paper_gap:+.1f} points")
    return text


def scale_text(claim: Claim) -> str:
    seed = min(claim.seeds) if claim.seeds else None
    high, low = rows_of(claim, seed)
    scales = {scale_of(row) for row in (high, low) if row is not None}
    accuracies = [f"seed {s}: {accuracy_text(claim, s)}" if s is not None else
                  accuracy_text(claim) for s in (sorted(claim.seeds) or [None])]
    caveats = [caveat for key, caveat in ROW_CAVEATS.items()
               if any(row and key(row) for row in (high, low))]
    return "; ".join([*sorted(scales), *[a for a in accuracies if not a.endswith(": ")
                                         and a], *caveats])


ROW_CAVEATS = {  # what a row's provenance qualifies (issue 79)
    (lambda row: "input_dropout" in row.attack and "dropout_grid" not in row.experiment):
        "input dropout: grid {0.01, 0.05}, N = 4, no p = 0, chosen on one reference",
    (lambda row: "input_dropout" in row.attack and "dropout_grid" in row.experiment):
        "input dropout: grid p in {0, 0.01, 0.02, 0.05, 0.1} x N in {4, 8}, chosen on every "
        "reference, never the target",
    (lambda row: "memorization" in row.label and "independent" not in row.experiment):
        "memorization from the attack's own references (reused: partly mechanical)",
    (lambda row: "memorization" in row.label and "independent" in row.experiment):
        "memorization from 8 independent models (not the target, not its references)",
}


TABLE_HEADER = ["| paper, table | claim | paper | ours (95% CI; decision) | verdict "
                "(Holm-adjusted) | scale: data, width, epochs, models, accuracy vs the paper's "
                "| experiment |", "| --- | --- | --- | --- | --- | --- | --- |"]


def claims_table() -> str:
    decided, family = table_decisions() if CLAIMS is CLAIMS_FROM_DATA else decide_all(CLAIMS)
    lines = list(TABLE_HEADER)
    counts: dict[str, int] = {}
    below_floor: dict[str, int] = {}
    conditions: dict[str, int] = {}
    for claim, (overall, ours) in zip(CLAIMS, decided):
        note = f" ({claim.note})" if claim.note else ""
        lines.append(f"| {claim.source} | {claim_text(claim)} | {paper_text(claim)} | "
                     f"{ours} | **{overall}**{note} | {scale_text(claim)} | "
                     f"{', '.join(experiments_of(claim))} |")
        if claim.kind == "at_least":
            conditions[overall] = conditions.get(overall, 0) + 1
            continue
        category = re.split(r":| \(", overall)[0]  # "failed run", "mixed", or the verdict
        counts[category] = counts.get(category, 0) + 1
        if category == "failed run":
            below = re.split(r":| \(", overall.split(BELOW, 1)[1])[0]
            below_floor[below] = below_floor.get(below, 0) + 1
    tally = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
    if below_floor:
        tally += " (below the floors, not counted: " + ", ".join(
            f"{n} {verdict}" for verdict, n in sorted(below_floor.items())) + ")"
    said = (f"\n\n{sum(counts.values())} claims: {tally}; decided over a family of {family} "
            "per-metric tests (Holm, family-wise error 5%).")
    if conditions:
        said += " Conditions (accuracy matches, not claims): " + ", ".join(
            f"{n} {state}" for state, n in sorted(conditions.items())) + "."
    return "\n".join(lines) + said + "\n"


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
            overall, ours = table_decisions()[0][CLAIMS.index(claim)]
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


CLAIMS_MD = HERE / "CLAIMS.md"
FINDINGS_MD = HERE / "FINDINGS.md"
GENERATED = ("<!-- Generated by `python experiments/claims.py` from the committed outputs "
             "(experiments/claims.yaml, */outputs/*.results.json, paired.json); do not edit: "
             "rerun it. -->")


def interval_sources() -> str:
    """How many of the table's results.json carry the crossed bootstrap (issue 23)."""
    paths = {(row.experiment, row.stem) for row in ROWS.values()}
    paths |= {(experiment, ROWS[label].stem) for claim in CLAIMS
              for experiment in claim.seeds.values() for label in (claim.high, claim.low)
              if label}
    found = [load(*path) for path in sorted(paths)]
    found = [summary for summary in found if summary]
    crossed = sum(any("ci_method" in (a.get("pooled") or {}) for a in s["attacks"].values())
                  for s in found)
    cuda = sum((s.get("timing") or {}).get("device", s["config"].get("device")) == "cuda"
               for s in found)
    return (f"Of the {len(found)} results.json the table reads, {crossed} carry the crossed "
            f"bootstrap's intervals (the others: the per-target-summary interval, which errs "
            f"wide); {cuda} were trained on CUDA, the rest on this project's CPU box.")


METHOD = """\
How to read it (issue 79):

- **Each claim compares two rows on some metrics**; each metric is one test of a decision
  statistic with its 95% interval: the paired-bootstrap interval of the difference where the
  two rows share targets and samples (two attacks of one run: results.json's `differences`;
  two runs with the same memberships: `paired.json`); otherwise the difference of the two
  rows' intervals by MOVER (Zou & Donner 2008). Bound claims test the distance to the
  (epsilon, 1e-5) ROC bound, "positive" Spearman's rho by Fisher's z.
- **p-values from the intervals**: results.json keeps intervals, not bootstrap replicates, so
  each p-value inverts its interval as a normal one with the standard error of its side
  facing the null (`miaudit.analysis.decision_rules.interval_p`): p < 0.05 exactly when the
  95% interval excludes the null. The paired bootstrap's own replicates (from kept scores)
  are not used: kept scores exist for 4 rows, never both sides of a pair at both seeds.
- **Not the simultaneous bands**: results.json's `*_ci_simultaneous` cover one ROC curve's
  FPR levels at once (within one row), not the table's claims, so they are shown nowhere here.
- **Family-wise error, not false discovery rate**: Holm's step-down procedure over every
  decidable per-metric test of the table (one per metric of each claim, pooled over seeds),
  at 5% family-wise error under any dependence between the tests (claims share models, so
  the tests are not independent: Holm needs no independence). The verdict column is the
  adjusted verdict; "unadjusted: ..." follows where it differs; the 95% intervals shown are
  the unadjusted ones.
- **Seeds**: a claim run at two seeds is decided on the seeds pooled by a fixed-effects
  (inverse-variance) combination of the two seeds' decision statistics, said as "seeds
  pooled" (the seeds' targets are disjoint draws: independent estimates; a combined paired
  bootstrap over both seeds' targets needs scores this repository does not keep). "Seeds
  disagree" only when the two seeds are significant (unadjusted) in opposite directions;
  otherwise the verdict says what each seed shows ("reproduced at seed 1; seed 0
  inconclusive, same direction").
- **Equivalence** ("~", "similar") by two one-sided tests (Schuirmann 1987) at 5%: the
  papers' largest difference called comparable (A Tab. 6, B Tab. 2), taken relative to the
  paper's level of the metric and applied to ours (AUC's level: AUC - 0.5); the paper's
  absolute margin is printed beside it.
- **Conditions, not claims**: an accuracy-matched control's check ("control no more accurate
  than DeMem") is a condition of the claim above it: met (significantly less accurate), met
  within the margin, not shown, or violated; not counted among the claims, not in the family.
  The scale column says where a pair is not accuracy-matched as the paper's was (its test
  accuracy gap more than 5 points from the paper's).
- **Inconclusive "greater" claims** say what scale would decide them at 80% power (5% two-sided,
  the measured effect staying, standard error falling as 1/sqrt(scale)): ((1.96 + 0.84) x
  SE / effect)^2, said as such; before the family's adjustment.
- **By a hair**: a test whose interval excludes the null (or the margin) by less than a tenth
  of its width says so.
- **Floors**: a row below its family's test-accuracy floor is a failed run and decides
  nothing (what it measured is shown, unadjusted, not counted); rows calibrated on different
  numbers of reference models are not compared.
"""


def claims_md() -> str:
    return "\n".join([GENERATED, "", "# The three studies' claims at CPU scale", "",
                      "One row per claim (two rows compared on some metrics), from the "
                      "committed outputs. Test-accuracy floors: " + floors_text() + ". "
                      + interval_sources(), "", METHOD, claims_table()])


@cache
def findings_data() -> dict:
    return yaml.safe_load(DATA.read_text()).get("findings", {})


def find_claim(entry: dict) -> int:
    """The index in CLAIMS of the claim a findings entry names (source, high, low)."""
    for index, claim in enumerate(CLAIMS_FROM_DATA):
        if (claim.source, claim.high, claim.low) == (entry["source"], entry["high"],
                                                    entry.get("low", "")):
            return index
    raise ValueError(f"{DATA.name}: findings entry {entry!r} names no claim")


PLAIN = {"reproduced": "holds", "not reproduced": "refuted (the other way)",
         "mixed": "holds on some metrics only", "seeds disagree": "seeds disagree",
         "inconclusive": "open", "not run": "not run"}


def plain_words(verdict: str) -> str:
    head = re.split(r":| \(", verdict)[0]
    if head != "mixed":
        return PLAIN.get(head, head)
    parts = set(re.findall(r"(not reproduced|reproduced|inconclusive) \(", verdict))
    if "reproduced" in parts:
        return "holds on some metrics only" + (
            ", refuted on others" if "not reproduced" in parts else "")
    return "refuted on some metrics, open on the others"


def verdict_cell(verdict: str) -> str:
    plain = plain_words(verdict)
    return f"**{plain}**" if plain == verdict else f"**{plain}**: {verdict}"


def adjusted_interval(test: Test, family: int) -> str:
    """The effect with its Bonferroni interval over the family (1 - 0.05 / family, two-sided):
    the simultaneous interval that matches family-wise control (Holm's decisions can be
    sharper than it)."""
    value, low, high = test.stat
    z = float(norm.ppf(1 - ALPHA / (2 * family)))
    lo = value - z * side_se(value, low, high, low - 1)
    hi = value + z * side_se(value, low, high, high + 1)
    return fmt_difference(test.metric, {"value": value, "ci": (lo, hi)})


def cost_to_decide(claim: Claim, test: Test) -> str:
    """The 80%-power scale factor times what training the claim's rows took (one seed)."""
    if not test.decidable or test.margin or test.verdict(True) != "inconclusive":
        return ""
    value, low, high = test.stat
    if value <= 0:
        return f"{METRIC_NAMES[test.metric]}: estimate against the claim: no scale decides it"
    factor = test.power_scale()
    seconds, devices = 0.0, set()
    for row in rows_of(claim, min(claim.seeds) if claim.seeds else None):
        summary = row and load(row.experiment, row.stem)
        if summary:
            seconds += summary["target_models"].get("train_seconds_mean", 0) * summary.get(
                "num_models", 0)
            devices.add((summary.get("timing") or {}).get("device", "cpu"))
    if factor > 100:
        return "effect ~0: more than 100x the targets and samples for 80% power"
    hours = factor * seconds / 3600
    return (f"{METRIC_NAMES[test.metric]}: ~{factor:.1f}x the targets and samples for 80% power "
            f"at the family's level (estimate: ~{hours:.0f} {'/'.join(sorted(devices))}-hours "
            "of training at this model size, from the rows' measured per-model times)")


def findings_md() -> str:
    """One screen per paper: its central claims, ours beside the paper's, in plain words."""
    assessments, family = table_assessments()
    decided, _ = table_decisions()
    out = [GENERATED, "", "# What the three papers' central claims look like at CPU scale", "",
           f"Each row is one claim of `CLAIMS.md` (its decision rules there): the effect is the "
           f"pooled decision statistic (high - low, or the distance to a bound) with its interval "
           f"adjusted over the table's family of {family} tests (Bonferroni, two-sided "
           f"{100 * (1 - ALPHA / family):.3f}%); the verdict is Holm's.", ""]
    for data in findings_data().values():
        out += [f"## {data['title']}", "",
                "| claim (paper) | paper's numbers | ours: effect [adjusted interval] | test "
                "accuracy, ours (paper's) | verdict |", "| --- | --- | --- | --- | --- |"]
        deciders = []
        for entry in data["claims"]:
            index = find_claim(entry)
            claim, found = CLAIMS_FROM_DATA[index], assessments[index]
            effects = "; ".join(f"{METRIC_NAMES[t.metric]} {adjusted_interval(t, family)}"
                                for t in found.pooled if t.decidable) or "-"
            seed = min(claim.seeds) if claim.seeds else None
            out.append(f"| {entry['says']} ({claim.source}) | {paper_text(claim)} | {effects} | "
                       f"{accuracy_text(claim, seed) or '-'} | {verdict_cell(decided[index][0])} |")
            deciders += [f"- {entry['says']}: {cost}" for t in found.pooled
                         if (cost := cost_to_decide(claim, t))]
        out += ["", f"**Scale gap.** {data['gap']}", ""]
        if data.get("queued"):
            out += [f"**Queued (not run this session).** {data['queued']}", ""]
        if deciders:
            out += ["**What would decide the open ones** (the measured effect held; 80% power at "
                    f"the family's Bonferroni level, 5% / {family} two-sided):", *deciders, ""]
    return "\n".join(out)


def write_generated(folder: Path = HERE) -> list[Path]:
    """CLAIMS.md and FINDINGS.md into ``folder``."""
    written = []
    for name, text in (("CLAIMS.md", claims_md()), ("FINDINGS.md", findings_md())):
        path = folder / name
        path.write_text(text)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", action="store_true",
                        help=f"print the experiments of {DATA.name}'s queue in order and exit")
    parser.add_argument("--plan", action="store_true",
                        help="print what each queued experiment still has to run, and the "
                             "claims waiting for it, and exit")
    parser.add_argument("--out", type=Path, default=None,
                        help="write CLAIMS.md and FINDINGS.md into this folder (default: "
                             "experiments/) and skip the summaries")
    args = parser.parse_args(argv)
    if args.queue or args.plan:
        print("\n".join(QUEUE) if args.queue else plan_text())
        return
    for path in [] if args.out else write_verdicts():
        print(f"wrote {path.relative_to(HERE.parent)}")
    for path in write_generated(args.out or HERE):
        print(f"wrote {path}")

if __name__ == "__main__":
    main()
