"""How sure the target was at each cell of a run: the entropy of its processed distribution (nats)
and the share of that distribution's mass on its single most probable token, per cell.

The distribution per cell is the one every method samples from (CFG with its interval, temperature,
top-k / top-p as the run had them: likelihood.sampling_of), read from one teacher-forced, cache-free
forward of the target over the run's *final* tokens (likelihood.target_distribution): each cell's
distribution given the final tokens before it in raster order. That is the context after the run,
not the one a verify pass saw (a proposal's tokens before the cell), so the numbers say how
ambiguous the image the run produced is at each cell, to set beside what the run's tests measured.

Also the numbers one sentence of the view is built from (median entropy, the share of cells whose
top-1 mass is below one half, the correlation of the tested values with entropy). Pure computation:
no Gradio here.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from .likelihood import sampling_of, target_distribution

UNSURE = 0.5   # a cell whose top-1 token has less mass than this is counted as ambiguous


@dataclass(frozen=True)
class Ambiguity:
    """The target's uncertainty at every cell of one run's final grid."""
    entropy: np.ndarray      # (H, W) float64, nats: -sum p log p of the processed distribution
    top1: np.ndarray         # (H, W) float64: max p, the mass on the most probable token
    top1_token: np.ndarray   # (H, W) int64: that token
    p_final: np.ndarray      # (H, W) float64: p of the token the run kept at the cell
    vocab_size: int          # V (the entropy is at most log V)
    seconds: float           # wall clock of the forward and the reductions
    sampling: dict           # the sampling knobs the distribution was processed with


def per_cell(p: torch.Tensor, final) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(N, V) probabilities and the (H, W) final grid -> (entropy, top-1 mass, top-1 token, p of the
    final token), each (H, W). 0 log 0 counts as 0 (torch.special.entr)."""
    shape = np.asarray(final).shape
    entropy = torch.special.entr(p).sum(-1, dtype=torch.float64)
    top1, arg = p.max(-1)
    x = torch.as_tensor(np.asarray(final), dtype=torch.long).reshape(-1, 1).to(p.device)
    got = p.gather(-1, x)[:, 0]
    return tuple(a.double().cpu().numpy().reshape(shape) if a.is_floating_point() else
                 a.cpu().numpy().astype(np.int64).reshape(shape) for a in (entropy, top1, arg, got))


def measure(pair, trace) -> Ambiguity:
    """One cache-free forward of the pair's target over the trace's final tokens, under the run's
    processed distribution, reduced to the per-cell numbers; timed."""
    t0 = time.perf_counter()
    s = sampling_of(trace)
    p = target_distribution(pair, trace.prompt, trace.tokens, s)
    entropy, top1, top1_token, p_final = per_cell(p, trace.tokens)
    return Ambiguity(entropy, top1, top1_token, p_final, int(p.shape[-1]), time.perf_counter() - t0,
                     dict(cfg=s.cfg, temperature=s.temperature, top_k=s.top_k, top_p=s.top_p,
                          cfg_interval=s.cfg_interval))


def summary(entropy: np.ndarray, top1: np.ndarray, tested: np.ndarray | None = None) -> dict:
    """The numbers of the view's sentence, all from these arrays: the median entropy (nats) over every
    cell, the share of cells whose top-1 mass is below UNSURE, and, where `tested` ((H, W), NaN where the
    run tested nothing) is given, the Pearson correlation of the tested values with entropy over the
    tested cells (NaN when fewer than two or either is constant) and their count."""
    entropy, top1 = np.asarray(entropy, np.float64), np.asarray(top1, np.float64)
    out = dict(median_entropy=float(np.median(entropy)), unsure_share=float(np.mean(top1 < UNSURE)),
               cells=int(entropy.size), tested=0, correlation=math.nan)
    if tested is not None:
        t = np.asarray(tested, np.float64)
        ok = np.isfinite(t)
        out["tested"] = int(ok.sum())
        if ok.sum() >= 2 and np.ptp(t[ok]) > 0 and np.ptp(entropy[ok]) > 0:
            out["correlation"] = float(np.corrcoef(entropy[ok], t[ok])[0, 1])
    return out
