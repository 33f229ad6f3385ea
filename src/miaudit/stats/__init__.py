"""Pure numpy statistics: attack metrics and their confidence intervals."""

__all__ = ["intervals", "metrics"]  # public modules (pure functions of scores and counts)
