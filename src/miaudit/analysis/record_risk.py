"""Per-record membership risk across retrainings.

Under the rotation protocol every audited record is IN (trained on) for about half of the
targets and OUT for the others. Its **risk** is the membership advantage of the audit's
strongest attack on that very record: the rate at which the attack flags it when it is IN minus
the rate when it is OUT,

    risk_i = k_in_i / n_in_i - k_out_i / n_out_i,

where a flag is a score at or above the attack's *global* pooled threshold for a stated FPR
(the threshold that gives FPR <= level over all targets and records, as ``metrics.tpr_at_fpr``
chooses it), n_in / n_out count the targets where the record is IN / OUT and k_in / k_out the
flags among them. For a record the attack cannot tell apart, both rates are the same and the
risk is 0 whatever the FPR; a record the model memorizes is flagged IN far more often than OUT.

The 95% interval is Newcombe's (1998, "Interval estimation for the difference between
independent proportions", method 10) square-and-add construction, with exact Clopper-Pearson
intervals in place of Wilson's for the two rates (so it keeps at least its nominal coverage
for few targets): with p1, p2 the two rates and [l1, u1], [l2, u2] their intervals,

    low  = (p1 - p2) - sqrt((p1 - l1)^2 + (u2 - p2)^2)
    high = (p1 - p2) + sqrt((u1 - p1)^2 + (p2 - l2)^2).

The interval is over the retrainings (targets): it says how surely *this record* is exposed by
*this training recipe*, not by one trained model. A single target cannot give this: the record
is either IN or OUT of it, so there is no OUT rate to subtract, and one flag is one Bernoulli
draw whose rate is unknown (see docs/tutorials/per-record-risk.md).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from miaudit._runtime.io import atomic_write
from miaudit.stats import metrics

RECORDS_FILE = "records.csv"
RISK_FPR = 1e-2  # the stated FPR of the global threshold (see RecordRisk.level)


@dataclass
class RecordRisk:
    """Per-record risk of one attack at one FPR level; arrays are (N,) over audited records."""

    attack: str
    level: float  # the global threshold's FPR
    threshold: float
    n_in: np.ndarray
    n_out: np.ndarray
    flagged_in: np.ndarray
    flagged_out: np.ndarray
    risk: np.ndarray  # NaN where the record is never IN or never OUT
    low: np.ndarray
    high: np.ndarray

    @property
    def significant(self) -> np.ndarray:
        """Records whose interval excludes zero from above (risk credibly positive)."""
        return np.nan_to_num(self.low, nan=-1.0) > 0.0

    def share_significant(self) -> float:
        rated = np.isfinite(self.risk)
        return float(self.significant[rated].mean()) if rated.any() else float("nan")


def global_threshold(scores: np.ndarray, members: np.ndarray, level: float) -> float:
    """The pooled threshold whose FPR is at most ``level`` with the largest TPR (the
    threshold ``metrics.tpr_at_fpr`` picks); inf when none flags anyone."""
    fpr, tpr, thresholds = metrics.roc_curve(np.ravel(scores), np.ravel(members))
    return float(thresholds[int(np.argmax(np.where(fpr <= level, tpr, -1.0)))])


def newcombe_difference(k1: np.ndarray, n1: np.ndarray, k2: np.ndarray, n2: np.ndarray,
                        confidence: float = metrics.CONFIDENCE
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(p1 - p2, low, high), vectorized: Newcombe's square-and-add interval for a difference
    of two independent proportions with Clopper-Pearson component intervals (module
    docstring). Entries with n1 == 0 or n2 == 0 are NaN."""
    k1, n1, k2, n2 = (np.asarray(a, dtype=np.float64) for a in (k1, n1, k2, n2))
    rated = (n1 > 0) & (n2 > 0)
    safe1, safe2 = np.where(rated, n1, 1.0), np.where(rated, n2, 1.0)
    p1, p2 = np.where(rated, k1, 0.0) / safe1, np.where(rated, k2, 0.0) / safe2
    l1, u1 = metrics.clopper_pearson_intervals(np.where(rated, k1, 0.0), safe1, confidence)
    l2, u2 = metrics.clopper_pearson_intervals(np.where(rated, k2, 0.0), safe2, confidence)
    difference = p1 - p2
    low = difference - np.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = difference + np.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    nan = np.full_like(difference, np.nan)
    return (np.where(rated, difference, nan), np.where(rated, low, nan),
            np.where(rated, high, nan))


def record_risk(scores: np.ndarray, members: np.ndarray, *, level: float = RISK_FPR,
                attack: str = "", confidence: float = metrics.CONFIDENCE) -> RecordRisk:
    """Per-record risk of ``scores`` (targets, N) with ground truth ``members`` (targets, N)
    at the global threshold of FPR ``level`` (module docstring)."""
    scores = np.asarray(scores, dtype=np.float64)
    members = np.asarray(members, dtype=bool)
    if scores.shape != members.shape or scores.ndim != 2:
        raise ValueError(f"scores {scores.shape} and members {members.shape} must be equal "
                         "(targets, records) shapes")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level {level} must be an FPR in (0, 1)")
    threshold = global_threshold(scores, members, level)
    flags = scores >= threshold
    n_in, n_out = members.sum(0), (~members).sum(0)
    k_in, k_out = (flags & members).sum(0), (flags & ~members).sum(0)
    risk, low, high = newcombe_difference(k_in, n_in, k_out, n_out, confidence)
    return RecordRisk(attack, level, threshold, n_in, n_out, k_in, k_out, risk, low, high)


def score_summaries(scores: np.ndarray, members: np.ndarray) -> dict[str, np.ndarray]:
    """(N,) mean score of each record over its IN targets and over its OUT targets (NaN when
    it has none)."""
    scores = np.asarray(scores, dtype=np.float64)
    members = np.asarray(members, dtype=bool)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_in = np.where(members, scores, 0.0).sum(0) / members.sum(0)
        mean_out = np.where(~members, scores, 0.0).sum(0) / (~members).sum(0)
    return {"mean_in": mean_in, "mean_out": mean_out}


def records_table(risk: RecordRisk, indices: np.ndarray, labels: np.ndarray | None,
                  class_names: list[str] | None,
                  attack_scores: dict[str, np.ndarray], members: np.ndarray) -> dict[str, list]:
    """The columns of records.csv / ``Results.records()``: ``index`` (pool index), ``label``
    and ``class`` (-1 / "" when the run does not know them), per attack ``<label>:mean_in`` /
    ``<label>:mean_out``, then n_in, n_out, flagged_in, flagged_out, risk, risk_low,
    risk_high, significant (of ``risk.attack`` at ``risk.level``)."""
    n = len(risk.risk)
    labels = np.full(n, -1) if labels is None else np.asarray(labels, dtype=np.int64)
    names = [class_names[int(y)] if class_names is not None and 0 <= y < len(class_names)
             else "" for y in labels]
    columns: dict[str, list] = {"index": np.asarray(indices).tolist(), "label": labels.tolist(),
                                "class": names}
    for label, scores in attack_scores.items():
        for key, values in score_summaries(scores, members).items():
            columns[f"{label}:{key}"] = values.tolist()
    columns.update({"n_in": risk.n_in.tolist(), "n_out": risk.n_out.tolist(),
                    "flagged_in": risk.flagged_in.tolist(),
                    "flagged_out": risk.flagged_out.tolist(), "risk": risk.risk.tolist(),
                    "risk_low": risk.low.tolist(), "risk_high": risk.high.tolist(),
                    "significant": risk.significant.tolist()})
    return columns


def write_records(run_dir: Path, columns: dict[str, list], risk: RecordRisk) -> Path:
    """``run_dir/records.csv`` (atomically): a comment line
    ``# risk<TAB>attack=...<TAB>fpr=...<TAB>threshold=...``, the header, one row per record."""
    path = Path(run_dir) / RECORDS_FILE
    names = list(columns)

    def write(tmp: Path) -> None:
        with open(tmp, "w", newline="") as handle:
            handle.write(f"# risk\tattack={risk.attack}\tfpr={risk.level!r}\t"
                         f"threshold={risk.threshold!r}\n")
            writer = csv.writer(handle)
            writer.writerow(names)
            writer.writerows(zip(*(columns[name] for name in names), strict=True))

    atomic_write(path, write)
    return path


def strongest_attack(attacks: dict) -> str:
    """The label of the attack with the highest pooled TPR at 0.1% FPR (ties: higher AUC;
    unmeasurable levels last): the report's strongest attack (``RunView.best_attack``)."""
    def rank(label: str) -> tuple:
        record = attacks[label]
        value = record.tpr_at(1e-3)
        return (value is not None, value or 0.0, record.auc)

    return max(attacks, key=rank)


def read_records_header(path: Path) -> tuple[str, float] | None:
    """(attack, fpr) of a records.csv's comment line; None when it has none."""
    with open(path) as handle:
        first = handle.readline()
    if not first.startswith("# risk\t"):
        return None
    fields = dict(part.split("=", 1) for part in first.rstrip("\n").split("\t")[1:])
    return fields["attack"], float(fields["fpr"])
