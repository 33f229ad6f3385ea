"""Batch-wise data augmentation on tensors (no per-sample Python transforms)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def random_crop(x: torch.Tensor, padding: int, generator: torch.Generator) -> torch.Tensor:
    """Reflect-pad by ``padding`` and crop back at an independent random offset per sample."""
    if padding <= 0 or x.dim() != 4:
        return x
    batch, _, height, width = x.shape
    padded = F.pad(x, (padding,) * 4, mode="reflect")
    offset_y = torch.randint(0, 2 * padding + 1, (batch,), generator=generator)
    offset_x = torch.randint(0, 2 * padding + 1, (batch,), generator=generator)
    rows = (offset_y[:, None] + torch.arange(height))[:, :, None].to(x.device)
    cols = (offset_x[:, None] + torch.arange(width))[:, None, :].to(x.device)
    samples = torch.arange(batch, device=x.device)[:, None, None]
    # Advanced indexing puts the indexed dims first: (B, H, W, C) -> (B, C, H, W).
    return padded.permute(0, 2, 3, 1)[samples, rows, cols].permute(0, 3, 1, 2).contiguous()


def random_flip(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Flip each image horizontally with probability 1/2."""
    if x.dim() != 4:
        return x
    flip = (torch.rand(len(x), generator=generator) < 0.5).to(x.device)
    return torch.where(flip[:, None, None, None], x.flip(-1), x)


def shift(x: torch.Tensor, dx: int, dy: int) -> torch.Tensor:
    """Translate images by (dx, dy) pixels with reflect padding (LiRA/RMIA query shifts)."""
    if dx == 0 and dy == 0:
        return x
    pad = max(abs(dx), abs(dy))
    padded = F.pad(x, (pad,) * 4, mode="reflect")
    height, width = x.shape[-2:]
    top, left = pad - dy, pad - dx
    return padded[..., top : top + height, left : left + width]


def augment(x: torch.Tensor, crop_padding: int, flip: bool,
            generator: torch.Generator) -> torch.Tensor:
    """The training augmentation: random crop (if ``crop_padding``) then random flip."""
    x = random_crop(x, crop_padding, generator)
    return random_flip(x, generator) if flip else x
