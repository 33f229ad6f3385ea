"""``miaudit usage``: dataset usage inference (DUCI) on a finished audit or ``miaudit score``
run (:mod:`miaudit.analysis.dataset_usage`)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from miaudit.cli.errors import user_errors
from miaudit.errors import MiauditError

if TYPE_CHECKING:
    import numpy as np

console = Console() if sys.stdout.isatty() else Console(width=160)


@user_errors()
def usage(
    run: Annotated[Path, typer.Argument(help="a run directory (miaudit audit or miaudit "
                                        "score)")],
    candidates: Annotated[Path | None, typer.Option(help="a .npy file of pool indices (the "
                          "candidate set, audited records only): estimate the fraction of it "
                          "each target trained on")] = None,
    attack: Annotated[str | None, typer.Option(help="the attack whose guesses are debiased; "
                      "default: the one with the smallest error on known-fraction sets")]
    = None,
) -> None:
    """How much of a data set did each target train on? DUCI (Tong et al., ICLR 2025) with a
    crossed-bootstrap interval; without --candidates, its error on sets of known fractions."""
    from miaudit._runtime.io import read_json
    from miaudit.analysis.dataset_usage import (
        USAGE_FILE,
        estimate_usage,
        evaluate_usage,
        usage_report,
    )
    from miaudit.results import Results

    chosen_indices = None if candidates is None else _read_candidates(candidates)
    results = Results.load(run)
    if attack is not None and attack not in results.attacks:
        raise MiauditError(f"--attack {attack!r}: the run has no such attack; its attacks: "
                           f"{', '.join(results.attacks)}")
    scores = {label: results.scores(label)[0] for label in results.attacks}
    members = results.scores(next(iter(results.attacks)))[1]
    if members.shape[0] < 3:
        raise MiauditError(f"{run} has {members.shape[0]} target(s); dataset usage needs a "
                           "target and at least 2 references: audit with more models")
    stored = Path(run) / USAGE_FILE
    if attack is None and stored.exists():  # the audit's own evaluation
        report = read_json(stored)
        attack, evaluation = report["chosen"], report["evaluation"]
    elif attack is None:
        report = usage_report(scores, members)
        attack, evaluation = report["chosen"], report["evaluation"]
    else:
        evaluation = evaluate_usage(scores[attack], members)
    if chosen_indices is None:
        _print_evaluation(attack, evaluation)
        return
    positions = _positions(chosen_indices, run)
    found = estimate_usage(scores[attack], members, positions)
    console.print(f"DUCI with {attack} on {len(positions)} candidate records: estimated "
                  f"fraction used {found['estimate']:.3f} [95% CI {found['interval'][0]:.3f}, "
                  f"{found['interval'][1]:.3f}] (mean over {members.shape[0]} targets; "
                  f"known-fraction MAE per target {evaluation['mean_absolute_error']:.3f})",
                  markup=False, highlight=False, soft_wrap=True)
    table = Table("target", "estimate", "true fraction")
    for target, (estimate, truth) in enumerate(zip(found["per_target"], found["true_fraction"],
                                                   strict=True)):
        table.add_row(str(target), "n/a" if estimate is None else f"{estimate:.3f}",
                      f"{truth:.3f}")
    console.print(table)


def _print_evaluation(attack: str, evaluation: dict) -> None:
    table = Table("true fraction", "estimate [95% CI]", "covered", "bias", "MAE per target",
                  title=f"DUCI with {attack} on candidate sets of known fractions")
    for check in evaluation["fractions"]:
        low, high = check["interval"]
        table.add_row(f"{check['fraction']:g}", f"{check['estimate']:.3f} [{low:.3f}, "
                      f"{high:.3f}]", "yes" if check["covered"] else "NO",
                      f"{check['bias']:+.3f}", f"{check['mean_absolute_error']:.3f}")
    console.print(table)
    console.print(f"mean absolute error per target {evaluation['mean_absolute_error']:.3f}; "
                  f"intervals covering the truth {100 * evaluation['coverage']:.0f}%",
                  markup=False, highlight=False)


def _read_candidates(path: Path) -> np.ndarray:
    import numpy as np  # when the command runs: the CLI starts without it

    try:
        indices = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise MiauditError(f"--candidates {path}: cannot read it as a .npy array ({error})") \
            from None
    if indices.ndim != 1 or indices.size == 0 or not np.issubdtype(indices.dtype, np.integer):
        raise MiauditError(f"--candidates {path}: expected a non-empty 1-D array of integer "
                           f"pool indices, got {indices.dtype} {indices.shape}")
    if len(np.unique(indices)) != len(indices):
        raise MiauditError(f"--candidates {path}: pool indices repeat; give each record once")
    return indices


def _positions(indices: np.ndarray, run: Path) -> np.ndarray:
    """Pool indices -> positions among the audited records (the stored scores' columns)."""
    import numpy as np

    from miaudit.auditor.rundir import RunDir

    audited = RunDir(run).read_split()["audited"]
    where = {int(index): position for position, index in enumerate(audited)}
    missing = [int(i) for i in indices if int(i) not in where]
    if missing:
        raise MiauditError(f"--candidates: {len(missing)} pool indices are not audited records "
                           f"of this run (first: {missing[:5]}); the audited indices are in "
                           "split.npz ('audited')")
    return np.array([where[int(i)] for i in indices])
