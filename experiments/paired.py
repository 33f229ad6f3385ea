"""Cross-run paired differences for the claims of experiments/claims.yaml.

A claim whose two rows are two audits with the same memberships (same data, seed, number of
models and protocol: e.g. an SNN at T = 1 and at T = 2, or fast AT with and without DeMem) is
decided by the paired two-way bootstrap interval of the difference
(:mod:`miaudit.analysis.paired_runs`) instead of by two intervals that overlap. That needs the
runs' per-sample scores, which live in the run directories (not committed); this script
computes the differences where the run directories are here and writes them, with the digests
of the two committed results.json files they were computed from, to ``experiments/paired.json``
(committed). claims.py uses an entry only while both digests still match the committed outputs,
so a rerun never leaves a stale difference behind.

A run directory rarely outlives its session here, so where one row's run directory is here and
its partner's scores are not (not run yet, or its run directory gone), the scores the pair
needs are kept beside the row's results.json (``outputs/<stem>.scores.npz``, committed;
:mod:`miaudit.analysis.kept_scores`) and used in place of its run directory while they belong
to the committed result: the partner, run in a later session, still pairs with it.

Usage:
    python experiments/paired.py                  # every claim whose run directories are here
    python experiments/paired.py --runs /tmp/gpu  # also look for run directories under these
    python experiments/paired.py --force          # recompute the entries that are current too
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

from miaudit import Results
from miaudit.analysis import (
    KeptScores,
    NotPaired,
    keep_scores,
    paired_run_difference,
    read_kept_scores,
)
from miaudit.errors import RunDirError
from miaudit.stats import metrics

sys.path.insert(0, str(Path(__file__).resolve().parent))
import claims as C  # noqa: E402  (the claims' rows, seeds and committed outputs)


def run_dir(committed: Results, roots: list[Path]) -> Results | None:
    """The run directory of a committed results.json (as loaded): where it was made, else a
    directory of the same name under one of ``roots`` (e.g. run directories brought back from
    a GPU); only one that still holds that result (a run directory rescored since, e.g. at
    another number of models, holds other scores)."""
    made = Path(committed.summary.run_dir)
    for folder in (made, *(root / made.name for root in roots)):
        try:
            here = Results.load(folder)
        except RunDirError:  # absent, damaged or of an older layout: holds no result
            continue
        if here.reproduces(committed):
            return here
    return None


def pairs() -> list[tuple[C.Row, C.Row, tuple[str, ...]]]:
    """(high, low, metrics) of every greater- or similar-claim (at every seed) whose rows are
    two runs."""
    out = []
    for claim in C.CLAIMS:
        if claim.kind not in ("greater", "similar") or not claim.low:
            continue
        for seed in sorted(claim.seeds) or [None]:
            high, low = C.rows_of(claim, seed)
            if (high.experiment, high.stem) != (low.experiment, low.stem):
                paired = tuple(m for m in claim.metrics if m in metrics.HEADLINE_KEYS)
                if paired:  # accuracy-only claims pair over targets in claims.py instead
                    out.append((high, low, paired))
    return out


def kept_path(row: C.Row) -> Path:
    return C.HERE / row.experiment / "outputs" / f"{row.stem}.{KeptScores.SUFFIX}"


def kept_for(row: C.Row, committed: Results) -> KeptScores | None:
    """The scores kept beside ``row``'s committed result, while they belong to it."""
    path = kept_path(row)
    if not path.exists():
        return None
    kept = read_kept_scores(path)
    return kept if kept.result_digest == committed.digest else None


def scores_of(row: C.Row, committed: Results | None, roots: list[Path]) -> KeptScores | None:
    """``row``'s per-sample scores: from its run directory while it holds the ``committed``
    result, else the scores kept beside that result; None when neither (or not run)."""
    if committed is None:
        return None
    here = run_dir(committed, roots)
    return KeptScores.of(here, [row.attack]) if here is not None else kept_for(row, committed)


def compute(high: C.Row, low: C.Row, paired: tuple[str, ...], roots: list[Path]
            ) -> tuple[dict | None, str]:
    """(entry or None, what happened)."""
    committed = [C.load_results(row.experiment, row.stem) for row in (high, low)]
    if None in committed:
        return None, "not run"
    try:
        sides = [scores_of(row, result, roots) for row, result in zip((high, low), committed)]
        if None in sides:
            return None, "run directory not here (or rescored since)"
        found = paired_run_difference(sides[0], high.attack, sides[1], low.attack, paired)
    except NotPaired as error:
        return None, f"not paired: {error}"
    except (OSError, ValueError, KeyError, RunDirError) as error:  # e.g. an attack it lacks
        return None, f"unreadable: {error}"
    return {"digests": [result.digest for result in committed], **found}, "computed"


def keep_for_later(wanted: list[tuple[C.Row, C.Row, tuple[str, ...]]], roots: list[Path]
                   ) -> None:
    """Keep the scores of every row whose run directory is here while its partner's scores
    are not, with the attacks its pairs need (and those already kept for the same result)."""
    needed: dict[Path, tuple[C.Row, Results, Results, set[str]]] = {}
    for high, low, _ in wanted:
        sides = [(row, C.load_results(row.experiment, row.stem)) for row in (high, low)]
        for (row, committed), (other, other_committed) in (sides, sides[::-1]):
            here = run_dir(committed, roots) if committed else None
            if here is not None and not scores_here(other, other_committed, roots):
                entry = needed.setdefault(kept_path(row), (row, here, committed, set()))
                entry[3].add(row.attack)
    for path, (row, here, committed, labels) in needed.items():
        try:
            kept = kept_for(row, committed)
        except RunDirError:  # damaged: kept anew
            kept = None
        if kept is not None and labels <= set(kept.by_label):
            continue
        labels |= set(kept.by_label if kept else ())
        keep_scores(path, KeptScores.of(here, labels), labels, committed.digest)
        print(f"{'kept scores':>24}: {os.path.relpath(path)}")


def scores_here(row: C.Row, committed: Results | None, roots: list[Path]) -> bool:
    """Whether ``row``'s scores can be read (its run directory, or kept scores)."""
    if committed is None:
        return False
    try:
        return run_dir(committed, roots) is not None or kept_for(row, committed) is not None
    except RunDirError:  # damaged kept scores: as good as none
        return False


def is_current(entry: dict | None, high: C.Row, low: C.Row, paired: tuple[str, ...]) -> bool:
    """Whether ``entry`` was computed from the committed results.json files of both rows, for
    all of ``paired`` (then recomputing it would give the same numbers: the bootstrap is
    seeded)."""
    return entry is not None and set(paired) <= set(entry) \
        and entry["digests"] == C.committed_digests(high, low)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, action="append", default=[],
                        help="another folder holding run directories (repeatable)")
    parser.add_argument("--force", action="store_true",
                        help="recompute the entries that are current too")
    args = parser.parse_args(argv)
    wanted = pairs()
    current_keys = {C.paired_key(high, low) for high, low, _ in wanted}
    stored = {key: entry for key, entry in C.paired_entries().items()
              if key in current_keys}  # a claim removed or renamed takes its entry with it
    for high, low, paired in wanted:
        key = C.paired_key(high, low)
        if not args.force and is_current(stored.get(key), high, low, paired):
            print(f"{'current':>24}: {key}")
            continue
        entry, what = compute(high, low, paired, args.runs)
        if entry is not None:
            stored[key] = entry
        print(f"{what:>24}: {key}")
    keep_for_later(wanted, args.runs)
    # compact, as the committed outputs (experiments/run.py)
    write_atomically(C.PAIRED,
                     json.dumps(dict(sorted(stored.items())), separators=(",", ":")) + "\n")
    print(f"wrote {os.path.relpath(C.PAIRED)}")


def write_atomically(path: Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``path``, then rename it over ``path``: a
    kill leaves the old file or the new one, never half of one."""
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False) as temporary:
        temporary.write(text)
    os.replace(temporary.name, path)


if __name__ == "__main__":
    main()
