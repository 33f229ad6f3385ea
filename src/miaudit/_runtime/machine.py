"""What the machine offers, asked once in one place: its physical memory (the planners refuse
an audit whose score stage would not fit, before any training) and whether its processor
computes bfloat16 (``train.precision: bf16``) in fast kernels or in slow fallback code."""

from __future__ import annotations

import os
from typing import Any

import torch

from miaudit._runtime import allocator
from miaudit.errors import ConfigError

#: how a bfloat16-kernels answer (:func:`bf16_kernels`) is printed
BF16_ANSWERS = {True: "yes", False: "no", None: "unknown"}


def physical_memory_bytes() -> int:
    """The machine's physical memory (POSIX sysconf), or 64 GiB where it cannot be asked."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):  # not POSIX (Windows)
        return 64 << 30


def score_memory_bytes(models: int, pool: int, outputs: int, signals: int) -> int:
    """Peak bytes of the score stage, the one estimate every planner uses: per (model, pool
    sample) the keep matrix (1 byte, bool), ``outputs`` float32 stored outputs and ``signals``
    float64 signals the attacks derive from them."""
    return models * pool * (1 + 4 * outputs + 8 * signals)


def check_score_memory(needed: int, what: str, fix: str) -> None:
    """A :class:`~miaudit.errors.ResourceError` naming ``what`` needs ``needed`` bytes and how
    to ``fix`` it, when that exceeds this machine's physical memory."""
    from miaudit.errors import ResourceError

    available = physical_memory_bytes()
    if needed > available:
        raise ResourceError(f"{what} needs about {needed / 2**30:.1f} GiB to score "
                            f"(memberships, outputs, signals), this machine has "
                            f"{available / 2**30:.1f} GiB; {fix}")


def describe(device: torch.device) -> dict[str, Any]:
    """The facts a training time depends on besides the load (results.json ``timing.machine``,
    :class:`miaudit.results.Machine`): CPU count and instruction set, bfloat16 kernels of
    ``device`` (None: torch cannot say), the GPU's name, whether this process keeps freed
    memory for reuse (:mod:`miaudit._runtime.allocator`: spiking queries took ~2x the CPU time
    without)."""
    return {"cpus": os.cpu_count() or 1, "cpu_capability": cpu_capability(),
            "bf16_kernels": bf16_kernels(device),
            "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
            "freed_memory_kept": allocator.kept()}


def devices() -> list[torch.device]:
    """The devices this machine can train on: the CPU, each CUDA device, MPS."""
    found = [torch.device("cpu")]
    found += [torch.device("cuda", index) for index in range(torch.cuda.device_count())]
    return found + ([torch.device("mps")] if torch.backends.mps.is_available() else [])


def cpu_capability() -> str:
    """The vector instruction set torch dispatches to on this CPU (e.g. AVX2, AVX512)."""
    return torch.backends.cpu.get_cpu_capability()


def native_bf16(device: torch.device) -> bool:
    """Whether bfloat16 autocast on ``device`` runs in fast kernels (True where torch cannot
    say, so that nothing is reported slow without evidence)."""
    return bf16_kernels(device) is not False


def slow_bf16(device: torch.device) -> str | None:
    """Why ``train.precision: bf16`` would train slowly on ``device`` (a sentence for the
    train stage's warning and experiments/run.py's refusal), or None where bfloat16 has
    kernels or torch cannot say."""
    if native_bf16(device):
        return None
    what = f"CPU ({cpu_capability()})" if device.type == "cpu" else str(device)
    return (f"train.precision bf16 on a {what} without bfloat16 kernels: autocast falls back "
            "to slow code (ResNet-14 trains ~10x slower than in fp32 on an AVX2 CPU); train "
            "where bfloat16 is native (AVX512_BF16 or AMX CPU, Ampere or later GPU), or set "
            "train.precision fp32 (other models: the precision is part of their identity)")


def bf16_kernels(device: torch.device) -> bool | None:
    """Whether ``device`` has bfloat16 kernels: a CUDA device with bfloat16 in hardware
    (Ampere or later), a CPU for which oneDNN has bfloat16 convolutions and matrix products
    (AVX-512, AMX or AVX2-VNNI-2 on x86, BF16 on Arm); None where torch cannot say (MPS, a
    build without oneDNN). Without them bfloat16 autocast still runs, in fallback code: on an
    AVX2-only CPU ResNet-14 trains ~10x slower than in float32
    (``benchmarks/train_throughput.md``)."""
    if device.type == "cuda":
        with torch.cuda.device(device):  # torch asks the current device
            try:
                return bool(torch.cuda.is_bf16_supported(including_emulation=False))
            except TypeError:  # torch < 2.3: no including_emulation (and no emulation counted)
                return bool(torch.cuda.is_bf16_supported())
    if device.type == "cpu":
        return _onednn_bf16()
    return None


def _onednn_bf16() -> bool | None:
    """oneDNN's answer; torch's own test suite asks it so (no public API says it)."""
    probe = getattr(torch.ops.mkldnn, "_is_mkldnn_bf16_supported", None)
    try:
        return None if probe is None else bool(probe())
    except RuntimeError:  # a build without oneDNN
        return None


def resolve_device(name: str) -> torch.device:
    """The torch device a config's ``device`` names (``auto``: CUDA when available); a
    ConfigError naming what is missing when it is not usable here."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"device {name!r} is not a device torch knows; give cpu, cuda, "
                          "cuda:<index>, mps or auto") from None
    if device.type not in ("cpu", "cuda", "mps"):
        raise ConfigError(f"device {name!r}: miaudit runs on cpu, cuda[:index] or mps")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {name!r} requested but CUDA is not available here")
    if device.type == "cuda" and device.index is not None \
            and device.index >= torch.cuda.device_count():
        raise ConfigError(f"device {name!r}: only {torch.cuda.device_count()} CUDA device(s)")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device {name!r} requested but MPS is not available here")
    return device
