"""Import cost: the config and the CLI's cheap paths (--help, --version, the listings) load no
torch, each checked in a fresh interpreter (this process has torch loaded already)."""

import inspect
import subprocess
import sys

import pytest

from miaudit.cli.listings import LISTINGS
from miaudit.registry import _static_doc

NO_TORCH = "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if 'torch' in m)[:3]"


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def test_config_and_package_import_without_torch():
    done = _run(f"import sys, miaudit, miaudit.config, miaudit.registry; {NO_TORCH}")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["attacks"], ["models"],
                                  ["privacy", "--help"], ["audit", "--help"]])
def test_cli_cheap_paths_import_no_torch(argv):
    code = ("import sys\nfrom miaudit.cli import app\n"
            f"try:\n    app({argv!r})\nexcept SystemExit as e:\n    assert e.code in (0, None)\n"
            f"{NO_TORCH}")
    done = _run(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_version_prints_the_package_version():
    from miaudit.version import __version__

    done = _run("from miaudit.cli import app\napp(['--version'])")
    assert done.stdout.strip() == f"miaudit {__version__}"


def test_listings_read_docstrings_without_importing_but_say_the_same():
    # the static read (module source) must give what the imported objects' docstrings give,
    # for every built-in entry (the listing falls back to the live object for the others)
    checked = 0
    for registry, _ in LISTINGS.values():
        for name, module in registry._modules.items():
            static = _static_doc(module, name)
            assert static is not None, (registry.kind, name, module)
            assert static == (inspect.getdoc(registry.get(name)) or ""), (registry.kind, name)
            checked += 1
    assert checked > 50
