"""vvs: verification skipping (VVS, arXiv 2511.13587, CVPR 2026), as HyattDD/VVS releases it for LlamaGen
(models/skip_utils_llamagen.py).

LANTERN's cycle (eagle's dynamic tree, one target forward, lantern's relaxed rule with delta,
lantern_k and lantern_residual; delta = 0 is eagle's), except that some cycles commit part of the
drafted tree with no target forward (eagle.committed_unverified: a random root-to-leaf path cut to
the tree's mean path length, the head reading the last target features shifted along). Which
cycles (cycle i counted from 0 over verified and skipped cycles alike; never while the root's cell
is 5 or less, i.e. before 6 tokens are committed):
  uniform  i mod vvs_interval = 1 (interval 5 in the released run script; 0 = never: lantern)
  dynamic  not right after a skip, and the drafted tree's paths agree: every other root-to-leaf
           path (in node order), per depth l the cosine of two paths' code vectors weighted by
           0.9^l / sum over the longest path's depths (not renormalised where a path is shorter),
           averaged over pairs of paths (0 with fewer than two) >= vvs_threshold (0.70 released)
Lossy by design. Two defects of the released code (an extra positional argument in the call of its
schedule, unset variables in its run script) stop it from running as shipped; the semantics here
are read from its functions.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..decoding import MethodContext
from ..trees import Tree
from .eagle import SkipRule, dynamic_growth, tree_speculate
from .lantern import greedy_of, rule_of

FIRST_SKIP_ROOT = 6     # no skip while 5 or fewer tokens are committed before the root (the released rule)
DEPTH_DECAY = 0.9


def code_vectors(tokenizer) -> torch.Tensor:
    """(V, d) the pair's code vectors, L2-normalised (the released code normalises its VQ codebook)."""
    vq = getattr(tokenizer, "quantize", None)
    codes = vq.codes() if vq is not None else tokenizer.codes()
    return F.normalize(codes.detach().float().cpu(), dim=-1)


def path_agreement(tree: Tree, codes: torch.Tensor) -> float:
    """The dynamic schedule's score of a drafted tree (see the module's text)."""
    leaves = [n for n in range(len(tree)) if not tree.children(n)]
    paths = [[tree.token[a] for a in tree.ancestors(n)] + [tree.token[n]] for n in leaves][::2]
    if len(paths) < 2:
        return 0.0
    longest = max(len(p) for p in paths)
    w = DEPTH_DECAY ** torch.arange(longest, dtype=torch.float32)
    w = w / w.sum()
    total, pairs = 0.0, 0
    for m in range(len(paths)):
        for n in range(m + 1, len(paths)):
            L = min(len(paths[m]), len(paths[n]))
            cos = (codes[paths[m][:L]] * codes[paths[n][:L]]).sum(-1)
            total += float((w[:L] * cos).sum())
            pairs += 1
    return total / pairs


def skip_rule(ctx: MethodContext) -> SkipRule:
    p = ctx.params
    codes = code_vectors(ctx.tokenizer) if p.vvs_schedule == "dynamic" else None

    def skip(cycle: int, root: int, tree: Tree, last_skipped: bool) -> bool:
        if root < FIRST_SKIP_ROOT:
            return False
        if p.vvs_schedule == "uniform":
            return p.vvs_interval > 0 and cycle % p.vvs_interval == 1
        return not last_skipped and path_agreement(tree, codes) >= p.vvs_threshold
    return skip


def run(ctx: MethodContext):
    return (yield from tree_speculate(ctx, dynamic_growth(ctx), rule_of(ctx), skip=skip_rule(ctx),
                                      greedy=greedy_of(ctx)))


def expected_steps(params, grid: tuple[int, int]) -> int:
    """Fewer than eagle: some cycles commit a path of the tree without a verify pass."""
    return grid[0] * grid[1] // 2
