"""Privacy accounting of DP-SGD-style training: the Poisson-subsampled Gaussian mechanism.

One training step releases ``sum_i clip(g_i) + N(0, (z C)^2 I)`` over a Poisson sample of rate
``q``; ``T`` steps compose. Three of Opacus's accountants bound the resulting (epsilon, delta):

- ``rdp``: Renyi DP (Mironov 2017; Mironov, Talwar & Zhang 2019 for the subsampled Gaussian),
  converted to (epsilon, delta) over Opacus's default orders;
- ``gdp``: Gaussian DP with the CLT approximation (Dong, Roth & Su 2022, Cor. 5.4; Bu et al.
  2020). An *approximation*: it can underestimate epsilon (Opacus warns; see Gopi et al. 2021);
- ``prv``: numerical composition of privacy-loss random variables (Gopi, Lee & Wutschitz 2021),
  Opacus's default; returns the upper end of its epsilon error band (``eps_error``).

Step convention (Opacus's, used by ``get_noise_multiplier`` and ``make_private_with_epsilon``):
``steps = int(epochs / q)``. With Opacus's data loader ``q = 1 / len(loader)``, so this is
``epochs * len(loader)``; with ``q = batch / n`` (the study's notation) it may differ by one
step from ``epochs * ceil(n / batch)``.

Also the exact (epsilon, delta) curve of a single Gaussian mechanism / mu-GDP (Balle & Wang 2018,
Thm. 8; Dong, Roth & Su 2022, Cor. 2.13), used by the NSDE bound and the ROC bounds.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from opacus.accountants import create_accountant
from opacus.accountants.accountant import IAccountant
from opacus.accountants.utils import get_noise_multiplier
from scipy.optimize import brentq
from scipy.special import log_ndtr, ndtr

from miaudit._runtime.io import save_figure
from miaudit.errors import ConfigError
from miaudit.registry import ACCOUNTANTS

ACCOUNTANT_NAMES = ("rdp", "gdp", "prv")


# -- validation ---------------------------------------------------------------------------------
def check_delta(delta: float, name: str = "delta") -> float:
    if not 0 < delta < 1:
        raise ConfigError(f"option {name!r} must be in (0, 1); got {delta!r}")
    return float(delta)


def check_sample_rate(sample_rate: float) -> float:
    if not 0 < sample_rate <= 1:
        raise ConfigError(f"option 'sample_rate' must be in (0, 1]; got {sample_rate!r}")
    return float(sample_rate)


def check_noise(noise_multiplier: float) -> float:
    if not noise_multiplier >= 0:
        raise ConfigError(f"option 'noise_multiplier' must be >= 0; got {noise_multiplier!r}")
    return float(noise_multiplier)


def sample_rate_for(batch_size: int, dataset_size: int) -> float:
    """Poisson sampling rate q = batch_size / dataset_size (the expected batch size is B)."""
    if not (isinstance(batch_size, int) and batch_size >= 1):
        raise ConfigError(f"option 'batch_size' must be a positive integer; got {batch_size!r}")
    if not (isinstance(dataset_size, int) and dataset_size >= batch_size):
        raise ConfigError(f"option 'dataset_size' must be an integer >= batch_size "
                         f"({batch_size}); got {dataset_size!r}")
    return batch_size / dataset_size


def resolve_steps(sample_rate: float, epochs: float | None = None,
                  steps: int | None = None) -> int:
    """Number of composed steps from exactly one of ``epochs`` or ``steps``:
    ``int(epochs / sample_rate)`` (Opacus's convention; the 1e-9 guards float round-off such as
    100 / (1 / 98) = 9800.000000000002 or 9799.999999999998)."""
    check_sample_rate(sample_rate)
    if (epochs is None) == (steps is None):
        raise ConfigError("give exactly one of options 'epochs' and 'steps'")
    if steps is not None:
        if not (isinstance(steps, (int, np.integer)) and steps >= 0):
            raise ConfigError(f"option 'steps' must be an integer >= 0; got {steps!r}")
        return int(steps)
    if not epochs >= 0:
        raise ConfigError(f"option 'epochs' must be >= 0; got {epochs!r}")
    return int(math.floor(epochs / sample_rate + 1e-9))


# -- accountants --------------------------------------------------------------------------------
class Accountant:
    """Epsilon of ``steps`` compositions of the Poisson-subsampled Gaussian mechanism, computed
    by the Opacus accountant of the same name; ``options`` go to its ``get_epsilon``."""

    name = ""

    def __init__(self, **options: Any):
        self.options = options

    def opacus(self) -> IAccountant:
        """A fresh Opacus accountant (the GDP one warns that it is experimental on every
        construction; the caveat is in this module's docstring instead)."""
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="GDP accounting is experimental")
            return create_accountant(mechanism=self.name)

    def epsilon(self, noise_multiplier: float, sample_rate: float, steps: int,
                delta: float) -> float:
        check_noise(noise_multiplier)
        check_sample_rate(sample_rate)
        check_delta(delta)
        if steps == 0:
            return 0.0
        if noise_multiplier == 0:
            return math.inf
        accountant = self.opacus()
        accountant.history = [(float(noise_multiplier), float(sample_rate), int(steps))]
        return float(accountant.get_epsilon(delta=delta, **self.options))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.options})"


@ACCOUNTANTS.register("rdp")
class RDPAccountant(Accountant):
    """Renyi-DP accountant (Mironov 2017), Opacus's orders; option alphas."""

    name = "rdp"


@ACCOUNTANTS.register("gdp")
class GDPAccountant(Accountant):
    """Gaussian-DP CLT accountant (Dong et al. 2022): approximate, may underestimate epsilon;
    option poisson (True)."""

    name = "gdp"


@ACCOUNTANTS.register("prv")
class PRVAccountant(Accountant):
    """PRV accountant (Gopi et al. 2021), Opacus's default; options eps_error, delta_error."""

    name = "prv"


def build_accountant(accountant: str | Accountant, **options: Any) -> Accountant:
    if isinstance(accountant, Accountant):
        return accountant
    if accountant not in ACCOUNTANT_NAMES:
        raise ConfigError(f"option 'accountant' must be one of {', '.join(ACCOUNTANT_NAMES)}; "
                         f"got {accountant!r}")
    # The classes directly, not ACCOUNTANTS.build: that would import every plugin module.
    classes = {"rdp": RDPAccountant, "gdp": GDPAccountant, "prv": PRVAccountant}
    return classes[accountant](**options)


def epsilon(noise_multiplier: float, sample_rate: float, delta: float, *,
            epochs: float | None = None, steps: int | None = None,
            accountant: str | Accountant = "prv", **options: Any) -> float:
    """(epsilon, ``delta``)-DP of DP-SGD with noise multiplier z (noise std z * clip norm),
    Poisson rate q and ``epochs`` (or ``steps``) under the named accountant."""
    count = resolve_steps(sample_rate, epochs, steps)
    return build_accountant(accountant, **options).epsilon(noise_multiplier, sample_rate, count,
                                                           delta)


def noise_multiplier(target_epsilon: float, delta: float, sample_rate: float, *,
                     epochs: float | None = None, steps: int | None = None,
                     accountant: str = "prv", tolerance: float = 0.01,
                     **options: Any) -> float:
    """Smallest noise multiplier (to within the bisection) whose epsilon is <= target:
    Opacus's ``get_noise_multiplier`` (doubling, then bisection until the epsilon is within
    ``tolerance`` below the target)."""
    if not target_epsilon > 0:
        raise ConfigError(f"option 'target_epsilon' must be > 0; got {target_epsilon!r}")
    check_delta(delta)
    if accountant not in ACCOUNTANT_NAMES:
        raise ConfigError(f"option 'accountant' must be one of {', '.join(ACCOUNTANT_NAMES)}; "
                         f"got {accountant!r}")
    count = resolve_steps(sample_rate, epochs, steps)
    if count == 0:
        raise ConfigError("zero steps spend no privacy: no noise multiplier to solve for")
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="GDP accounting is experimental")
        try:
            return float(get_noise_multiplier(
                target_epsilon=target_epsilon, target_delta=delta, sample_rate=sample_rate,
                steps=count, accountant=accountant, epsilon_tolerance=tolerance, **options))
        except ValueError as error:  # Opacus: "The privacy budget is too low." and the like
            raise ConfigError(f"target_epsilon {target_epsilon:g} at delta {delta:g}: "
                              f"{error}") from error


# -- epsilon over epochs (the study's Figure 4, left panels) ------------------------------------
@dataclass(frozen=True)
class EpsilonTable:
    """epsilon[d, e] for deltas[d] after epochs[e] (one accountant, one noise, one rate)."""

    accountant: str
    noise_multiplier: float
    sample_rate: float
    epochs: np.ndarray
    deltas: np.ndarray
    epsilon: np.ndarray


def epsilon_table(noise_multiplier: float, sample_rate: float, epochs: Sequence[float],
                  deltas: Sequence[float], accountant: str = "prv") -> EpsilonTable:
    """Epsilon after each of ``epochs`` for each of ``deltas`` (one Opacus call per cell)."""
    if not len(epochs) or not len(deltas):
        raise ConfigError("options 'epochs' and 'deltas' must not be empty")
    counter = build_accountant(accountant)
    values = np.array([[counter.epsilon(noise_multiplier, sample_rate,
                                        resolve_steps(sample_rate, epochs=e), d)
                        for e in epochs] for d in deltas])
    return EpsilonTable(accountant, float(noise_multiplier), float(sample_rate),
                        np.asarray(epochs, dtype=float), np.asarray(deltas, dtype=float), values)


def plot_epsilon_tables(tables: Sequence[EpsilonTable], path: str | Path,
                        title: str | None = None) -> Path:
    """One panel per table: epsilon against epochs, one line per delta (Figure 4, left)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not tables:
        raise ConfigError("no epsilon tables to plot")
    fig, axes = plt.subplots(1, len(tables), figsize=(4.2 * len(tables), 3.4), squeeze=False)
    for axis, table in zip(axes[0], tables, strict=True):
        for delta, row in zip(table.deltas, table.epsilon, strict=True):
            axis.plot(table.epochs, row, marker="o", markersize=3, label=f"delta = {delta:g}")
        axis.set_xlabel("epochs")
        axis.set_ylabel("epsilon")
        axis.set_title(f"{table.accountant}: z = {table.noise_multiplier:g}, "
                       f"q = {table.sample_rate:.3g}", fontsize=9)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return save_figure(fig, path, dpi=150)


# -- the Gaussian mechanism / mu-GDP ------------------------------------------------------------
def gaussian_delta(epsilon: float, mu: float) -> float:
    """delta(epsilon) of mu-GDP, equivalently of a Gaussian mechanism with sensitivity / noise
    std = mu (Balle & Wang 2018, Thm. 8; Dong, Roth & Su 2022, Cor. 2.13):
    delta = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2); exact, not a bound."""
    if not mu >= 0 or not epsilon >= 0:
        raise ConfigError(f"need mu >= 0 and epsilon >= 0; got mu={mu!r}, epsilon={epsilon!r}")
    if mu == 0:
        return 0.0
    if math.isinf(mu):
        return 1.0
    # e^eps Phi(.) in log space: for large eps the product is 0 * inf otherwise.
    first = ndtr(-epsilon / mu + mu / 2)
    second = math.exp(epsilon + log_ndtr(-epsilon / mu - mu / 2))
    return float(max(0.0, first - second))


def gaussian_mu(epsilon: float, delta: float) -> float:
    """Largest mu whose mu-GDP is (epsilon, delta)-DP (delta(eps) is increasing in mu)."""
    check_delta(delta)
    if not epsilon >= 0:
        raise ConfigError(f"option 'epsilon' must be >= 0; got {epsilon!r}")
    high = 1.0
    while gaussian_delta(epsilon, high) < delta:
        high *= 2
    return float(brentq(lambda mu: gaussian_delta(epsilon, mu) - delta, 0.0, high,
                        xtol=1e-12, rtol=1e-12))


def gaussian_epsilon(mu: float, delta: float) -> float:
    """Smallest epsilon such that mu-GDP is (epsilon, delta)-DP (delta(eps) is decreasing)."""
    check_delta(delta)
    if not mu >= 0:
        raise ConfigError(f"mu must be >= 0; got {mu!r}")
    if gaussian_delta(0.0, mu) <= delta:
        return 0.0
    if math.isinf(mu):
        return math.inf
    high = 1.0
    while gaussian_delta(high, mu) > delta:
        high *= 2
    return float(brentq(lambda eps: gaussian_delta(eps, mu) - delta, 0.0, high,
                        xtol=1e-12, rtol=1e-12))
