"""Up-samplers U_r (low-res draft tokens -> target-grid proposal) and the down-sampler D_r.

- pixel (default, training free): VQ-decode the low-res grid, resize x r in pixel space (bicubic),
  VQ-encode at the target resolution with the same tokenizer.
- nearest: repeat each token r x r.
D_r goes the other way through pixels (decode, area-resize / r, encode).
Token grids are (h, w) int64 tensors; the tokenizer is any ImageTokenizer (encode/decode).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F


def _device(tokenizer) -> torch.device:
    return next(tokenizer.parameters()).device


def pixel_upsample(tokens: torch.Tensor, r: int, tokenizer) -> torch.Tensor:
    """(h, w) -> (h r, w r) through pixel space. Token grids live on the CPU; pixels on the tokenizer's device."""
    img = tokenizer.decode(tokens[None].to(_device(tokenizer)))           # (1, 3, h f, w f)
    big = F.interpolate(img.float(), scale_factor=r, mode="bicubic", align_corners=False).clamp(-1, 1)
    return tokenizer.encode(big)[0].cpu()


def nearest_upsample(tokens: torch.Tensor, r: int, tokenizer=None) -> torch.Tensor:
    """(h, w) -> (h r, w r), each token repeated r x r."""
    return tokens.repeat_interleave(r, dim=0).repeat_interleave(r, dim=1)


def pixel_downsample(tokens: torch.Tensor, r: int, tokenizer) -> torch.Tensor:
    """(H, W) -> (H / r, W / r) through pixel space."""
    img = tokenizer.decode(tokens[None].to(_device(tokenizer)))
    small = F.interpolate(img.float(), scale_factor=1.0 / r, mode="area")
    return tokenizer.encode(small)[0].cpu()


UPSAMPLERS: dict[str, Callable] = {"pixel": pixel_upsample, "nearest": nearest_upsample}
