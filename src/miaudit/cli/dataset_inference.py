"""``miaudit dataset-inference``: was a collection of texts trained on (Maini et al. 2024)?"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console

from miaudit.cli.errors import user_errors
from miaudit.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np

console = Console()
SIZES = [16, 32, 64, 128, 256, 512, 1024, 2048, 4096]


def _indices(path: Path, what: str) -> np.ndarray:
    import numpy as np  # imported when the command runs: the CLI starts without it

    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise ConfigError(f"{what} {path}: not a readable .npy of pool indices ({error})") \
            from None


@user_errors()
def dataset_inference_command(
    source: Annotated[Path, typer.Argument(help="a run directory (audit or miaudit score) or a "
                      "text bundle (.npz / .safetensors)")],
    suspect: Annotated[Path, typer.Option(help="(n,) .npy of pool indices: the collection "
                       "suspected to have been trained on")],
    heldout: Annotated[Path | None, typer.Option(help="(m,) .npy of pool indices known NOT to "
                       "have been trained on (default: the target's other non-members)")] = None,
    target: Annotated[int, typer.Option(help="the suspect model (a target of the run)")] = 0,
    attacks: Annotated[str | None, typer.Option(help="','-separated attack labels whose "
                       "scores are the features (default: every attack of the run)")] = None,
    population: Annotated[Path | None, typer.Option(help="bundle only: (P,) indices of "
                          "population texts")] = None,
    seed: Annotated[int, typer.Option(help="seed of the halves and permutations")] = 0,
) -> None:
    """Dataset inference (Maini et al. 2024): per-text attack scores aggregated by a linear
    map learned on one half of the suspect and held-out texts, tested on the other half
    (one-sided Welch t-test and permutation test); prints the p-values and how many texts
    the collection needs to reach p < 0.01. Writes dataset_inference.json into a run
    directory."""
    import numpy as np

    from miaudit.analysis.dataset_inference import (
        collection_rows,
        dataset_inference,
        run_features,
        subsample_curve,
    )

    labels = [a.strip() for a in attacks.split(",") if a.strip()] if attacks else None
    indices = None if population is None else _indices(population, "--population")
    data = run_features(source, labels, target, indices)
    suspect_rows = collection_rows(_indices(suspect, "--suspect"), data["audited"], "--suspect")
    if heldout is None:
        chosen = np.ones(len(data["audited"]), dtype=bool)
        chosen[suspect_rows] = False
        heldout_rows = np.flatnonzero(chosen & ~data["members"])
    else:
        heldout_rows = collection_rows(_indices(heldout, "--heldout"), data["audited"],
                                       "--heldout")
        if np.intersect1d(heldout_rows, suspect_rows).size:
            raise ConfigError("--heldout and --suspect share texts; give disjoint collections")
        trained = int(data["members"][heldout_rows].sum())
        if trained:
            console.print(f"warning: {trained} held-out texts were trained on by model "
                          f"{target} (the run's keep); the test assumes none were",
                          markup=False, soft_wrap=True)
    features = data["features"]
    result = dataset_inference(features[suspect_rows], features[heldout_rows], seed=seed)
    curve = subsample_curve(features[suspect_rows], features[heldout_rows], SIZES, seed=seed)
    record = {**result, "target": target, "attacks": data["attacks"],
              "suspect_members": int(data["members"][suspect_rows].sum()),
              "texts_needed": curve}
    console.print(f"dataset inference, model {target}, features {', '.join(data['attacks'])}: "
                  f"{len(suspect_rows)} suspect vs {len(heldout_rows)} held-out texts: "
                  f"p = {result['p_value']:.3g} (Welch t = {result['t']:.2f}), permutation "
                  f"p = {result['p_value_permutation']:.3g}", markup=False, soft_wrap=True)
    needed = curve["texts_needed"]
    console.print("texts needed for p < 0.01 (median over 20 subsets): "
                  + (f"{needed}" if needed is not None else "not reached with this collection"),
                  markup=False, soft_wrap=True)
    if Path(source).is_dir():
        (Path(source) / "dataset_inference.json").write_text(json.dumps(record, indent=1))
