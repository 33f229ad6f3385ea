"""The user-error hierarchy: every error a user can cause and fix derives from
:class:`UserError`; the CLI prints its message on one line and exits with code 2. Anything
else is a bug in miaudit and keeps its traceback.

    UserError
    ├── ConfigError      a config or command-line value that cannot be run (also a ValueError)
    ├── DataError        missing, corrupt or malformed data
    ├── InputFileError   a file the user handed in (outputs, results.json) that cannot be read
    │   └── ExternalOutputsError   malformed outputs of models trained elsewhere
    ├── ResourceError    not enough memory, disk or devices for what was asked
    └── RunDirError      a run directory that does not belong to this config, or is damaged
        └── RunLockedError
"""

from __future__ import annotations

__all__ = ["ConfigError", "DataError", "ExternalOutputsError", "InputFileError", "MiauditError",
           "ResourceError", "RunDirError", "RunLockedError", "UserError"]


class UserError(Exception):
    """A problem the user can fix; the message says what is wrong and how to fix it."""


#: the base's earlier name (plugins and scripts catch it)
MiauditError = UserError


class ConfigError(UserError, ValueError):
    """A configuration (or command-line value) that cannot be run; the message names the field.

    A ValueError too, so pydantic reports it against the field whose validator raised it.
    """


class DataError(UserError):
    """Missing, corrupt or malformed data; the message says what was expected where."""


class InputFileError(UserError):
    """A file the user handed in (outputs made elsewhere, a results.json to compare) that
    cannot be read as what it should be; the message names the file."""


class ExternalOutputsError(InputFileError, DataError, ValueError):
    """Malformed outputs of models trained elsewhere; the message names the file, the problem
    and the fix."""


class ResourceError(UserError):
    """Not enough memory, disk or devices for what was asked; the message says how much is
    needed and what to lower."""


class RunDirError(UserError):
    """A run directory that does not belong to this config, or a missing/corrupt artefact."""


class RunLockedError(RunDirError):
    """Another process holds the run directory (or a model-cache entry)."""
