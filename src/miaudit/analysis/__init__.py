"""Post-hoc analyses of an audit's models and scores: memorization, per-record risk, dataset
usage (DUCI), LLM dataset inference, paired comparisons of two audits (and the scores kept for
them beside a results.json), the synthetic world with known truth that checks the intervals,
the privacy gate's bounds and the claims' decision rules.

The public names below load their module when first asked for, so that importing this package
costs nothing."""

from importlib import import_module
from typing import Any

# eager: the submodule ``memorization`` would otherwise shadow the function of that name
from miaudit.analysis.memorization import (  # noqa: F401 (public, named in __all__)
    jackknife_quantile,
    memorization,
    memorization_analysis,
    memorization_bins,
    plot_memorization_analysis,
)

#: public name -> the module of this package that defines it
_HOMES = {
    **dict.fromkeys(("record_risk", "RecordRisk"), "record_risk"),
    **dict.fromkeys(("estimate_usage", "evaluate_usage"), "dataset_usage"),
    **dict.fromkeys(("dataset_inference", "run_features", "texts_needed", "subsample_curve"),
                    "dataset_inference"),
    **dict.fromkeys(("holm", "tost_p", "interval_p", "side_se", "beyond_margin_p",
                     "fixed_effects", "scale_for_power", "by_a_hair"), "decision_rules"),
    **dict.fromkeys(("World", "coverage_study", "paired_coverage_study"), "synthetic_world"),
    **dict.fromkeys(("KeptScores", "keep_scores", "read_kept_scores"), "kept_scores"),
    **dict.fromkeys(("paired_run_difference", "paired_difference", "NotPaired"),
                    "paired_runs"),
}
__all__ = sorted([*_HOMES, "jackknife_quantile", "memorization", "memorization_analysis",
                  "memorization_bins", "plot_memorization_analysis"])


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(f"miaudit.analysis.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'miaudit.analysis' has no attribute {name!r}")
