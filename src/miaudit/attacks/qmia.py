"""Quantile-regression membership inference, QMIA (Bertran, Tang, Kearns, Morgenstern, Roth &
Wu 2023, "Scalable Membership Inference Attacks via Quantile Regression", NeurIPS)."""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import norm
from torch import nn

from miaudit.attacks._base import Attack, AttackInput, AttackResult
from miaudit.attacks._common import (
    check_models,
    choice,
    columns,
    population_samples,
    positive_int,
    query_option,
)
from miaudit.queries.signals import _true_class
from miaudit.registry import ATTACKS


def hinge_score(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The paper's score s(x, y) = z_y - max_{j != y} z_j (its "hinge" score), from
    (..., C) logits; unchanged by a per-row shift, so log-probabilities give the same value."""
    logits = np.asarray(logits, dtype=np.float64)
    labels = np.broadcast_to(np.asarray(labels)[..., None], logits.shape[:-1] + (1,))
    others = logits.copy()
    np.put_along_axis(others, labels, -np.inf, axis=-1)
    return _true_class(logits, labels[..., 0]) - others.max(axis=-1)


def pinball_loss(predicted: torch.Tensor, target: torch.Tensor, level: float) -> torch.Tensor:
    """Mean pinball loss at quantile level tau = ``level`` (the paper's quantile-regression
    objective with tau = 1 - alpha): max(tau (s - q), (1 - tau) (q - s)). Its minimizer over
    constants is the tau-quantile of s."""
    error = target - predicted
    return torch.maximum(level * error, (level - 1.0) * error).mean()


def gaussian_nll(mean: torch.Tensor, log_std: torch.Tensor,
                 target: torch.Tensor) -> torch.Tensor:
    """Mean Gaussian negative log-likelihood (constant dropped): the paper's second form."""
    return (log_std + 0.5 * ((target - mean) * torch.exp(-log_std)) ** 2).mean()


def _regressor(inputs: int, hidden: tuple[int, ...], outputs: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for size in hidden:
        layers += [nn.Linear(inputs, size), nn.ReLU()]
        inputs = size
    return nn.Sequential(*layers, nn.Linear(inputs, outputs))


#: epochs without a better held-out loss before training stops (early stopping)
PATIENCE = 5
#: share of the population held out from the regressor: its coverage at alpha is measured
#: there, and training stops when its loss stops improving
HOLDOUT_SHARE = 0.2
#: standardized inputs: a feature's spread is floored at this share of the median spread
#: (a near-constant feature would otherwise standardize to values of 50 and more)
SPREAD_FLOOR = 0.1
#: Gaussian sigma bounded to [low, high] x the population scores' standard deviation
SIGMA_BOUNDS = (0.01, 10.0)


def fit_regressor(features: np.ndarray, targets: np.ndarray, loss: str, level: float,
                  hidden: tuple[int, ...], epochs: int, seed: int,
                  held_out: tuple[np.ndarray, np.ndarray] | None = None) -> nn.Sequential:
    """A small MLP from attacker features to the quantile (1 output) or to (mean, log std)
    (2 outputs), trained with Adam on mini-batches of 256; with ``held_out`` (features,
    targets), the weights of the epoch with the lowest held-out loss, training stopped after
    :data:`PATIENCE` epochs without improvement."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 64-wide MLP: thread hand-offs cost more than they give
    try:
        return _fit(features, targets, loss, level, hidden, epochs, seed, held_out)
    finally:
        torch.set_num_threads(threads)


def log_sigma_bounds(targets: torch.Tensor) -> tuple[float, float]:
    """Bounds of the Gaussian's log sigma: :data:`SIGMA_BOUNDS` times the scores' spread (an
    unbounded sigma near 0 turns a small residual into a huge score)."""
    spread = float(targets.std().clamp_min(1e-6))
    return float(np.log(SIGMA_BOUNDS[0] * spread)), float(np.log(SIGMA_BOUNDS[1] * spread))


def objective(out: torch.Tensor, target: torch.Tensor, loss: str, level: float,
              bounds: tuple[float, float]) -> torch.Tensor:
    if loss == "pinball":
        return pinball_loss(out[:, 0], target, level)
    return gaussian_nll(out[:, 0], out[:, 1].clamp(*bounds), target)


def _fit(features: np.ndarray, targets: np.ndarray, loss: str, level: float,
         hidden: tuple[int, ...], epochs: int, seed: int,
         held_out: tuple[np.ndarray, np.ndarray] | None) -> nn.Sequential:
    torch.manual_seed(seed)
    x = torch.as_tensor(features, dtype=torch.float32)
    y = torch.as_tensor(targets, dtype=torch.float32)
    bounds = log_sigma_bounds(y)
    model = _regressor(x.shape[1], hidden, 1 if loss == "pinball" else 2)
    model.log_sigma_bounds = bounds  # read back when scoring
    with torch.no_grad():  # start at the marginal solution: the bias at the target's level
        start = float(torch.quantile(y, level)) if loss == "pinball" else float(y.mean())
        model[-1].bias[0] = start
        if loss == "gaussian":
            model[-1].bias[1] = float(torch.log(y.std().clamp_min(1e-6)))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-4)
    generator = torch.Generator().manual_seed(seed)
    if held_out is not None:
        x_val = torch.as_tensor(held_out[0], dtype=torch.float32)
        y_val = torch.as_tensor(held_out[1], dtype=torch.float32)
    best, best_state, waited = float("inf"), None, 0
    for _ in range(epochs):
        model.train()
        for batch in torch.randperm(len(x), generator=generator).split(256):
            value = objective(model(x[batch]), y[batch], loss, level, bounds)
            optimizer.zero_grad()
            value.backward()
            optimizer.step()
        if held_out is None:
            continue
        with torch.no_grad():
            current = float(objective(model(x_val), y_val, loss, level, bounds))
        if current < best:
            best, waited = current, 0
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        else:
            waited += 1
            if waited >= PATIENCE:
                break
    if best_state is not None:
        model.load_state_dict(best_state)
    return model.eval()


def standardize(inputs: np.ndarray, fitted: np.ndarray) -> np.ndarray:
    """Inputs centred and scaled by the ``fitted`` rows' mean and spread, each spread floored
    at :data:`SPREAD_FLOOR` times the median spread (robust to near-constant features)."""
    center, scale = inputs[fitted].mean(axis=0), inputs[fitted].std(axis=0)
    positive = scale[scale > 0]
    floor = SPREAD_FLOOR * float(np.median(positive)) if positive.size else 1.0
    return (inputs - center) / np.maximum(scale, max(floor, 1e-12))


@ATTACKS.register("qmia")
class QMIA(Attack):
    """QMIA (Bertran et al. 2023): one regressor q, trained on the attacker's population data
    (non-members of the target), predicts for each example (x, y) a high quantile of the
    target's score s(x, y) = z_y - max_{j != y} z_j on non-members; x is declared a member at
    FPR alpha when s(x, y) > q_{1-alpha}(x, y). The ROC ranks by s - q. No reference
    model is trained: the cost is one small regressor instead of M models.

    The regressor's input is the attacker's view of the example, ``AttackInput.features``
    (the audit's feature map of the raw inputs, :mod:`miaudit.queries.features`), with the one-hot
    label appended (the paper regresses on the example; its score depends on y). The paper
    fine-tunes a pretrained image network as q; here a small MLP on those features, which is
    what runs without downloads (the test's quantile is conditional only as far as the
    features describe the example's difficulty).

    Options:
      loss ("pinball" | "gaussian", "pinball"): "pinball": q trained with the pinball loss
        at level 1 - alpha (``pinball_loss``), score s - q; "gaussian": (mu, log sigma)
        trained with the Gaussian NLL (the paper's second form), score (s - mu) / sigma,
        whose threshold Phi^-1(1 - alpha) gives the same test at every alpha.
      alpha (float, 0.01): the target FPR whose quantile the pinball regressor predicts.
      population ("disjoint"): the audit's population data; "target_nonmembers" is refused:
        the regressor would be fitted on the very non-members it then scores (under a target
        that memorizes nothing, TPR@1% read 6-10% instead of 1%).
      population_size (int | None).
      hidden (list[int], [64, 64]); epochs (int, 50, at most: training stops when the loss
        on the held-out fifth of the population stops improving); seed (int, 0);
      queries (list[str] | None): score columns, s averaged over them (all by default).

    ``info``: ``holdout_coverage``, the share of the held-out population (never seen by the
    regressor) below its predicted quantile, which should be about 1 - alpha (the test's
    false-positive rate at alpha is 1 minus it), and ``train_coverage`` on the fitted part.
    """

    min_references = 0
    needs_population = True
    needs_features = True

    def __init__(self, loss: str = "pinball", alpha: float = 0.01,
                 population: str = "disjoint", population_size: int | None = None,
                 hidden: list[int] | None = None, epochs: int = 50, seed: int = 0,
                 queries: list[str] | None = None):
        self.loss = choice(loss, "loss", ("pinball", "gaussian"))
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or \
                not 0.0 < alpha < 0.5:
            raise ValueError(f"option 'alpha' must be a number in (0, 0.5), got {alpha!r}")
        self.alpha = float(alpha)
        if population == "target_nonmembers":
            raise ValueError("option population='target_nonmembers' fits the regressor on the "
                             "non-members it then scores (a false signal); use the default "
                             "'disjoint' with data.population_size")
        self.population = choice(population, "population", ("disjoint",))
        self.population_size = positive_int(population_size, "population_size", allow_none=True)
        hidden = [64, 64] if hidden is None else hidden
        if not isinstance(hidden, (list, tuple)) or not all(
                isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in hidden):
            raise ValueError(f"option 'hidden' must be a list of positive integers, got "
                             f"{hidden!r}")
        self.hidden = tuple(hidden)
        self.epochs = positive_int(epochs, "epochs")
        self.seed = int(seed)
        self.queries = query_option(queries)
        self.needs_population = self.population == "disjoint"

    def inputs(self, data: AttackInput) -> np.ndarray:
        """(N, F + C) regressor inputs: standardized features and the one-hot label."""
        if data.features is None:
            raise ValueError("qmia needs the attacker's view of the inputs (features), which "
                             "these outputs lack: run it in an audit, or pass features to "
                             "AttackInput")
        features = np.asarray(data.features, dtype=np.float64).reshape(len(data.labels), -1)
        classes = data.logits.shape[-1]
        return np.hstack([features, np.eye(classes)[data.labels]])

    def evaluate(self, data: AttackInput, target: int, references: np.ndarray) -> AttackResult:
        check_models(data, target, references, "qmia", minimum=0)
        qidx = data.query_index(self.queries)
        score = hinge_score(columns(data.logits[target], qidx),
                            data.labels[:, None]).mean(axis=1)
        population = population_samples(data, target, self.population, self.population_size,
                                        np.random.default_rng(self.seed), "qmia")
        train, held = split_population(population, self.seed)
        inputs = standardize(self.inputs(data), train)
        level = 1.0 - self.alpha
        model = fit_regressor(inputs[train], score[train], self.loss, level, self.hidden,
                              self.epochs, self.seed, held_out=(inputs[held], score[held]))
        with torch.no_grad():
            out = model(torch.as_tensor(inputs, dtype=torch.float32)).double().numpy()
        if self.loss == "pinball":
            result = score - out[:, 0]
            below = score <= out[:, 0]
        else:
            result = (score - out[:, 0]) / np.exp(np.clip(out[:, 1], *model.log_sigma_bounds))
            below = result <= norm.ppf(level)
        return AttackResult(result, {"population_size": int(len(population)),
                                     "holdout_size": int(len(held)),
                                     "holdout_coverage": float(below[held].mean()),
                                     "train_coverage": float(below[train].mean())})


def split_population(population: np.ndarray, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(fitted, held-out) parts of the population: a seeded :data:`HOLDOUT_SHARE`, at least one
    sample, held out from the regressor."""
    order = np.random.default_rng(seed + 1).permutation(np.asarray(population))
    held = max(1, int(round(HOLDOUT_SHARE * len(order))))
    if len(order) < 2:
        raise ValueError("qmia needs at least 2 population samples (one held out)")
    return order[held:], order[:held]
