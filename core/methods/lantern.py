"""lantern (arXiv 2410.03355): EAGLE-2's dynamic tree (eagle.py) with a relaxed acceptance.

Trying child x at a node with the target's distribution p there: the draft token's nearest
codebook neighbours (itself excluded, nearest first), the longest prefix A whose summed p stays
<= delta, give their mass to x (p~); x is accepted with p~(x) (drafts are chosen, q = 1, as in
LANTERN's dynamic-tree code). What the next sibling is tried against after a rejection
(lantern_residual):
  moved     the papers' text: p~ without x, renormalised (x and A leave p)
  official  the released code's: x leaves p and, whenever A is not empty (the nearest neighbour's p
            alone is within the budget), so do x's first k + 1 neighbours, however many A held;
            all zero -> every code equally likely (the code's all-ones fallback), then renormalised.
            With k at the codebook's size every code leaves p and the next draw is uniform.
At temperature 0 (greedy_of) the released code's greedy test: x passes iff it is the argmax of the
plain softmax with p(x) alone raised, and the longest passing root-to-leaf path is kept.
delta = 0 is eagle under moved; under official a rejection still takes x's first k + 1 neighbours out
wherever the nearest one holds no mass (a prefix of p = 0 is within a budget of 0, as in the code).
"""
from __future__ import annotations

import torch

from ..acceptance import relaxed_target
from ..decoding import MethodContext
from ..trees import Rule, _normalized, greedy_relaxed_test
from .eagle import dynamic_growth, tree_speculate


def released_rest(p: torch.Tensor, x: int, neighbours: torch.Tensor, k: int, moved_any: bool) -> torch.Tensor:
    """The released LANTERN code's distribution after x is rejected: x zeroed in p and, when the
    relaxation moved anything, x's first k + 1 neighbours too; all-ones where nothing is left; normalised."""
    rest = p.clone()
    rest[x] = 0.0
    if moved_any:
        rest[neighbours[x, :k + 1]] = 0.0
    if not bool((rest > 0).any()):
        rest = torch.ones_like(rest)
    return rest / rest.sum()


def relaxed_point_rule(neighbours: torch.Tensor, k: int, delta: float, residual: str = "moved") -> Rule:
    def rule(p, x, q):
        p_relaxed = relaxed_target(p[None], torch.tensor([x]), neighbours, k, delta)[0]
        a = min(1.0, float(p_relaxed[x]))
        if residual == "official":
            moved_any = k > 0 and float(p[neighbours[x, 0]]) <= delta
            return a, released_rest(p, x, neighbours, k, moved_any), None
        rest = p_relaxed.clone()
        rest[x] = 0.0
        return a, _normalized(rest, p), None
    return rule


def rule_of(ctx: MethodContext) -> Rule:
    """lantern's rule with the run's delta, k (capped by the neighbour table) and residual (vvs shares it)."""
    p = ctx.params
    return relaxed_point_rule(ctx.neighbours, min(p.lantern_k, ctx.neighbours.shape[1]), p.delta, p.lantern_residual)


def greedy_of(ctx: MethodContext):
    """Temperature 0 as the released code: x passes iff it is the argmax of the plain softmax with p(x)
    raised by its neighbours' mass within delta (trees.greedy_relaxed_test); the longest passing path."""
    p = ctx.params
    return greedy_relaxed_test(ctx.neighbours, min(p.lantern_k, ctx.neighbours.shape[1]), delta=p.delta)


def run(ctx: MethodContext):
    return (yield from tree_speculate(ctx, dynamic_growth(ctx), rule_of(ctx), greedy=greedy_of(ctx)))


def expected_steps(params, grid: tuple[int, int]) -> int:
    """As eagle: about one step per cell."""
    return grid[0] * grid[1]
