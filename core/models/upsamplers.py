"""Trained up-sampler networks for mulo's U_r (core/upsampling.py runs them; the embedded family trains
and ships them).

- SRNet: super-resolution in pixel space. The low-resolution decode (B, 3, h, w) -> (B, 3, h r, w r):
  bicubic up-sampling plus a residual predicted at the low resolution and unfolded by pixel shuffle.
  The residual's last layer starts at zero, so an untrained network is exactly bicubic.
- TokenUpsampler: low-resolution tokens (B, h, w) -> logits (B, V, h r, w r) over the codebook for
  every target cell; the proposal is the argmax.

Both are fully convolutional: the network trained for r serves any grid whose sides r divides.
Knows nothing of files or of the engine.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class SRConfig:
    scale: int = 2          # r
    width: int = 48         # channels of the residual branch
    depth: int = 5          # 3x3 convolutions between head and tail

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class TokenUpsamplerConfig:
    scale: int = 2          # r
    vocab_size: int = 512   # V
    embed: int = 32         # width of a low-resolution token's embedding
    width: int = 64         # channels at the low resolution
    depth: int = 4          # 3x3 convolutions at the low resolution
    cell: int = 16          # channels per target cell after the pixel shuffle

    def to_dict(self) -> dict:
        return asdict(self)


def _body(width: int, depth: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Conv2d(width, width, 3, padding=1), nn.GELU()]
    return nn.Sequential(*layers)


class SRNet(nn.Module):
    def __init__(self, cfg: SRConfig):
        super().__init__()
        self.cfg = cfg
        r = cfg.scale
        self.head = nn.Conv2d(3, cfg.width, 3, padding=1)
        self.body = _body(cfg.width, cfg.depth)
        self.tail = nn.Conv2d(cfg.width, 3 * r * r, 3, padding=1)
        nn.init.zeros_(self.tail.weight)
        nn.init.zeros_(self.tail.bias)

    def forward(self, low: torch.Tensor) -> torch.Tensor:
        """(B, 3, h, w) in [-1, 1] -> (B, 3, h r, w r) in [-1, 1]."""
        r = self.cfg.scale
        base = F.interpolate(low, scale_factor=r, mode="bicubic", align_corners=False)
        x = F.gelu(self.head(low))
        return (base + F.pixel_shuffle(self.tail(self.body(x) + x), r)).clamp(-1, 1)


class TokenUpsampler(nn.Module):
    def __init__(self, cfg: TokenUpsamplerConfig):
        super().__init__()
        self.cfg = cfg
        r = cfg.scale
        self.embed = nn.Embedding(cfg.vocab_size, cfg.embed)
        self.head = nn.Conv2d(cfg.embed, cfg.width, 3, padding=1)
        self.body = _body(cfg.width, cfg.depth)
        self.unfold = nn.Conv2d(cfg.width, cfg.cell * r * r, 3, padding=1)
        self.out = nn.Conv2d(cfg.cell, cfg.vocab_size, 1)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, h, w) token ids -> (B, V, h r, w r) logits."""
        x = F.gelu(self.head(self.embed(tokens).permute(0, 3, 1, 2)))
        x = self.body(x) + x
        return self.out(F.gelu(F.pixel_shuffle(self.unfold(x), self.cfg.scale)))
