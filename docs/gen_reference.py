"""MkDocs hook: generate the reference pages from the code at build time.

* ``reference/config.md``: every field of :class:`miaudit.AuditConfig` (nested sections
  included) with its type, default and description, walked from the pydantic schema;
* ``reference/registries.md``: every entry of every registry with its options, read from the
  constructor's signature, and its docstring;
* ``reference/cli.md``: every command of the typer app, walked as click commands;
* ``reference/api.md``: mkdocstrings directives for the public objects, named by the modules
  they live in *now* (``obj.__module__``), so moving a module does not break the site.

Nothing here names an internal module path: everything is reached from ``miaudit``'s public
names and the registries.
"""

from __future__ import annotations

import inspect
import re
import typing
from typing import Any

from mkdocs.structure.files import File, Files

# The public objects of the Python API page, by the names users import them under.
PUBLIC_API = [
    ("The four entry points", ["miaudit.audit", "miaudit.score", "miaudit.Results",
                               "miaudit.load_config"]),
    ("Pure attack scoring", ["miaudit.attacks.evaluate", "miaudit.attacks.AttackInput",
                             "miaudit.attacks.AttackResult"]),
    ("Base classes to extend", ["miaudit.attacks.Attack", "miaudit.training.Recipe",
                                "miaudit.training.engine.Penalty", "miaudit.data.DataSplits",
                                "miaudit.models.scaled"]),
    ("Registries", ["miaudit.registry.Registry", "miaudit.registry.parse_spec"]),
    ("Errors", ["miaudit.ConfigError", "miaudit.errors.MiauditError"]),
]

# Arguments miaudit passes to constructors itself: not user options.
PROVIDED = {"self", "input_shape", "num_classes", "width", "data_dir", "penalties", "queries"}


def on_files(files: Files, config: Any) -> Files:
    """Add the generated pages to the site's files."""
    pages = {"reference/config.md": config_page(), "reference/registries.md": registries_page(),
             "reference/cli.md": cli_page(), "reference/api.md": api_page()}
    for path, content in pages.items():
        files.append(File.generated(config, path, content=content))
    return files


# ---------------------------------------------------------------------------------- config


def config_page() -> str:
    """The config reference: one table row per field, nested sections flattened."""
    from miaudit import AuditConfig

    rows = list(_field_rows(AuditConfig, ""))
    lines = [
        "# Config reference",
        "",
        "Generated from the pydantic schema of `miaudit.AuditConfig` at build time. A config "
        "is YAML (`miaudit audit -c file.yaml`) or a dict for `miaudit.audit`; unknown keys, "
        "bad values and bad component options fail before any training with an error naming "
        "the field and listing the valid options. Any field can be overridden on the command "
        "line with `--set key.path=value`; `miaudit config` prints the resolved config.",
        "",
        "| field | type | default | description |",
        "| --- | --- | --- | --- |",
    ]
    for path, kind, default, description in rows:
        lines.append(f"| `{path}` | {_cell(kind)} | {_cell(default)} | {_cell(description)} |")
    return "\n".join(lines) + "\n"


def _field_rows(model: Any, prefix: str):
    from pydantic import BaseModel

    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        default = field.get_default(call_default_factory=True)
        shown = "required" if field.is_required() else _literal(default)
        yield path, f"`{_type_name(field.annotation)}`", shown, field.description or ""
        for nested in _models_in(field.annotation):
            if issubclass(nested, BaseModel):
                yield from _field_rows(nested, f"{path}.")


def _models_in(annotation: Any) -> list[type]:
    from pydantic import BaseModel

    if inspect.isclass(annotation) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def _type_name(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if inspect.isclass(annotation) else None
    text = text or str(annotation)
    text = re.sub(r"\b(typing|pathlib|collections\.abc|miaudit\.[\w.]+)\.", "", text)
    return text.replace("NoneType", "None").replace("<class '", "").replace("'>", "")


def _literal(value: Any) -> str:
    from pydantic import BaseModel

    if isinstance(value, BaseModel):
        return "(the section's defaults)"
    text = repr(value)
    return f"`{text}`" if len(text) < 60 else f"`{text[:57]}...`"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


# ------------------------------------------------------------------------------ registries


def registries_page() -> str:
    """Every registered name with its options and docstring."""
    from miaudit.registry import ALL_REGISTRIES

    lines = ["# Registries", "",
             "Generated from the registries at build time: every built-in entry, its options "
             "(keyword arguments of its constructor, with defaults) and its docstring. Give "
             "options as `name:key=value,...` or `{name: ..., key: value}`; your own entries "
             "need no edit of miaudit (an import path `package.module:name`, or a "
             "`miaudit.plugins` entry point: see [Contributing](../contributing.md)).", ""]
    for registry in ALL_REGISTRIES:
        lines += [f"## {registry.kind}", ""]
        lines += ["| name | summary |", "| --- | --- |"]
        for name, summary in registry.describe().items():
            lines.append(f"| [`{name}`](#{_anchor(registry.kind, name)}) | {_cell(summary)} |")
        lines.append("")
        for name in registry.names():
            lines += _entry(registry, name)
    return "\n".join(lines) + "\n"


def _anchor(kind: str, name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", f"{kind}-{name}".lower()).strip("-")


def _entry(registry: Any, name: str) -> list[str]:
    constructor = registry.get(name)
    lines = [f"### `{name}` {{ #{_anchor(registry.kind, name)} }}", ""]
    options = _options(constructor)
    if options:
        lines.append("Keyword options (defaults): " + ", ".join(options) + ".")
    else:
        lines.append("Keyword options: none.")
    lines.append("")
    doc = inspect.getdoc(constructor) or ""
    lines += [_markdown(doc), ""]
    return lines


def _options(constructor: Any) -> list[str]:
    try:
        signature = inspect.signature(constructor)
    except (TypeError, ValueError):
        return []
    shown = []
    for parameter in signature.parameters.values():
        if parameter.name in PROVIDED or parameter.kind in (parameter.VAR_POSITIONAL,
                                                             parameter.VAR_KEYWORD):
            continue
        if parameter.default is parameter.empty:
            shown.append(f"`{parameter.name}` (required)")
        else:
            shown.append(f"`{parameter.name}={parameter.default!r}`")
    return shown


def _markdown(doc: str) -> str:
    """A docstring as Markdown: reST roles and literals to code spans, HTML-like text
    escaped."""
    doc = re.sub(r":(?:class|func|meth|mod|attr|data|obj):`~?([^`]+)`", r"`\1`", doc)
    doc = doc.replace("``", "`").replace("<", "&lt;").replace(">", "&gt;")
    return doc.replace("::\n", ":\n")


# -------------------------------------------------------------------------------------- cli


def cli_page() -> str:
    """Every command of the typer app with its arguments and options."""
    import typer

    from miaudit.cli import app

    root = typer.main.get_command(app)
    lines = ["# Command line", "",
             "Generated from the typer app at build time (`miaudit --help` and "
             "`miaudit COMMAND --help` print the same). Errors a user can fix print one line "
             "(`error: ...`) and exit with code 2.", ""]

    def walk(command: Any, path: list[str]) -> None:
        if hasattr(command, "commands"):  # a group (typer vendors its own click)
            for name in sorted(command.commands):
                walk(command.commands[name], [*path, name])
            return
        ctx = command.context_class(command, info_name=" ".join(path))
        usage = " ".join([*path, *command.collect_usage_pieces(ctx)])
        lines.extend([f"## `{' '.join(path)}`", "", "```text", usage, "```", "",
                      _markdown(inspect.cleandoc(command.help or "")), ""])
        params = [p for p in command.params if p.name != "help"]
        if params:
            lines.extend(["| argument / option | type | default | help |",
                          "| --- | --- | --- | --- |"])
            for param in params:
                names = ", ".join(f"`{n}`" for n in [*param.opts, *param.secondary_opts])
                default = param.default if not callable(param.default) else None
                shown = "" if default in (None, ()) else f"`{default!r}`"
                help_text = getattr(param, "help", None) or ""
                lines.append(f"| {names} | {_cell(_param_type(param, ctx))} | {_cell(shown)} | "
                             f"{_cell(_markdown(help_text))} |")
            lines.append("")

    walk(root, ["miaudit"])
    return "\n".join(lines) + "\n"


def _param_type(param: Any, ctx: Any) -> str:
    if getattr(param, "is_flag", False):
        return "flag"
    if hasattr(param, "display_type"):  # typer's own click
        return param.display_type(ctx).strip("<>")
    kind = getattr(param, "type", None)
    return getattr(kind, "name", "") if kind is not None else ""


# -------------------------------------------------------------------------------------- api


def api_page() -> str:
    """mkdocstrings directives for the public objects, at the modules they live in."""
    lines = ["# Python API", "",
             "Generated from the docstrings. Import everything from the names shown in each "
             "heading's section (`import miaudit`, `miaudit.attacks`, ...): the module a "
             "directive names is where the object lives today, which may change.", ""]
    for title, names in PUBLIC_API:
        lines += [f"## {title}", ""]
        for public in names:
            obj = _resolve(public)
            lines += [f"`{public}`", "", f"::: {obj.__module__}.{obj.__qualname__}", ""]
    return "\n".join(lines) + "\n"


def _resolve(dotted: str) -> Any:
    import importlib

    module, _, attribute = dotted.rpartition(".")
    return getattr(importlib.import_module(module), attribute)
