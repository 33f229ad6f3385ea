"""Vectorized ensemble training equals K sequential fit runs (same init, data order, state)."""

from __future__ import annotations

import pytest
import torch

from miaudit.models import build_model
from miaudit.training.engine import Recipe, TrainEnv, TrainParams, fit
from miaudit.training.ensemble import ensemble_unsupported, fit_ensemble


def _data(shape: tuple[int, ...], n: int = 48) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return torch.rand(n, *shape, generator=generator), torch.randint(0, 3, (n,),
                                                                     generator=generator)


def _members(n: int, count: int, k: int) -> list[torch.Tensor]:
    return [torch.sort(torch.randperm(n, generator=torch.Generator().manual_seed(100 + i))[
        :count]).values for i in range(k)]


def _build(name: str, shape: tuple[int, ...], seed: int, **options: object) -> torch.nn.Module:
    torch.manual_seed(seed)  # as pipeline.train_model seeds before building
    return build_model(name, input_shape=shape, num_classes=3, width=0.25, **options)


@pytest.mark.parametrize(("name", "shape", "options", "params"), [
    ("small_cnn", (1, 8, 8), {}, TrainParams(epochs=2, batch_size=8, lr=0.05, momentum=0.9,
                                             weight_decay=5e-4, schedule="cosine",
                                             crop_padding=1, flip=True)),
    ("mlp", (10,), {"hidden": (16,)}, TrainParams(epochs=3, batch_size=7, lr=0.1,
                                                  momentum=0.9, nesterov=True)),
])
def test_ensemble_matches_sequential_fit(name, shape, options, params):
    x, y = _data(shape)
    members, seeds = _members(len(y), 20, 3), [11, 12, 13]
    sequential = [fit(_build(name, shape, s, **options), x[m], y[m], params, Recipe(),
                      TrainEnv(seed=s)) for m, s in zip(members, seeds)]
    batched = fit_ensemble([_build(name, shape, s, **options) for s in seeds], x, y, members,
                           params, seeds)
    for (model_a, log_a), (model_b, log_b) in zip(sequential, batched):
        state_a, state_b = model_a.state_dict(), model_b.state_dict()
        assert state_a.keys() == state_b.keys()
        for key in state_a:
            torch.testing.assert_close(state_b[key], state_a[key], rtol=1e-4, atol=1e-5)
        with torch.no_grad():
            torch.testing.assert_close(model_b(x), model_a(x), rtol=1e-4, atol=1e-5)
        assert log_b["loss"] == pytest.approx(log_a["loss"], rel=1e-4)
    # the models really differ (own members and seeds) and really trained
    first, second = (m.state_dict() for m, _ in batched[:2])
    assert not all(torch.equal(first[k], second[k]) for k in first)
    assert batched[0][1]["loss"][-1] < batched[0][1]["loss"][0]


def test_ensemble_rejects_batchnorm_dropout_and_unequal_members():
    assert "BatchNorm" in ensemble_unsupported(_build("resnet14", (3, 8, 8), 0))
    assert ensemble_unsupported(_build("resnet14", (3, 8, 8), 0, norm="group")) is None
    assert "dropout" in ensemble_unsupported(_build("small_cnn", (1, 8, 8), 0, dropout=0.5))
    x, y = _data((10,))
    models = [_build("mlp", (10,), s) for s in (0, 1)]
    with pytest.raises(ValueError, match="equal member counts"):
        fit_ensemble(models, x, y, [torch.arange(10), torch.arange(12)], TrainParams(epochs=1),
                     [0, 1])


def test_train_ensemble_returns_what_train_model_returns():
    from miaudit.auditor.modeljob import train_ensemble, train_model
    from miaudit.auditor.stages import plan_audit
    from miaudit.config import validate_config

    planned = plan_audit(validate_config({
        "data": {"name": "digits", "pool_size": 120}, "num_models": 4,
        "model": {"name": "small_cnn", "width": 0.25},
        "train": {"epochs": 2, "batch_size": 16}, "attacks": ["loss"]}))
    jobs = planned.jobs[:3]
    done = []
    batched = train_ensemble(jobs, planned.pool, planned.plan, planned.device, size=2,
                             on_done=lambda job, state, meta: done.append(job.index))
    assert sorted(done) == [job.index for job in jobs]
    for job, (state, meta) in zip(jobs, batched):
        ref_state, ref_meta = train_model(job, planned.pool, planned.plan, planned.device)
        assert meta["index"] == ref_meta["index"] and meta["seed"] == ref_meta["seed"]
        assert meta["log"]["loss"] == pytest.approx(ref_meta["log"]["loss"], rel=1e-4)
        for key in ref_state:
            torch.testing.assert_close(state[key], ref_state[key], rtol=1e-4, atol=1e-5)
    assert [meta.get("ensemble") for _, meta in batched] == [2, 2, None]
