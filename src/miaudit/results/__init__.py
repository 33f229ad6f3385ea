"""An audit's results: :class:`Results` (the public handle on a run directory and its
results.json) and results.json's reading and writing, digest checked. The schema, the typed
records results.json holds, is :mod:`miaudit.results.schema` (its names are re-exported here).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from miaudit._runtime.io import (
    DIGEST_KEY,
    path_problem,
    read_digested_json,
    text_digest,
    write_digested_json,
)

# LAYOUT: the one layout version of a run directory and its results
from miaudit.auditor.runfiles import LAYOUT, RESULTS_FILE, record_layout
from miaudit.errors import RunDirError
from miaudit.results.schema import (
    EXTERNAL_SOURCE,
    STRONGEST_KEY,
    AttackRecord,
    BlindBaseline,
    Difference,
    EmpiricalEpsilon,
    Interval,
    Machine,
    MetricValue,
    NsdeGuarantee,
    Privacy,
    Record,
    Summary,
    TargetModels,
    Timing,
    reference_models,
)
from miaudit.stats import metrics

__all__ = ["EXTERNAL_SOURCE", "LAYOUT", "RESULTS_FILE", "STRONGEST_KEY", "AttackRecord",
           "BlindBaseline", "Difference", "EmpiricalEpsilon", "Interval", "Machine",
           "MetricValue", "NsdeGuarantee", "Privacy", "Record", "Results", "Summary",
           "TargetModels", "Timing", "holds_result", "load_summary", "parse_summary",
           "read_results", "read_results_file", "reference_models", "roc_title", "write_results"]


NO_SCORES = ("these results were loaded from results.json alone, which holds no per-sample "
             "scores: load the run directory")


@dataclass
class Results:
    """What an audit (or ``miaudit.score``) produced: the run directory and its results.json
    as a :class:`Summary`. Results scored in memory (``miaudit.score(..., out_dir=None)``)
    have no run directory and hold their per-sample scores themselves."""

    run_dir: Path | None
    summary: Summary
    memory_scores: dict[str, np.ndarray] | None = field(default=None, repr=False)
    memory_members: np.ndarray | None = field(default=None, repr=False)
    #: the digest results.json carries (None: written before miaudit sealed its records)
    digest: str | None = None

    @classmethod
    def load(cls, path: str | Path) -> Results:
        """The results of a finished run directory (results.json checked against the schema
        and its scores folder present), or of a results.json file on its own (e.g. an
        experiment's committed ``outputs/X.results.json``, of any layout the schema reads):
        its digest verified when it carries one, no per-sample scores."""
        path = Path(path)
        if path.is_file():
            record, digest = read_results_file(path)
            return cls(run_dir=None, summary=parse_summary(record, path), digest=digest)
        summary, digest = _read_run(path)
        return cls(run_dir=path, summary=summary, digest=digest)

    @property
    def attacks(self) -> dict[str, AttackRecord]:
        """Attack label -> its record (pooled metrics, intervals, per target, per class)."""
        return self.summary.attacks

    def metric(self, attack: str, key: str, view: str = "pooled") -> float | None:
        """E.g. ``results.metric("lira", "tpr@0.1%")``; view is pooled, mean or std. None for
        a level that cannot be measured (``tpr@X_measurable`` false: below 1/non-members,
        or the top tie group exceeds the FPR budget), never a TPR at zero FPR."""
        return self.attacks[attack].value(key, view)

    def table(self) -> Any:
        """One row per attack label (a pandas DataFrame; ``pip install pandas``): the attack's
        registry name, every pooled metric (an interval ``k`` as ``k_low`` / ``k_high``) and,
        over several targets, ``k_mean`` / ``k_std``. Rates are fractions (see module
        docstring)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Results.table() needs pandas: pip install pandas") from None
        rows = {label: _table_row(attack) for label, attack in self.attacks.items()}
        return pd.DataFrame.from_dict(rows, orient="index").rename_axis("label")

    def plot_roc(self) -> Any:
        """The log-log ROC of every attack, pooled over targets, as a matplotlib figure
        (the run's roc.png)."""
        from miaudit.reporting.figures import roc_figure

        curves, members = {}, None
        for label in self.attacks:
            scores, truth = self.scores(label)
            members = truth.ravel()
            curves[label] = metrics.roc_curve(scores.ravel(), members)[:2]
        return roc_figure(curves, {label: a.auc for label, a in self.attacks.items()},
                          members, roc_title(self.summary))

    def scores(self, attack: str) -> tuple[np.ndarray, np.ndarray]:
        """(scores, members) of one attack label, both (targets, audited samples): the
        per-sample membership scores (higher = more likely a member) and the ground truth."""
        if attack not in self.attacks:
            raise KeyError(f"no attack {attack!r}; have {sorted(self.attacks)}")
        if self.run_dir is None:
            if self.memory_scores is None:
                raise RunDirError(NO_SCORES)
            return self.memory_scores[attack], self.memory_members
        from miaudit.auditor.rundir import audited_members, read_scores

        return (read_scores(self.run_dir, self.summary.scores_dir, attack),
                audited_members(self.run_dir, self.summary.targets))


    @property
    def audited(self) -> np.ndarray:
        """(A,) the pool indices of the audited samples: the columns of :meth:`scores`."""
        if self.run_dir is not None:
            return _audited_indices(self.run_dir)
        if self.memory_members is None:
            raise RunDirError(NO_SCORES)
        return np.arange(self.memory_members.shape[1])  # scored in memory: all of them

    def reproduces(self, other: Results) -> bool:
        """Whether these results hold the same result as ``other`` (e.g. an experiment's
        committed results.json): the same content but for when, where and how fast it was made
        (:data:`CIRCUMSTANCES`). A run directory rescored since at another number of models,
        or retrained, holds another result: its scores must not stand for ``other``'s."""
        return _without_circumstances(self.summary.model_dump()) == \
            _without_circumstances(other.summary.model_dump())

    def records(self, attack: str | None = None, level: float | None = None) -> Any:
        """Per-record risk (:mod:`miaudit.analysis.record_risk`) as a pandas DataFrame, one row
        per audited record: ``index`` (pool index), ``label``, ``class``, per attack
        ``<label>:mean_in`` / ``<label>:mean_out`` (mean score over the targets where the record
        is IN / OUT), ``n_in``, ``n_out``, ``flagged_in``, ``flagged_out``, ``risk`` (flag rate
        IN minus OUT of ``attack``, default the strongest, at the global threshold of FPR
        ``level``, default 1%), ``risk_low`` / ``risk_high`` (95% interval over the targets)
        and ``significant`` (interval above zero). The audit's records.csv when it holds this
        attack and level, else computed from the stored scores (labels from records.csv when
        the run has one, -1 otherwise)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Results.records() needs pandas: pip install pandas") from None
        from miaudit.analysis import record_risk as rr

        attack = attack or rr.strongest_attack(self.attacks)
        level = rr.RISK_FPR if level is None else level
        stored = None if self.run_dir is None else self.run_dir / rr.RECORDS_FILE
        if stored is not None and stored.exists():
            table = pd.read_csv(stored, comment=None, skiprows=1)
            if rr.read_records_header(stored) == (attack, level):
                return table
            labels, names = table["label"].to_numpy(), None
            classes = dict(zip(table["label"], table["class"].fillna(""), strict=True))
        else:
            labels, classes = None, {}
        scores = {label: self.scores(label)[0] for label in self.attacks}
        members = self.scores(attack)[1]
        risk = rr.record_risk(scores[attack], members, level=level, attack=attack)
        if classes:
            names = [classes.get(i, "") for i in range(max(classes) + 1)]
        return pd.DataFrame(rr.records_table(risk, self.audited, labels,
                                             names if classes else None, scores, members))


def _audited_indices(run_dir: Path) -> np.ndarray:
    from miaudit.auditor.rundir import RunDir

    return RunDir(run_dir).read_split()["audited"]


def roc_title(summary: Summary) -> str:
    """The ROC plot's title: the run's name and its number of targets."""
    return f"{summary.name} (pooled over {len(summary.targets)} targets)"


def _table_row(attack: AttackRecord) -> dict[str, Any]:
    row: dict[str, Any] = {"attack": attack.attack}
    pooled = attack.pooled
    unmeasurable = {metric.name for key, value in pooled.items()
                    if (metric := metrics.MetricKeys.of_measurable(key)) and value is False}
    for key, value in pooled.items():
        if key in unmeasurable:  # as Results.metric: no number, not a TPR at zero FPR
            row[key] = None
        elif isinstance(value, (list, tuple)) and len(value) == 2:
            row[f"{key}_low"], row[f"{key}_high"] = value
        elif isinstance(value, (int, float, bool)) or value is None:
            row[key] = value
    if len(attack.per_target) > 1:
        for view in ("mean", "std"):
            row.update({f"{key}_{view}": None if key in unmeasurable else value
                        for key, value in getattr(attack, view).items()})
    return row


def write_results(path: Path, summary: dict[str, Any]) -> None:
    """Write the record ``summary`` (a dict, written as built) with the digest of its JSON
    content, so damage is found on reading."""
    write_digested_json(path, summary)


def read_results_file(path: Path) -> tuple[dict[str, Any], str | None]:
    """(content, digest) of a results.json read on its own: verified against its digest, or
    read as it is when it carries none (written before miaudit sealed its records)."""
    record, problem = read_digested_json(path)
    if problem == "no digest":
        return record, None
    if problem is not None:
        raise RunDirError(f"{path} is damaged ({problem}); restore it (git checkout) or rerun "
                          "the audit that wrote it")
    return record, text_digest(record)  # equal to the stored one: it was just verified


def read_results(path: Path) -> dict[str, Any]:
    """results.json as written (a dict), verified against its digest; a damaged or edited
    file is named."""
    summary, problem = read_digested_json(path)
    if problem is not None:
        raise RunDirError(f"{path} is damaged ({problem}); rerun the audit (or miaudit score) "
                          "to rebuild it: it reuses every trained model")
    return summary


# what a rerun that reproduced a result may change: when, where and how fast it was made
CIRCUMSTANCES = ("timing", "scores_dir", "run_dir", DIGEST_KEY)


def holds_result(run_root: Path, record: dict[str, Any]) -> bool:
    """Whether run directory ``run_root`` holds the result ``record`` (e.g. an experiment's
    committed copy of its results.json): the same content but for :data:`CIRCUMSTANCES`. A run
    directory rescored since at another number of models, or retrained, answers for another
    result: its scores must not stand for ``record``'s."""
    try:
        found = read_results(Path(run_root) / RESULTS_FILE)
    except RunDirError:
        return False
    return _without_circumstances(found) == _without_circumstances(record)


def _without_circumstances(record: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if key not in CIRCUMSTANCES}


def parse_summary(record: dict[str, Any], path: Path | str) -> Summary:
    """``record`` (results.json's contents) as a :class:`Summary`; RunDirError naming
    ``path`` when it does not match the schema."""
    try:
        return Summary.model_validate(record)
    except ValidationError as error:
        raise RunDirError(f"{path} does not match the results schema ({error}); rerun the "
                          "audit to rebuild it") from None


def load_summary(run_root: Path) -> Summary:
    """results.json of a finished run of this layout, checked against the schema."""
    return _read_run(run_root)[0]


def _read_run(run_root: Path) -> tuple[Summary, str]:
    """(summary, its digest) of a finished run's results.json (see :func:`load_summary`)."""
    if not Path(run_root).is_dir():
        raise RunDirError(f"{path_problem(Path(run_root), 'folder')}: give a run directory "
                          "(or a results.json file)")
    path = Path(run_root) / RESULTS_FILE
    if not path.exists():
        raise RunDirError(f"{path} does not exist: run `miaudit audit` first")
    record = read_results(path)
    layout = record_layout(record, RESULTS_FILE)
    if layout is None:
        raise RunDirError(f"{path} is incomplete (no layout); rerun the audit to rebuild it "
                          "(it reuses every trained model)")
    if layout != LAYOUT:
        raise RunDirError(f"{path} was written by an older miaudit (layout {layout}, this one "
                          f"reads {LAYOUT}); rerun the audit to rebuild it")
    summary = parse_summary(record, path)
    if not (Path(run_root) / summary.scores_dir).is_dir():
        raise RunDirError(f"{path} names scores folder {summary.scores_dir}, which is "
                          "missing; rerun the audit to rebuild it")
    return summary, text_digest(record)
