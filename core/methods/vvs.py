"""vvs: verification skipping (VVS, arXiv 2511.13587, CVPR 2026) on eagle's dynamic tree.

After each verified cycle (eagle's: tree, one target forward, lossless walk) come vvs_skip cycles
(vvs_schedule=uniform; dynamic: only after a verified cycle whose accepted path reached half the
tree's depth, where the head has been right)
that the target never checks: the head drafts a chain of tree_depth tokens, each sampled from its
processed q, reading its own predicted features where the target's would be (the stale features
VVS reuses), and the chain is committed as it is. The next verify forward writes those cells into
the target's cache (fused into it). Lossy by design; vvs_skip = 0 is eagle. The paper's own
schedule and token selector are not public; this is its uniform-schedule reading.
"""
from __future__ import annotations

from ..decoding import MethodContext
from ..trees import point_rule
from .eagle import dynamic_growth, tree_speculate


def run(ctx: MethodContext):
    p = ctx.params
    return (yield from tree_speculate(ctx, dynamic_growth(ctx), point_rule, skip=p.vvs_skip,
                                      schedule=p.vvs_schedule))


def expected_steps(params, grid: tuple[int, int]) -> int:
    """Fewer than eagle: each skipped cycle commits tree_depth cells in one step."""
    return grid[0] * grid[1] // 2
