"""Up-samplers U_r (low-res draft tokens -> target-grid proposal) and the down-sampler D_r.

- pixel (default, training free): VQ-decode the low-res grid, resize x r in pixel space (bicubic),
  VQ-encode at the target resolution with the same tokenizer.
- nearest: repeat each token r x r.
- sr (trained): VQ-decode, a super-resolution network (models/upsamplers.SRNet) x r, VQ-encode.
- learned (trained): a token-space network (models/upsamplers.TokenUpsampler) gives a distribution
  over the codebook for every target cell; the proposal is its argmax. Trained on the data: the scene's
  tokens given its low-resolution tokens.
- distilled (trained): the same network trained on the target's own samples against the target's
  processed distribution at every cell (core/embedded/train.DistilledJob); the proposal is its argmax.
The trained ones take their network as `net` (the pair loads it: ModelPair.upsampler_net); the
others ignore it. D_r goes the other way through pixels (decode, area-resize / r, encode).
Token grids are (h, w) int64 tensors; the tokenizer is any ImageTokenizer (encode/decode).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F


def _device(tokenizer) -> torch.device:
    return next(tokenizer.parameters()).device


def pixel_upsample(tokens: torch.Tensor, r: int, tokenizer, net=None) -> torch.Tensor:
    """(h, w) -> (h r, w r) through pixel space. Token grids live on the CPU; pixels on the tokenizer's device."""
    img = tokenizer.decode(tokens[None].to(_device(tokenizer)))           # (1, 3, h f, w f)
    big = F.interpolate(img.float(), scale_factor=r, mode="bicubic", align_corners=False).clamp(-1, 1)
    return tokenizer.encode(big)[0].cpu()


def nearest_upsample(tokens: torch.Tensor, r: int, tokenizer=None, net=None) -> torch.Tensor:
    """(h, w) -> (h r, w r), each token repeated r x r."""
    return tokens.repeat_interleave(r, dim=0).repeat_interleave(r, dim=1)


def pixel_downsample(tokens: torch.Tensor, r: int, tokenizer) -> torch.Tensor:
    """(H, W) -> (H / r, W / r) through pixel space."""
    img = tokenizer.decode(tokens[None].to(_device(tokenizer)))
    small = F.interpolate(img.float(), scale_factor=1.0 / r, mode="area")
    return tokenizer.encode(small)[0].cpu()


@torch.no_grad()
def sr_upsample(tokens: torch.Tensor, r: int, tokenizer, net) -> torch.Tensor:
    """(h, w) -> (h r, w r) through pixel space, the resize a trained super-resolution network."""
    _check_net(net, r, "sr")
    img = tokenizer.decode(tokens[None].to(_device(tokenizer)))
    return tokenizer.encode(net(img.float()))[0].cpu()


@torch.no_grad()
def learned_logits(tokens: torch.Tensor, r: int, net, name: str = "learned") -> torch.Tensor:
    """(h, w) -> (V, h r, w r): a token-space up-sampler's (learned, distilled) logits for every target cell."""
    _check_net(net, r, name)
    return net(tokens[None].to(next(net.parameters()).device))[0]


def learned_upsample(tokens: torch.Tensor, r: int, tokenizer, net) -> torch.Tensor:
    """(h, w) -> (h r, w r): the argmax of the learned up-sampler's distribution at every cell."""
    return learned_logits(tokens, r, net).argmax(0).cpu()


def distilled_upsample(tokens: torch.Tensor, r: int, tokenizer, net) -> torch.Tensor:
    """(h, w) -> (h r, w r): the argmax of the distilled up-sampler's distribution at every cell."""
    return learned_logits(tokens, r, net, "distilled").argmax(0).cpu()


def _check_net(net, r: int, name: str) -> None:
    if net is None or net.cfg.scale != r:
        raise ValueError(f"upsampler={name} at scale={r} needs its trained network for x{r}"
                         + ("" if net is None else f"; got one trained for x{net.cfg.scale}"))


UPSAMPLERS: dict[str, Callable] = {"pixel": pixel_upsample, "nearest": nearest_upsample, "sr": sr_upsample,
                                   "learned": learned_upsample, "distilled": distilled_upsample}
TRAINED = ("sr", "learned", "distilled")   # the up-samplers whose network the pair must ship
TOKEN_SPACE = ("learned", "distilled")     # trained up-samplers with a distribution q at every cell
