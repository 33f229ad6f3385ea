"""Post-hoc analyses of an audit's models and scores (memorization, ...)."""

from miaudit.analysis.memorization import (
    memorization,
    memorization_analysis,
    memorization_bins,
    plot_memorization_analysis,
)

__all__ = [
    "memorization",
    "memorization_analysis",
    "memorization_bins",
    "plot_memorization_analysis",
]
