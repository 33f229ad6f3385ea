"""Training recipes for spiking networks (spiking-network MI study).

``ann2snn``: hybrid training by conversion (Bojkovic et al. 2024). The registry model is the
spiking model itself (``snn_resnet18`` / ``snn_cnn`` with ``neuron="if"`` and the target latency
``T``); the recipe switches it to its ReLU twin, trains it, converts it with data-driven
thresholds, calibrates it with surrogate gradients at T = 1 and then at T = 2, ..., target T,
each stage starting from a copy of the previous one. The saved weights therefore load into a
freshly built registry model (``architecture`` only switches spiking on).

Stages shared between latencies are trained once (:mod:`miaudit.auditor.parents`): at T = 1 the
parent
is the ReLU twin (the "ann" stage, trained by the standard recipe); at T > 1 it is the same
spiking model at T - 1 trained by this recipe with the same options, whose own parent is the
model at T - 2, down to the ANN. ``train_from_parent`` then runs only the last stage ("T1"
after conversion, or "T<T>" from the T - 1 weights, thresholds included). So the family
T = 1, 2, 4 trains the ANN, T1, T2, T3 and T4 stages once each, and a T = 1 audit's models are
the parents a T = 2 audit of the same settings fetches from the model cache. Each stage keeps
its seed (the run's seed + stage number), so chained training is bit-identical to ``train``.

``snn_direct``: direct training from scratch (Mukhoty et al. 2023: LIF neurons, surrogate
gradient) at the model's T. That is the standard loop applied to a spiking model
(``snn_cnn:neuron=lif,T=4``); the recipe only checks that the model spikes.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import nn

from miaudit.models.conversion import METHODS, convert, thresholds
from miaudit.models.snn import SpikingNet
from miaudit.registry import MODELS, RECIPES
from miaudit.training.engine import ParentSpec, Penalty, Recipe, TrainEnv, TrainParams, fit

Log = dict[str, list[Any]]
#: the registry ReLU twin of each registry spiking model: same modules built in the same order
#: (so the same seed gives the same initial weights) and, in ReLU mode, the same function (the
#: neuron kind, surrogate slope and readout do not act at one step without spikes)
RELU_TWINS = {"snn_cnn": "ann_cnn", "snn_resnet18": "ann_resnet18"}


def next_latency(model: SpikingNet, T: int) -> SpikingNet:
    """A copy of ``model`` (weights, thresholds, batch-norm statistics) running at latency T:
    the initialization of stage T from the model trained at T - 1 (Bojkovic et al. 2024)."""
    copied = copy.deepcopy(model)
    copied.T = T
    return copied


def _spiking_net(model: nn.Module, recipe: str, neuron: str | None = None) -> SpikingNet:
    if not isinstance(model, SpikingNet) or (neuron is not None and model.neuron != neuron):
        need = f"a spiking model with neuron={neuron!r}" if neuron else "a spiking model"
        raise ValueError(f"recipe {recipe!r} needs {need} (snn_resnet18, snn_cnn), got "
                         f"{type(model).__name__}"
                         + (f" with neuron={model.neuron!r}" if isinstance(model, SpikingNet)
                            else ""))
    return model


def _latency(model: str, model_options: dict[str, Any]) -> int | None:
    """The latency T the registry ``model`` is built with (its option, else the constructor's
    default); None when it takes no integer T (the model build reports a bad value)."""
    T = model_options.get("T", MODELS.option_default(model, "T"))
    return T if isinstance(T, int) and not isinstance(T, bool) else None


def _merge(log: Log, stage_log: Log, stage: str) -> None:
    """Append one stage's per-epoch log to the run's, tagging each epoch with its stage."""
    epochs = len(stage_log.get("loss", []))
    for key, values in stage_log.items():
        log.setdefault(key, []).extend(values)
    log.setdefault("stage", []).extend([stage] * epochs)


@RECIPES.register("ann2snn")
class AnnToSnn(Recipe):
    """Hybrid training by conversion (Bojkovic et al. 2024): ANN, data-driven IF thresholds,
    surrogate-gradient calibration at T = 1, 2, ..., target T.

    Options: ``ann_epochs`` (ANN stage; default: the run's epochs, with the run's optimizer and
    schedule), ``calib_epochs`` (T = 1 stage, default 50) and ``latency_epochs`` (each
    T = 2..target, default 30) as in the paper; calibration uses SGD with ``calib_lr`` 5e-3 (the
    spiking study's surrogate-gradient learning rate, paper C Sec. 5.1.1; stated once, so it is
    used for every latency stage; Bojkovic et al.'s own recipe uses 1e-3), ``calib_momentum``
    0.9, ``calib_schedule`` cosine, ``calib_weight_decay`` (default: the run's);
    ``learn_thresholds`` also trains theta_out and theta_in during calibration;
    ``activation_samples`` training images and at most ``max_activations`` values per layer
    feed the threshold fit; ``conversion`` "l1" (the paper's two-level quantizer) or
    "percentile" (robust max-norm thresholds at ``percentile``, Rueckauer et al. 2017).
    """

    resumable = True

    def __init__(self, penalties: Sequence[Penalty] = (), ann_epochs: int | None = None,
                 calib_epochs: int = 50, latency_epochs: int = 30, calib_lr: float = 5e-3,
                 calib_momentum: float = 0.9, calib_schedule: str = "cosine",
                 calib_weight_decay: float | None = None, learn_thresholds: bool = False,
                 activation_samples: int = 512, max_activations: int = 200_000,
                 conversion: str = "l1", percentile: float = 99.9):
        super().__init__(penalties)
        if conversion not in METHODS:
            raise ValueError(f"conversion must be one of {METHODS}, got {conversion!r}")
        if not 0 < percentile <= 100:
            raise ValueError(f"percentile must lie in (0, 100], got {percentile}")
        self.conversion, self.percentile = conversion, percentile
        counts = {"calib_epochs": calib_epochs, "latency_epochs": latency_epochs,
                  "ann_epochs": 0 if ann_epochs is None else ann_epochs}
        for name, value in counts.items():
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        for name, value in (("activation_samples", activation_samples),
                            ("max_activations", max_activations)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not calib_lr > 0:
            raise ValueError(f"calib_lr must be positive, got {calib_lr}")
        self.ann_epochs, self.calib_epochs, self.latency_epochs = (ann_epochs, calib_epochs,
                                                                   latency_epochs)
        self.calib_lr, self.calib_momentum, self.calib_schedule = (calib_lr, calib_momentum,
                                                                   calib_schedule)
        self.calib_weight_decay, self.learn_thresholds = calib_weight_decay, learn_thresholds
        self.activation_samples, self.max_activations = activation_samples, max_activations

    def architecture(self, model: nn.Module) -> nn.Module:
        net = _spiking_net(model, "ann2snn", neuron="if")
        net.spiking = True
        return net

    def stage_params(self, params: TrainParams, target_T: int) -> list[tuple[str, TrainParams]]:
        """(stage name, optimization settings) of every stage: "ann", then "T1", ..., "T<T>"."""
        ann = params if self.ann_epochs is None else replace(params, epochs=self.ann_epochs)
        calib = replace(params, optimizer="sgd", lr=self.calib_lr, momentum=self.calib_momentum,
                        schedule=self.calib_schedule, warmup_epochs=0.0,
                        weight_decay=(params.weight_decay if self.calib_weight_decay is None
                                      else self.calib_weight_decay))
        stages = [("ann", ann), ("T1", replace(calib, epochs=self.calib_epochs))]
        stages += [(f"T{t}", replace(calib, epochs=self.latency_epochs))
                   for t in range(2, target_T + 1)]
        return stages

    def parent(self, model: str, model_options: dict[str, Any]) -> ParentSpec | None:
        """At T > 1: the same model at T - 1 trained by this recipe with the same settings
        (stages ann .. T<T-1>; a T - 1 audit of the same settings supplies it). At T = 1: the
        ANN stage, the registry ReLU twin (ann_cnn, ann_resnet18) trained with the standard
        recipe, this recipe's penalties and ``ann_epochs``; it does not depend on T, so every
        latency shares it (and an ANN audit of the same family supplies it). None at T = 1 for
        spiking models without a registry twin, or when ``ann_epochs`` is 0."""
        T = _latency(model, model_options)
        if T is not None and T > 1:
            return ParentSpec(model=model, model_options={**model_options, "T": T - 1},
                              same_training=True)
        twin = RELU_TWINS.get(model)
        if twin is None or self.ann_epochs == 0:
            return None
        return ParentSpec(model=twin, recipe="standard", epochs=self.ann_epochs, penalties=True)

    def train(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, params: TrainParams,
              env: TrainEnv, x_val: torch.Tensor | None = None,
              y_val: torch.Tensor | None = None) -> tuple[nn.Module, Log]:
        net = _spiking_net(model, "ann2snn", neuron="if")
        return self._stages(net, self.stage_params(params, net.T), x, y, env, x_val, y_val)

    def train_from_parent(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor,
                          params: TrainParams, env: TrainEnv, x_val: torch.Tensor | None = None,
                          y_val: torch.Tensor | None = None) -> tuple[nn.Module, Log]:
        """The stages after the parent's (:meth:`parent`): at T = 1 ``model`` holds the trained
        ANN's weights, converted and calibrated here; at T > 1 it holds the weights and
        thresholds of the model trained at T - 1, and only stage "T<T>" runs."""
        net = _spiking_net(model, "ann2snn", neuron="if")
        if net.T == 1:
            net.spiking = False
            net = net.to(env.device).eval()  # as the ANN stage's fit leaves it
            return self._stages(net, self.stage_params(params, 1)[1:], x, y, env, x_val, y_val,
                                first=1)
        net.spiking = True
        self._unfreeze(net, self.learn_thresholds)  # as calibration at T - 1 left them
        net = net.to(env.device).eval()  # as the stage at T - 1 left it
        stage = self.stage_params(params, net.T)[-1]
        return self._stages(net, [stage], x, y, env, x_val, y_val, first=net.T)

    def _stages(self, net: SpikingNet, stages: list[tuple[str, TrainParams]], x: torch.Tensor,
                y: torch.Tensor, env: TrainEnv, x_val: torch.Tensor | None,
                y_val: torch.Tensor | None, first: int = 0) -> tuple[nn.Module, Log]:
        """Run ``stages`` (numbered from ``first``: each stage's seed is env.seed + number)."""
        total = sum(stage.epochs for _, stage in stages)
        log: Log = {}
        done = 0
        for index, (name, stage) in enumerate(stages, start=first):
            if name == "ann":
                net.spiking = False
            elif name == "T1":
                net = convert(net, x, T=1, method=self.conversion, percentile=self.percentile,
                              samples=self.activation_samples,
                              max_per_layer=self.max_activations, seed=env.seed)
                log["thresholds"] = [thresholds(net)]
                self._unfreeze(net, self.learn_thresholds)
            else:
                net = next_latency(net, int(name[1:]))
            if stage.epochs > 0:
                net, stage_log = fit(net, x, y, stage, self, self._env(env, index, done, total),
                                     x_val, y_val)
                _merge(log, stage_log, name)
                done += stage.epochs
        self._unfreeze(net, False)
        net.eval()
        return net, log

    @staticmethod
    def _unfreeze(net: SpikingNet, on: bool) -> None:
        for unit in net.neurons():
            unit.theta_out.requires_grad_(on)
            unit.theta_in.requires_grad_(on)

    @staticmethod
    def _env(env: TrainEnv, index: int, done: int, total: int) -> TrainEnv:
        """The stage's environment: its own seed, progress reported on the whole run."""
        progress = env.progress
        if progress is None:
            return replace(env, seed=env.seed + index)
        return replace(env, seed=env.seed + index,
                       progress=lambda epoch, _, stats: progress(done + epoch, total, stats))


@RECIPES.register("snn_direct")
class DirectSnn(Recipe):
    """Direct surrogate-gradient training of a spiking model at its T (Mukhoty et al. 2023:
    LIF neurons); the standard loop, checked to receive a spiking model."""

    resumable = True

    def train(self, model: nn.Module, x: torch.Tensor, y: torch.Tensor, params: TrainParams,
              env: TrainEnv, x_val: torch.Tensor | None = None,
              y_val: torch.Tensor | None = None) -> tuple[nn.Module, Log]:
        net = _spiking_net(model, "snn_direct")
        if not net.spiking:
            raise ValueError("recipe 'snn_direct' needs a spiking model (snn_resnet18, snn_cnn), "
                             "got a ReLU twin")
        return super().train(net, x, y, params, env, x_val, y_val)
