"""gsd: Grouped Speculative Decoding (So, Shin, Kook, Park; ICCV 2025), lossy.

sjd's iteration with another acceptance probability: a guess x is tested on a cluster C of tokens
interchangeable with it, min(1, sum_C p / sum_C q). C is built per slot from the current target p:
the gsd_group tokens of the rank window around x, kept where |p(y) - p(x)| < gsd_gap and the squared
distance of their rows of the target's token-embedding table is at most a threshold (the gsd_dist
quantile of those distances over the table, so that one knob means the same on every model). On
rejection the residual stays sjd's token-level normalize(max(0, p - q)). gsd_group = 1 is sjd.
Not lossless: the cluster mass can pass a token the target alone would reject, p(x) = 0 included.
"""
from __future__ import annotations

import torch

from ..acceptance import grouped_accept_prob, rank_cluster
from ..decoding import MethodContext
from .sjd import independent_redraft, jacobi

TABLE_ROWS = 1024  # rows of the embedding table the distance quantile is taken over (all of a small one)


def distance_threshold(emb: torch.Tensor, quantile: float) -> float:
    """The quantile of squared L2 distances between distinct rows of emb (V, D) (its first TABLE_ROWS)."""
    e = emb[:TABLE_ROWS].float()
    d2 = torch.cdist(e, e).pow(2)
    return float(torch.quantile(d2[~torch.eye(len(e), dtype=torch.bool)], quantile))


def run(ctx: MethodContext):
    prm = ctx.params
    emb = ctx.target.tok_embeddings.weight.detach().float().cpu()  # (V, D)
    thr = distance_threshold(emb, prm.gsd_dist)

    def accept(p: torch.Tensor, q: torch.Tensor, x: int) -> float:
        close = (emb - emb[x]).pow(2).sum(1) <= thr                  # (V,)
        return float(grouped_accept_prob(p, q, rank_cluster(p, x, prm.gsd_group, prm.gsd_gap, close)))
    return (yield from jacobi(ctx, accept, independent_redraft))
