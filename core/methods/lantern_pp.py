"""lantern_pp: LANTERN++ (arXiv 2502.06352): a static draft tree and a multiplicative bound.

The head drafts the static tree of core/trees.py (STATIC_TREE): each node's children are sampled
from the head's processed distribution q without replacement. Trying child x with the target's p:
the longest prefix of x's nearest codebook neighbours whose summed p stays <= (lambda - 1) p(x)
gives its mass to x (p~(x) <= lambda p(x)); x is accepted with min(1, p~(x) / q(x)); on rejection
p becomes normalize(max(0, p~ - q)) and x leaves q (the residual of sampling without replacement).
lambda = 1 is lossless tree speculative sampling with sampled drafts.
"""
from __future__ import annotations

import torch

from ..acceptance import bounded_target
from ..decoding import MethodContext
from ..trees import STATIC_TREE, Rule, _normalized, grow_static
from .eagle import tree_speculate


def bounded_sampled_rule(neighbours: torch.Tensor, k: int, lam: float) -> Rule:
    def rule(p, x, q):
        p_relaxed = bounded_target(p[None], torch.tensor([x]), neighbours, k, lam)[0]
        a = min(1.0, float(p_relaxed[x]) / max(float(q[x]), 1e-20))
        q_rest = q.clone()
        q_rest[x] = 0.0
        return a, _normalized((p_relaxed - q).clamp_min(0.0), p), _normalized(q_rest, q)
    return rule


def run(ctx: MethodContext):
    p = ctx.params
    k = min(p.lantern_k, ctx.neighbours.shape[1])
    grow = lambda hd, root, final, cap: grow_static(hd, root, final, STATIC_TREE, ctx.gen, cap)  # noqa: E731
    return (yield from tree_speculate(ctx, grow, bounded_sampled_rule(ctx.neighbours, k, p.lantern_lambda),
                                      sampled=True))


def expected_steps(params, grid: tuple[int, int]) -> int:
    """As eagle: about one step per cell."""
    return grid[0] * grid[1]
