"""The bring-your-own example (examples/byo/my_project.py), reached by import path as an audit
config names it: its loader, model and training function work with miaudit's containers."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from miaudit._runtime.importpath import import_callable
from miaudit.data import DataSplits
from miaudit.recipes.user_function import UserFunction
from miaudit.training.engine import TrainEnv, TrainParams, accuracy

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "byo"


def example(name: str):
    return import_callable(f"my_project:{name}", search_paths=[EXAMPLE])


def test_example_loader_returns_data_splits():
    splits = example("load_data")(data_dir=None, n=300, seed=4)
    assert isinstance(splits, DataSplits) and splits.num_classes == 3
    assert splits.x_train.shape == (225, 2) and splits.x_test.shape == (75, 2)
    assert splits.x_train.min() >= 0 and splits.x_train.max() <= 1
    assert sorted(torch.cat([splits.y_train, splits.y_test]).bincount().tolist()) == [100] * 3
    again = example("load_data")(data_dir=None, n=300, seed=4)
    assert torch.equal(again.x_test, splits.x_test)  # seeded


def test_example_model_and_training_function_through_the_recipe():
    splits = example("load_data")(n=300)
    net = example("make_net")(input_shape=(2,), num_classes=3, width=0.5, hidden=64)
    assert net(splits.x_test[:5]).shape == (5, 3)
    assert net[1].out_features == 32  # width scales the hidden size
    recipe = UserFunction(function="my_project:train", options={"epochs": 40},
                          search_paths=[EXAMPLE])
    torch.manual_seed(0)
    model = example("make_net")(input_shape=(2,), num_classes=3)
    cpu = torch.device("cpu")
    before = accuracy(model, splits.x_train, splits.y_train, cpu)
    model, log = recipe.train(model, splits.x_train, splits.y_train, TrainParams(),
                              TrainEnv(seed=0))
    after = accuracy(model, splits.x_train, splits.y_train, cpu)
    # the spirals are learnable: chance is 1/3, the example's own loop reaches ~0.98
    assert before < 0.5 < 0.9 < after
    assert accuracy(model, splits.x_test, splits.y_test, cpu) > 0.85
    assert set(log) == {"seconds"}


TEXT_EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "text"


@pytest.mark.slow
def test_text_example_overfit_model_leaks_and_the_defended_ones_leak_less(tmp_path):
    """examples/text/fortunes_audit.py at a smaller scale (4 models, 300 fortunes): the
    overfit language model leaks (AUC well above 0.5), the regularized and DP-LoRA ones leak
    less, and every model learned (perplexity far below the 257-token uniform model's)."""
    pytest.importorskip("transformers", reason="the text extra: pip install 'miaudit[text]'")
    pytest.importorskip("peft", reason="the text extra: pip install 'miaudit[text]'")
    if not Path("/usr/share/games/fortunes/cookie").is_file():
        pytest.skip("Debian's fortunes package is not installed (apt-get install fortunes)")
    main = import_callable("fortunes_audit:main", search_paths=[TEXT_EXAMPLE])
    rows = {r["setting"]: r for r in main(["--out", str(tmp_path), "--models", "4",
                                           "--pool", "300"])}
    assert set(rows) == {"overfit", "regularized", "dp_lora"}
    for row in rows.values():
        assert row["test_ppl"] < 257 / 4, row["setting"]  # learned the bytes' statistics
    overfit = rows["overfit"]["attacks"]
    assert overfit["loss"]["auc"] > 0.7 and overfit["lira"]["auc"] > 0.7
    for defended in ("regularized", "dp_lora"):
        attacks = rows[defended]["attacks"]
        assert attacks["loss"]["auc"] < overfit["loss"]["auc"] - 0.1, defended
        assert attacks["lira"]["auc"] < overfit["lira"]["auc"] - 0.1, defended
    assert rows["dp_lora"]["epsilon"] is not None and rows["dp_lora"]["epsilon"] <= 8.0 + 1e-6
