"""Trained models shared between run directories (``output_dir/model_cache``): copies,
never links, verified against their records on the way out."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from miaudit._runtime.io import TMP_SUFFIX, copy_file, sweep_temporaries
from miaudit.auditor.rundir import locked, verified_record
from miaudit.errors import RunLockedError


class ModelCache:
    """Trained models (and their query outputs) keyed by everything that determines them, so
    that audits which share models train each one once. An entry is a folder laid out like a
    run's model folder. Files are copied in and out (never hard-linked: damage in one place
    must not reach another) and verified against their records on the way out."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def entry(self, key: str) -> Path:
        return self.root / key

    def lock(self, key: str) -> Any:
        return locked(self.root / f".{key}.lock", wait=True, what=f"model cache entry {key}")

    def fetch(self, key: str, identity: str, record_rel: str, data_rel: str,
              destination: Path) -> bool:
        """Copy one verified (data, record) pair of an entry to ``destination`` (data first,
        record last); False when the entry lacks it, made it for another identity, or holds
        a damaged copy."""
        source = self.entry(key)
        record_path = source / record_rel
        record = verified_record(record_path.parent, record_path.name, identity,
                                 Path(data_rel).name)
        if record is None:
            return False
        copy_file(source / data_rel, destination / data_rel)
        copy_file(record_path, destination / record_rel)
        return True

    def sweep(self) -> int:
        """Remove temporaries a killed process left in entries that nobody holds now (each
        entry is swept under its own lock, taken without waiting); returns how many."""
        removed = 0
        if not self.root.is_dir():
            return 0
        for entry in {path.relative_to(self.root).parts[0]
                      for path in self.root.rglob(f".*{TMP_SUFFIX}")}:
            try:
                with locked(self.root / f".{entry}.lock", wait=False, what=entry):
                    removed += sweep_temporaries(self.root / entry)
            except RunLockedError:
                continue  # a live writer: its temporaries are not leftovers
        return removed

    def store(self, key: str, record_rel: str, data_rel: str, source: Path) -> None:
        """Copy a (data, record) pair into the entry (data first, record last)."""
        target = self.entry(key)
        with self.lock(key):
            if (target / record_rel).exists():
                return
            copy_file(source / data_rel, target / data_rel)
            copy_file(source / record_rel, target / record_rel)
