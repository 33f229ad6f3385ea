"""Spiking neural networks and their ANN twins (spiking-network MI study).

Why an own neuron instead of snnTorch or SpikingJelly: snnTorch 1.0 appends every neuron to a
class-level list (memory grows across the dozens of shadow models an audit trains in one
process) and its surrogates fail under ``torch.func.vmap``; SpikingJelly pulls in torchvision.
The dynamics needed here are a few lines: integrate-and-fire with reset by subtraction
(Bojkovic et al. 2024) and the leaky neuron of Mukhoty et al. 2023. Membrane state lives only in
local variables of one forward call, so nothing survives between calls or models.

Time is folded into the batch (time-major, ``T * B`` rows): convolutions, batch norm and pooling
see all steps at once and only the neurons unfold ``(T, B, ...)`` to iterate. Inputs use direct
(constant) encoding. The output (option ``readout``) is the mean of the classifier's logits
over the T steps (``"mean"``, default), or ``"membrane"``: the final membrane potential of a
non-leaky, non-spiking output layer that integrates the classifier's output from 0, i.e. the
sum over the T steps (the output the spiking-network MI study, paper C, defines). Both rank
classes alike, but softmax probabilities, and with them the confidence-based attack signals,
differ (the sum is T times the mean: a softmax temperature of 1 / T). Models
use average pooling only (conversion needs it). ``spiking = False`` turns every neuron into a
ReLU: the same module, weights and state-dict keys are the ANN twin.

Note for DP-SGD: Opacus' hook-based per-sample gradients would see ``T * B`` rows; these models
are not meant for DP training as written.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import nn

from miaudit.models._base import scaled
from miaudit.registry import MODELS

NEURONS = ("if", "lif")
LIF_DECAY = 0.5  # Mukhoty et al. 2023: mem = 0.5 mem + x
LIF_THRESHOLD = 1.0  # spike when mem > 1, then hard reset to 0


def heaviside(u: torch.Tensor, alpha: float, strict: bool = False) -> torch.Tensor:
    """Step function 1[u >= 0] (1[u > 0] when ``strict``) with the arctan surrogate gradient
    alpha / (2 (1 + (pi alpha u / 2)^2)) (Fang et al. 2021).

    Written as ``hard + (s - s.detach())`` with the bounded primitive s = atan(pi alpha u / 2) / pi
    instead of a custom autograd.Function: it works under torch.func transforms, and unlike the
    sigmoid surrogate (NaN gradients for large negative inputs in snnTorch) it has no exp to
    overflow. The forward value is exactly 0 or 1.
    """
    hard = ((u > 0) if strict else (u >= 0)).to(u.dtype)
    if not torch.is_grad_enabled():
        # Inference (queries): the surrogate term is exactly 0 (s - s for finite s), so the
        # value is bit-identical without it, and skipping it saves ~a third of a spiking
        # forward's elementwise work (benchmarks/query_throughput.py).
        return hard
    soft = torch.atan(0.5 * math.pi * alpha * u) / math.pi
    return hard + (soft - soft.detach())


def if_spikes(current: torch.Tensor, theta_out: torch.Tensor, theta_in: torch.Tensor,
              alpha: float = 2.0) -> torch.Tensor:
    """Binary spike trains of integrate-and-fire neurons (Bojkovic et al. 2024).

    ``current`` is (T, ...) input per step. The membrane starts at theta_out - theta_in, adds the
    input each step, fires when it reaches theta_out and then subtracts theta_out. At T = 1 the
    output theta_out * spike equals the quantizer theta_out * 1[a >= theta_in]; for constant
    input a >= 0 the spike count is clip(floor((theta_out - theta_in + T a) / theta_out), 0, T).
    """
    mem = (theta_out - theta_in).expand_as(current[0])
    spikes = []
    for step in current:
        mem = mem + step
        spike = heaviside((mem - theta_out) / theta_out, alpha)
        mem = mem - spike * theta_out
        spikes.append(spike)
    return torch.stack(spikes)


def lif_spikes(current: torch.Tensor, alpha: float = 2.0) -> torch.Tensor:
    """Binary spike trains of leaky integrate-and-fire neurons (Mukhoty et al. 2023):
    mem = 0.5 mem + x, spike when mem > 1, hard reset to 0; membrane starts at 0."""
    mem = torch.zeros_like(current[0])
    spikes = []
    for step in current:
        mem = LIF_DECAY * mem + step
        spike = heaviside(mem - LIF_THRESHOLD, alpha, strict=True)
        mem = mem * (1.0 - spike)
        spikes.append(spike)
    return torch.stack(spikes)


class Neuron(nn.Module):
    """A spiking activation layer on time-major folded inputs (T * B, ...); a ReLU when
    ``spiking`` is False. IF neurons emit theta_out per spike (the quantizer's upper level), so
    converted weights need no rescaling; LIF neurons emit 1.

    theta_out and theta_in are parameters of IF neurons, frozen unless a recipe unfreezes them
    (ANN-to-SNN calibration may learn them). Defaults theta_out = 1, theta_in = 1/2 (a
    half-threshold initial membrane) until a conversion sets data-driven values.
    """

    def __init__(self, kind: str = "if", alpha: float = 2.0):
        super().__init__()
        if kind not in NEURONS:
            raise ValueError(f"neuron must be one of {NEURONS}, got {kind!r}")
        self.kind, self.alpha = kind, alpha
        self.spiking, self.T = True, 1
        if kind == "if":
            self.theta_out = nn.Parameter(torch.tensor(1.0), requires_grad=False)
            self.theta_in = nn.Parameter(torch.tensor(0.5), requires_grad=False)

    def set_thresholds(self, theta_out: float, theta_in: float) -> None:
        if not 0.0 < theta_in <= theta_out:
            raise ValueError(f"need 0 < theta_in <= theta_out, got {theta_in}, {theta_out}")
        with torch.no_grad():
            self.theta_out.fill_(theta_out)
            self.theta_in.fill_(theta_in)

    def spikes(self, x: torch.Tensor) -> torch.Tensor:
        """(T, B, ...) binary spikes for folded input (T * B, ...)."""
        current = x.reshape(self.T, -1, *x.shape[1:])
        if self.kind == "lif":
            return lif_spikes(current, self.alpha)
        # Learned thresholds must stay positive for the dynamics to make sense.
        theta_out = self.theta_out.clamp_min(1e-6)
        theta_in = torch.minimum(self.theta_in.clamp_min(1e-6), theta_out)
        return if_spikes(current, theta_out, theta_in, self.alpha)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.spiking:
            return torch.relu(x)
        spikes = self.spikes(x).reshape(x.shape)
        return spikes * self.theta_out.clamp_min(1e-6) if self.kind == "if" else spikes

    def extra_repr(self) -> str:
        return f"kind={self.kind}, spiking={self.spiking}, T={self.T}"


class SpikingNet(nn.Module):
    """Direct-encoding spiking classifier: the input is repeated over ``T`` steps (folded into
    the batch), ``features`` maps it to per-step logits, the output is their mean over steps.

    ``readout``: "mean" of the per-step logits, or "membrane" (their sum: the final potential of
    a non-leaky integrating output layer; module docstring).

    ``input_dropout_p`` > 0 zeroes each input element with probability p after the T-step
    repetition, a fresh mask per step, in train and eval mode alike (the study's input-dropout
    query; :class:`miaudit.queries.InputDropout` sets this attribute).
    """

    def __init__(self, features: nn.Module, *, T: int = 4, neuron: str = "if",
                 spiking: bool = True, readout: str = "mean"):
        super().__init__()
        self.features = features
        self.readout = check_readout(readout)
        self.neuron = neuron
        self.input_dropout_p = 0.0
        self._T, self._spiking = 1, True
        self.T, self.spiking = T, spiking

    def neurons(self) -> list[Neuron]:
        return [m for m in self.modules() if isinstance(m, Neuron)]

    @property
    def T(self) -> int:
        return self._T

    @T.setter
    def T(self, steps: int) -> None:
        steps = check_latency(steps)
        self._T = steps
        for unit in self.neurons():
            unit.T = steps if self._spiking else 1

    @property
    def spiking(self) -> bool:
        return self._spiking

    @spiking.setter
    def spiking(self, on: bool) -> None:
        self._spiking = bool(on)
        for unit in self.neurons():
            unit.spiking, unit.T = self._spiking, self._T if self._spiking else 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.input_dropout_p
        if not 0.0 <= p < 1.0:
            raise ValueError(f"input_dropout_p must lie in [0, 1), got {p}")
        steps = self._T if self._spiking else 1
        x = x.repeat(steps, *([1] * (x.dim() - 1)))
        if p > 0:
            x = x * (torch.rand_like(x) >= p).to(x.dtype)
        logits = self.features(x)
        logits = logits.view(steps, -1, logits.shape[-1])
        # membrane: u_t = u_{t-1} + o_t with u_0 = 0 (no leak, no spike), read at t = T
        return logits.sum(0) if self.readout == "membrane" else logits.mean(0)


    def extra_repr(self) -> str:
        return (f"T={self._T}, neuron={self.neuron}, spiking={self._spiking}, "
                f"readout={self.readout}")


READOUTS = ("mean", "membrane")


def check_latency(steps: int) -> int:
    if isinstance(steps, bool) or not isinstance(steps, numbers.Integral) or steps < 1:
        raise ValueError(f"T (latency, time steps) must be an integer >= 1, got {steps!r}")
    return int(steps)


def check_readout(readout: str) -> str:
    if readout not in READOUTS:
        raise ValueError(f"option 'readout' must be one of {', '.join(READOUTS)}; "
                         f"got {readout!r}")
    return readout


def _conv_bn(cin: int, cout: int, stride: int = 1, kernel: int = 3) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride, padding=kernel // 2, bias=False),
            nn.BatchNorm2d(cout)]


class BasicBlock(nn.Module):
    """ResNet basic block with spiking activations: N(BN(conv(N(BN(conv x)))) + shortcut x)."""

    def __init__(self, cin: int, cout: int, stride: int, neuron: str, alpha: float):
        super().__init__()
        self.residual = nn.Sequential(*_conv_bn(cin, cout, stride), Neuron(neuron, alpha),
                                      *_conv_bn(cout, cout))
        self.shortcut = (nn.Sequential(*_conv_bn(cin, cout, stride, kernel=1))
                         if stride != 1 or cin != cout else nn.Identity())
        self.out = Neuron(neuron, alpha)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.residual(x) + self.shortcut(x))


def _head(channels: int, num_classes: int) -> list[nn.Module]:
    return [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(channels, num_classes)]


def _image_channels(name: str, input_shape: tuple[int, ...]) -> int:
    if len(input_shape) != 3:
        raise ValueError(f"{name} needs image inputs (C, H, W), got input_shape {input_shape}")
    return input_shape[0]


def resnet18_features(input_shape: tuple[int, ...], num_classes: int, width: float,
                      neuron: str, alpha: float) -> nn.Module:
    """CIFAR ResNet-18 (3x3 stem, no max-pool, stages 64-128-256-512 x 2 blocks, strides
    1-2-2-2, global average pool), channels times ``width``."""
    cin = _image_channels("resnet18", input_shape)
    stem = scaled(64, width)
    layers: list[nn.Module] = [*_conv_bn(cin, stem), Neuron(neuron, alpha)]
    cin = stem
    for stage, channels in enumerate((64, 128, 256, 512)):
        cout = scaled(channels, width)
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            layers.append(BasicBlock(cin, cout, stride, neuron, alpha))
            cin = cout
    return nn.Sequential(*layers, *_head(cin, num_classes))


def cnn_features(input_shape: tuple[int, ...], num_classes: int, width: float, neuron: str,
                 alpha: float) -> nn.Module:
    """Small VGG-style CNN for CPU scale: [conv-BN-N, avg-pool 2] with 32, 64 channels, then
    conv-BN-N with 128 channels, global average pool, linear; channels times ``width``. A pool
    is skipped once the feature map would drop below 2 x 2 pixels."""
    cin = _image_channels("cnn", input_shape)
    size = min(input_shape[1:])
    layers: list[nn.Module] = []
    for channels, pool in ((32, True), (64, True), (128, False)):
        cout = scaled(channels, width)
        layers += [*_conv_bn(cin, cout), Neuron(neuron, alpha)]
        if pool and size // 2 >= 2:
            layers.append(nn.AvgPool2d(2))
            size //= 2
        cin = cout
    return nn.Sequential(*layers, *_head(cin, num_classes))


def _check(neuron: str, alpha: float) -> None:
    if neuron not in NEURONS:
        raise ValueError(f"neuron must be one of {NEURONS}, got {neuron!r}")
    if not alpha > 0:
        raise ValueError(f"surrogate_alpha must be positive, got {alpha}")


def check_snn(*, T: int, neuron: str, surrogate_alpha: float, readout: str) -> None:
    """The spiking models' option values (the config checks them before any data is
    loaded; the constructors check each where it is used)."""
    check_latency(T)
    _check(neuron, surrogate_alpha)
    check_readout(readout)


@MODELS.register("snn_resnet18", check=check_snn)
def snn_resnet18(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0,
                 T: int = 4, neuron: str = "if", surrogate_alpha: float = 2.0,
                 readout: str = "mean") -> SpikingNet:
    """Spiking ResNet-18 (direct encoding, T steps; neuron "if" for conversion, "lif" for
    direct training; ``readout`` mean | membrane, see :class:`SpikingNet`)."""
    _check(neuron, surrogate_alpha)
    features = resnet18_features(input_shape, num_classes, width, neuron, surrogate_alpha)
    return SpikingNet(features, T=T, neuron=neuron, readout=readout)


@MODELS.register("snn_cnn", check=check_snn)
def snn_cnn(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0, T: int = 4,
            neuron: str = "if", surrogate_alpha: float = 2.0,
            readout: str = "mean") -> SpikingNet:
    """Small spiking VGG-style CNN for CPU scale (3 conv layers, average pooling); ``readout``
    mean | membrane (:class:`SpikingNet`)."""
    _check(neuron, surrogate_alpha)
    features = cnn_features(input_shape, num_classes, width, neuron, surrogate_alpha)
    return SpikingNet(features, T=T, neuron=neuron, readout=readout)


@MODELS.register("ann_resnet18")
def ann_resnet18(*, input_shape: tuple[int, ...], num_classes: int,
                 width: float = 1.0) -> SpikingNet:
    """ReLU twin of snn_resnet18 (same modules and weights, average pooling)."""
    features = resnet18_features(input_shape, num_classes, width, "if", 2.0)
    return SpikingNet(features, T=1, neuron="if", spiking=False)


@MODELS.register("ann_cnn")
def ann_cnn(*, input_shape: tuple[int, ...], num_classes: int, width: float = 1.0) -> SpikingNet:
    """ReLU twin of snn_cnn (same modules and weights, average pooling)."""
    features = cnn_features(input_shape, num_classes, width, "if", 2.0)
    return SpikingNet(features, T=1, neuron="if", spiking=False)
