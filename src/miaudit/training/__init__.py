"""Training engine and recipes (registered in :data:`miaudit.registry.RECIPES`)."""

from miaudit.training.engine import FitState, Recipe, TrainEnv, TrainParams, fit, predict_logits

__all__ = ["FitState", "Recipe", "TrainEnv", "TrainParams", "fit", "predict_logits"]
