"""lantern_pp: LANTERN++ (arXiv 2502.06352): a static draft tree and a multiplicative bound.

The head drafts a static tree (static_tree: cpu, core/trees.py STATIC_TREE; paper, the released 57
nodes): each node's children are sampled from the head's processed distribution q without
replacement. Trying child x with the target's p: the longest prefix A of x's nearest codebook
neighbours whose summed p stays <= (lambda - 1) p(x) gives its mass to x (p~(x) <= lambda p(x)); x
is accepted with min(1, p~(x) / q(x)); x then leaves q (the residual of sampling without
replacement). What the next sibling is tried against (lantern_residual):
  moved     the paper's text: normalize(max(0, p~ - q))
  official  the released code's (its LlamaGen model): normalize(max(0, p - q')), p unrelaxed, q' the
            q of the try with x's first k + 1 neighbours zeroed (not renormalised) whenever A is not
            empty; all zero -> all ones, then normalised
At temperature 0, as the released code: the static tree's children are the head's top-ranked tokens,
and x passes iff it is the argmax of the plain softmax with p(x) raised within (lambda - 1) p(x).
lambda = 1 is lossless tree speculative sampling with sampled drafts under moved (under official, q'
still drops x's neighbours wherever the nearest one holds no p, as in the code).
"""
from __future__ import annotations

import torch

from ..acceptance import bounded_target
from ..decoding import MethodContext
from ..trees import STATIC_TREE_OF, Rule, _normalized, greedy_relaxed_test, grow_static
from .eagle import tree_speculate


def bounded_sampled_rule(neighbours: torch.Tensor, k: int, lam: float, residual: str = "moved") -> Rule:
    def rule(p, x, q):
        p_relaxed = bounded_target(p[None], torch.tensor([x]), neighbours, k, lam)[0]
        a = min(1.0, float(p_relaxed[x]) / max(float(q[x]), 1e-20))
        q_rest = q.clone()
        q_rest[x] = 0.0
        if residual == "official":
            q_cut = q.clone()
            if k > 0 and float(p[neighbours[x, 0]]) <= (lam - 1.0) * float(p[x]):
                q_cut[neighbours[x, :k + 1]] = 0.0
            rest = (p - q_cut).clamp_min(0.0)
            if not bool((rest > 0).any()):
                rest = torch.ones_like(rest)
            return a, rest / rest.sum(), _normalized(q_rest, q)
        return a, _normalized((p_relaxed - q).clamp_min(0.0), p), _normalized(q_rest, q)
    return rule


def run(ctx: MethodContext):
    p = ctx.params
    k = min(p.lantern_k, ctx.neighbours.shape[1])
    tree = STATIC_TREE_OF[p.static_tree]
    grow = lambda hd, root, final, cap: grow_static(hd, root, final, tree, ctx.gen, cap)  # noqa: E731
    return (yield from tree_speculate(ctx, grow, bounded_sampled_rule(ctx.neighbours, k, p.lantern_lambda,
                                                                      p.lantern_residual), sampled=True,
                                      greedy=greedy_relaxed_test(ctx.neighbours, k, lam=p.lantern_lambda)))


def expected_steps(params, grid: tuple[int, int]) -> int:
    """As eagle: about one step per cell."""
    return grid[0] * grid[1]
