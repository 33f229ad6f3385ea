"""The user-error hierarchy: every error a user can cause and fix derives from
:class:`MiauditError`; the CLI prints its message on one line and exits with code 2. Anything
else is a bug and keeps its traceback."""

from __future__ import annotations


class MiauditError(Exception):
    """A problem the user can fix; the message says what is wrong and how to fix it."""


class ConfigError(MiauditError, ValueError):
    """A configuration that cannot be run; the message names the field. (A ValueError too, so
    pydantic reports it against the field whose validator raised it.)"""


class DataError(MiauditError):
    """Missing, corrupt or malformed data; the message says what was expected where."""


class ExternalOutputsError(DataError, ValueError):
    """Malformed outputs of models trained elsewhere; the message names the file, the problem
    and the fix."""


class RunDirError(MiauditError):
    """A run directory that does not belong to this config, or a missing/corrupt artefact."""


class RunLockedError(RunDirError):
    """Another process holds the run directory (or a model-cache entry)."""
