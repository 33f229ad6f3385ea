"""The ``standard`` recipe: cross-entropy training plus optional penalties."""

from __future__ import annotations

from miaudit.registry import RECIPES
from miaudit.training.engine import Recipe


@RECIPES.register("standard")
class Standard(Recipe):
    """Cross-entropy training (empirical risk minimization) plus optional penalties."""

    resumable = True
