"""The ``user_function`` recipe calls the user's own training function (defined in this very
module, named by import path) on the members only, and checks the path and the signature
before any training."""

from __future__ import annotations

import hashlib

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from miaudit._runtime.importpath import ImportPathError, import_object, source_digest
from miaudit.recipes.user_function import UserFunction
from miaudit.training.engine import TrainEnv, TrainParams

SEEN: dict = {}
NOT_CALLABLE = 3


def train_sgd(model, dataset, *, seed, device, epochs=30, lr=0.5):
    """A user's own loop: their optimizer, batch size and shuffling."""
    SEEN.update(size=len(dataset), seed=seed, device=device, epochs=epochs,
                dataset_type=type(dataset))
    generator = torch.Generator().manual_seed(seed)
    loader = DataLoader(dataset, batch_size=15, shuffle=True, generator=generator)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    model.to(device).train()
    losses = []
    for _ in range(epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(xb.to(device)), yb.to(device))
            loss.backward()
            optimizer.step()
        losses.append(loss.item())
    return model, {"loss": losses}


def train_in_place(model, dataset, *, seed, device, params):
    SEEN.update(params=params)
    with torch.no_grad():
        model.weight.fill_(1.0)


def train_badly(model, dataset, *, seed, device):
    return "a model"


def train_one_arg(model):
    return model


def toy(n: int = 40):
    """Two classes separated by the sign of the first feature."""
    x = torch.rand(n, 2, generator=torch.Generator().manual_seed(0))
    return x, (x[:, 0] > 0.5).long()


def run(recipe: UserFunction, x, y, seed: int = 1):
    torch.manual_seed(99)
    model = nn.Linear(2, 2)
    return recipe.train(model, x, y, TrainParams(epochs=3), TrainEnv(seed=seed))


def test_trains_on_the_members_with_the_users_loop():
    x, y = toy()
    member = torch.arange(40) % 4 != 0  # 30 members
    recipe = UserFunction(function="test_user_function:train_sgd", options={"epochs": 25})
    model, log = run(recipe, x[member], y[member])
    assert SEEN["size"] == 30 and SEEN["seed"] == 1 and SEEN["epochs"] == 25
    assert SEEN["dataset_type"] is TensorDataset and SEEN["device"] == torch.device("cpu")
    assert not model.training and len(log["loss"]) == 25 and len(log["seconds"]) == 1
    accuracy = (model(x).argmax(1) == y).float().mean().item()
    assert accuracy >= 0.9  # a linearly separable toy: the user's loop learned it
    again, _ = run(recipe, x[member], y[member])
    assert torch.equal(again.weight, model.weight)  # the seed makes it reproducible
    other, _ = run(recipe, x[member], y[member], seed=2)
    assert not torch.equal(other.weight, model.weight)


def test_in_place_training_and_params_only_when_declared():
    x, y = toy(8)
    recipe = UserFunction(function="test_user_function:train_in_place")
    model, log = run(recipe, x, y)
    assert torch.equal(model.weight, torch.ones(2, 2)) and isinstance(SEEN["params"],
                                                                       TrainParams)
    assert SEEN["params"].epochs == 3 and set(log) == {"seconds"}


def test_a_wrong_return_value_is_named():
    recipe = UserFunction(function="test_user_function:train_badly")
    with pytest.raises(TypeError, match="returned str; it must return the trained"):
        run(recipe, *toy(8))


@pytest.mark.parametrize("spec, options, message", [
    ("no_such_module_x1:train", {}, r"module 'no_such_module_x1' not found"),
    ("test_user_function:absent", {}, r"has no attribute 'absent'; its callables: .*train_sgd"),
    ("test_user_function:NOT_CALLABLE", {}, r"is a int, not a function"),
    ("test_user_function:train_one_arg", {}, r"train_one_arg\(model\), which cannot be called "
                                             r"as train\(model, dataset, \*, seed, device\)"),
    ("test_user_function:train_sgd", {"epochz": 2}, r"device, epochz\).*'epochz'"),
    ("test_user_function.train_sgd", {}, r"is not an import path; write 'package.module:name'"),
])
def test_bad_import_paths_fail_when_built(spec, options, message):
    with pytest.raises(ImportPathError, match=message):
        UserFunction(function=spec, options=options)


def test_module_errors_and_search_paths(tmp_path):
    (tmp_path / "broken_user_mod.py").write_text("raise RuntimeError('boom at import')\n")
    (tmp_path / "needy_user_mod.py").write_text("import not_installed_pkg_q9\n")
    (tmp_path / "fine_user_mod.py").write_text("def train(model, data, *, seed, device):\n"
                                               "    return model\n")
    with pytest.raises(ImportPathError, match=r"importing 'broken_user_mod' failed: "
                                              r"RuntimeError: boom at import"):
        import_object("broken_user_mod:train", search_paths=[tmp_path])
    with pytest.raises(ImportPathError, match=r"needs the missing module 'not_installed_pkg_q9'"):
        import_object("needy_user_mod:train", search_paths=[tmp_path])
    recipe = UserFunction(function="fine_user_mod:train", search_paths=[str(tmp_path)])
    assert recipe.function.__module__ == "fine_user_mod"
    with pytest.raises(ValueError, match="cannot add penalties"):
        UserFunction(penalties=[object()], function="fine_user_mod:train")
    with pytest.raises(ValueError, match="needs the option function"):
        UserFunction()
    assert source_digest(len) == hashlib.sha256(b"").hexdigest()  # no Python source file
    assert source_digest(recipe.function) == hashlib.sha256(
        (tmp_path / "fine_user_mod.py").read_bytes()).hexdigest()


def test_fingerprint_follows_the_source_and_the_options(tmp_path):
    path = tmp_path / "printed_user_mod.py"
    path.write_text("def train(model, data, *, seed, device, lr=0.1):\n    return model\n")
    first = UserFunction(function="printed_user_mod:train", search_paths=[tmp_path])
    assert first.fingerprint == UserFunction(function="printed_user_mod:train").fingerprint
    with_options = UserFunction(function="printed_user_mod:train", options={"lr": 0.2})
    assert with_options.fingerprint != first.fingerprint
    before = first.fingerprint
    path.write_text(path.read_text() + "# tuned\n")  # an edit to the user's code
    assert first.fingerprint != before
