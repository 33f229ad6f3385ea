"""The names and kinds of a run directory's files, spelled here only.

Layout (``LAYOUT`` = 2)::

    RUN/manifest.json                  layout version, run identity, the last config used
    RUN/split.npz                      audited / population / holdout pool indices
    RUN/keep.npy                       (models x pool) bool memberships of the current plan
    RUN/models/0003/model.json         train stage: identity, weights digest, training log
    RUN/models/0003/weights.safetensors
    RUN/models/0003/outputs/<key>.safetensors + <key>.json
                                       query stage: (pool x classes) logits of one query spec,
                                       keyed by the weights and the spec; the json (digest,
                                       spec) is written last and marks it complete
    RUN/models/0003/eval/<key>.json    evaluate stage (robust accuracy), keyed likewise
    RUN/scores-<generation>/<attack>.npy   score stage: (targets x audited) scores
    RUN/results.json                   names the scores generation it belongs to
    RUN/roc.png, report.html, ...      report stage (removed before results.json is replaced)
    RUN/.lock                          advisory lock held by the running process

A record's identity is checked on every read: a record made for another identity (changed
data, recipe, seed, membership, device, query) is stale and is recomputed, never reused; a
file whose digest differs from its record is damaged and is recomputed too (a warning names
it). The shared model cache (``output_dir/model_cache``) holds copies, never links.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

LAYOUT = 2
#: the key a layout-1 record (which wrote no ``layout``) always had, per file
LAYOUT_1_MARKERS = {"manifest.json": "training_hash", "results.json": "attacks"}


def record_layout(record: dict[str, Any], name: str) -> int | None:
    """The layout that wrote ``record`` (the contents of the run file ``name``): its ``layout``
    key, 1 for a layout-1 record (no key, but its marker), None for neither ({} or a hand-cut
    file). The one layout-1 detection."""
    if "layout" in record:
        return record["layout"]
    return 1 if LAYOUT_1_MARKERS[name] in record else None


# The names of a run's result files, spelled here only.
RESULTS_FILE = "results.json"
ROC_FILE = "roc.png"
ROC_DP_BOUND_FILE = "roc_dp_bound.png"
REPORT_FILE = "report.html"
EXPOSED_FILE = "exposed.npz"

# Every kind of file a run directory can hold (a glob under RUN), and what guards it against
# damage: "digests" (the folder's digests.json), "record" (the data file's record holds its
# digest), "self" (the file carries the digest of its own content), "regenerated" (an output
# no stage reads back; every audit writes it again), "empty" (no content). A new kind of
# file is added here, and tests/test_integrity.py flips a byte in it for every reader.
FILE_KINDS = {
    "manifest": ("manifest.json", "self"),
    "split": ("split.npz", "digests"),
    "keep": ("keep.npy", "digests"),
    "root digests": ("digests.json", "self"),
    "model record": ("models/*/model.json", "self"),
    "weights": ("models/*/weights.safetensors", "record"),
    "output record": ("models/*/outputs/*.json", "self"),
    "outputs": ("models/*/outputs/*.safetensors", "record"),
    "eval record": ("models/*/eval/*.json", "self"),
    "scores": ("scores-*/*.npy", "digests"),
    "scores digests": ("scores-*/digests.json", "self"),
    "results": ("results.json", "self"),
    "memorization": ("memorization.json", "digests"),
    "memorization plot": ("memorization.png", "digests"),
    "exposed samples": ("exposed.npz", "digests"),
    "roc plot": ("roc.png", "regenerated"),
    "dp-bound plot": ("roc_dp_bound.png", "regenerated"),
    "html report": ("report.html", "regenerated"),
    "figure vectors": ("*.svg", "regenerated"),
    "figure pdfs": ("*.pdf", "regenerated"),
    "per-record risk": ("records.csv", "regenerated"),
    "dataset usage": ("usage.json", "regenerated"),
    "leakage plot": ("leakage_over_training.png", "regenerated"),
    "snapshot record": ("models/*/snapshots/*/model.json", "self"),
    "snapshot weights": ("models/*/snapshots/*/weights.safetensors", "record"),
    "checkpoint": ("checkpoints/*.pt", "self"),
    "parent record": ("parents/*/model.json", "self"),
    "parent weights": ("parents/*/weights.safetensors", "record"),
    "lock": (".lock", "empty"),
}


def file_kind(relative: str) -> str | None:
    """The :data:`FILE_KINDS` kind of a path relative to the run directory (None: none)."""
    from fnmatch import fnmatchcase

    parts = Path(relative).parts
    for kind, (pattern, _) in FILE_KINDS.items():
        glob = Path(pattern).parts
        if len(glob) == len(parts) and all(fnmatchcase(p, g) for p, g in zip(parts, glob)):
            return kind
    return None

# what the report stage renders from results.json and its scores generation
REPORT_FILES = (ROC_FILE, ROC_DP_BOUND_FILE, REPORT_FILE, EXPOSED_FILE, "records.csv",
                "usage.json", "leakage_over_training.png")
WEIGHTS = "weights.safetensors"
MODEL_RECORD = "model.json"
