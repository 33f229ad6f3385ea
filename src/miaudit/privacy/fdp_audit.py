"""One-run f-DP audit (Mahloujifar, Melis & Chaudhuri 2024, "Auditing f-differential privacy
in one run", arXiv:2410.22235). Pure numpy/scipy (no torch, no I/O).

Game (as in Steinke et al. 2023, :mod:`miaudit.privacy.auditing`): m canaries, each in with
probability 1/2; the auditor guesses on c' of them (the k+ highest scores "in", the k- lowest
"out", abstains on the rest) and c guesses are correct. Instead of reducing each guess to
eps-randomized response, the paper bounds the number of correct guesses through the whole
trade-off function f of the mechanism. For an f-DP mechanism (Dong, Roth & Su 2022, Def. 2.3)
write f^-1 for the inverse "blow-up" map (the least probability one hypothesis can give an
event of probability x under the other):

    mu-GDP:          f^-1(x) = Phi(Phi^-1(x) - mu)
    (eps, delta)-DP: f^-1(x) = max(0, e^-eps (x - delta), 1 - delta - e^eps (1 - x))

The paper's recursion (its Theorem for the guessing game with abstention, k = 2 outcomes; the
numerical procedure of its Algorithm "audit with cap"): with tau the level and

    h_c = tau (c' - c) / m,  r_c = tau c / m,
    h_i = max(h_{i+1}, f^-1(r_{i+1})),  r_i = r_{i+1} + i / (c' - i) (h_i - h_{i+1}),
          for i = c - 1, ..., 0,

P[at least c correct] >= tau forces r_0 + h_0 <= c' / m. So r_0 + h_0 > c' / m rejects the
hypothesis "the algorithm is f-DP" at level tau. The map is monotone in the privacy parameter,
so the (1 - tau)-confidence lower bound is the largest rejected mu (or eps); it is searched on
a fine grid and the largest *rejected grid point* is reported (never above the exact root).
(k+, k-) chosen from a grid after seeing the scores is paid for by Bonferroni (tau / grid size).

What it proves. With ``family="dp"`` the bound refutes (eps, delta)-DP claims for every
eps <= eps_lo, for any mechanism (the only randomness used is the auditor's coins). With
``family="gdp"`` it refutes mu-GDP for mu <= mu_lo; the reported eps(mu_lo, delta) is then the
epsilon of that Gaussian curve, i.e. a bound on claims *stated in Gaussian-DP terms* (DP-SGD's
curve is close to Gaussian, Dong et al. Cor. 5.4), not on arbitrary (eps, delta) claims.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy.special import ndtr, ndtri

from miaudit.privacy.accounting import gaussian_epsilon
from miaudit.privacy.auditing import flat_scores, one_run_guesses

FAMILIES = ("gdp", "dp")
#: privacy-parameter grids searched (mu for GDP, eps for DP); the reported bound is the
#: largest rejected grid point, so the step is the most the search can cost.
_GRIDS = {"gdp": np.linspace(0.0, 20.0, 4001), "dp": np.linspace(0.0, 40.0, 8001)}


def inverse_blow_up(x: np.ndarray, parameter: np.ndarray, family: str,
                    delta: float = 0.0) -> np.ndarray:
    """f^-1(x) for each privacy parameter (broadcast): see the module docstring."""
    x = np.clip(np.asarray(x, dtype=float), 0.0, 1.0)
    parameter = np.asarray(parameter, dtype=float)
    if family == "gdp":
        with np.errstate(divide="ignore"):
            return ndtr(ndtri(x) - parameter)
    if family == "dp":
        scale = np.exp(-parameter)
        with np.errstate(over="ignore", invalid="ignore"):
            second = np.nan_to_num(1 - delta - np.exp(parameter) * (1 - x), nan=0.0,
                                   neginf=0.0)
        return np.maximum(0.0, np.maximum(scale * (x - delta), second))
    raise ValueError(f"option 'family' must be one of {', '.join(FAMILIES)}; got {family!r}")


def rejected(m: int, guesses: int, correct: int, parameters: np.ndarray, family: str,
             level: float, delta: float = 0.0) -> np.ndarray:
    """For each privacy parameter: does ``correct`` of ``guesses`` (of m canaries) reject
    f-DP at ``level``? The paper's recursion, vectorized over the parameters."""
    if not 0 <= correct <= guesses <= m or guesses == 0:
        raise ValueError(f"need 0 <= correct <= guesses <= m and guesses > 0; got "
                         f"correct={correct}, guesses={guesses}, m={m}")
    parameters = np.asarray(parameters, dtype=float)
    h = np.full(parameters.shape, level * (guesses - correct) / m)
    r = np.full(parameters.shape, level * correct / m)
    for i in range(correct - 1, -1, -1):
        h_next = np.maximum(h, inverse_blow_up(r, parameters, family, delta))
        r = r + i / (guesses - i) * (h_next - h)
        h = h_next
    return r + h > guesses / m


@dataclass(frozen=True)
class FDPAudit:
    """The guesses and the bound of one f-DP one-run audit."""

    epsilon_lower: float
    parameter_lower: float  # mu (gdp) or eps (dp)
    family: str
    canaries: int
    guesses: int
    correct: int
    k_pos: int
    k_neg: int
    delta: float
    confidence: float
    grid_size: int

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


def largest_rejected(m: int, guesses: int, correct: int, family: str, level: float,
                     delta: float) -> float:
    """The largest grid parameter rejected at ``level`` (0 if none is)."""
    grid = _GRIDS[family]
    hit = rejected(m, guesses, correct, grid[1:], family, level, delta)
    return float(grid[1:][hit].max()) if hit.any() else 0.0


def _epsilon(parameter: float, family: str, delta: float) -> float:
    return gaussian_epsilon(parameter, delta) if family == "gdp" else parameter


def fdp_one_run_audit(scores: np.ndarray, included: np.ndarray,
                      guesses: Sequence[tuple[int, int]] | tuple[int, int],
                      delta: float = 1e-5, confidence: float = 0.95,
                      family: str = "gdp") -> FDPAudit:
    """f-DP one-run lower bound from canary ``scores`` (higher = "in") and inclusion bits,
    for (k+, k-) = ``guesses`` or the best of a list (Bonferroni)."""
    scores, included = flat_scores(scores, included, "included")
    if family not in FAMILIES:
        raise ValueError(f"option 'family' must be one of {', '.join(FAMILIES)}; "
                         f"got {family!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"option 'confidence' must be in (0, 1); got {confidence!r}")
    if not 0 <= delta < 1 or (family == "gdp" and delta == 0):
        raise ValueError(f"option 'delta' must be in {'(0, 1)' if family == 'gdp' else '[0, 1)'}"
                         f" for family {family!r}; got {delta!r}")
    grid = [tuple(guesses)] if np.ndim(guesses) == 1 else [tuple(g) for g in guesses]
    if not grid:
        raise ValueError("no (k_pos, k_neg) to try")
    level = (1 - confidence) / len(grid)
    truth = np.where(included, 1, -1)
    best: FDPAudit | None = None
    for k_pos, k_neg in grid:
        t = one_run_guesses(scores, int(k_pos), int(k_neg))
        made, correct = int(np.count_nonzero(t)), int(np.sum(t * truth == 1))
        parameter = largest_rejected(scores.size, made, correct, family, level, delta)
        eps = _epsilon(parameter, family, delta)
        if best is None or eps > best.epsilon_lower:
            best = FDPAudit(eps, parameter, family, scores.size, made, correct, int(k_pos),
                            int(k_neg), float(delta), float(confidence), len(grid))
    assert best is not None
    return best


def max_fdp_epsilon(canaries: int, guesses: Sequence[tuple[int, int]], delta: float = 1e-5,
                    confidence: float = 0.95, family: str = "gdp") -> float:
    """The most the audit can prove with these guesses (all correct), Bonferroni included."""
    level = (1 - confidence) / len(guesses)
    return max(_epsilon(largest_rejected(canaries, k_pos + k_neg, k_pos + k_neg, family, level,
                                         delta), family, delta) for k_pos, k_neg in guesses)
