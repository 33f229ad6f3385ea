"""Spiking models, ANN-to-SNN conversion and the SNN training recipes (issue 5)."""

from __future__ import annotations

import gc
import math
import weakref

import numpy as np
import pytest
import torch

from miaudit.models.conversion import (
    collect_activations,
    convert,
    fit_two_level_quantizer,
    quantizer_cost,
    thresholds,
)
from miaudit.models.snn import Neuron, SpikingNet, heaviside, if_spikes, lif_spikes
from miaudit.queries import query_outputs
from miaudit.recipes.snn import next_latency
from miaudit.registry import DATASETS, MODELS, RECIPES
from miaudit.training.engine import TrainEnv, TrainParams

CPU = torch.device("cpu")


def build(name: str, shape=(1, 8, 8), width: float = 0.25, **options) -> SpikingNet:
    return MODELS.build(name, input_shape=shape, num_classes=10, width=width, **options)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """One intra-op thread: these tiny models run faster so on a busy shared CPU."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def digits():
    return DATASETS.build("digits")


@pytest.fixture(scope="module")
def trained_ann(digits):
    """A ReLU twin of snn_cnn trained on digits (about 98 % test accuracy)."""
    torch.manual_seed(0)
    ann = build("ann_cnn")
    params = TrainParams(epochs=5, lr=0.1, batch_size=64)
    ann, _ = RECIPES.build("standard").train(ann, digits.x_train, digits.y_train, params,
                                             TrainEnv(seed=0))
    return ann


# --- the two-level quantizer -------------------------------------------------------------------

def brute_force_quantizer(a: np.ndarray) -> float:
    """Optimal L1 cost by enumeration: a two-level quantizer splits the sorted values into a
    prefix sent to 0 and a suffix sent to one level, whose best value is the suffix median."""
    a = np.sort(a)
    return min(a[:k].sum() + np.abs(a[k:] - np.median(a[k:])).sum() if k < len(a) else a.sum()
               for k in range(len(a) + 1))


@pytest.mark.parametrize(("n_low", "n_high", "expected"), [(10, 10, 3.0), (30, 10, 1.0)])
def test_quantizer_point_masses(n_low, n_high, expected):
    # Masses at 1 and 3. theta_out = 3 (split at 1.5) costs n_low; theta_out = 1 (both mapped
    # to 1) costs 2 n_high; every other level costs more (the cost is linear in between).
    a = np.array([1.0] * n_low + [3.0] * n_high)
    theta_out, theta_in = fit_two_level_quantizer(a)
    assert theta_out == expected and theta_in == expected / 2
    assert quantizer_cost(a, theta_out, theta_in) == min(n_low, 2 * n_high)


def test_quantizer_exponential_closed_form():
    # For Exp(1): d cost / dc = P(c/2 <= a < c) - P(a >= c) = 0 gives c = 2 ln 2.
    n = 100_000
    a = -np.log1p(-(np.arange(n) + 0.5) / n)  # exact quantiles of Exp(1)
    theta_out, theta_in = fit_two_level_quantizer(a)
    assert theta_out == pytest.approx(2 * math.log(2), abs=5e-3)
    assert theta_in == theta_out / 2


def test_quantizer_matches_brute_force_and_ignores_non_positive():
    rng = np.random.default_rng(1)
    for _ in range(10):
        a = rng.lognormal(0.0, 1.5, size=80)
        theta_out, theta_in = fit_two_level_quantizer(np.concatenate([a, -a, np.zeros(5)]))
        cost = quantizer_cost(np.sort(a), theta_out, theta_in)
        assert cost == pytest.approx(brute_force_quantizer(a), rel=1e-12)
    assert fit_two_level_quantizer(np.zeros(4)) == (1.0, 0.5)  # dead layer


# --- neuron dynamics ---------------------------------------------------------------------------

def test_if_spike_count_closed_form():
    a = torch.rand(500, dtype=torch.float64) * 2.5 - 0.5
    theta_out = torch.tensor(1.3, dtype=torch.float64)
    theta_in = torch.tensor(0.4, dtype=torch.float64)
    for T in (1, 2, 5, 8):
        spikes = if_spikes(a.expand(T, -1), theta_out, theta_in)
        assert set(spikes.unique().tolist()) <= {0.0, 1.0}
        expected = torch.floor((theta_out - theta_in + T * a) / theta_out).clamp(0, T)
        assert torch.equal(spikes.sum(0), expected)
    # T = 1 is the quantizer theta_out * 1[a >= theta_in]
    assert torch.equal(if_spikes(a[None], theta_out, theta_in)[0], (a >= theta_in).double())


def test_lif_hand_worked():
    # mem = 0.5 mem + x, spike when mem > 1, hard reset: x = 0.6 -> 0.6, 0.9, 1.05 (spike) ...
    x = torch.tensor([0.6, 1.0, 1.2])
    spikes = lif_spikes(x.expand(6, -1)).T
    assert spikes.tolist() == [[0, 0, 1, 0, 0, 1], [0, 1, 0, 1, 0, 1], [1, 1, 1, 1, 1, 1]]


def test_surrogate_gradient_finite_and_peaked():
    u = torch.tensor([-1e30, -1e6, -1.0, 0.0, 1.0, 1e6, 1e30], requires_grad=True)
    out = heaviside(u, alpha=2.0)
    assert out.tolist() == [0, 0, 0, 1, 1, 1, 1]
    out.sum().backward()
    assert torch.isfinite(u.grad).all()
    assert u.grad[3] == pytest.approx(1.0)  # alpha / 2 at the threshold
    assert u.grad[0] == 0 and u.grad[2] == pytest.approx(1 / (1 + math.pi**2))


@pytest.mark.parametrize("neuron", ["if", "lif"])
def test_inference_fast_path_gives_bit_identical_logits(neuron):
    """Without autograd the spike function skips its surrogate term (exactly 0 in value):
    queries (no_grad) must give the logits the grad-mode forward gives, bit for bit, at
    inputs that put membranes on and near the threshold."""
    torch.manual_seed(0)
    model = build("snn_cnn", shape=(3, 8, 8), T=4, neuron=neuron).eval()
    x = torch.randn(64, 3, 8, 8) * 3
    x[:8] = 0.0  # IF membranes start at theta_out - theta_in: the half-threshold case
    with torch.no_grad():
        fast = model(x)
    with torch.enable_grad():
        full = model(x).detach()
    assert torch.equal(fast, full)
    u = torch.tensor([-1.0, 0.0, 1e-30, 1.0])
    with torch.no_grad():
        assert heaviside(u, 2.0).tolist() == [0, 1, 1, 1]
        assert heaviside(u, 2.0, strict=True).tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize("neuron", ["if", "lif"])
def test_spikes_binary_and_rates_in_unit_interval(neuron):
    torch.manual_seed(0)
    T = 4
    model = build("snn_resnet18", width=0.0625, T=T, neuron=neuron).eval()
    rates = []

    def check(module, inputs, output):
        scale = module.theta_out if module.kind == "if" else 1.0
        spikes = (output / scale).view(T, -1, *output.shape[1:])
        assert set(spikes.unique().tolist()) <= {0.0, 1.0}
        rates.append(spikes.mean(0))

    for unit in model.neurons():
        unit.register_forward_hook(check)
    logits = model(torch.rand(4, 1, 8, 8) * 3)
    assert logits.shape == (4, 10) and torch.isfinite(logits).all()
    assert len(rates) == 17
    rate = torch.cat([r.flatten() for r in rates])
    assert rate.min() >= 0 and rate.max() <= 1 and 0 < rate.mean() < 1


# --- conversion --------------------------------------------------------------------------------

def test_snn_at_t1_equals_quantized_ann():
    torch.manual_seed(0)
    ann = build("ann_cnn").eval()
    x = torch.rand(64, 1, 8, 8)
    snn = convert(ann, x, T=1)
    units = snn.neurons()
    assert all(0 < u.theta_in < u.theta_out for u in units)

    def quantize(unit):  # replaces the ReLU output by q(a) = theta_out 1[a >= theta_in]
        return lambda module, inputs, output: unit.theta_out * (inputs[0] >= unit.theta_in)

    for ann_unit, unit in zip(ann.neurons(), units, strict=True):
        ann_unit.register_forward_hook(quantize(unit))
    with torch.no_grad():
        torch.testing.assert_close(snn(x), ann(x), rtol=1e-5, atol=1e-5)


def agreement(model: SpikingNet, reference: torch.Tensor, x: torch.Tensor) -> float:
    with torch.no_grad():
        return (model.eval()(x).argmax(1) == reference).float().mean().item()


def test_conversion_agreement_grows_with_latency(trained_ann, digits):
    x = digits.x_test
    with torch.no_grad():
        ann_labels = trained_ann.eval()(x).argmax(1)
    snn = convert(trained_ann, digits.x_train, T=1, method="percentile", percentile=99.9)
    agree = {}
    for T in (1, 2, 4, 8):
        snn.T = T
        agree[T] = agreement(snn, ann_labels, x)
    # measured: about 0.2, 0.7, 0.98, 0.99 (rate coding converges to the clipped ReLU)
    assert agree[1] < agree[2] < agree[4] <= agree[8] + 0.01
    assert agree[8] >= 0.95 and agree[1] < 0.8


def test_collect_activations_positive_and_capped(trained_ann, digits):
    layers = collect_activations(trained_ann, digits.x_train, samples=100, max_per_layer=500)
    assert len(layers) == 3 and not trained_ann.spiking
    assert all(0 < len(a) <= 500 and (a > 0).all() for a in layers)


def test_conversion_rejects_lif():
    with pytest.raises(ValueError, match="neuron='if'"):
        convert(build("snn_cnn", neuron="lif"), torch.rand(4, 1, 8, 8), T=2)


def test_next_latency_copies_weights():
    torch.manual_seed(0)
    model = build("snn_cnn", T=1)
    model.neurons()[0].set_thresholds(2.0, 0.7)
    model.train()(torch.rand(8, 1, 8, 8))  # moves batch-norm statistics
    copied = next_latency(model, 2)
    assert copied is not model and copied.T == 2 and model.T == 1
    assert all(u.T == 2 for u in copied.neurons())
    original = model.state_dict()
    for key, value in copied.state_dict().items():
        assert torch.equal(value, original[key]), key
    next(copied.parameters()).data.add_(1.0)  # independent storage
    assert not torch.equal(next(copied.parameters()), next(model.parameters()))


def test_ann2snn_stages_follow_the_paper():
    recipe = RECIPES.build("ann2snn", ann_epochs=7, calib_epochs=5, latency_epochs=3)
    stages = recipe.stage_params(TrainParams(epochs=99, lr=0.1, optimizer="adam"), 3)
    assert [name for name, _ in stages] == ["ann", "T1", "T2", "T3"]
    assert [p.epochs for _, p in stages] == [7, 5, 3, 3]
    assert stages[0][1].optimizer == "adam" and stages[0][1].lr == 0.1
    for _, p in stages[1:]:
        # paper C Sec. 5.1.1: surrogate-gradient SNN training at lr 5e-3
        assert (p.optimizer, p.lr, p.momentum, p.schedule) == ("sgd", 5e-3, 0.9, "cosine")


def test_membrane_readout_is_the_sum_of_the_per_step_outputs():
    """Paper C's output: the final membrane potential of a non-leaky output layer fed the
    classifier's output at each step, u_T = sum_t o_t (from u_0 = 0); the mean is u_T / T."""
    torch.manual_seed(0)
    mean = build("snn_cnn", T=3)
    membrane = build("snn_cnn", T=3, readout="membrane")
    membrane.load_state_dict(mean.state_dict())
    mean.eval(), membrane.eval()
    x = torch.rand(5, 1, 8, 8)
    with torch.no_grad():
        per_step = mean.features(x.repeat(3, 1, 1, 1)).view(3, 5, -1)
        u = torch.zeros(5, per_step.shape[-1])
        for t in range(3):  # brute-force non-leaky integration
            u = u + per_step[t]
        torch.testing.assert_close(membrane(x), u)
        torch.testing.assert_close(mean(x), u / 3)
        # Sensitivity: softmax confidences differ (a temperature of 1 / T), argmax does not.
        assert not torch.allclose(membrane(x).softmax(1), mean(x).softmax(1))
        assert torch.equal(membrane(x).argmax(1), mean(x).argmax(1))
    with pytest.raises(ValueError, match="readout"):
        build("snn_cnn", readout="last")


# --- training ----------------------------------------------------------------------------------

def test_snn_direct_lowers_loss(digits):
    torch.manual_seed(0)
    model = build("snn_cnn", T=4, neuron="lif")
    params = TrainParams(epochs=3, lr=0.02, optimizer="adam", batch_size=64)
    model, log = RECIPES.build("snn_direct").train(model, digits.x_train[:500],
                                                   digits.y_train[:500], params, TrainEnv())
    assert log["loss"][-1] < 0.8 * log["loss"][0]
    with pytest.raises(ValueError, match="spiking model"):
        RECIPES.build("snn_direct").train(build("ann_cnn"), digits.x_train[:8],
                                          digits.y_train[:8], params, TrainEnv())


def test_ann2snn_lowers_loss_and_reloads(digits):
    torch.manual_seed(0)
    x, y = digits.x_train[:600], digits.y_train[:600]
    recipe = RECIPES.build("ann2snn", ann_epochs=4, calib_epochs=3, latency_epochs=2,
                           calib_lr=0.02)
    steps = []
    env = TrainEnv(progress=lambda epoch, total, stats: steps.append((epoch, total)))
    model, log = recipe.train(build("snn_cnn", T=2), x, y, TrainParams(lr=0.05, batch_size=64),
                              env)
    assert log["stage"] == ["ann"] * 4 + ["T1"] * 3 + ["T2"] * 2
    assert steps == [(e, 9) for e in range(1, 10)]
    loss = np.array(log["loss"])
    assert loss[3] < 0.5 * loss[0]  # ANN stage
    assert loss[6] < loss[4]  # calibration at T = 1
    assert model.spiking and model.T == 2 and len(log["thresholds"][0]) == 3
    assert thresholds(model) == log["thresholds"][0]  # fixed unless learn_thresholds
    assert not any(p.requires_grad for u in model.neurons() for p in u.parameters())
    # the pipeline rebuilds the registry model, applies architecture() and loads the weights
    fresh = recipe.architecture(build("snn_cnn", T=2))
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(fresh.eval()(x[:50]), model.eval()(x[:50]))
    with pytest.raises(ValueError, match="neuron='if'"):
        recipe.train(build("snn_cnn", neuron="lif"), x, y, TrainParams(), env)


def test_ann2snn_learn_thresholds(digits):
    torch.manual_seed(0)
    recipe = RECIPES.build("ann2snn", ann_epochs=2, calib_epochs=2, latency_epochs=0,
                           calib_lr=0.02, learn_thresholds=True)
    model, log = recipe.train(build("snn_cnn", T=2), digits.x_train[:300], digits.y_train[:300],
                              TrainParams(lr=0.05, batch_size=64), TrainEnv())
    assert log["stage"] == ["ann"] * 2 + ["T1"] * 2 and model.T == 2
    moved = np.abs(np.array(thresholds(model)) - np.array(log["thresholds"][0]))
    assert moved.max() > 1e-3


def test_per_sample_gradients_under_vmap():
    # snnTorch's surrogates fail under vmap; ours must give the per-sample loop's gradients.
    from torch.func import functional_call, grad, vmap

    torch.manual_seed(0)
    model = build("snn_cnn", T=3).eval()
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = dict(model.named_buffers())

    def loss(p, x, y):
        logits = functional_call(model, (p, buffers), (x[None],))
        return torch.nn.functional.cross_entropy(logits, y[None])

    x, y = torch.rand(4, 1, 8, 8) * 2, torch.arange(4)
    batched = vmap(grad(loss), in_dims=(None, 0, 0))(params, x, y)["features.0.weight"]
    for i in range(4):
        looped = grad(loss)(params, x[i], y[i])["features.0.weight"]
        torch.testing.assert_close(batched[i], looped)
    assert batched.abs().sum() > 0


# --- registry, input dropout, memory -----------------------------------------------------------

@pytest.mark.parametrize("name", ["snn_resnet18", "snn_cnn", "ann_resnet18", "ann_cnn"])
@pytest.mark.parametrize("shape", [(1, 8, 8), (3, 32, 32), (3, 5, 7)])
def test_models_any_input_size(name, shape):
    model = build(name, shape=shape, width=0.125)
    assert model(torch.rand(2, *shape)).shape == (2, 10)
    assert model.spiking == name.startswith("snn")
    assert not any(isinstance(m, torch.nn.MaxPool2d) for m in model.modules())


def test_bad_options_name_the_option():
    with pytest.raises(ValueError, match="neuron"):
        build("snn_cnn", neuron="relu")
    with pytest.raises(ValueError, match="T"):
        build("snn_cnn", T=0)
    with pytest.raises(ValueError, match="calib_epochs"):
        RECIPES.build("ann2snn", calib_epochs=-1)
    with pytest.raises(ValueError, match="conversion"):
        RECIPES.build("ann2snn", conversion="max")


def test_input_dropout_masks_each_time_step():
    torch.manual_seed(0)
    T, p = 4, 0.3
    model = build("snn_cnn", T=T).eval()
    seen = []
    first_conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    first_conv.register_forward_pre_hook(lambda module, inputs: seen.append(inputs[0]))
    x = torch.ones(16, 1, 8, 8)
    model(x)
    assert torch.equal(seen[-1], x.repeat(T, 1, 1, 1))  # p = 0: T copies, no mask
    model.input_dropout_p = p
    model(x)
    steps = seen[-1].view(T, 16, 1, 8, 8)
    dropped = (steps == 0).float()
    assert dropped.mean().item() == pytest.approx(p, abs=0.03)
    assert not torch.equal(steps[0], steps[1])  # a fresh mask per time step
    model.input_dropout_p = 1.0
    with pytest.raises(ValueError, match="input_dropout_p"):
        model(x)


def test_dropout_query_delegates_to_model():
    torch.manual_seed(0)
    model = build("snn_cnn", T=2)
    x = torch.rand(6, 1, 8, 8)
    out = query_outputs(model, x, ["identity", "dropout:p=0.5,n=3"], CPU, seed=0)
    again = query_outputs(model, x, ["identity", "dropout:p=0.5,n=3"], CPU, seed=0)
    assert out.shape == (6, 2, 10) and torch.equal(out, again)
    assert not torch.allclose(out[:, 0], out[:, 1])
    assert model.input_dropout_p == 0.0


def test_memory_does_not_grow_across_constructions():
    def neurons_alive() -> int:
        gc.collect()
        return sum(type(o) is Neuron for o in gc.get_objects())  # type(): no proxy lookups

    def tensors_alive() -> int:
        gc.collect()
        return sum(issubclass(type(o), torch.Tensor) for o in gc.get_objects())

    x, y = torch.rand(4, 1, 8, 8), torch.tensor([0, 1, 2, 3])
    baseline_neurons, refs = neurons_alive(), []
    for index in range(20):
        model = build("snn_resnet18", width=0.0625, T=2, neuron=("if", "lif")[index % 2])
        torch.nn.functional.cross_entropy(model(x), y).backward()
        refs.append(weakref.ref(model))
        del model
        if index == 4:
            tensors_after_five = tensors_alive()
    assert neurons_alive() == baseline_neurons
    assert all(ref() is None for ref in refs)
    assert tensors_alive() <= tensors_after_five
