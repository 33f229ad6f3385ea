"""The documentation: every fenced bash / python block of README.md and docs/ runs at toy scale,
and the built site's reference lists every registered name and config field.

Blocks run in one temporary folder that holds a shared tiny audit (made once) and links to the
repository's folders; the substitutions that shrink them are documented in
docs/contributing.md ("The docs"). A block preceded by ``<!-- docs-test: skip REASON -->`` is
skipped with that reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"(?:<!-- docs-test: (?P<marker>[^\n]*?) -->\n\s*)?```(?P<lang>bash|python)\n"
                   r"(?P<code>.*?)```", re.S)
TOY = ("--pool-size 300 --epochs 2 --num-models 4 --threads 1 --quiet "
       '--output-dir "$DOCS_RUNS"')  # the shared folder's runs/, whatever the block's cwd
LINKED = ("examples", "tests", "src", "benchmarks", "experiments", "pyproject.toml")


def blocks() -> list:
    """(page, index, language, code, skip reason) of every fenced bash / python block."""
    found = []
    for page in PAGES:
        for index, match in enumerate(FENCE.finditer(page.read_text())):
            marker = match["marker"] or ""
            reason = marker.removeprefix("skip ").strip() if marker.startswith("skip") else None
            found.append(pytest.param(match["lang"], match["code"], reason,
                                      id=f"{page.relative_to(REPO)}#{index}"))
    return found


def toy_flags(command: str) -> str:
    """TOY's flags, less those a command must keep: its own --output-dir (a later step reads
    that folder) and, with train.snapshots, its --epochs (the snapshots lie below them)."""
    keep = {"--output-dir"} | ({"--epochs"} if "snapshots" in command else set())
    flags = re.findall(r'(--[\w-]+)((?: (?!--)(?:"[^"]*"|\S+))*)', TOY)
    return " ".join(f"{flag}{value}" for flag, value in flags
                    if not (flag in keep and re.search(rf"{flag}\b", command)))


def toy(code: str, run_dir: str) -> str:
    """The block at toy scale (the substitutions docs/contributing.md lists)."""
    code = code.replace("\\\n", " ")  # one line per command, so flags append to its end
    code = re.sub(r"runs/digits-small_cnn-[0-9a-f]{12}", run_dir, code)
    code = re.sub(r"pip install [^&\n]*", "true", code)
    code = code.replace("python -m pytest -q", "python -m pytest -q --co -p no:cacheprovider")
    lines = []
    for line in code.splitlines():
        command, hash_, comment = line.partition("  #")
        if re.search(r"\bmiaudit audit\b", command):
            command = f"{command.rstrip()} {toy_flags(command)}"
        lines.append(command + (hash_ + comment if hash_ else ""))
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict]:
    """A folder with links to the repository and the shared tiny default audit in runs/."""
    folder = tmp_path_factory.mktemp("docs")
    for name in LINKED:
        (folder / name).symlink_to(REPO / name)
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{REPO}",
           "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "COLUMNS": "160",
           "DOCS_RUNS": str(folder / "runs")}
    run = subprocess.run(f"miaudit audit {TOY}", shell=True, cwd=folder, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    run_dirs = sorted((folder / "runs").glob("digits-small_cnn-*"))
    assert len(run_dirs) == 1
    return folder, f"runs/{run_dirs[0].name}", env


@pytest.mark.parametrize(("lang", "code", "skip"), blocks())
def test_block_runs(workdir: tuple[Path, str, dict], lang: str, code: str,
                    skip: str | None) -> None:
    if skip:
        pytest.skip(skip)
    folder, run_dir, env = workdir
    script = toy(code, run_dir)
    command = ["bash", "-euo", "pipefail", "-c", script] if lang == "bash" else \
        [sys.executable, "-c", script]
    run = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, f"{script}\n--- stdout\n{run.stdout[-3000:]}\n--- stderr\n" \
                                f"{run.stderr[-3000:]}"


def test_toy_substitution_keeps_comments_and_joins_lines() -> None:
    code = "miaudit audit --model resnet14 \\\n    --epochs 15   # grow it\npip install -e .\n"
    assert toy(code, "runs/x") == (f"miaudit audit --model resnet14      --epochs 15 {TOY}  "
                                   "# grow it\ntrue\n")


def test_every_page_in_the_nav_exists_and_every_page_is_in_the_nav() -> None:
    import yaml

    nav = yaml.safe_load((REPO / "mkdocs.yml").read_text())["nav"]

    def leaves(items):
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            yield from (leaves(value) if isinstance(value, list) else [value])

    listed = set(leaves(nav))
    generated = {f"reference/{name}.md" for name in ("config", "registries", "cli", "api")}
    written = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert listed - generated <= written
    # pages of other issues are added to the nav when they are merged
    assert written - listed <= {"architecture.md", "reliability.md", "get-started-times.md",
                                "dp-audits.md"} | {p for p in written if p.startswith("tutorials/")
                                                   and p not in listed}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site built with warnings as errors (skipped where mkdocs is not installed)."""
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings is not installed")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "NO_MKDOCS_2_WARNING": "1"}
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                            str(out)], cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=600)
    assert build.returncode == 0, build.stderr[-4000:]
    return out


def test_reference_lists_every_registered_name(site: Path) -> None:
    from miaudit.registry import ALL_REGISTRIES

    html = (site / "reference" / "registries.html").read_text()
    missing = [f"{registry.kind} {name}" for registry in ALL_REGISTRIES
               for name in registry.names() if f"<code>{name}</code>" not in html]
    assert not missing


def test_reference_lists_every_config_field_with_a_description(site: Path) -> None:
    from pydantic import BaseModel

    from miaudit import AuditConfig

    html = (site / "reference" / "config.html").read_text()

    def fields(model: type[BaseModel], prefix: str):
        for name, field in model.model_fields.items():
            yield f"{prefix}{name}", field
            for arg in [field.annotation, *getattr(field.annotation, "__args__", ())]:
                if isinstance(arg, type) and issubclass(arg, BaseModel):
                    yield from fields(arg, f"{prefix}{name}.")

    every = list(fields(AuditConfig, ""))
    assert len(every) > 40
    assert not [path for path, _ in every if f"<code>{path}</code>" not in html]
    assert not [path for path, field in every if not field.description]


def test_reference_lists_every_command(site: Path) -> None:
    import typer

    from miaudit.cli import app

    html = (site / "reference" / "cli.html").read_text()

    def paths(command, path: str):
        if hasattr(command, "commands"):  # a group (typer vendors its own click)
            for name, sub in command.commands.items():
                yield from paths(sub, f"{path} {name}")
        else:
            yield path

    commands = list(paths(typer.main.get_command(app), "miaudit"))
    assert len(commands) > 15
    assert not [c for c in commands if f"<code>{c}</code>" not in html]


def test_api_reference_renders_the_public_entry_points(site: Path) -> None:
    html = (site / "reference" / "api.html").read_text()
    for name in ("audit", "score", "Results", "load_config", "evaluate", "Attack", "Recipe"):
        assert re.search(rf'id="[\w.]*\b{name}"', html), name


def test_site_needs_no_network(site: Path) -> None:
    remote = re.compile(r'<(?:script|link)[^>]+(?:src|href)="(?:https?:)?//')
    assert not [p for p in site.rglob("*.html") if remote.search(p.read_text())]


def test_report_renders_a_committed_record(tmp_path: Path) -> None:
    """experiments/ keeps results.json records, not run directories: `miaudit report` renders
    one again (its table and an HTML report without the score-based figures)."""
    import json

    from typer.testing import CliRunner

    from miaudit.cli import app

    source = REPO / "experiments/papers/A/floor/outputs/2_odenet.results.json"
    record = tmp_path / "2_odenet.results.json"
    shutil.copy(source, record)
    result = CliRunner().invoke(app, ["report", str(record), "--html"])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "2_odenet.report.html").read_text()
    for label in json.loads(source.read_text())["attacks"]:
        assert label in page
    assert "no ROC curves" in result.output
    refused = CliRunner().invoke(app, ["report", str(record), "--plots"])
    assert refused.exit_code == 2 and "needs the run directory" in refused.output
    damaged = tmp_path / "damaged.results.json"
    damaged.write_text(source.read_text().replace('"seed":0', '"seed":1', 1))
    assert CliRunner().invoke(app, ["report", str(damaged)]).exit_code == 2
