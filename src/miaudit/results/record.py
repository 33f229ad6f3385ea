"""The base of every record results.json holds (:mod:`miaudit.results.schema`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Record(BaseModel):
    """A record of results.json: every key declared, none added, read-only. It also reads as
    the mapping it was built from (``summary["attacks"]``, ``record.get("caveats", [])``,
    ``"privacy" in summary``), as code holding results.json's dicts expects: the keys are the
    fields the record was given (a field left at its default is absent, as from the file),
    the values the typed fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def keys(self) -> list[str]:
        """The fields this record was given, in declaration order (results.json's keys)."""
        return [name for name in type(self).model_fields if name in self.model_fields_set]

    def __getitem__(self, key: str) -> Any:
        if key not in self.model_fields_set:
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self.model_fields_set

    def get(self, key: str, default: Any = None) -> Any:
        """The field ``key`` when this record was given it, else ``default`` (dict.get)."""
        return self[key] if key in self else default

    def items(self) -> list[tuple[str, Any]]:
        """(name, value) of every field given."""
        return [(key, getattr(self, key)) for key in self.keys()]

    def values(self) -> list[Any]:
        """The value of every field given, in field order."""
        return [getattr(self, key) for key in self.keys()]
