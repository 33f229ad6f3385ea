import math

import pytest
import torch

from miaudit.models import build_model
from miaudit.queries import expand_queries, query_outputs
from miaudit.training import Recipe, TrainEnv, TrainParams, fit, predict_logits
from miaudit.training.augment import random_crop, random_flip, shift
from miaudit.training.engine import lr_factor


def test_random_crop_is_a_window_of_the_reflect_padded_image():
    x = torch.arange(2 * 3 * 5 * 5, dtype=torch.float32).reshape(2, 3, 5, 5)
    generator = torch.Generator().manual_seed(0)
    out = random_crop(x, 2, generator)
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2), mode="reflect")
    for i in range(2):  # brute force: the output must equal one of the 25 windows
        windows = [padded[i, :, a : a + 5, b : b + 5] for a in range(5) for b in range(5)]
        assert any(torch.equal(out[i], w) for w in windows)


def test_random_flip_flips_about_half_and_nothing_else():
    x = torch.rand(400, 1, 4, 4)
    out = random_flip(x, torch.Generator().manual_seed(1))
    flipped = (out == x.flip(-1)).flatten(1).all(1)
    same = (out == x).flatten(1).all(1)
    assert (flipped | same).all() and 150 < int(flipped.sum()) < 250


def test_shift_moves_content_by_dx_dy():
    x = torch.rand(1, 1, 6, 6)
    out = shift(x, 1, 0)
    assert torch.equal(out[..., :, 1:], x[..., :, :-1])
    out = shift(x, 0, -2)
    assert torch.equal(out[..., :-2, :], x[..., 2:, :])


def test_lr_schedules():
    cosine = TrainParams(epochs=10, schedule="cosine")
    assert lr_factor(0, 100, cosine, 10) == 1.0
    assert lr_factor(50, 100, cosine, 10) == pytest.approx(0.5)
    assert lr_factor(100, 100, cosine, 10) == pytest.approx(0.0)
    warm = TrainParams(epochs=10, schedule="constant", warmup_epochs=1)
    assert [lr_factor(s, 100, warm, 10) for s in (0, 4, 9, 50)] == [0.1, 0.5, 1.0, 1.0]
    step = TrainParams(epochs=10, schedule="step", milestones=(0.5, 0.75))
    assert lr_factor(49, 100, step, 10) == 1.0
    assert lr_factor(60, 100, step, 10) == pytest.approx(0.1)
    assert lr_factor(80, 100, step, 10) == pytest.approx(0.01)


def _data(n=128, d=10, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=generator)
    y = (x[:, 0] > 0).long()
    return x, y


def test_fit_lowers_the_loss_and_is_deterministic():
    x, y = _data()
    params = TrainParams(epochs=15, batch_size=32, lr=0.1)

    def run():
        torch.manual_seed(0)
        model = build_model("mlp", input_shape=(10,), num_classes=2, hidden=(16,))
        return fit(model, x, y, params, Recipe(), TrainEnv(seed=5))

    model_a, log = run()
    model_b, _ = run()
    assert log["loss"][-1] < 0.5 * log["loss"][0]
    for a, b in zip(model_a.parameters(), model_b.parameters()):
        assert torch.equal(a, b)


class _MasksItsInput(torch.nn.Module):
    """A model that draws its own input-dropout mask (as the spiking nets do)."""

    def __init__(self) -> None:
        super().__init__()
        self.input_dropout_p = 0.0
        self.head = torch.nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x * (torch.rand_like(x) >= self.input_dropout_p)
        return self.head(x.flatten(1))


@pytest.mark.parametrize("masks_itself", [False, True])
def test_a_dropout_stream_serves_every_count_from_one_run(masks_itself):
    """dropout n=4's passes are n=8's first four: asked together, the queries cost 8 passes
    per batch, and each output equals the one asked alone (so a resumed stage that lacks
    only one of them computes the same numbers)."""
    torch.manual_seed(0)
    model = _MasksItsInput() if masks_itself else build_model(
        "small_cnn", input_shape=(1, 8, 8), num_classes=10, width=0.25)
    x = torch.rand(10, 1, 8, 8)
    calls = []
    model.register_forward_hook(lambda *_: calls.append(1))
    alone = {n: query_outputs(model, x, [f"dropout:p=0.3,n={n}"], torch.device("cpu"), seed=7,
                              batch_size=4)[:, 0] for n in (4, 8)}
    calls.clear()
    both = query_outputs(model, x, ["dropout:p=0.3,n=8", "identity", "dropout:p=0.3,n=4"],
                         torch.device("cpu"), seed=7, batch_size=4)
    assert len(calls) == 3 * (8 + 1)  # 3 batches x (8 shared dropout passes + identity)
    assert torch.equal(both[:, 2], alone[4]) and torch.equal(both[:, 0], alone[8])
    assert not torch.allclose(alone[4], alone[8], atol=1e-4)
    other_p = query_outputs(model, x, ["dropout:p=0.2,n=4"], torch.device("cpu"), seed=7,
                            batch_size=4)[:, 0]
    assert not torch.allclose(other_p, alone[4], atol=1e-4)  # another stream, other draws


def test_fit_rejects_a_diverging_loss():
    x, y = _data()
    model = build_model("mlp", input_shape=(10,), num_classes=2)
    with pytest.raises(FloatingPointError):
        fit(model, x * math.inf, y, TrainParams(epochs=1), Recipe(), TrainEnv())


def test_query_outputs_match_direct_forward_passes():
    torch.manual_seed(0)
    model = build_model("small_cnn", input_shape=(1, 8, 8), num_classes=3, width=0.25)
    x = torch.rand(10, 1, 8, 8)
    specs = expand_queries(["augs2", "dropout:p=0.0,n=2", "dropout:p=0.3,n=3"])
    out = query_outputs(model, x, specs, torch.device("cpu"), seed=0, batch_size=4)
    assert out.shape == (10, 4, 3)
    direct = predict_logits(model, x, torch.device("cpu"))
    assert torch.allclose(out[:, 0], direct, atol=1e-5)
    assert torch.allclose(out[:, 1], predict_logits(model, x.flip(-1), torch.device("cpu")),
                          atol=1e-5)
    # p = 0 dropout averages identical passes: same softmax as identity
    assert torch.allclose(out[:, 2].softmax(-1), direct.softmax(-1), atol=1e-5)
    assert not torch.allclose(out[:, 3], out[:, 2], atol=1e-4)
    again = query_outputs(model, x, specs, torch.device("cpu"), seed=0, batch_size=4)
    assert torch.equal(out, again)
