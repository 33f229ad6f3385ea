"""benchmarks/record.py: a benchmark's printed numbers, unchanged, also as result files."""

import json

import pytest

from conftest import load_script

record = load_script("benchmarks/record.py")

PRINTED = ("3 models, 2 threads\n\n| model | img/s | img/s |\n| --- | ---: | ---: |\n"
           "| resnet14 | 950 | 570 |\n| odenet | 410 | 300 |\ndone\n")


def test_the_output_is_unchanged_and_written_as_markdown_and_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MIAUDIT_BENCH_RESULTS", str(tmp_path))
    with record.recorded("benchmarks/fake_bench.py", ["--models", "3"]):
        print(PRINTED, end="")
    assert capsys.readouterr().out == PRINTED
    saved = json.loads((tmp_path / "fake_bench.json").read_text())
    assert saved["command"] == "python benchmarks/fake_bench.py --models 3"
    assert saved["output"] == PRINTED.rstrip("\n").splitlines()
    assert saved["tables"] == [{"header": ["model", "img/s", "img/s"],
                                "rows": [["resnet14", "950", "570"], ["odenet", "410", "300"]]}]
    page = (tmp_path / "fake_bench.md").read_text()
    import torch  # the rates' hardware: instruction set and bfloat16 kernels, in both files

    machine = saved["machine"]
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine["bf16_kernels"] in (True, False, None)
    assert f"{machine['cpu_capability']}, bfloat16 kernels " in page
    assert "```text\n3 models, 2 threads\n```\n\n| model | img/s | img/s |\n" in page
    assert "| odenet | 410 | 300 |\n\n```text\ndone\n```\n" in page


def test_a_failed_run_or_a_disabled_record_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("MIAUDIT_BENCH_RESULTS", str(tmp_path))
    with pytest.raises(RuntimeError), record.recorded("fake_bench.py", []):
        print("half a table")
        raise RuntimeError("out of memory")
    monkeypatch.setenv("MIAUDIT_BENCH_RECORD", "0")
    with record.recorded("fake_bench.py", []):
        print("not recorded")
    assert list(tmp_path.iterdir()) == []
