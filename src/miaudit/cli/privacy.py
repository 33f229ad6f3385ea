"""``miaudit privacy ...``: DP accounting (epsilon, noise for a target epsilon, epsilon over
epochs as a table or plot) and the NSDE bound. Mounted by :mod:`miaudit.cli`; errors the
accountants raise for bad values (:class:`~miaudit.errors.ConfigError`) end a command through
:func:`user_errors`."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from miaudit._runtime.lazy import LazyModule
from miaudit.cli.errors import user_errors
from miaudit.errors import ConfigError

# the accountants import opacus and torch: loaded at a command's first use, not for --help
accounting = LazyModule("miaudit.privacy.accounting")
nsde = LazyModule("miaudit.privacy.nsde")
nsde_gdp = LazyModule("miaudit.privacy.nsde_gdp")

app = typer.Typer(help="Differential-privacy accounting and bounds.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
console = Console()

Noise = Annotated[float, typer.Option("--noise", "-z", help="noise multiplier z (noise std / "
                                      "clipping norm)")]
Rate = Annotated[float | None, typer.Option("--sample-rate", "-q", help="Poisson sample rate q")]
Batch = Annotated[int | None, typer.Option("--batch-size", "-b", help="expected batch size "
                                           "(with --dataset-size: q = b / n)")]
Size = Annotated[int | None, typer.Option("--dataset-size", "-n", help="training-set size")]
Epochs = Annotated[float | None, typer.Option("--epochs", "-e", help="epochs (steps = "
                                              "int(epochs / q))")]
Steps = Annotated[int | None, typer.Option("--steps", help="steps (instead of --epochs)")]
Deltas = Annotated[list[float] | None, typer.Option("--delta", "-d", help="delta (repeatable; "
                                                    "default 1e-5)")]
Accountants = Annotated[list[str] | None, typer.Option(
    "--accountant", "-a", help="rdp | gdp | prv (repeatable; default all three)")]


def _rate(sample_rate: float | None, batch_size: int | None, dataset_size: int | None) -> float:
    if sample_rate is not None:
        if batch_size is not None or dataset_size is not None:
            raise typer.BadParameter("give --sample-rate or --batch-size/--dataset-size, not both")
        return accounting.check_sample_rate(sample_rate)
    if batch_size is None or dataset_size is None:
        raise typer.BadParameter("give --sample-rate, or both --batch-size and --dataset-size")
    return accounting.sample_rate_for(batch_size, dataset_size)


def _accountants(names: list[str] | None) -> list[str]:
    names = names or list(accounting.ACCOUNTANT_NAMES)
    for name in names:
        if name not in accounting.ACCOUNTANT_NAMES:
            raise typer.BadParameter(f"--accountant must be one of "
                                     f"{', '.join(accounting.ACCOUNTANT_NAMES)}; got {name!r}")
    return names


@app.command("epsilon")
@user_errors()
def epsilon_command(noise: Noise, sample_rate: Rate = None, batch_size: Batch = None,
                    dataset_size: Size = None, epochs: Epochs = None, steps: Steps = None,
                    delta: Deltas = None, accountant: Accountants = None) -> None:
    """Epsilon of DP-SGD (Poisson-subsampled Gaussian) under the RDP, GDP and PRV accountants."""
    q = _rate(sample_rate, batch_size, dataset_size)
    count = accounting.resolve_steps(q, epochs, steps)
    table = Table(title=f"epsilon: z = {noise:g}, q = {q:.6g}, {count} steps")
    for column in ("accountant", "delta", "epsilon"):
        table.add_column(column, justify="right" if column != "accountant" else "left")
    for name in _accountants(accountant):
        for d in delta or [1e-5]:
            value = accounting.epsilon(noise, q, d, steps=count, accountant=name)
            table.add_row(name, f"{d:g}", f"{value:.4f}")
    console.print(table)
    if "gdp" in _accountants(accountant):
        console.print("[dim]gdp is a CLT approximation and can underestimate epsilon[/dim]")


@app.command("noise")
@user_errors()
def noise_command(
        target_epsilon: Annotated[float, typer.Option("--epsilon", help="target epsilon")],
        sample_rate: Rate = None, batch_size: Batch = None, dataset_size: Size = None,
        epochs: Epochs = None, steps: Steps = None, delta: Deltas = None,
        accountant: Accountants = None,
        tolerance: Annotated[float, typer.Option(help="epsilon tolerance of the bisection")]
        = 0.01) -> None:
    """Noise multiplier needed for a target epsilon (Opacus's get_noise_multiplier)."""
    q = _rate(sample_rate, batch_size, dataset_size)
    count = accounting.resolve_steps(q, epochs, steps)
    table = Table(title=f"noise for epsilon = {target_epsilon:g}: q = {q:.6g}, {count} steps")
    for column in ("accountant", "delta", "noise multiplier", "epsilon reached"):
        table.add_column(column, justify="right" if column != "accountant" else "left")
    for name in _accountants(accountant):
        for d in delta or [1e-5]:
            z = accounting.noise_multiplier(target_epsilon, d, q, steps=count,
                                            accountant=name, tolerance=tolerance)
            reached = accounting.epsilon(z, q, d, steps=count, accountant=name)
            table.add_row(name, f"{d:g}", f"{z:.4f}", f"{reached:.4f}")
    console.print(table)


def _epoch_grid(epochs: list[float] | None, max_epochs: float, points: int) -> list[float]:
    if epochs:
        return sorted(epochs)
    if not (max_epochs > 0 and points >= 1):
        raise typer.BadParameter("--max-epochs must be > 0 and --points >= 1")
    return [max_epochs * (i + 1) / points for i in range(points)]


EpochList = Annotated[list[float] | None, typer.Option("--epochs", "-e", help="epochs to "
                                                       "tabulate (repeatable)")]
MaxEpochs = Annotated[float, typer.Option(help="without --epochs: grid up to this")]
Points = Annotated[int, typer.Option(help="without --epochs: number of grid points")]


def _tables(noise: float, q: float, epochs: list[float], deltas: list[float],
            names: list[str]) -> list[accounting.EpsilonTable]:
    return [accounting.epsilon_table(noise, q, epochs, deltas, name) for name in names]


def _checked_tables(noise, sample_rate, batch_size, dataset_size, epochs, max_epochs, points,
                    delta, accountant) -> tuple[float, list]:
    """The sample rate and one epsilon table per accountant; bad options exit with an error."""
    q = _rate(sample_rate, batch_size, dataset_size)
    grid = _epoch_grid(epochs, max_epochs, points)
    return q, _tables(noise, q, grid, delta or [1e-5, 1e-6, 1e-7], _accountants(accountant))


@app.command("table")
@user_errors()
def table_command(noise: Noise, sample_rate: Rate = None, batch_size: Batch = None,
                  dataset_size: Size = None, epochs: EpochList = None, max_epochs: MaxEpochs = 100,
                  points: Points = 10, delta: Deltas = None,
                  accountant: Accountants = None) -> None:
    """Epsilon over epochs for several deltas (the study's Figure 4, left panels, as a table)."""
    q, tables = _checked_tables(noise, sample_rate, batch_size, dataset_size, epochs, max_epochs,
                                points, delta, accountant)
    for result in tables:
        table = Table(title=f"{result.accountant}: epsilon over epochs, z = {noise:g}, "
                            f"q = {q:.6g}")
        table.add_column("epochs", justify="right")
        for d in result.deltas:
            table.add_column(f"delta {d:g}", justify="right")
        for column, e in enumerate(result.epochs):
            table.add_row(f"{e:g}", *(f"{v:.3f}" for v in result.epsilon[:, column]))
        console.print(table)


@app.command("plot")
@user_errors()
def plot_command(noise: Noise,
                 out: Annotated[Path, typer.Option("--out", "-o", help="image file (png, pdf)")],
                 sample_rate: Rate = None, batch_size: Batch = None, dataset_size: Size = None,
                 epochs: EpochList = None, max_epochs: MaxEpochs = 100, points: Points = 20,
                 delta: Deltas = None, accountant: Accountants = None) -> None:
    """Plot epsilon over epochs for several deltas, one panel per accountant (Figure 4, left)."""
    q, tables = _checked_tables(noise, sample_rate, batch_size, dataset_size, epochs, max_epochs,
                                points, delta, accountant)
    path = accounting.plot_epsilon_tables(tables, out)
    console.print(f"wrote {path}")


BOUNDS = ("theorem", "gdp", "classic")
FORM_WHY = {"proof": "proof (the default): Theorem 4.1's proof (Gaussian mechanism, sensitivity "
                     "T L) gives sigma linear in T L / eps; the statement's square does not "
                     "follow from it",
            "printed": "printed: Theorem 4.1 as stated, with (T L / eps)^2 (the default is the "
                       "proof form, which is what the proof establishes)"}


def _theorem_rows(table: Table, epsilon: float | None, sigma: float | None, delta: float,
                  T: float, lipschitz: float, l_eps: float, form: str, iterations: int,
                  delta_prime: float | None) -> list[str]:
    """Theorem 4.1 (K = 1) or Corollary 4.2 (K > 1); returns notes to print under the table."""
    for column in ("T", "L", "L_eps", "K", "delta", "total delta", "epsilon", "sigma"):
        table.add_column(column, justify="right")
    kw = {"T": T, "lipschitz": lipschitz, "l_eps": l_eps}
    d_prime = delta if delta_prime is None else delta_prime
    if iterations == 1:
        total = delta
        if epsilon is not None:
            eps_value, sigma_value = epsilon, nsde.theorem41_sigma(epsilon, delta, form=form, **kw)
        else:
            sigma_value = sigma
            eps_value = nsde.theorem41_epsilon(sigma, delta, form=form, **kw)
    else:
        total = iterations * delta + d_prime
        if epsilon is not None:
            eps_value = epsilon
            sigma_value = nsde.corollary42_sigma(epsilon, delta, d_prime, iterations, **kw)
        else:
            sigma_value = sigma
            eps_value = nsde.corollary42_epsilon(sigma, delta, d_prime, iterations, **kw)
    table.add_row(f"{T:g}", f"{lipschitz:g}", f"{l_eps:g}", str(iterations), f"{delta:g}",
                  f"{total:g}", f"{eps_value:.4f}", f"{sigma_value:.4f}")
    notes = []
    if not nsde.in_theorem_range(eps_value):
        notes.append(f"[yellow]outside the theorem's range 0 < eps < 1 (eps = "
                     f"{eps_value:.4g}): paper A claims no guarantee here[/yellow]")
    return notes


def _theorem_table(epsilon: float | None, sigma: float | None, delta: float, T: float,
                   lipschitz: float, l_eps: float, form: str, iterations: int,
                   delta_prime: float | None) -> tuple[Table, list[str]]:
    """Paper A's bound as a table, and the notes to print under it."""
    name = ("Theorem 4.1" if iterations == 1 else "Corollary 4.2")
    table = Table(title=f"NSDE bound: paper A, {name}"
                        + (f", {form} form" if iterations == 1 else ""))
    notes = _theorem_rows(table, epsilon, sigma, delta, T, lipschitz, l_eps, form,
                          iterations, delta_prime)
    if iterations == 1:
        notes.insert(0, f"form: {FORM_WHY[form]}")
    return table, notes


def _gdp_table(bound: str, epsilon: float | None, sigma: float | None, delta: float, T: float,
               lipschitz: float, distance: float, iterations: int) -> Table:
    """The GDP alternative (``gdp``: exact Gaussian composition; ``classic``: textbook)."""
    table = Table(title=f"NSDE bound ({bound} composition; our derivation, see "
                        "miaudit.privacy.nsde_gdp)")
    for column in ("T", "L", "D", "K", "delta", "epsilon", "sigma"):
        table.add_column(column, justify="right")
    composition = "gaussian" if bound == "gdp" else "classic"
    kw = {"T": T, "lipschitz": lipschitz, "distance": distance, "iterations": iterations,
          "composition": composition}
    if epsilon is not None:
        eps_value, sigma_value = epsilon, nsde_gdp.gdp_sigma_bound(epsilon, delta, **kw).sigma
    else:
        eps_value, sigma_value = nsde_gdp.gdp_epsilon(sigma, delta, **kw), sigma
    table.add_row(f"{T:g}", f"{lipschitz:g}", f"{distance:g}", str(iterations),
                  f"{delta:g}", f"{eps_value:.4f}", f"{sigma_value:.4f}")
    return table


def _training_table(sigma: float | None, batch_size: int | None, dataset_size: int | None,
                    epochs: float, delta: float, sensitivity: float) -> Table:
    """The accountant epsilon of NSDE training read as DP-SGD, one row per accountant."""
    if sigma is None or batch_size is None or dataset_size is None:
        raise ConfigError("training epsilon needs --sigma, --batch-size, --dataset-size "
                         "and --epochs")
    training = Table(title=f"NSDE training read as DP-SGD: z = sigma / {sensitivity:g}, "
                           f"q = {batch_size}/{dataset_size}, {epochs:g} epochs")
    for column in ("accountant", "delta", "epsilon"):
        training.add_column(column)
    for acc_name in accounting.ACCOUNTANT_NAMES:
        value = nsde.training_epsilon(sigma, batch_size, dataset_size, epochs, delta,
                                      acc_name, sensitivity)
        training.add_row(acc_name, f"{delta:g}", "inf" if math.isinf(value)
                         else f"{value:.4f}")
    return training


@app.command("nsde")
@user_errors()
def nsde_command(
        delta: Annotated[float, typer.Option("--delta", "-d")] = 1e-5,
        epsilon: Annotated[float | None, typer.Option(
            "--epsilon", help="target epsilon: print the sigma needed")] = None,
        sigma: Annotated[float | None, typer.Option(
            "--sigma", help="theorem sigma (total noise std over [0, T]): print its epsilon")]
        = None,
        T: Annotated[float, typer.Option("--T", "-T", help="integration time")] = 1.0,
        lipschitz: Annotated[float, typer.Option("--lipschitz", "-L",
                                                 help="drift Lipschitz constant")] = 1.0,
        bound: Annotated[str, typer.Option(
            help="theorem (paper A, Theorem 4.1 / Corollary 4.2) | gdp (our exact GDP "
                 "derivation) | classic")] = "theorem",
        form: Annotated[str | None, typer.Option(
            help="theorem bound: proof (default: what the proof establishes) | printed")]
        = None,
        l_eps: Annotated[float, typer.Option(
            "--l-eps", help="theorem bound: Lipschitz constant of the Euler-Maruyama error "
            "(Remark 1)")] = 0.0,
        delta_prime: Annotated[float | None, typer.Option(
            "--delta-prime", help="theorem bound with K > 1: delta' of Corollary 4.2 "
            "(default: --delta)")] = None,
        distance: Annotated[float, typer.Option(
            "--distance", "-D", help="gdp/classic: bound D on the drift argument's change "
            "between neighbours (2C after clipping to norm C)")] = 1.0,
        iterations: Annotated[int, typer.Option(
            "--iterations", "-K", help="iterations K (theorem: Corollary 4.2 when K > 1; "
            "SDE blocks in sequence are not iterations, Sec. 5.3)")] = 1,
        batch_size: Batch = None, dataset_size: Size = None,
        epochs: Annotated[float | None, typer.Option(
            "--epochs", "-e", help="with --sigma, -b, -n: accountant epsilon of NSDE training")]
        = None,
        sensitivity: Annotated[float, typer.Option(
            help="training: noise multiplier = sigma / sensitivity")] = 1.0) -> None:
    """The NSDE bound: paper A's Theorem 4.1 / Corollary 4.2 (default, in the proof form), or
    the GDP alternative (see miaudit.privacy.nsde_gdp) and, optionally, the accountant epsilon of
    NSDE training."""
    if (epsilon is None) == (sigma is None):
        raise typer.BadParameter("give exactly one of --epsilon and --sigma")
    if bound not in BOUNDS:
        raise typer.BadParameter(f"--bound must be one of {', '.join(BOUNDS)}; got {bound!r}")
    form = form or nsde.DEFAULT_FORM
    if form not in nsde.FORMS:
        raise typer.BadParameter(f"--form must be one of {', '.join(nsde.FORMS)}; got {form!r}")
    notes: list[str] = []
    if bound == "theorem":
        table, notes = _theorem_table(epsilon, sigma, delta, T, lipschitz, l_eps, form,
                                      iterations, delta_prime)
    else:
        table = _gdp_table(bound, epsilon, sigma, delta, T, lipschitz, distance, iterations)
    training = None
    if epochs is not None:
        training = _training_table(sigma, batch_size, dataset_size, epochs, delta, sensitivity)
    console.print(table)
    for note in notes:
        console.print(note)
    if training is not None:
        console.print(training)

