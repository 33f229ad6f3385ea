"""Pure numpy statistics: attack metrics and their confidence intervals."""
