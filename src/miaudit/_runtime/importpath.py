"""Objects of the user's own code named by an import path, ``"package.module:attribute"``.

The colon form (as in entry points, uvicorn and gunicorn) says unambiguously where the module
ends and the attribute begins; the attribute may be dotted (``"module:Class.method"``). Each
failure is an :class:`ImportPathError` (a ValueError, so a config field naming the path reports
it) that says which of the steps failed: the path's form, finding the module, running it, the
attribute, or (:func:`import_callable`) calling it.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any


class ImportPathError(ValueError):
    """An import path that does not lead to the object it should."""


def split_import_path(spec: str) -> tuple[str, str]:
    """``"a.b:c.d"`` -> ``("a.b", "c.d")``."""
    module, sep, attribute = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    if not sep or not module.strip() or not attribute.strip() or ":" in attribute:
        raise ImportPathError(f"{spec!r} is not an import path; write 'package.module:name' "
                              "(module, a colon, then the function or class)")
    return module.strip(), attribute.strip()


def add_search_paths(paths: Sequence[str | Path]) -> None:
    """Put folders at the front of ``sys.path`` (once each), so the user's modules there
    import; they stay for later imports the user's module may make lazily."""
    for path in reversed([str(Path(p).expanduser().resolve()) for p in paths]):
        if path not in sys.path:
            sys.path.insert(0, path)


def import_object(spec: str, *, what: str = "object",
                  search_paths: Sequence[str | Path] = ()) -> Any:
    """The object ``spec`` names; ``what`` ("model constructor", ...) words the errors."""
    module_name, attribute = split_import_path(spec)
    add_search_paths(search_paths)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if module_name == missing or module_name.startswith(missing + "."):
            raise ImportPathError(
                f"{what} {spec!r}: module {module_name!r} not found. Run miaudit from the "
                f"folder that holds {module_name.split('.')[0]}.py (or the package), or add "
                "that folder to PYTHONPATH") from error
        raise ImportPathError(f"{what} {spec!r}: importing {module_name!r} failed, it needs "
                              f"the missing module {missing!r}: {error}") from error
    except Exception as error:  # the user's module raised while running: say so, keep the cause
        raise ImportPathError(f"{what} {spec!r}: importing {module_name!r} failed: "
                              f"{type(error).__name__}: {error}") from error
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            public = sorted(n for n in dir(target) if not n.startswith("_")
                            and callable(getattr(target, n, None)))
            where = getattr(module, "__file__", module_name)
            raise ImportPathError(f"{what} {spec!r}: {where} has no attribute {part!r}; its "
                                  f"callables: {public[:20]}")
        target = getattr(target, part)
    return target


def import_callable(spec: str, *, what: str = "function",
                    search_paths: Sequence[str | Path] = ()) -> Callable[..., Any]:
    """Like :func:`import_object`, and the object must be callable."""
    target = import_object(spec, what=what, search_paths=search_paths)
    if not callable(target):
        raise ImportPathError(f"{what} {spec!r} is a {type(target).__name__}, not a function "
                              "or class")
    return target


def source_digest(target: Any) -> str:
    """SHA-256 of the source file that defines ``target`` (a function, class or module):
    part of the identity of whatever the user's code produces, so an edit to that code is
    never served from a cache. Empty-file digest for objects without a Python source file."""
    try:
        path = inspect.getsourcefile(target)
        source = Path(path).read_bytes() if path else b""
    except (OSError, TypeError):
        source = b""  # a builtin or C extension: its import path must identify it
    return hashlib.sha256(source).hexdigest()
