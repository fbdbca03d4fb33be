"""The target's log-likelihood of a token grid: how probable the target finds what a method produced.

One teacher-forced forward of the target over the whole grid, without a cache (GPT.forward), under
the processed distribution every method samples from (CFG with its interval, temperature, top-k /
top-p). Its mean over the cells is the yardstick `loglik` (nats per token); a lossless method's
output matches ar's in expectation. Works for every model pair the engine runs, LlamaGen included:
it needs only the target and the prompt. A token's probability is floored at IMPOSSIBLE (1e-12,
-27.6 nats; a token top-k / top-p or greedy rules out has probability 0), so that one absurd token
cannot make a mean infinite; `impossible` counts the cells at the floor (the floor understates a
loss, never overstates it).
"""
from __future__ import annotations

import math

import numpy as np
import torch

from .config import SamplingConfig
from .models.pair import ModelPair
from .sampling import processed

IMPOSSIBLE = 1e-12   # probability floor: a token below it (or ruled out) counts as this probable


@torch.inference_mode()
def target_distribution(pair: ModelPair, prompt: str, tokens, sampling: SamplingConfig) -> torch.Tensor:
    """(H, W) token grid -> (H·W, V) float32: the target's processed distribution at every cell given
    the grid's tokens before it (one teacher-forced, cache-free forward; row t is p_target(· | prompt, x_<t))."""
    grid = pair.grid
    ids, mask = pair.caption(prompt, grid)
    B = 1 if sampling.cfg == 1.0 else 2                      # conditional row, then the null caption
    dev = pair.device
    captions = ids[None].expand(B, *ids.shape).to(dev)
    masks = mask[None].expand(B, -1).to(dev)
    drop = torch.tensor([False, True][:B], device=dev)
    x = torch.as_tensor(np.asarray(tokens), dtype=torch.long).reshape(1, -1).to(dev)   # (1, N)
    N = x.shape[1]
    if N != grid[0] * grid[1]:
        raise ValueError(f"a {grid[0]}x{grid[1]} target scores {grid[0] * grid[1]} tokens; got {N}")
    logits = pair.target(captions, masks, x.expand(B, -1), grid, drop=drop)          # (B, N, V)
    return processed(logits, sampling, cells=torch.arange(N))[0]                      # (N, V)


@torch.inference_mode()
def token_logprobs(pair: ModelPair, prompt: str, tokens, sampling: SamplingConfig) -> np.ndarray:
    """(H, W) token grid -> (H·W,) log p_target(x_t | prompt, x_<t) under the processed distribution."""
    p = target_distribution(pair, prompt, tokens, sampling)
    x = torch.as_tensor(np.asarray(tokens), dtype=torch.long).reshape(-1)
    got = p.gather(-1, x[:, None].to(p.device))[:, 0].double().cpu().numpy()
    return np.log(np.maximum(got, IMPOSSIBLE))


def loglik(pair: ModelPair, prompt: str, tokens, sampling: SamplingConfig, probs=None) -> dict:
    """{'loglik': mean log-probability per token (nats), 'impossible': cells at the floor}. probs
    (optional): p_target of each token, already read from target_distribution (no forward then)."""
    lp = token_logprobs(pair, prompt, tokens, sampling) if probs is None else \
        np.log(np.maximum(np.asarray(probs, np.float64).reshape(-1), IMPOSSIBLE))
    return dict(loglik=float(lp.mean()), impossible=int((lp <= math.log(IMPOSSIBLE) + 1e-9).sum()))


def sampling_of(trace) -> SamplingConfig:
    """The processed distribution a trace's run sampled from (its params hold every sampling knob)."""
    names = SamplingConfig.__dataclass_fields__
    return SamplingConfig(**{k: v for k, v in trace.params.items() if k in names})


def against_ar(pair: ModelPair, trace, ar_trace, image=None, ar_image=None, probs=None) -> dict:
    """One run's per-image yardsticks against the ar run of the same prompt and seed: sharpness ÷ ar
    (high-frequency energy ratio), both log-likelihoods and their gap (nats per token, under the
    processed distribution of the run). Images are decoded from the traces unless given; probs: the
    run's own tokens' p_target when a caller has read them already (core.ambiguity's p_final)."""
    from . import engine, yardsticks
    image = engine.decode_image(trace.tokens, pair.tokenizer) if image is None else image
    ar_image = engine.decode_image(ar_trace.tokens, pair.tokenizer) if ar_image is None else ar_image
    s = sampling_of(trace)
    ll, ar_ll = loglik(pair, trace.prompt, trace.tokens, s, probs), loglik(pair, ar_trace.prompt, ar_trace.tokens, s)
    return dict(sharpness=yardsticks.laplacian_energy(image) / max(yardsticks.laplacian_energy(ar_image), 1e-12),
                loglik=ll["loglik"], ar_loglik=ar_ll["loglik"], loglik_gap=ll["loglik"] - ar_ll["loglik"],
                impossible=ll["impossible"])
