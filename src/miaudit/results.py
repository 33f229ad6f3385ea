"""The results schema: what ``results.json`` holds, shared by the pipeline (which validates a
summary before writing it), the report and ``Results`` (which read it). Metric keys come from
:mod:`miaudit.metrics` (``metrics.tpr_key(level)``, FPR levels defined there once)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from miaudit.errors import RunDirError
from miaudit.io import read_json

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
    """What an audit produced: the run directory and the contents of its results.json."""

    run_dir: Path
    summary: dict[str, Any]

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


def load_summary(run_root: Path) -> dict[str, Any]:
    """results.json of a finished run, checked against the schema."""
    path = Path(run_root) / "results.json"
    if not path.exists():
        raise RunDirError(f"{path} does not exist: run `miaudit audit` first")
    summary = read_json(path)
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
