"""Label-only queries: what an API that returns only the predicted label releases.

Two query kinds, stored in the audit's (N, C) output slot of each (model, query) like every
other query, so that they are cached, resumed and keyed the same way:

``label`` (options flip, dx, dy: the geometric transforms of :class:`miaudit.queries.Query`):
    the one-hot vector of the predicted label of the transformed input. Nothing but the label
    is stored, so an attack over these columns cannot use a confidence, and a label-only
    defense is audited with what it releases.

``boundary`` (options budget, init_tries, seed, method): the L2 distance from the input to the
    model's decision boundary, found by HopSkipJump (Chen, Jordan & Wainwright 2020), a
    decision-based attack that calls the model for labels only, with at most ``budget`` label
    queries per sample (a hard bound); ``method=whitebox`` uses the model's gradients instead
    (DeepFool, at most ``budget`` iterations), the paper's white-box upper bound on leakage.
    Stored as one_hot(label) * (1 + distance): the argmax is still the predicted label (accuracy
    and label attacks read it as such) and :func:`boundary_distances` reads the distance back.

Score-releasing attacks never read these columns unless named (``AttackInput.query_index``),
and output defenses leave ``boundary`` columns alone (a label-preserving defense does not move
the decision boundary; :func:`protect_decision_columns`).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from miaudit.errors import ConfigError
from miaudit.queries import Forward, Query
from miaudit.registry import QUERIES, parse_spec

#: query names whose outputs carry labels only
LABEL_ONLY_QUERIES = ("label", "boundary")


def query_name(spec: str) -> str:
    return parse_spec(spec)[0]


def is_label_only(spec: str) -> bool:
    """True for the specs of label-only queries (``label:...``, ``boundary:...``)."""
    try:
        return query_name(spec) in LABEL_ONLY_QUERIES
    except ConfigError:  # a malformed spec is not ours to judge here (config validation is)
        return False


def one_hot_labels(logits: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).float()


class LabelQuery(Query):
    """The predicted label of the transformed input, as a one-hot vector."""

    def __call__(self, forward: Forward, x: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        return one_hot_labels(forward(self.transform(x)))


@QUERIES.register("label")
def label(flip: bool = False, dx: int = 0, dy: int = 0) -> Query:
    """Label only: the one-hot predicted label of the input (shifted by dx, dy; mirrored)."""
    return LabelQuery(flip=flip, dx=dx, dy=dy)


class BoundaryQuery(Query):
    """HopSkipJump (Chen, Jordan & Wainwright 2020, Algorithm 2, L2, untargeted) from each
    input, returning one_hot(label) * (1 + distance to the boundary found).

    Hand-written because no maintained library in our stack has it for batches of torch
    models (IBM ART does, but pulls in its own framework wrappers); vectorized over the batch:
    every sample runs the same iterations, so the per-sample budget is a bound for all.

    Per iteration t (the paper's constants): the boundary point x_t, d = input dimension, theta
    = d^(-3/2) (binary-search tolerance), delta_t = sqrt(d) * theta * ||x_t - x|| (probe
    radius), B_t = min(B0 sqrt(t), max_evals) probes u_b on the unit sphere; the gradient-
    direction estimate, baseline-corrected as in the paper, v = mean_b (phi_b - mean phi) u_b
    with phi_b = +1 where x_t + delta_t u_b is adversarial; the step xi_t = ||x_t - x|| /
    sqrt(t), halved until x_t + xi_t v is adversarial (geometric progression); then a binary
    search between x and that point gives x_{t+1}. Initialization: uniform noise over the input
    range until adversarial (``init_tries``), then a binary search towards x. Inputs are
    clipped to the batch's [min, max] value range (the data's domain as the query stage sees
    it).
    Samples with no adversarial start within the tries get distance = the largest found in
    the batch (they are far from any boundary); counted nowhere else.
    """

    max_halvings = 12  # geometric step search: at most 2^-12 of the first step

    def __init__(self, budget: int = 1000, init_tries: int = 10, num_evals: int = 100,
                 max_evals: int = 10_000, seed: int = 0, method: str = "hopskipjump"):
        super().__init__()
        if method not in ("hopskipjump", "whitebox"):
            raise ValueError(f"boundary option 'method' must be 'hopskipjump' or 'whitebox', "
                             f"got {method!r}")
        self.method = method
        for option, value in (("budget", budget), ("init_tries", init_tries),
                              ("num_evals", num_evals), ("max_evals", max_evals)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"boundary option {option!r} must be a positive integer, "
                                 f"got {value!r}")
        self.budget, self.init_tries = budget, init_tries
        self.num_evals, self.max_evals, self.seed = num_evals, max_evals, int(seed)
        self.n = budget  # forward passes per sample, for progress and time estimates

    @property
    def applies_to_tabular(self) -> bool:
        return True

    def __call__(self, forward: Forward, x: torch.Tensor,
                 generator: torch.Generator | None = None) -> torch.Tensor:
        # the query stage's generator is seeded per (model, spec), the seed option included
        rng = generator if generator is not None else torch.Generator().manual_seed(self.seed)
        x = x.float()
        logits = forward(x)
        labels = logits.argmax(-1)
        if self.method == "whitebox":
            distance = deepfool_distance(forward, x, labels, self.budget)
            return one_hot_labels(logits) * (1.0 + distance[:, None].float())
        distance = hop_skip_jump(lambda batch: forward(batch).argmax(-1), x, labels,
                                 self.budget, self.init_tries, self.num_evals, self.max_evals,
                                 self.max_halvings, rng)
        return one_hot_labels(logits) * (1.0 + distance[:, None].float())


@QUERIES.register("boundary")
def boundary(budget: int = 1000, init_tries: int = 10, num_evals: int = 100,
             max_evals: int = 10_000, seed: int = 0, method: str = "hopskipjump") -> Query:
    """Label only: L2 distance to the decision boundary (HopSkipJump, <= budget queries)."""
    return BoundaryQuery(budget=budget, init_tries=init_tries, num_evals=num_evals,
                         max_evals=max_evals, seed=seed, method=method)


def deepfool_distance(forward: Forward, x: torch.Tensor, labels: torch.Tensor,
                      budget: int, overshoot: float = 0.02) -> torch.Tensor:
    """The white-box variant (``method=whitebox``): the L2 distance to the boundary from the
    model's gradients, by multi-class DeepFool (Moosavi-Dezfooli et al. 2016, Alg. 2: step to
    the nearest linearized boundary, repeat until the label changes; at most ``budget``
    iterations), then a label-only binary search back along x -> found point, which removes
    the overshoot. Choquette-Choo et al.'s white-box distance uses Carlini-Wagner; DeepFool
    finds the same minimal-L2 boundary point for locally linear models at a fraction of the
    cost. Samples whose label never changes get the distance reached."""
    perturbation = torch.zeros_like(x)
    active = torch.ones(len(x), dtype=torch.bool)
    for _ in range(budget):
        point = (x + (1 + overshoot) * perturbation).detach().requires_grad_(True)
        with torch.enable_grad():
            logits = forward(point)
            classes = logits.shape[-1]
            active &= logits.argmax(-1) == labels
            if not active.any():
                break
            own = logits.gather(1, labels[:, None])[:, 0]
            best_ratio = torch.full((len(x),), float("inf"))
            best_step = torch.zeros_like(x)
            for k in range(classes):
                gap = logits[:, k] - own  # < 0 while the label holds
                grad, = torch.autograd.grad(gap.sum(), point, retain_graph=k < classes - 1)
                norm = _norms(grad).clamp_min(1e-12)
                ratio = gap.detach().abs() / norm
                better = (labels != k) & (ratio < best_ratio)
                best_ratio = torch.where(better, ratio, best_ratio)
                step = _expand((gap.detach().abs() + 1e-6) / norm ** 2, grad) * grad
                best_step[better] = step[better]
        perturbation = perturbation + best_step * _expand(active.float(), x)
    adversarial = (x + (1 + overshoot) * perturbation).detach()
    with torch.no_grad():
        flipped = forward(adversarial).argmax(-1) != labels
        # 2^-30 of the overshot step: exact to float32 precision, 30 label queries
        refined = _binary_search(lambda b: forward(b).argmax(-1), x, adversarial, labels, 30)
    return torch.where(flipped, _norms(refined - x), _norms(adversarial - x))


def _norms(v: torch.Tensor) -> torch.Tensor:
    return v.flatten(1).norm(dim=1)


def _expand(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return values.view(-1, *([1] * (like.dim() - 1)))


def _binary_search(decide, x: torch.Tensor, adversarial: torch.Tensor, labels: torch.Tensor,
                   steps: int) -> torch.Tensor:
    """The point on the segment x -> adversarial nearest to x that is still adversarial,
    to within 2^-steps of the segment (one label query per sample per step)."""
    low = torch.zeros(len(x))
    high = torch.ones(len(x))
    for _ in range(steps):
        middle = (low + high) / 2
        blend = x + _expand(middle, x) * (adversarial - x)
        flipped = decide(blend) != labels
        high = torch.where(flipped, middle, high)
        low = torch.where(flipped, low, middle)
    return x + _expand(high, x) * (adversarial - x)


def hop_skip_jump(decide, x: torch.Tensor, labels: torch.Tensor, budget: int,
                  init_tries: int, num_evals: int, max_evals: int, max_halvings: int,
                  rng: torch.Generator) -> torch.Tensor:
    """(N,) L2 distances from x to the boundary of ``decide`` (labels only) found within
    ``budget`` label queries per sample; see :class:`BoundaryQuery`."""
    dims = x[0].numel()
    theta = dims ** -1.5
    search_steps = max(1, math.ceil(math.log2(1.0 / theta)))
    low, high = float(x.min()), float(x.max())
    start, found, used = _random_start(decide, x, labels, min(init_tries, budget), low, high,
                                       rng)
    if used + search_steps > budget or not found.any():
        return torch.full((len(x),), float(_norms(torch.full_like(x[:1], high - low))[0]))
    current = _binary_search(decide, x, start, labels, search_steps)
    used += search_steps
    t = 1
    while True:
        probes = min(int(num_evals * math.sqrt(t)), max_evals)
        if used + probes + max_halvings + search_steps > budget:
            break
        gap = _norms(current - x)
        delta = math.sqrt(dims) * theta * gap
        direction = _estimate_direction(decide, x, current, labels, delta, probes, (low, high),
                                        rng)
        used += probes
        candidate = _geometric_step(decide, x, current, labels, direction, gap / math.sqrt(t),
                                    max_halvings, (low, high))
        used += max_halvings
        # a sample whose step never landed keeps its boundary point
        current = _binary_search(decide, x, candidate, labels, search_steps)
        used += search_steps
        t += 1
    distance = _norms(current - x)
    if not found.all():
        distance[~found] = distance[found].max()
    return distance


def _random_start(decide, x: torch.Tensor, labels: torch.Tensor, tries: int, low: float,
                  high: float, rng: torch.Generator) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Initialization: uniform noise until adversarial (start points, which samples found
    one, label queries used); a binary search towards x follows."""
    start = x.clone()
    found = torch.zeros(len(x), dtype=torch.bool)
    used = 0
    for _ in range(tries):
        noise = torch.rand(x.shape, generator=rng) * (high - low) + low
        hit = (decide(noise) != labels) & ~found
        start[hit] = noise[hit]
        found |= hit
        used += 1
        if found.all():
            break
    return start, found, used


def _estimate_direction(decide, x: torch.Tensor, current: torch.Tensor, labels: torch.Tensor,
                        delta: torch.Tensor, probes: int, bounds: tuple[float, float],
                        rng: torch.Generator) -> torch.Tensor:
    """The unit gradient-direction estimate at the boundary points ``current``."""
    # the baseline-corrected estimate in one pass: sum_b (phi_b - mean phi) u_b =
    # sum phi_b u_b - mean phi sum u_b; where every vote agrees the paper uses the plain
    # mean of phi_b u_b instead
    weighted, plain = torch.zeros_like(x), torch.zeros_like(x)
    votes = torch.zeros(len(x))
    for _ in range(probes):  # one probe per sample at a time: memory stays O(batch)
        u = torch.randn(x.shape, generator=rng)
        u = u / _expand(_norms(u).clamp_min(1e-12), u)
        probe = (current + _expand(delta, x) * u).clamp(*bounds)
        phi = torch.where(decide(probe) != labels, 1.0, -1.0)
        weighted += _expand(phi, x) * u
        plain += u
        votes += phi
    baseline = votes / probes
    unanimous = baseline.abs() == 1.0
    direction = torch.where(_expand(unanimous, x), weighted,
                            weighted - _expand(baseline, x) * plain)
    return direction / _expand(_norms(direction).clamp_min(1e-12), direction)


def _geometric_step(decide, x: torch.Tensor, current: torch.Tensor, labels: torch.Tensor,
                    direction: torch.Tensor, step: torch.Tensor, max_halvings: int,
                    bounds: tuple[float, float]) -> torch.Tensor:
    """A step along ``direction``, halved until it stays adversarial (at most
    ``max_halvings`` tries); samples whose step never landed keep ``current``."""
    pending = torch.ones(len(x), dtype=torch.bool)
    candidate = current.clone()
    for _ in range(max_halvings):
        trial = (current + _expand(step, x) * direction).clamp(*bounds)
        ok = (decide(trial) != labels) & pending
        candidate[ok] = trial[ok]
        pending &= ~ok
        step = torch.where(pending, step / 2, step)
        if not pending.any():
            break
    return candidate


def boundary_distances(outputs: np.ndarray) -> np.ndarray:
    """Distances stored by ``boundary`` queries: (..., C) outputs -> (...) distances."""
    return np.asarray(outputs, dtype=np.float64).max(axis=-1) - 1.0


def protect_decision_columns(query_names: list[str]) -> np.ndarray:
    """Columns an output defense must leave as they are (``boundary`` queries: distances, not
    released scores)."""
    return np.array([i for i, spec in enumerate(query_names)
                     if is_label_only(spec) and query_name(spec) == "boundary"],
                    dtype=np.int64)
