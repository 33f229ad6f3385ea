"""ANN-to-SNN conversion with data-driven thresholds (Bojkovic et al. 2024, "Data driven
threshold and potential initialization for spiking neural networks", AISTATS).

Per layer, the positive post-ReLU activations a of the trained ANN are fitted by the two-level
quantizer q(a) = theta_out * 1[a >= theta_in] minimizing sum_i |a_i - q(a_i)| (L1). The
integrate-and-fire neuron with threshold theta_out, reset by subtraction and initial membrane
theta_out - theta_in reproduces q exactly at T = 1 (see :func:`miaudit.models.snn.if_spikes`).
"""

from __future__ import annotations

import copy

import numpy as np
import torch

from miaudit.models.snn import Neuron, SpikingNet

METHODS = ("l1", "percentile")


def quantizer_cost(sorted_a: np.ndarray, theta_out: float, theta_in: float) -> float:
    """L1 error sum_i |a_i - theta_out 1[a_i >= theta_in]| of sorted activations."""
    k = np.searchsorted(sorted_a, theta_in, side="left")
    low, high = sorted_a[:k], sorted_a[k:]
    return float(low.sum() + np.abs(high - theta_out).sum())


def fit_two_level_quantizer(activations: np.ndarray | torch.Tensor) -> tuple[float, float]:
    """(theta_out, theta_in) of the L1-optimal quantizer theta_out * 1[a >= theta_in] on the
    positive entries of ``activations`` (Bojkovic et al. 2024).

    For a given theta_out the best split is theta_in = theta_out / 2 (each a goes to the nearer
    level). The paper then alternates this with theta_out = median{a >= theta_in}; that search
    stops at local optima (measured here, even from 5 starting quantiles: 3.1 above the optimal
    L1 cost on 2,000 log-normal values). The cost sum_{a < c/2} a + sum_{a >= c/2} |a - c| is
    continuous and piecewise linear in c = theta_out with breakpoints at every a_i and 2 a_i,
    so the global optimum is at a breakpoint: all of them are evaluated at once with prefix
    sums, O(n log n). Ties go to the smallest theta_out. With no positive activation (a dead layer)
    the neuron never fires whatever the thresholds; (1, 1/2) is returned.
    """
    a = torch.as_tensor(activations).detach().reshape(-1).double().cpu().numpy()
    a = np.sort(a[a > 0])
    if len(a) == 0:
        return 1.0, 0.5
    prefix = np.concatenate([[0.0], np.cumsum(a)])
    c = np.unique(np.concatenate([a, 2 * a]))
    k = np.searchsorted(a, c / 2, side="left")  # a[:k] < c / 2 are quantized to 0
    j = np.searchsorted(a, c, side="left")  # a[k:j] lie below c, a[j:] above
    cost = (prefix[k] + c * (j - k) - (prefix[j] - prefix[k])
            + (prefix[-1] - prefix[j]) - c * (len(a) - j))
    best = float(c[np.argmin(cost)])
    return best, best / 2


def percentile_thresholds(activations: torch.Tensor, percentile: float) -> tuple[float, float]:
    """Robust max-norm thresholds (Rueckauer et al. 2017): theta_out = the ``percentile``-th
    percentile of the positive activations, theta_in = theta_out / 2 (initial membrane at half
    the threshold, which turns the IF spike count into rounding). The rate approximates
    min(a, theta_out) ever better as T grows, whereas the L1 two-level fit is tuned for T = 1."""
    a = torch.as_tensor(activations).detach().reshape(-1).double().cpu().numpy()
    a = a[a > 0]
    if len(a) == 0:
        return 1.0, 0.5
    theta = float(np.percentile(a, percentile))
    return theta, theta / 2


@torch.no_grad()
def collect_activations(model: SpikingNet, x: torch.Tensor, *, samples: int = 512,
                        max_per_layer: int = 200_000, batch_size: int = 256,
                        seed: int = 0) -> list[torch.Tensor]:
    """Positive post-ReLU activations of every neuron layer of ``model`` in ANN eval mode, on
    the first ``samples`` rows of ``x``; each layer keeps a uniform random subset of at most
    ``max_per_layer`` values (the quantile-type fit needs no more, and CIFAR feature maps would
    not fit in memory)."""
    if samples < 1 or max_per_layer < 1:
        raise ValueError(f"need samples >= 1 and max_per_layer >= 1, got {samples}, "
                         f"{max_per_layer}")
    generator = torch.Generator().manual_seed(seed)
    units = model.neurons()
    x = x[:samples]
    per_batch = max(1, max_per_layer * batch_size // max(1, len(x)))
    found: list[list[torch.Tensor]] = [[] for _ in units]

    def keep(index: int):
        def hook(module: torch.nn.Module, inputs: tuple, output: torch.Tensor) -> None:
            found[index].append(_subsample(output[output > 0].float().cpu(), per_batch,
                                           generator))
        return hook

    was_spiking, was_training = model.spiking, model.training
    model.spiking = False
    model.eval()
    handles = [unit.register_forward_hook(keep(i)) for i, unit in enumerate(units)]
    device = next(model.parameters()).device
    try:
        for start in range(0, len(x), batch_size):
            model(x[start : start + batch_size].to(device))
    finally:
        for handle in handles:
            handle.remove()
        model.spiking = was_spiking
        model.train(was_training)
    return [_subsample(torch.cat(parts), max_per_layer, generator) if parts else torch.empty(0)
            for parts in found]


def _subsample(values: torch.Tensor, size: int, generator: torch.Generator) -> torch.Tensor:
    if len(values) <= size:
        return values
    return values[torch.randperm(len(values), generator=generator)[:size]]


def convert(ann: SpikingNet, x: torch.Tensor, *, T: int, method: str = "l1",
            percentile: float = 99.9, samples: int = 512, max_per_layer: int = 200_000,
            seed: int = 0) -> SpikingNet:
    """A spiking copy of a trained ReLU model: weights copied, each IF layer's theta_out and
    theta_in (initial membrane theta_out - theta_in) fitted on activations of ``x`` by the L1
    two-level quantizer (``method="l1"``, Bojkovic et al. 2024) or set by
    :func:`percentile_thresholds` (``method="percentile"``)."""
    if not isinstance(ann, SpikingNet) or ann.neuron != "if":
        raise ValueError("conversion needs a SpikingNet with neuron='if' (snn_resnet18, "
                         "snn_cnn, ann_resnet18, ann_cnn)")
    if method not in METHODS:
        raise ValueError(f"conversion method must be one of {METHODS}, got {method!r}")
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must lie in (0, 100], got {percentile}")
    snn = copy.deepcopy(ann)
    layers = collect_activations(snn, x, samples=samples, max_per_layer=max_per_layer, seed=seed)
    for unit, activations in zip(snn.neurons(), layers, strict=True):
        fitted = (fit_two_level_quantizer(activations) if method == "l1"
                  else percentile_thresholds(activations, percentile))
        unit.set_thresholds(*fitted)
    snn.spiking, snn.T = True, T
    return snn


def thresholds(model: SpikingNet) -> list[tuple[float, float]]:
    """(theta_out, theta_in) of every IF layer, for logs."""
    return [(unit.theta_out.item(), unit.theta_in.item()) for unit in model.neurons()
            if isinstance(unit, Neuron) and unit.kind == "if"]
