"""lantern (arXiv 2410.03355): sd with a relaxed target probability for the draft token.

The draft token's nearest codebook neighbours (normalized codes, itself excluded, nearest first):
the longest prefix whose summed p stays <= delta gives its mass to the draft token (p~), then the
exact test min(1, p~/q) and, on rejection, the residual normalize(max(0, p~ - q)). delta = 0 is sd.
"""
from __future__ import annotations

from ..acceptance import relaxed_target
from ..decoding import MethodContext
from .sd import relaxed_rule, speculate


def run(ctx: MethodContext):
    k = min(ctx.params.lantern_k, ctx.neighbours.shape[1])
    return (yield from speculate(ctx, relaxed_rule(
        lambda p, drafts: relaxed_target(p, drafts, ctx.neighbours, k, ctx.params.delta))))


def expected_steps(params, grid: tuple[int, int]) -> int:
    """As sd: about (gamma + 1) / 2 steps per cell."""
    return grid[0] * grid[1] * (params.gamma + 1) // 2
