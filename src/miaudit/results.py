"""The results schema: what ``results.json`` holds, shared by the pipeline (which validates a
summary before writing it), the report and ``Results`` (which read it). Metric keys come from
:mod:`miaudit.metrics` (``metrics.tpr_key(level)``, FPR levels defined there once).

Units: every rate (TPR, FPR, accuracy, AUC) is a fraction in [0, 1] in results.json and in
this API (``Results.metric``, ``Results.table``); only the displays (the terminal table, the
HTML report, the markdown tables) print percent, and say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict

from miaudit.errors import RunDirError
from miaudit.io import path_problem, read_digested_json, write_digested_json

LAYOUT = 2


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class TargetModels(_Open):
    train_accuracy: float
    test_accuracy: float
    generalization_gap: float
    train_accuracy_std: float
    test_accuracy_std: float


class AttackSummary(_Open):
    attack: str
    options: dict[str, Any]
    pooled: dict[str, Any]
    mean: dict[str, float]
    std: dict[str, float]
    per_target: list[dict[str, Any]]
    per_class: dict[int, dict[str, Any]]  # class label -> metrics
    info: list[dict[str, Any]] | None = None
    empirical_epsilon: dict[str, Any] | None = None


class Summary(_Open):
    layout: int
    name: str
    run_dir: str
    protocol: str
    targets: list[int]
    num_models: int
    pool_size: int
    audited_size: int
    queries: list[str]
    scores_dir: str
    target_models: TargetModels
    attacks: dict[str, AttackSummary]
    privacy: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    config: dict[str, Any]


@dataclass
class Results:
    """What an audit (or ``miaudit.score``) produced: the run directory and the contents of its
    results.json. Results scored in memory (``miaudit.score(..., out_dir=None)``) have no run
    directory and hold their per-sample scores themselves."""

    run_dir: Path | None
    summary: dict[str, Any]
    memory_scores: dict[str, np.ndarray] | None = field(default=None, repr=False)
    memory_members: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def load(cls, path: str | Path) -> Results:
        """The results of a finished run directory (results.json checked against the schema
        and its scores folder present)."""
        return cls(run_dir=Path(path), summary=load_summary(Path(path)))

    @property
    def attacks(self) -> dict[str, Any]:
        return self.summary["attacks"]

    def metric(self, attack: str, key: str, view: str = "pooled") -> float | None:
        """E.g. ``results.metric("lira", "tpr@0.1%")``; view is pooled, mean or std. None for
        a level that cannot be measured (``tpr@X_measurable`` false: below 1/non-members,
        or the top tie group exceeds the FPR budget), never a TPR at zero FPR."""
        if self.attacks[attack]["pooled"].get(f"{key}_measurable") is False:
            return None
        return self.attacks[attack][view].get(key) if view != "pooled" \
            else self.attacks[attack][view][key]

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
        from miaudit import metrics
        from miaudit.report import roc_figure

        curves, members = {}, None
        for label in self.attacks:
            scores, truth = self.scores(label)
            members = truth.ravel()
            curves[label] = metrics.roc_curve(scores.ravel(), members)[:2]
        return roc_figure(self.summary, curves, members)

    def scores(self, attack: str) -> tuple[np.ndarray, np.ndarray]:
        """(scores, members) of one attack label, both (targets, audited samples): the
        per-sample membership scores (higher = more likely a member) and the ground truth."""
        if attack not in self.attacks:
            raise KeyError(f"no attack {attack!r}; have {sorted(self.attacks)}")
        if self.run_dir is None:
            return self.memory_scores[attack], self.memory_members
        from miaudit.rundir import audited_members, read_scores

        return (read_scores(self.run_dir, self.summary, attack),
                audited_members(self.run_dir, self.summary))


def _table_row(attack: dict[str, Any]) -> dict[str, Any]:
    row: dict[str, Any] = {"attack": attack["attack"]}
    pooled = attack["pooled"]
    unmeasurable = {key.removesuffix("_measurable") for key, value in pooled.items()
                    if key.endswith("_measurable") and value is False}
    for key, value in pooled.items():
        if key in unmeasurable:  # as Results.metric: no number, not a TPR at zero FPR
            row[key] = None
        elif isinstance(value, (list, tuple)) and len(value) == 2:
            row[f"{key}_low"], row[f"{key}_high"] = value
        elif isinstance(value, (int, float, bool)) or value is None:
            row[key] = value
    if len(attack.get("per_target", ())) > 1:
        for view in ("mean", "std"):
            row.update({f"{key}_{view}": None if key in unmeasurable else value
                        for key, value in attack[view].items()})
    return row


EXTERNAL_SOURCE = "external outputs"  # config["source"] of a `miaudit score` run
def write_results(path: Path, summary: dict[str, Any]) -> None:
    """Write ``summary`` with the digest of its JSON content, so damage is found on reading."""
    write_digested_json(path, summary)


def read_results(path: Path) -> dict[str, Any]:
    """results.json, verified against its digest; a damaged or edited file is named."""
    summary, problem = read_digested_json(path)
    if problem is not None:
        raise RunDirError(f"{path} is damaged ({problem}); rerun the audit (or miaudit score) "
                          "to rebuild it: it reuses every trained model")
    return summary


def load_summary(run_root: Path) -> dict[str, Any]:
    """results.json of a finished run, checked against the schema."""
    if not Path(run_root).is_dir():
        raise RunDirError(f"{path_problem(Path(run_root), 'folder')}: give a run directory")
    path = Path(run_root) / "results.json"
    if not path.exists():
        raise RunDirError(f"{path} does not exist: run `miaudit audit` first")
    summary = read_results(path)
    # layout 1 wrote no layout key but had attacks; {} (or a hand-cut file) is neither
    layout = summary.get("layout", 1 if "attacks" in summary else None)
    if layout is None:
        raise RunDirError(f"{path} is incomplete (no layout); rerun the audit to rebuild it "
                          "(it reuses every trained model)")
    if layout != LAYOUT:
        raise RunDirError(f"{path} was written by an older miaudit (layout {layout}, this one "
                          f"reads {LAYOUT}); rerun the audit to rebuild it")
    try:
        Summary.model_validate(summary)
    except Exception as error:
        raise RunDirError(f"{path} does not match the results schema ({error}); rerun the "
                          "audit to rebuild it") from None
    if not (Path(run_root) / summary["scores_dir"]).is_dir():
        raise RunDirError(f"{path} names scores folder {summary['scores_dir']}, which is "
                          "missing; rerun the audit to rebuild it")
    return summary


def caveat_lines(summary: dict[str, Any]) -> list[str]:
    """One line per warning an attack gave about its own numbers (marked * in the table)."""
    labels: dict[str, list[str]] = {}  # caveat -> the attacks that gave it
    for label, attack in summary["attacks"].items():
        for caveat in attack.get("caveats", []):
            labels.setdefault(caveat, []).append(label)
    return [f"* {', '.join(names)}: {caveat}" for caveat, names in labels.items()]
