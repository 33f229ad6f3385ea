"""Neural ODE/SDE model zoo and replace-then-finetune (issue 4; SDENet's spectral norm, issue 6)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import save_file
from torch import nn

from miaudit.models import build_model
from miaudit.models.ode import (
    ODEBlock,
    ODEFunc,
    Solver,
    StepBatchNorm2d,
    dp_incompatibilities,
)
from miaudit.models.ode_second_order import SecondOrderBlock
from miaudit.models.resnet import ResBlock
from miaudit.models.sde import (
    NoiseSchedule,
    SDEBlock,
    drift_lipschitz_bound,
    sde_parameters,
    srk4_step,
)
from miaudit.recipes.replace_finetune import ReplaceFinetune
from miaudit.registry import DATASETS, RECIPES
from miaudit.training.engine import TrainEnv, TrainParams, fit

MODELS = ["resnet14", "odenet", "odenet64", "anode", "sonode", "hbnode", "sdenet"]
ODE_OPTIONS = {"steps": 2}


@pytest.fixture(autouse=True)
def _one_thread():
    # Tiny convolutions: one thread is far faster than two on a shared, loaded machine.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def tiny(name: str, shape=(1, 8, 8), **options) -> nn.Module:
    if name != "resnet14":
        options = {**ODE_OPTIONS, **options}
    return build_model(name, input_shape=shape, num_classes=10, width=0.25, **options)


class Linear(nn.Module):
    """f(t, y) = a y, counting evaluations: closed-form test field."""

    def __init__(self, a: float):
        super().__init__()
        self.a, self.nfe = a, 0

    def forward(self, t, y):
        self.nfe += 1
        return self.a * y


class Zero(nn.Module):
    def forward(self, t, y):
        return torch.zeros_like(y)


# -- shapes -----------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(1, 8, 8), (3, 32, 32)])
@pytest.mark.parametrize("name", MODELS)
def test_forward_backward_shapes(name, shape):
    torch.manual_seed(0)
    model = tiny(name, shape)
    out = model(torch.rand(3, *shape))
    assert out.shape == (3, 10) and torch.isfinite(out).all()
    out.logsumexp(1).sum().backward()
    missing = [n for n, p in model.named_parameters() if p.grad is None]
    assert not missing, f"{name}: no gradient for {missing}"


@pytest.mark.parametrize("options", [{"solver": "rk4"}, {"solver": "dopri5"}, {"adjoint": True},
                                     {"norm": "group"}, {"norm": "none"}])
def test_odenet_solver_and_norm_options_run(options):
    torch.manual_seed(0)
    model = tiny("odenet64", **options)
    model(torch.rand(2, 1, 8, 8)).sum().backward()
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize(("name", "options", "word"), [
    ("odenet", {"solver": "midpoint"}, "solver"), ("odenet", {"steps": 0}, "steps"),
    ("odenet", {"blocks": 4}, "blocks"), ("resnet14", {"norm": "layer"}, "norm"),
    ("odenet64", {"T": 0.0}, "T"), ("anode", {"augment_channels": 0}, "augment_channels"),
    ("odenet", {"stem_stride": 3}, "stem_stride"), ("sdenet", {"convention": "ito"}, "convention"),
    ("sdenet", {"stepper": "heun"}, "stepper"), ("sdenet", {"n_sde_blocks": 4}, "n_sde_blocks"),
    ("sdenet", {"k": 0.5, "sigma": 2.0}, "sigma"), ("sdenet", {"k": -1.0}, "k"),
    ("sdenet", {"spectral_norm": True, "ode_norm": "group"}, "ode_norm"),
    ("resnet14", {}, "image"), ("sonode", {"bn_stats": "per_step"}, "bn_stats"),
    ("sonode", {"bn_stats": "per_evaluation", "norm": "group"}, "norm='batch'"),
    ("anode", {"bn_stats": "per_evaluation", "solver": "dopri5"}, "fixed-step"),
    ("odenet", {"bn_stats": "per_evaluation", "adjoint": True}, "fixed-step"),
])
def test_bad_options_name_the_option(name, options, word):
    shape = (8,) if word == "image" else (1, 8, 8)
    with pytest.raises(ValueError, match=word):
        build_model(name, input_shape=shape, num_classes=10, **options)


# -- dimensions (paper A, Appendix A) ------------------------------------------------------
def _conv(cin: int, cout: int, bias: bool = False) -> int:
    return 9 * cin * cout + (cout if bias else 0)


def _resnet14_count(c=(32, 64, 128), classes=10) -> int:
    """Hand count: stem conv + BN; 3 pre-activation blocks (2 BN + 2 convs) per group; BN-ReLU-
    conv stride-2 downsampling; head BN + linear."""
    total = _conv(3, c[0]) + 2 * c[0]
    total += sum(3 * (2 * _conv(ch, ch) + 4 * ch) for ch in c)
    total += sum(2 * a + _conv(a, b) for a, b in zip(c, c[1:]))
    return total + 2 * c[-1] + c[-1] * classes + classes


def _odenet_count(c=(32, 64, 128), classes=10) -> int:
    """As ResNet-14, one ODE function per group: 2 BN + 2 ConcatConv2d (t channel, bias)."""
    blocks = sum(2 * _conv(ch + 1, ch, bias=True) + 4 * ch for ch in c)
    resblocks = sum(3 * (2 * _conv(ch, ch) + 4 * ch) for ch in c)
    return _resnet14_count(c, classes) - resblocks + blocks


@pytest.mark.parametrize(("name", "options", "count"), [
    ("resnet14", {}, 1_258_730), ("odenet", {}, 487_274), ("sdenet", {}, 487_274),
    ("odenet64", {}, 209_290), ("anode", {}, 251_338),
    ("anode", {"augment_channels": 64}, 432_778),
])
def test_width_one_parameter_counts_are_pinned(name, options, count):
    model = build_model(name, input_shape=(3, 32, 32), num_classes=10, **options)
    assert sum(p.numel() for p in model.parameters()) == count
    if name == "resnet14":
        assert count == _resnet14_count()
    if name in ("odenet", "sdenet"):
        assert count == _odenet_count()


@pytest.mark.parametrize("name", ["resnet14", "odenet", "sdenet"])
def test_resnet_and_ode_nets_share_stem_and_feature_map_sizes(name):
    """Paper A, Appendix A: the same 3x3 stride-2 stem to 32 channels and groups at 32/64/128,
    so 32x32 inputs give 32x16x16, 64x8x8, 128x4x4 maps in every model (and 8x8 digits give
    4x4, 2x2, 1x1, never an empty map)."""
    for shape, sizes in (((3, 32, 32), (16, 8, 4)), ((1, 8, 8), (4, 2, 1))):
        model = build_model(name, input_shape=shape, num_classes=10, steps=1) if name != \
            "resnet14" else build_model(name, input_shape=shape, num_classes=10)
        stem = model.stem[0]
        assert (stem.kernel_size, stem.stride, stem.out_channels) == ((3, 3), (2, 2), 32)
        h = model.eval().stem(torch.zeros(1, *shape))
        maps = []
        for stage in model.stages:
            h = stage(h)
            maps.append(tuple(h.shape[1:]))
        assert maps == [(32, sizes[0], sizes[0]), (64, sizes[1], sizes[1]),
                        (128, sizes[2], sizes[2])]
    full = build_model(name, input_shape=(1, 8, 8), num_classes=10, stem_stride=1,
                       **({} if name == "resnet14" else {"steps": 1}))
    assert full.stem(torch.zeros(1, 1, 8, 8)).shape[-1] == 8


def test_anode_appends_the_requested_zero_channels():
    model = build_model("anode", input_shape=(3, 32, 32), num_classes=10, augment_channels=64,
                        steps=1).eval()
    h = model.stages[0].down(model.stem(torch.rand(2, 3, 32, 32)))
    assert h.shape[1] == 64 + 64 and h[:, 64:].abs().max() == 0


# -- ResNet-as-Euler identity and solvers ----------------------------------------------------
def _randomized(func: ODEFunc) -> ODEFunc:
    """Random weights, t-channel weights and BN statistics; zero biases (ResBlock has none)."""
    with torch.no_grad():
        for conv in (func.conv1.layer, func.conv2.layer):
            conv.bias.zero_()
        for norm in (func.norm1, func.norm2):
            norm.running_mean.normal_()
            norm.running_var.uniform_(0.5, 2.0)
            norm.weight.uniform_(0.5, 1.5)
            norm.bias.normal_()
    return func.eval()


def _matching_resblock(func: ODEFunc) -> ResBlock:
    block = ResBlock(func.conv1.layer.out_channels).eval()
    block.norm1.load_state_dict(func.norm1.state_dict())
    block.norm2.load_state_dict(func.norm2.state_dict())
    with torch.no_grad():  # the x part of the concat convs: the t channel is 0 at t = 0
        block.conv1.weight.copy_(func.conv1.layer.weight[:, 1:])
        block.conv2.weight.copy_(func.conv2.layer.weight[:, 1:])
    return block


def test_euler_one_unit_step_is_a_residual_block():
    torch.manual_seed(0)
    func = _randomized(ODEFunc(6))
    resblock = _matching_resblock(func)
    x = torch.randn(4, 6, 5, 5)
    expected = resblock(x)
    ode = ODEBlock(func, Solver("euler", steps=1, T=1.0))
    torch.testing.assert_close(ode(x), expected, rtol=1e-5, atol=1e-5)
    sde = SDEBlock(func, NoiseSchedule(k=0.0, T=1.0, steps=1, stepper="euler_maruyama"))
    torch.testing.assert_close(sde.eval()(x), expected, rtol=1e-5, atol=1e-5)
    # Sensitivity: two half steps (t enters the second one) are not the residual block.
    two = ODEBlock(func, Solver("euler", steps=2, T=1.0))(x)
    assert (two - expected).abs().max() > 1e-3


@pytest.mark.parametrize(("method", "per_step"), [("euler", 1), ("rk4", 4)])
def test_fixed_step_solver_evaluations_and_closed_form(method, per_step):
    a, T, steps = -1.3, 1.0, 5
    field = Linear(a)
    y0 = torch.ones(2, 3)
    out = Solver(method, steps=steps, T=T).integrate(field, y0)
    assert field.nfe == per_step * steps
    h = a * T / steps
    factor = 1 + h if method == "euler" else 1 + h + h**2 / 2 + h**3 / 6 + h**4 / 24
    torch.testing.assert_close(out, y0 * factor**steps, rtol=1e-6, atol=1e-7)


def test_dopri5_is_adaptive_and_accurate():
    counts = {}
    for tol in (1e-3, 1e-8):
        field = Linear(-1.3)
        out = Solver("dopri5", T=1.0, rtol=tol, atol=tol).integrate(field, torch.ones(3))
        counts[tol] = field.nfe
        assert abs(out[0].item() - math.exp(-1.3)) < 20 * tol
    assert counts[1e-8] > counts[1e-3] > 0  # step count adapts to the tolerance


def test_model_honours_solver_choice():
    x = torch.rand(2, 1, 8, 8)
    counts = {}
    for solver in ("euler", "rk4", "dopri5"):
        torch.manual_seed(0)
        model = tiny("odenet64", solver=solver, steps=3).eval()
        model(x)
        counts[solver] = model.stages[0].blocks.func.nfe
    assert counts["euler"] == 3 and counts["rk4"] == 12
    assert counts["dopri5"] not in (3, 12) and counts["dopri5"] > 0


def test_srk4_step_is_classical_rk4_without_noise_and_counts_four():
    field = Linear(0.7)
    y = torch.ones(3)
    out = srk4_step(field, 0.0, 0.1, y, None)
    h = 0.07
    torch.testing.assert_close(out, y * (1 + h + h**2 / 2 + h**3 / 6 + h**4 / 24))
    assert field.nfe == 4


# -- SDE noise --------------------------------------------------------------------------------
@pytest.mark.parametrize("stepper", ["srk4", "euler_maruyama"])
@pytest.mark.parametrize(("convention", "T"), [("paper", 1.0), ("paper", 0.5),
                                               ("oganesyan", 0.5)])
def test_additive_noise_variance_matches_the_convention(stepper, convention, T):
    """Zero drift: h(T) - h(0) is the sum of the increments. Paper A's Theorem 4.1 SDE
    dh = f dt + (sigma / sqrt(T)) dB adds N(0, sigma^2) with Table 9's sigma = k sqrt(s/T);
    Oganesyan et al.'s W = k sqrt(dt) xi adds N(0, k^2 T)."""
    torch.manual_seed(0)
    schedule = NoiseSchedule(k=0.5, T=T, steps=16, stepper=stepper, convention=convention)
    expected = (0.5 * math.sqrt(16 / T)) ** 2 if convention == "paper" else 0.25 * T
    block = SDEBlock(Zero(), schedule).eval()
    out = block(torch.zeros(40_000))
    assert out.var().item() == pytest.approx(expected, rel=0.03)
    assert schedule.sigma_theorem ** 2 == pytest.approx(expected)


def test_default_sdenet_is_the_studys_sigma_two():
    """Paper A, Table 9 / Sec. 3: s = 16, T = 1, k = 0.5 -> sigma = k sqrt(s/T) = 2. Default
    convention: Oganesyan et al.'s increment W = k sqrt(dt) xi (per-step std 0.125, diffusion
    k, Theorem 4.1's sigma k sqrt(T) = 0.5); "paper": Theorem 4.1's sigma = 2 (per-step std
    sigma / sqrt(s) = 0.5, diffusion sigma / sqrt(T) = 2)."""
    params = sde_parameters(tiny("sdenet", steps=16))
    assert (params["k"], params["T"], params["steps"]) == (0.5, 1.0, 16)
    assert params["convention"] == "oganesyan" and params["stepper"] == "srk4"
    assert params["sigma"] == pytest.approx(2.0)  # the Table-9 label
    assert params["per_step_std"] == pytest.approx(0.5 / 4)  # k sqrt(dt)
    assert params["diffusion"] == pytest.approx(0.5)
    assert params["sigma_theorem"] == pytest.approx(0.5)  # total std k sqrt(T)
    paper = sde_parameters(tiny("sdenet", steps=16, convention="paper"))
    assert paper["sigma"] == pytest.approx(2.0)
    assert paper["sigma_theorem"] == pytest.approx(2.0)
    assert paper["diffusion"] == pytest.approx(2.0)
    assert paper["per_step_std"] == pytest.approx(0.5)


def test_sigma_table_and_theorem_mapping():
    for steps, sigma in ((8, 1.414), (16, 2.0), (32, 2.828)):
        assert NoiseSchedule(k=0.5, T=1.0, steps=steps).sigma == pytest.approx(sigma, abs=1e-3)
    # Table 9 row s = 8, T = 0.5, k = 0.5 -> sigma = 2.
    assert NoiseSchedule(k=0.5, T=0.5, steps=8).sigma == pytest.approx(2.0)
    model = tiny("sdenet", sigma=2.0, T=2.0, steps=16, convention="paper")
    params = sde_parameters(model)
    assert params["k"] == pytest.approx(2.0 * math.sqrt(2.0 / 16))
    assert params["sigma_theorem"] == pytest.approx(2.0)
    assert params["diffusion"] == pytest.approx(2.0 / math.sqrt(2.0))  # sigma / sqrt(T)
    assert params["per_step_std"] == pytest.approx(0.5)  # sigma / sqrt(s)
    reference = sde_parameters(tiny("sdenet", sigma=2.0, T=2.0, steps=16))
    assert reference["diffusion"] == pytest.approx(reference["k"])  # oganesyan: g = k
    assert reference["sigma_theorem"] == pytest.approx(reference["k"] * math.sqrt(2.0))
    model = tiny("sdenet", sigma=2.0, T=4.0, steps=16, convention="paper")
    params = sde_parameters(model)
    assert params["k"] == pytest.approx(2.0 * math.sqrt(4.0 / 16))
    assert params["sigma_theorem"] == pytest.approx(2.0)
    assert params["diffusion"] == pytest.approx(1.0)  # sigma / sqrt(T)
    assert params["per_step_std"] == pytest.approx(0.5)  # sigma / sqrt(s)
    assert params["n_sde_blocks"] == 3 and params["lipschitz_bound"] is None
    assert sde_parameters(tiny("resnet14")) is None


def test_sdenet_sigma_zero_is_deterministic():
    torch.manual_seed(0)
    model = tiny("sdenet", k=0.0).eval()
    x = torch.rand(4, 1, 8, 8)
    torch.testing.assert_close(model(x), model(x), rtol=0, atol=0)


def _output_variance(model: nn.Module, x: torch.Tensor, passes: int = 12) -> float:
    with torch.no_grad():
        outs = torch.stack([model(x) for _ in range(passes)])
    return outs.var(0).mean().item()


def test_sdenet_noise_on_in_eval_and_variance_grows_with_k():
    torch.manual_seed(0)
    x = torch.rand(8, 1, 8, 8)
    base = tiny("sdenet", k=0.0).eval()
    variances = []
    for k in (0.1, 0.3, 1.0):
        model = tiny("sdenet", k=k)
        model.load_state_dict(base.state_dict())  # same weights, only the noise differs
        variances.append(_output_variance(model.eval(), x))
    assert variances[0] > 0
    assert variances[0] < variances[1] < variances[2]


def test_deterministic_eval_switch_and_n_sde_blocks():
    torch.manual_seed(0)
    x = torch.rand(4, 1, 8, 8)
    model = tiny("sdenet", k=0.5, deterministic_eval=True)
    assert _output_variance(model.eval(), x, 3) == 0
    model.train()
    with torch.no_grad():
        assert not torch.equal(model(x), model(x))  # noise stays on in training
    partial = tiny("sdenet", blocks=2, n_sde_blocks=2)
    stochastic = [m.stochastic for m in partial.modules() if isinstance(m, SDEBlock)]
    assert stochastic == [False] * 4 + [True] * 2
    assert sde_parameters(partial)["n_sde_blocks"] == 2


def test_spectral_norm_gives_a_valid_lipschitz_bound():
    torch.manual_seed(0)
    model = tiny("sdenet", spectral_norm=True, norm="group")
    x = torch.rand(16, 1, 8, 8)
    model.train()
    for _ in range(20):  # power iterations converge during forward passes
        model(x)
    params = sde_parameters(model)
    assert params["spectral_norm"] and params["lipschitz_bound"] == pytest.approx(9.0, rel=0.05)
    block = next(m for m in model.modules() if isinstance(m, SDEBlock)).eval()
    bound = drift_lipschitz_bound(block.func)
    channels = block.func.conv1.layer.out_channels
    u, v = torch.randn(64, channels, 8, 8), torch.randn(64, channels, 8, 8)
    with torch.no_grad():
        ratio = ((block.func(0.3, u) - block.func(0.3, v)).flatten(1).norm(dim=1)
                 / (u - v).flatten(1).norm(dim=1))
    assert ratio.max().item() <= bound
    # The exact-SVD bound holds for unnormalized weights too: scale one conv, bound scales.
    with torch.no_grad():
        plain = ODEFunc(4, norm="none")
        before = drift_lipschitz_bound(plain)
        plain.conv1.layer.weight.mul_(3.0)
    assert drift_lipschitz_bound(plain) == pytest.approx(3.0 * before, rel=1e-6)


# -- BatchNorm statistics per solver evaluation (bn_stats) ---------------------------------
def test_step_batchnorm_trains_as_batchnorm_and_keeps_each_evaluations_statistics():
    """Brute-force reference: one torch BatchNorm2d per evaluation index, sharing the affine."""
    torch.manual_seed(0)
    step = StepBatchNorm2d(3, evaluations=2)
    nn.init.normal_(step.weight)
    nn.init.normal_(step.bias)
    references = [nn.BatchNorm2d(3) for _ in range(2)]
    for ref in references:
        ref.load_state_dict({**ref.state_dict(), "weight": step.weight.detach(),
                             "bias": step.bias.detach()})
    for _ in range(3):  # three solves of two evaluations, the second input shifted and scaled
        step.restart()
        for k, ref in enumerate(references):
            x = torch.randn(16, 3, 4, 4) * (1 + 4 * k) + 3 * k
            torch.testing.assert_close(step(x), ref(x))
    for k, ref in enumerate(references):
        torch.testing.assert_close(step.running_mean[k], ref.running_mean)
        torch.testing.assert_close(step.running_var[k], ref.running_var)
    step.eval()
    for ref in references:
        ref.eval()
    step.restart()
    x = torch.randn(4, 3, 4, 4)
    for ref in references:
        torch.testing.assert_close(step(x), ref(x))
    with pytest.raises(RuntimeError, match="evaluation 3"):
        step(x)


@pytest.mark.parametrize(("solver", "steps"), [("euler", 4), ("rk4", 2)])
def test_per_evaluation_statistics_cover_every_evaluation_of_a_solve(solver, steps):
    model = tiny("sonode", solver=solver, steps=steps, bn_stats="per_evaluation").train()
    model(torch.rand(8, 1, 8, 8))
    func = model.stages[0].blocks.func.f
    assert func.nfe == Solver(solver, steps=steps).evaluations
    for norm in (func.norm1, func.norm2):
        assert isinstance(norm, StepBatchNorm2d)
        assert norm.evaluation == len(norm.running_mean) == func.nfe
        assert (norm.running_var != 1).all()  # every row was updated


@pytest.mark.parametrize("name", ["sonode", "anode"])
def test_per_evaluation_statistics_make_eval_mode_match_the_trained_function(name):
    """The failure mode: SONODE's velocity and ANODE's extra channels start at zero, so one set
    of running statistics (the average over evaluations) normalizes each step wrongly in eval
    mode; per-evaluation statistics reproduce the training-mode function. With momentum 1 the
    running statistics are the last batch's (unbiased variance: large batch, loose tolerance)."""
    x = torch.rand(256, 1, 8, 8)
    gaps = {}
    for stats in ("shared", "per_evaluation"):
        torch.manual_seed(0)
        model = tiny(name, steps=4, bn_stats=stats)
        for module in model.modules():
            if isinstance(module, (nn.BatchNorm2d, StepBatchNorm2d)):
                module.momentum = 1.0
        block = model.stages[0]
        features = model.stem(x).detach()
        with torch.no_grad():
            trained = block.train()(features)
            evaluated = block.eval()(features)
        gaps[stats] = ((evaluated - trained).norm() / trained.norm()).item()
    assert gaps["per_evaluation"] < 0.02
    assert gaps["shared"] > 10 * gaps["per_evaluation"]


# -- second-order models --------------------------------------------------------------------
@pytest.mark.parametrize("name", ["sonode", "hbnode"])
def test_second_order_state_shapes_and_first_euler_step(name):
    torch.manual_seed(0)
    model = tiny(name, steps=1, norm="none").eval()
    block = model.stages[0].blocks
    assert isinstance(block, SecondOrderBlock)
    x = torch.rand(3, 1, 8, 8)
    h = model.stem(x)
    state = block.state(h)
    assert state.shape == (3, 2 * h.shape[1], *h.shape[2:])
    assert block(h).shape == h.shape
    position, velocity = state.chunk(2, dim=1)
    # One Euler step from zero velocity/momentum leaves the position unchanged.
    torch.testing.assert_close(position, h)
    zero = torch.zeros_like(h)
    expected = (block.func.f(0.0, torch.cat([h, zero], 1)) if name == "sonode"
                else block.func.f(0.0, h))
    torch.testing.assert_close(velocity, expected, rtol=1e-5, atol=1e-6)


def test_hbnode_gamma_is_learnable_from_minus_three():
    # theta(T) first feels the damping after three Euler steps (m(0) = 0; theta' = -m).
    model = tiny("hbnode", steps=3)
    gamma = model.stages[0].blocks.func.damping.gamma
    assert gamma.item() == -3.0 and gamma.requires_grad
    model(torch.rand(2, 1, 8, 8)).sum().backward()
    assert gamma.grad is not None and gamma.grad.abs().item() > 0


# -- training ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def digits():
    splits = DATASETS.build("digits")
    return splits.x_train[:400], splits.y_train[:400]


PARAMS = TrainParams(epochs=2, batch_size=50, optimizer="adam", lr=1e-2, weight_decay=0.0,
                     schedule="constant")


def _loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    torch.manual_seed(1)
    model.train()  # batch statistics: comparable before and after so few steps
    with torch.no_grad():
        return F.cross_entropy(model(x), y).item()


@pytest.mark.parametrize("name", MODELS)
def test_short_digits_training_lowers_the_loss(name, digits):
    x, y = digits
    torch.manual_seed(0)
    model = tiny(name, **({"k": 0.2} if name == "sdenet" else {}))  # noise on, moderate
    before = _loss(model, x, y)
    model, log = fit(model, x, y, PARAMS, RECIPES.build("standard", penalties=[]),
                     TrainEnv(seed=0))
    assert _loss(model, x, y) < 0.85 * before
    assert log["loss"][-1] < log["loss"][0]


# -- replace-then-finetune -------------------------------------------------------------------
def test_replace_finetune_keeps_pretrained_weights_and_replaces_last_group(digits):
    x, y = digits
    params = TrainParams(epochs=1, batch_size=50, optimizer="adam", lr=1e-2, weight_decay=0.0,
                         schedule="constant")
    torch.manual_seed(0)
    reference, _ = fit(tiny("resnet14"), x, y, params, RECIPES.build("standard", penalties=[]),
                       TrainEnv(seed=0))
    recipe = RECIPES.build("replace_finetune", penalties=[], pretrain_epochs=1, finetune_epochs=0,
                           steps=2, k=0.3)
    torch.manual_seed(0)
    model, log = recipe.train(tiny("resnet14"), x, y, params, TrainEnv(seed=0))
    # Pre-training equals the standard recipe; the stem, earlier groups and the last group's
    # downsampling keep those weights; the last group's blocks are one fresh SDE block.
    for part in ("stem", "stages.0", "stages.1", "stages.2.down", "head"):
        ours, theirs = model.get_submodule(part), reference.get_submodule(part)
        for a, b in zip(ours.state_dict().values(), theirs.state_dict().values(), strict=True):
            torch.testing.assert_close(a, b)
    last = model.stages[-1].blocks
    assert isinstance(last, SDEBlock) and last.func.conv1.layer.out_channels == 32
    assert sde_parameters(model)["k"] == pytest.approx(0.3)
    assert len(log["pretrain_loss"]) == 1


def test_replace_finetune_from_weights_file_and_architecture_reload(digits, tmp_path):
    x, y = digits
    torch.manual_seed(0)
    base = tiny("resnet14", norm="group")
    path = tmp_path / "weights.safetensors"
    save_file(base.state_dict(), str(path))
    recipe = ReplaceFinetune(pretrained=str(tmp_path), finetune_epochs=1, steps=2,
                             stepper="euler_maruyama")
    params = TrainParams(epochs=5, batch_size=100, optimizer="adam", lr=1e-2, weight_decay=0.0)
    model, log = recipe.train(tiny("resnet14", norm="group"), x, y, params, TrainEnv(seed=0))
    assert len(log["loss"]) == 1 and "pretrain_loss" not in log  # no pre-training
    assert isinstance(model.stages[-1].blocks.func.norm1, nn.GroupNorm)  # matches the model
    # The pipeline's reload path: architecture(fresh model) accepts the trained weights.
    fresh = recipe.architecture(tiny("resnet14", norm="group"))
    fresh.load_state_dict(model.state_dict(), strict=True)
    with pytest.raises(ValueError, match="pretrained"):
        ReplaceFinetune(pretrained=str(tmp_path / "absent.safetensors")).train(
            tiny("resnet14"), x, y, params, TrainEnv(seed=0))
    with pytest.raises(ValueError, match="staged model"):
        recipe.architecture(build_model("small_cnn", input_shape=(1, 8, 8), num_classes=10))


def test_replace_finetune_frozen_backbone_does_not_change(digits):
    """freeze_backbone=True: the reused part (stem, earlier groups, last group's downsampling;
    parameters and BatchNorm statistics) is bit-identical after finetuning, while the SDE block
    and the head train (paper A's post-processing argument, Corollary 4.2 / Fig. 7)."""
    x, y = digits
    params = TrainParams(epochs=1, batch_size=100, optimizer="sgd", lr=0.05, weight_decay=5e-4,
                         schedule="constant")
    torch.manual_seed(0)
    base = tiny("resnet14")
    before = {k: v.clone() for k, v in base.state_dict().items()}
    recipe = ReplaceFinetune(pretrain_epochs=0, finetune_epochs=1, steps=2,
                             stepper="euler_maruyama", freeze_backbone=True)
    model, _ = recipe.train(base, x, y, params, TrainEnv(seed=0))
    after = model.state_dict()
    frozen = ("stem.", "stages.0.", "stages.1.", "stages.2.down.")
    checked = [k for k in before if k.startswith(frozen)]
    assert any("running_mean" in k for k in checked)
    for key in checked:
        torch.testing.assert_close(after[key], before[key], rtol=0, atol=0)
    assert not torch.equal(after["head.4.weight"], before["head.4.weight"])
    assert all(p.requires_grad for p in model.stages[-1].blocks.parameters())
    # Sensitivity: without freezing the same run changes the stem.
    torch.manual_seed(0)
    free, _ = ReplaceFinetune(pretrain_epochs=0, finetune_epochs=1, steps=2,
                              stepper="euler_maruyama").train(tiny("resnet14"), x, y, params,
                                                              TrainEnv(seed=0))
    assert not torch.equal(free.state_dict()["stem.0.weight"], before["stem.0.weight"])
    with pytest.raises(ValueError, match="freeze_backbone"):
        ReplaceFinetune(freeze_backbone="yes")


# -- DP compatibility -----------------------------------------------------------------------
def test_dp_incompatibilities_are_declared():
    assert dp_incompatibilities(tiny("odenet", solver="rk4")) == []
    assert dp_incompatibilities(tiny("sdenet")) == []
    assert "adaptive" in dp_incompatibilities(tiny("odenet", solver="dopri5"))[0]
    assert "adjoint" in dp_incompatibilities(tiny("odenet64", adjoint=True))[0]
    assert "spectral" in dp_incompatibilities(tiny("sdenet", spectral_norm=True))[0]
    assert "per solver evaluation" in dp_incompatibilities(
        tiny("sonode", bn_stats="per_evaluation"))[0]


def _replayable_noise(model: nn.Module, batch: int) -> dict:
    """Give every SDE block a fixed table of per-sample increments (one per step), so a batch
    pass and single-sample passes see the same noise; ``rows`` selects the samples."""
    current = {"rows": slice(None)}
    for block_id, block in enumerate(m for m in model.modules() if isinstance(m, SDEBlock)):
        calls, tables = itertools.count(), {}

        def increment(like, block=block, calls=calls, tables=tables, block_id=block_id):
            key = (block_id, next(calls) % block.schedule.steps)
            if key not in tables:
                tables[key] = block.schedule.per_step_std * torch.randn(batch, *like.shape[1:])
            return tables[key][current["rows"]]

        block.increment = increment
    return current


@pytest.mark.filterwarnings("ignore:Full backward hook")
def test_opacus_per_sample_gradients_of_noisy_sdenet():
    from opacus import GradSampleModule

    torch.manual_seed(0)
    model = tiny("sdenet", norm="group", k=0.4, stepper="srk4")
    rows = _replayable_noise(model, batch=3)
    x, y = torch.rand(3, 1, 8, 8), torch.tensor([0, 4, 7])
    params = [p for p in model.parameters() if p.requires_grad]
    singles = []
    for i in range(3):
        rows["rows"] = slice(i, i + 1)
        loss = F.cross_entropy(model(x[i : i + 1]), y[i : i + 1])
        singles.append(torch.autograd.grad(loss, params))
    rows["rows"] = slice(None)
    wrapped = GradSampleModule(model, loss_reduction="sum")
    F.cross_entropy(wrapped(x), y, reduction="sum").backward()
    for i, single in enumerate(singles):
        for p, g in zip(params, single, strict=True):
            torch.testing.assert_close(p.grad_sample[i], g, rtol=1e-4, atol=1e-6)
    # Sensitivity: the noise matters (another draw changes sample 0's gradient).
    rows["rows"] = slice(0, 1)
    model.zero_grad()
    for block in model.modules():
        if isinstance(block, SDEBlock):
            block.increment = (lambda like, k=block.schedule.per_step_std:
                               k * torch.randn_like(like))
    other = torch.autograd.grad(F.cross_entropy(model(x[:1]), y[:1]), params)
    assert not torch.allclose(other[0], singles[0][0], rtol=1e-3, atol=1e-5)


def test_switch_noise_off_makes_an_sdenet_deterministic_in_eval_and_leaves_others_alone():
    from miaudit.models import switch_noise_off

    x = torch.rand(4, 1, 8, 8)
    model = tiny("sdenet").eval()
    torch.manual_seed(0)
    noisy = [model(x) for _ in range(2)]
    assert not torch.equal(*noisy)  # the released outputs carry the noise
    assert switch_noise_off(model) >= 1
    assert torch.equal(model(x), model(x))
    assert switch_noise_off(tiny("odenet")) == 0
