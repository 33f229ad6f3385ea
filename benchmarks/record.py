"""Every benchmark's numbers also as files: ``benchmarks/results/<script>.md`` and ``.json``.

A benchmark's ``__main__`` runs inside :func:`recorded`, which passes everything printed through
unchanged and, when the script finishes without an error, writes what it printed beside the
command, the time and the machine: the markdown file for reading (markdown tables kept as
tables, other output as a text block), the JSON file for tools (the printed lines and every
markdown table parsed into rows). Each run replaces the script's previous files, so they hold
its latest run; a run that fails writes nothing. ``MIAUDIT_BENCH_RECORD=0`` turns it off
(``MIAUDIT_BENCH_RESULTS=DIR`` writes elsewhere).
"""

from __future__ import annotations

import io
import json
import os
import platform
import re
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, TextIO

from miaudit._runtime.io import write_bytes

RESULTS = Path(__file__).resolve().parent / "results"


class Tee(io.TextIOBase):
    """Writes to the real stream and keeps a copy (the printed output is unchanged)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream, self.copy = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.copy.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


@contextmanager
def recorded(script: str, argv: list[str] | None = None) -> Iterator[None]:
    """Run the body with stdout teed; on success write the script's result files."""
    if os.environ.get("MIAUDIT_BENCH_RECORD", "1") == "0":
        yield
        return
    tee, real, load_before = Tee(sys.stdout), sys.stdout, os.getloadavg()[0]
    sys.stdout = tee
    try:
        yield
    finally:
        sys.stdout = real
    name = Path(script).stem
    out = Path(os.environ.get("MIAUDIT_BENCH_RESULTS", RESULTS))
    record = run_record(name, sys.argv[1:] if argv is None else argv, tee.copy.getvalue())
    record["machine"]["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    write_bytes(out / f"{name}.json", (json.dumps(record, indent=1) + "\n").encode())
    write_bytes(out / f"{name}.md", markdown(record).encode())
    print(f"(written: {out / name}.md, .json)", file=sys.stderr)


def run_record(name: str, argv: list[str], output: str) -> dict[str, Any]:
    lines = output.rstrip("\n").splitlines()
    torch = sys.modules.get("torch")  # as the benchmark left it, if it used torch
    return {"benchmark": name,
            "command": shlex.join(["python", f"benchmarks/{name}.py", *argv]),
            "utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
            "machine": {"platform": platform.platform(), "processor": platform.machine(),
                        "cpus": os.cpu_count(), "python": platform.python_version(),
                        "torch": torch.__version__ if torch else None,
                        "torch_threads": torch.get_num_threads() if torch else None,
                        **(cpu_kernels() if torch else {})},
            "output": lines, "tables": markdown_tables(lines)}


def cpu_kernels() -> dict[str, Any]:
    """What the rates depend on beyond the core count: the instruction set torch uses and
    whether bfloat16 has kernels here (without, bf16 runs many times slower than fp32)."""
    import torch

    from miaudit._runtime.machine import bf16_kernels, cpu_capability

    return {"cpu_capability": cpu_capability(), "bf16_kernels": bf16_kernels(torch.device("cpu"))}


def cpu_text(machine: dict[str, Any]) -> str:
    # imports torch: only for records that used it
    from miaudit._runtime.machine import BF16_ANSWERS

    return (f", {machine['cpu_capability']}, bfloat16 kernels "
            f"{BF16_ANSWERS[machine['bf16_kernels']]}")


def markdown_tables(lines: list[str]) -> list[dict[str, list]]:
    """Each markdown table in the output (a ``| ... |`` header, its ``---`` rule, rows) as
    ``{"header": [cells], "rows": [[cells]]}`` (headers may repeat a name: kept as lists)."""
    tables, index = [], 0
    while index + 1 < len(lines):
        header, rule = lines[index].strip(), lines[index + 1].strip()
        if header.startswith("|") and rule.startswith("|") and set(rule) <= set("|-: "):
            table, index = {"header": cells(header), "rows": []}, index + 2
            while index < len(lines) and lines[index].strip().startswith("|"):
                table["rows"].append(cells(lines[index]))
                index += 1
            tables.append(table)
        else:
            index += 1
    return tables


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def markdown(record: dict[str, Any]) -> str:
    """The record as a page: what ran where, then the output (tables as tables)."""
    machine = record["machine"]
    head = [f"# benchmarks/{record['benchmark']}.py", "",
            f"`{record['command']}`, {record['utc']} UTC; {machine['cpus']} CPUs "
            f"({machine['processor']}, {machine['platform']}), Python {machine['python']}"
            + (f", torch {machine['torch']} ({machine['torch_threads']} threads)"
               if machine["torch"] else "")
            + (cpu_text(machine) if "cpu_capability" in machine else "")
            + f"; load average {machine['load_average'][0]} at the start, "
            f"{machine['load_average'][1]} at the end. Written by `benchmarks/record.py` from "
            "what the script printed; its latest run.", ""]
    body, text = [], []
    for line in record["output"] + [""]:
        if line.strip().startswith("|"):
            body += fenced(text) + [line]
            text = []
        else:
            text.append(line)
    body += fenced(text)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(head + body)).rstrip("\n") + "\n"


def fenced(lines: list[str]) -> list[str]:
    """Plain output lines as a text block (blank-only runs dropped)."""
    while lines and not lines[-1].strip():
        lines = lines[:-1]
    while lines and not lines[0].strip():
        lines = lines[1:]
    return ["", "```text", *lines, "```", ""] if lines else []
