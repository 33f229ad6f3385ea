"""train.precision: bf16 autocast training with float32 master weights; fp32 unchanged."""

from __future__ import annotations

import contextlib
import io
from types import SimpleNamespace

import pytest
import torch
from rich.console import Console

from miaudit._runtime import machine
from miaudit.auditor.stages import train as train_stage
from miaudit.config import ConfigError, validate_config
from miaudit.models import build_model
from miaudit.training.engine import Recipe, TrainEnv, TrainParams, fit, predict_logits


def _data(n: int = 96) -> tuple[torch.Tensor, torch.Tensor]:
    """Two classes told apart by the mean brightness of the image: learnable in a few steps."""
    generator = torch.Generator().manual_seed(0)
    y = torch.randint(0, 2, (n,), generator=generator)
    x = torch.rand(n, 1, 8, 8, generator=generator) * 0.5 + 0.5 * y.view(-1, 1, 1, 1)
    return x, y


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return build_model("small_cnn", input_shape=(1, 8, 8), num_classes=2, width=0.5)


def _conv_output_dtypes(model: torch.nn.Module) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    conv = next(m for m in model.modules() if isinstance(m, torch.nn.Conv2d))
    conv.register_forward_hook(lambda module, inputs, output: seen.append(output.dtype))
    return seen


def test_bf16_trains_in_bfloat16_and_returns_a_float32_model():
    x, y = _data()
    params = TrainParams(epochs=8, batch_size=16, lr=0.05)
    model = _model()
    seen = _conv_output_dtypes(model)
    trained, log = fit(model, x, y, params, Recipe(), TrainEnv(seed=1, precision="bf16"))
    assert seen and set(seen) == {torch.bfloat16}  # the convolutions ran in bfloat16
    state = trained.state_dict()
    assert all(v.dtype == torch.float32 and v.is_contiguous() for v in state.values()
               if v.is_floating_point())  # master weights float32, saved layout contiguous
    seen.clear()
    logits = predict_logits(trained, x, torch.device("cpu"))
    assert set(seen) == {torch.float32} and logits.dtype == torch.float32  # queries: float32
    assert (logits.argmax(1) == y).float().mean() > 0.9  # it learned
    assert log["loss"][-1] < log["loss"][0]


def test_bf16_weights_differ_from_fp32_but_fp32_is_the_default():
    x, y = _data()
    params = TrainParams(epochs=2, batch_size=16)
    default, _ = fit(_model(), x, y, params, Recipe(), TrainEnv(seed=1))
    explicit, _ = fit(_model(), x, y, params, Recipe(), TrainEnv(seed=1, precision="fp32"))
    mixed, _ = fit(_model(), x, y, params, Recipe(), TrainEnv(seed=1, precision="bf16"))
    for name, value in default.state_dict().items():
        assert torch.equal(value, explicit.state_dict()[name])
    assert any(not torch.equal(value, mixed.state_dict()[name])
               for name, value in default.state_dict().items() if value.is_floating_point())


def test_optimizer_state_stays_float32_under_bf16():
    x, y = _data(32)
    recorded = []

    class Probe(Recipe):
        def end_epoch(self, state, epoch):
            recorded.extend(buffer["momentum_buffer"].dtype
                            for buffer in state.optimizer.state.values())

    fit(_model(), x, y, TrainParams(epochs=1, batch_size=16), Probe(),
        TrainEnv(seed=0, precision="bf16"))
    assert recorded and set(recorded) == {torch.float32}


def test_precision_enters_the_identity_only_when_not_fp32():
    assert "precision" not in validate_config({}).train.identity_dump()
    assert "precision" not in validate_config({"train": {"precision": "fp32"}}).train \
        .identity_dump()
    assert validate_config({"train": {"precision": "bf16"}}).train.identity_dump()[
        "precision"] == "bf16"


def test_retired_amp_option():
    # what earlier runs stored (amp: false) still loads and means fp32
    assert validate_config({"train": {"amp": False}}).train.precision == "fp32"
    with pytest.raises(ConfigError, match="precision: bf16"):
        validate_config({"train": {"amp": True}})


@pytest.mark.parametrize("train, match", [
    ({"recipe": "dpsgd", "recipe_options": {"noise_multiplier": 1.0}}, "Opacus"),
    ({"recipe": "user_function",
      "recipe_options": {"function": "tests.test_user_function:train_sgd"}}, "own loop"),
    ({"ensemble": 2}, "ensemble 1"),
])
def test_bf16_is_refused_where_it_is_not_supported(train, match):
    with pytest.raises(ConfigError, match=match):
        validate_config({"train": {**train, "precision": "bf16"}})


def test_sde_noise_is_the_float32_draw_in_the_inputs_dtype_and_layout():
    from miaudit.models.sde import noise_schedule, sde_block

    block = sde_block(4, noise_schedule(k=0.5, T=1.0, steps=4), norm="none")
    like = torch.zeros(3, 4, 5, 5)
    torch.manual_seed(7)
    reference = block.schedule.per_step_std * torch.randn_like(like)
    torch.manual_seed(7)
    assert torch.equal(block.increment(like), reference)  # fp32: the draw it always was
    torch.manual_seed(7)
    mixed = block.increment(like.bfloat16().contiguous(memory_format=torch.channels_last))
    assert mixed.dtype == torch.bfloat16
    assert mixed.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(mixed, reference.bfloat16())


def _planned(executor: str = "local") -> SimpleNamespace:
    cfg = SimpleNamespace(executor=SimpleNamespace(name=executor, gpus_per_model=0))
    return SimpleNamespace(cfg=cfg, device=torch.device("cpu"))


def _job(precision: str, parent: SimpleNamespace | None = None) -> SimpleNamespace:
    return SimpleNamespace(train=SimpleNamespace(precision=precision), parent=parent)


def _warning(planned: SimpleNamespace, todo: list, native: bool, monkeypatch) -> str:
    monkeypatch.setattr(machine, "native_bf16", lambda device: native)
    out = io.StringIO()
    train_stage.warn_slow_bf16(planned, todo, Console(file=out, width=300))
    return out.getvalue()


def test_bf16_without_bfloat16_kernels_is_said_before_training(monkeypatch):
    said = _warning(_planned(), [_job("bf16")], native=False, monkeypatch=monkeypatch)
    assert said.count("\n") == 1 and "train.precision bf16" in said
    assert "train.precision fp32" in said  # the way out that needs no other machine
    # a parent trained in bf16 counts too (a derived model starts from it)
    assert _warning(_planned(), [_job("fp32", parent=_job("bf16"))], False, monkeypatch)
    # silent: bfloat16 kernels present, fp32 models, nothing to train, Ray (other machines)
    assert not _warning(_planned(), [_job("bf16")], native=True, monkeypatch=monkeypatch)
    assert not _warning(_planned(), [_job("fp32")], native=False, monkeypatch=monkeypatch)
    assert not _warning(_planned(), [], native=False, monkeypatch=monkeypatch)
    assert not _warning(_planned("ray"), [_job("bf16")], native=False, monkeypatch=monkeypatch)


@pytest.mark.parametrize("onednn, expected", [(True, True), (False, False), (None, True)])
def test_native_bf16_on_cpu_is_onednns_answer(monkeypatch, onednn, expected):
    monkeypatch.setattr(machine, "_onednn_bf16", lambda: onednn)
    assert machine.bf16_kernels(torch.device("cpu")) is onednn
    assert machine.native_bf16(torch.device("cpu")) is expected  # unknown: no warning


def test_native_bf16_on_cuda_excludes_emulation(monkeypatch):
    asked = {}

    def is_bf16_supported(including_emulation=True):
        asked["including_emulation"] = including_emulation
        return False

    def current(device):
        asked["device"] = device
        return contextlib.nullcontext()

    monkeypatch.setattr(torch.cuda, "is_bf16_supported", is_bf16_supported)
    monkeypatch.setattr(torch.cuda, "device", current)
    assert machine.native_bf16(torch.device("cuda", 1)) is False
    # an emulating GPU is not native; the device asked about is the one given
    assert asked == {"including_emulation": False, "device": torch.device("cuda", 1)}
    # torch cannot say (MPS): unknown in the record, and no warning
    assert machine.bf16_kernels(torch.device("mps")) is None
    assert machine.native_bf16(torch.device("mps")) is True
