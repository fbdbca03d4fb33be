"""The processed distribution and sampling with an explicit torch.Generator.

logits -> classifier-free guidance (u + s (c - u)) -> temperature -> top-k / top-p -> softmax, in
float32. Every acceptance rule and every sample uses this distribution. At temperature 0 the
distribution is the one-hot of the argmax.
"""
from __future__ import annotations

import torch

from .config import SamplingConfig


def guided_logits(logits: torch.Tensor, cfg_scale: float) -> torch.Tensor:
    """(2B, ..., V) logits with conditional rows first, unconditional last -> (B, ..., V). B rows when s = 1."""
    logits = logits.float()
    if cfg_scale == 1.0:
        return logits
    cond, uncond = logits.chunk(2, dim=0)
    return uncond + cfg_scale * (cond - uncond)


def processed(logits: torch.Tensor, s: SamplingConfig) -> torch.Tensor:
    """(2B, ..., V) raw logits -> (B, ..., V) probabilities of the processed distribution."""
    z = guided_logits(logits, s.cfg)
    if s.temperature == 0.0:
        return torch.nn.functional.one_hot(z.argmax(-1), z.shape[-1]).float()
    z = z / s.temperature
    if 0 < s.top_k < z.shape[-1]:
        kth = z.topk(s.top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if s.top_p < 1.0:
        srt, idx = z.sort(dim=-1, descending=True)
        cum = srt.softmax(-1).cumsum(-1)
        drop = cum - srt.softmax(-1) > s.top_p  # keep the smallest prefix reaching top_p
        z = z.masked_fill(drop.scatter(-1, idx, drop), float("-inf"))
    return z.softmax(-1)


def sample(probs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """(..., V) probabilities -> (...) token ids, drawn with gen."""
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=gen).view(probs.shape[:-1])
