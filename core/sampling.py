"""The processed distribution and sampling with an explicit torch.Generator.

logits -> classifier-free guidance (u + s (c - u)) -> temperature -> top-k / top-p -> softmax, in
float32. Every acceptance rule and every sample uses this distribution. At temperature 0 the
distribution is the one-hot of the argmax. With a cfg_interval, guidance applies to the first cells
of the raster only, counted as LlamaGen's generate.py counts them; later cells read the conditional
logits alone.
"""
from __future__ import annotations

import torch

from .config import SamplingConfig


def guided_logits(logits: torch.Tensor, cfg_scale: float, guided: torch.Tensor | None = None) -> torch.Tensor:
    """(2B, ..., V) logits with conditional rows first, unconditional last -> (B, ..., V). B rows when s = 1.

    guided: bool, broadcastable to (B, ...): where False the conditional logits pass unchanged."""
    logits = logits.float()
    if cfg_scale == 1.0:
        return logits
    cond, uncond = logits.chunk(2, dim=0)
    mixed = uncond + cfg_scale * (cond - uncond)
    return mixed if guided is None else torch.where(guided[..., None], mixed, cond)


def guided_cells(cells, cfg_interval: int) -> torch.Tensor | None:
    """Which predicted cells (raster indices) get guidance; None = all of them.

    LlamaGen's generate.py guides the prefill token (cell 0) and then decode steps i = 0, 1, ... (each
    predicting cell i + 1) while i <= cfg_interval: cells 0 .. cfg_interval + 1; -1 means every cell."""
    if cfg_interval < 0:
        return None
    return torch.as_tensor(cells) <= cfg_interval + 1


def top_p_mask(z: torch.Tensor, top_p: float) -> torch.Tensor:
    """(..., V) logits -> (..., V) bool, True where nucleus filtering drops the token.

    Sorted descending, a token is dropped iff the cumulative probability of the tokens *before* it
    exceeds top_p: the cumulative sum shifted by one place, never cum - p (which rounds differently)."""
    srt, idx = z.sort(dim=-1, descending=True)
    over = srt.softmax(-1).cumsum(-1) > top_p
    drop = torch.zeros_like(over)
    drop[..., 1:] = over[..., :-1]
    return drop.scatter(-1, idx, drop)


def processed(logits: torch.Tensor, s: SamplingConfig, cells=None) -> torch.Tensor:
    """(2B, ..., V) raw logits -> (B, ..., V) probabilities of the processed distribution.

    cells: the raster indices of the predicted cells ((T,) for (2B, T, V) logits, one index for
    (2B, V)); required when s.cfg_interval >= 0."""
    if s.cfg_interval >= 0 and cells is None:
        raise ValueError("cfg_interval needs the raster indices of the predicted cells")
    guided = guided_cells(cells, s.cfg_interval)
    z = guided_logits(logits, s.cfg, None if guided is None else guided.to(logits.device))
    if s.temperature == 0.0:
        return torch.nn.functional.one_hot(z.argmax(-1), z.shape[-1]).float()
    z = z / s.temperature
    if 0 < s.top_k < z.shape[-1]:
        kth = z.topk(s.top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if s.top_p < 1.0:
        z = z.masked_fill(top_p_mask(z, s.top_p), float("-inf"))
    return z.softmax(-1)


def sample(probs: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """(..., V) probabilities -> (...) token ids, drawn with gen."""
    flat = probs.reshape(-1, probs.shape[-1])
    return torch.multinomial(flat, 1, generator=gen).view(probs.shape[:-1])
