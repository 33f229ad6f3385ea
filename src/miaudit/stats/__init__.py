"""Pure numpy statistics: attack metrics and their confidence intervals."""

# public modules (pure functions of scores and counts)
__all__ = ["intervals", "metrics", "summary_intervals"]
