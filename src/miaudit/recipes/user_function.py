"""The ``user_function`` recipe: train with the user's own training function.

Users who already have a training loop (their optimizer, augmentation, schedule, mixed
precision, ...) name it by import path instead of re-expressing it as miaudit options::

    train: {recipe: user_function, recipe_options: {function: "my_project:train"}}

It is called once per audited model as::

    model = train(model, dataset, *, seed, device, **options)

- ``model``: a freshly built, untrained ``torch.nn.Module`` (on the CPU);
- ``dataset``: a ``torch.utils.data.TensorDataset(x, y)`` of exactly this model's members
  (x float32 (n, ...) in [0, 1], y int64 class indices), on the CPU: wrap it in a DataLoader;
- ``seed``: this model's seed (each model gets its own; miaudit also seeds torch with it);
- ``device``: the ``torch.device`` to train on;
- ``options``: the recipe option ``options`` (a dict), passed as keyword arguments;
- ``params``: only if the function declares a parameter of that name, the audit's
  :class:`~miaudit.training.engine.TrainParams` (epochs, lr, batch_size, ... of the config).

It returns the trained model, or ``(model, log)`` with ``log`` a dict of per-epoch lists, or
``None`` when it trained ``model`` in place. The signature is checked when the recipe is built,
before any training.
"""

from __future__ import annotations

import inspect
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import TensorDataset

from miaudit._runtime.importpath import ImportPathError, import_callable, source_digest
from miaudit._runtime.io import text_digest
from miaudit.registry import RECIPES
from miaudit.training.engine import Recipe, TrainEnv, TrainParams


@RECIPES.register("user_function")
class UserFunction(Recipe):
    """Your own training function, named by import path (option function).

    Called as ``train(model, dataset, *, seed, device, **options) -> model``."""

    fp32_only = "your training function runs its own loop: set mixed precision there"
    resumable = False  # your function runs its own loop (and its own checkpoints, if any)

    def __init__(self, penalties: Sequence[Any] = (), function: str | None = None,
                 options: dict[str, Any] | None = None,
                 search_paths: Sequence[str | Path] = ()):
        if penalties:
            raise ValueError("the user_function recipe cannot add penalties: your training "
                             "function defines the objective; add them there")
        if function is None:
            raise ValueError("the user_function recipe needs the option function, e.g. "
                             "'my_project:train'")
        if options is not None and not isinstance(options, dict):
            raise ValueError(f"options must be a mapping, got {type(options).__name__}")
        super().__init__()
        self.spec = function
        self.options = dict(options or {})
        self.function = import_callable(function, what="training function",
                                        search_paths=search_paths)
        self.passes_params = check_signature(self.function, function, self.options)

    def train(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, params: TrainParams,
              env: TrainEnv, x_val: torch.Tensor | None = None,
              y_val: torch.Tensor | None = None) -> tuple[nn.Module, dict[str, list[Any]]]:
        torch.manual_seed(env.seed)  # for functions that draw from torch's global generator
        keywords: dict[str, Any] = {"seed": env.seed, "device": env.device, **self.options}
        if self.passes_params:
            keywords["params"] = params
        started = time.perf_counter()
        result = self.function(model, TensorDataset(x, y), **keywords)
        trained, log = self._unpack(result, model)
        log.setdefault("seconds", [time.perf_counter() - started])
        return trained.to(env.device).eval(), log

    def _unpack(self, result: Any, model: nn.Module) -> tuple[nn.Module, dict[str, list[Any]]]:
        log: Any = {}
        if isinstance(result, tuple) and len(result) == 2:
            result, log = result
        if result is None:
            result = model  # trained in place
        if not isinstance(result, nn.Module) or not isinstance(log, dict):
            raise TypeError(f"training function {self.spec!r} returned "
                            f"{type(result).__name__}; it must return the trained "
                            "torch.nn.Module, (model, log dict), or None after training in "
                            "place")
        return result, {str(k): v if isinstance(v, list) else [v] for k, v in log.items()}

    @property
    def fingerprint(self) -> str:
        """Hash of the import path, the options and the source file of the function: part of
        the identity of models this recipe trains, so editing the function retrains them."""
        return text_digest({"function": self.spec, "options": self.options,
                            "source": source_digest(self.function)}, default=str)


def check_signature(function: Any, spec: str, options: dict[str, Any]) -> bool:
    """Raise ImportPathError unless ``function(model, dataset, seed=..., device=...,
    **options)`` binds; return whether it declares ``params``."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return False  # some builtins have no signature; the call itself will tell
    declares_params = "params" in signature.parameters
    probe = {"seed": 0, "device": torch.device("cpu"), **options}
    if declares_params:
        probe["params"] = TrainParams()
    try:
        signature.bind(None, None, **probe)
    except TypeError as error:
        extra = "".join(f", {name}" for name in options)
        raise ImportPathError(
            f"training function {spec!r} has the signature {function.__name__}{signature}, "
            f"which cannot be called as train(model, dataset, *, seed, device{extra}): "
            f"{error}") from error
    return declares_params
