"""Issue 79: every experiment config's paper-scale variant validates (`miaudit config`) and
every model it names builds and runs one forward pass on a tiny batch (no training)."""

import re
from pathlib import Path

import pytest
import torch
import yaml
from typer.testing import CliRunner

from miaudit.cli import app
from miaudit.config import validate_config
from miaudit.configtools import set_dotted
from miaudit.models import build_model

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"
SHAPES = {"cifar10": ((3, 32, 32), 10), "cifar100": ((3, 32, 32), 100)}


def paper_scale_sets(path: Path) -> list[str] | None:
    """The ``--set`` items of a config header's "Paper scale (GPU):" line (and the comment
    lines continuing it); None when the header has none."""
    lines = path.read_text().splitlines()
    for index, line in enumerate(lines):
        if line.startswith("# Paper scale (GPU):"):
            text = line
            for more in lines[index + 1:]:
                if not more.startswith("#   --set"):
                    break
                text += " " + more
            return re.findall(r"--set (\S+)", text)
    return None


def variants() -> list[tuple[str, list[str]]]:
    """(config, its --set items) for every paper-scale variant: the configs of
    experiments/paper_scale as they are, and every other experiment config with its header's
    paper-scale line."""
    found = [(str(p.relative_to(EXPERIMENTS)), []) for p in
             sorted((EXPERIMENTS / "paper_scale").glob("*.yaml"))]
    for path in sorted(EXPERIMENTS.glob("papers/*/*/*.yaml")):
        sets = paper_scale_sets(path)
        if sets is not None:
            found.append((str(path.relative_to(EXPERIMENTS)), sets))
    return found


VARIANTS = variants()


def test_there_are_paper_scale_variants_of_every_paper():
    names = " ".join(name for name, _ in VARIANTS)
    for stem in ("A_3_sdenet_sigma2", "B_1_pgd_at", "B_3_trades", "B_4_trades_demem",
                 "C_1_snn_t1", "C_5_direct_t4"):
        assert stem in names
    assert len(VARIANTS) >= 30


@pytest.mark.parametrize(("name", "sets"), VARIANTS, ids=[name for name, _ in VARIANTS])
def test_a_paper_scale_variant_validates_and_its_models_build(name, sets):
    path = EXPERIMENTS / name
    args = ["config", "-c", str(path), "--no-check"] + [x for s in sets for x in ("--set", s)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    raw = yaml.safe_load(path.read_text())
    for item in sets:
        key, value = item.split("=", 1)
        set_dotted(raw, key, yaml.safe_load(value))
    cfg = validate_config(raw)
    shape, classes = SHAPES[cfg.data.name]
    for model in (cfg.model, cfg.reference_model):
        if model is None:
            continue
        torch.manual_seed(0)
        net = build_model(model.name, input_shape=shape, num_classes=classes,
                          width=model.width, **model.options).eval()
        with torch.no_grad():
            out = net(torch.rand(2, *shape))
        assert out.shape == (2, classes) and torch.isfinite(out).all()


def test_miaudit_models_lists_the_paper_scale_models():
    output = CliRunner().invoke(app, ["models"]).output
    for name in ("resnet50", "snn_resnet18", "ann_resnet18", "sdenet", "odenet", "resnet14"):
        assert f" {name} " in output


def test_resnet50_is_the_cifar_variant_of_he_et_al():
    net = build_model("resnet50", input_shape=(3, 32, 32), num_classes=10)
    # 23.5M parameters (torchvision's ResNet-50 less its 7x7 stem and 1000-way head)
    assert sum(p.numel() for p in net.parameters()) == pytest.approx(23.52e6, rel=0.002)
    assert net.stem[0].kernel_size == (3, 3) and net.stem[0].stride == (1, 1)
    blocks = [len([m for m in net.stages if m.body[3].out_channels == c])
              for c in (64, 128, 256, 512)]
    assert blocks == [3, 4, 6, 3]
