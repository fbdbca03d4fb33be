"""lantern (arXiv 2410.03355): EAGLE-2's dynamic tree (eagle.py) with a relaxed acceptance.

Trying child x at a node with the target's distribution p there: the draft token's nearest
codebook neighbours (normalized codes, itself excluded, nearest first), the longest prefix whose
summed p stays <= delta, give their mass to x (p~); x is accepted with p~(x) (drafts are chosen,
q = 1, as in LANTERN's dynamic-tree code); on rejection x and the neighbours whose mass it took
leave p~, which is renormalised before the next sibling. delta = 0 is eagle.
"""
from __future__ import annotations

import torch

from ..acceptance import relaxed_target
from ..decoding import MethodContext
from ..trees import Rule, _normalized
from .eagle import dynamic_growth, tree_speculate


def relaxed_point_rule(neighbours: torch.Tensor, k: int, delta: float) -> Rule:
    def rule(p, x, q):
        p_relaxed = relaxed_target(p[None], torch.tensor([x]), neighbours, k, delta)[0]
        rest = p_relaxed.clone()
        rest[x] = 0.0
        return min(1.0, float(p_relaxed[x])), _normalized(rest, p), None
    return rule


def run(ctx: MethodContext):
    k = min(ctx.params.lantern_k, ctx.neighbours.shape[1])
    return (yield from tree_speculate(ctx, dynamic_growth(ctx), relaxed_point_rule(ctx.neighbours, k,
                                                                                    ctx.params.delta)))


def expected_steps(params, grid: tuple[int, int]) -> int:
    """As eagle: about one step per cell."""
    return grid[0] * grid[1]
