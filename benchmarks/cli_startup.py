"""CPU-seconds (user + system) of the CLI's cheap paths and of ``import miaudit.config``, each
in a fresh interpreter, median over repeats; and whether torch was loaded. The target (issue
77): ``miaudit --help`` at most 0.5 CPU-s, no torch.

    PYTHONPATH=src python benchmarks/cli_startup.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys

from record import recorded

CASES = {
    "miaudit --help": "from miaudit.cli import app\ntry: app(['--help'])\nexcept SystemExit: pass",
    "miaudit --version": "from miaudit.cli import app\ntry: app(['--version'])\n"
                         "except SystemExit: pass",
    "miaudit attacks": "from miaudit.cli import app\ntry: app(['attacks'])\n"
                       "except SystemExit: pass",
    "import miaudit.config": "import miaudit.config",
    "python (no miaudit)": "pass",
}
REPORT = "\nimport sys, json\nprint(json.dumps({'torch': 'torch' in sys.modules}), file=sys.stderr)"


def cpu_seconds(code: str) -> tuple[float, bool]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-c", code + REPORT], capture_output=True,
                          text=True, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return spent, json.loads(done.stderr.strip().splitlines()[-1])["torch"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    print("| command | CPU-s (median) | min | torch loaded |")
    print("|---|---|---|---|")
    for name, code in CASES.items():
        runs = [cpu_seconds(code) for _ in range(args.repeats)]
        seconds = [s for s, _ in runs]
        print(f"| {name} | {statistics.median(seconds):.2f} | {min(seconds):.2f} | "
              f"{'yes' if runs[0][1] else 'no'} |")


if __name__ == "__main__":
    with recorded(__file__):
        main()
