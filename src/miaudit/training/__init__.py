"""Training engine and recipes (registered in :data:`miaudit.registry.RECIPES`).

The names below load :mod:`miaudit.training.engine` (torch) when first asked for, so that
torch-free modules of this package (:mod:`.params`) import without torch."""

from typing import Any

__all__ = ["FitState", "Recipe", "TrainEnv", "TrainParams", "accuracy", "fit", "predict_logits"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from miaudit.training import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'miaudit.training' has no attribute {name!r}")
