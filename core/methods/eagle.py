"""eagle: EAGLE-2 (Li et al. 2024) on image tokens, as LANTERN's code runs it for LlamaGen.

Each cycle, from the last committed cell (the root, sampled by the target):
  1. draft   the EAGLE head (one decoder layer on the target's features, core/models/eagle.py) grows
             a dynamic tree: tree_depth passes, tree_top_k children per expanded node, the
             tree_tokens - 1 best nodes by path probability kept (core/trees.py)
  2. verify  one target forward over the root and every node under the tree mask; down the tree
             each child x is accepted with p(x) (the drafts are chosen, not sampled: q = 1), a
             rejected one leaves p, which is renormalised before the next sibling; where no child
             is accepted the next token is drawn from what is left, at a leaf from p (the bonus)
  3. commit  the accepted path and that token; the path's K/V adopted into the cache
The output distribution equals the target's processed p (lossless). `tree_speculate` takes the
tree growth and the rule, so lantern (relaxed acceptance on this tree), lantern_pp (LANTERN++'s
static tree and bound) and vvs (verification skipping) share the loop.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..decoding import UNKNOWN, MethodContext, cells_of, timed
from ..trace import Step
from ..sampling import processed, sample
from ..trees import (GreedyTest, HeadDecoder, Rule, Tree, greedy_walk, grow_dynamic, plain_sampling, point_rule,
                     verify, walk)
from . import Result

Grow = Callable[[HeadDecoder, int, np.ndarray, int], Tree]   # (head, root cell, final, depth cap) -> Tree


def dynamic_growth(ctx: MethodContext) -> Grow:
    p = ctx.params
    return lambda hd, root, final, cap: grow_dynamic(hd, root, final, p.tree_tokens, min(p.tree_depth, cap),
                                                     p.tree_top_k)


def tree_record(tree: Tree, probs, verdict: list[int]) -> dict:
    """The trace's view of a verified tree: per node its parent, depth, token, the head's q, the
    target's p of the token at its parent (before any sibling was rejected) and the verdict."""
    p_of = [float(probs[0 if par < 0 else 1 + par][tok]) for par, tok in zip(tree.parent, tree.token)]
    return dict(parent=list(tree.parent), depth=list(tree.depth), token=list(tree.token),
                q=[round(x, 6) for x in tree.q], p=[round(x, 6) for x in p_of], verdict=verdict)


def start(ctx: MethodContext):
    """The target's decoder, the head's, and cell 0 drawn from the prefilled target (one pass)."""
    if ctx.head is None:
        raise ValueError("the tree methods need a draft head: the pair ships none")
    H, W = ctx.grid
    target = ctx.decoder(ctx.target, ctx.grid)
    hd = HeadDecoder(ctx.head, target)
    final = np.full(H * W, UNKNOWN, dtype=np.int64)
    f: dict = {}
    with timed(f, (target,)):
        target.prefill(features=True)
        final[0] = int(sample(target.p0[None], ctx.gen)[0])
        hd.features[0] = target.p0_feature
    return target, hd, final, Step("decode", "target", f["nfe"], f["wall_ms"], [[0, 0]], [int(final[0])],
                                   dict(fed=f["fed"]))


def draft_step(tree: Tree, root: int, wall_ms: float, nfe: int, fed: int, W: int) -> Step:
    order = list(range(len(tree)))[::-1]      # the best-ranked nodes of a cell listed last (drawn on top)
    return Step("draft", "drafter", nfe, wall_ms, cells_of([root + tree.depth[n] for n in order], W),
                [tree.token[n] for n in order], dict(fed=fed, nodes=len(tree), depth=max(tree.depth, default=0)))


def committed_unverified(ctx: MethodContext, hd: HeadDecoder, final: np.ndarray, tree: Tree,
                         root: int) -> tuple[list[int], list[int], dict]:
    """vvs, a cycle whose verification is skipped, as the released code does it: a root-to-leaf path of
    the tree just drafted, drawn uniformly over its leaves, is cut to the tree's mean path length
    (floored, the root counted, less one) and committed unverified; its last token is the next root.
    The head's features at those cells are the last ones the target computed, shifted along (the
    code's reuse_prev): cell root + j reads the feature of cell root - A + j. The next verify
    forward writes the cells into the target's cache (fused: more tokens, no extra pass).
    -> (cells, tokens, what the trace records of the choice)."""
    N = ctx.grid[0] * ctx.grid[1]
    leaves = [n for n in range(len(tree)) if not tree.children(n)]
    mean_len = sum(1 + tree.depth[n] for n in leaves) // len(leaves)
    leaf = leaves[int(torch.randint(len(leaves), (1,), generator=ctx.gen))]
    path = tree.ancestors(leaf) + [leaf]
    A = min(len(path), mean_len - 1, N - 1 - root)
    cells = [root + 1 + i for i in range(A)]
    toks = [tree.token[n] for n in path[:A]]
    final[cells] = toks
    for j in range(1, A + 1):
        hd.features[root + j] = hd.features[max(root - A + j, 0)]
    return cells, toks, dict(leaf=int(leaf), mean_len=int(mean_len),
                             tree=dict(parent=list(tree.parent), depth=list(tree.depth), token=list(tree.token),
                                       q=[round(x, 6) for x in tree.q]))


# vvs: (cycle index from 0, root cell, the tree just drafted, whether the last cycle was skipped)
#      -> whether this cycle skips verification
SkipRule = Callable[[int, int, Tree, bool], bool]


def plain_rows(target, out: dict, tree: Tree, root: int, sampling) -> torch.Tensor:
    """(1 + n, V) the plain softmax of the guided logits (no temperature, top-k, top-p) at the root and
    every node, from the verify forward's own features."""
    logits = target.gpt.output(out["hidden"]).float()
    cells = [root + 1] + [root + d + 1 for d in tree.depth]
    return processed(logits, plain_sampling(sampling), cells=cells)[0].cpu()


def tree_speculate(ctx: MethodContext, grow: Grow, rule: Rule, sampled: bool = False, skip: SkipRule | None = None,
                   greedy: GreedyTest | None = None):
    """The cycle loop of every tree method. greedy: at temperature 0, the released LANTERN code's test
    (trees.greedy_walk) instead of the rule."""
    H, W = ctx.grid
    N = H * W
    target, hd, final, first = start(ctx)
    yield first
    root, tried_total, accepted_total, unverified = 0, 0, 0, 0
    cycle, skipped = 0, False
    while root < N - 1:
        f: dict = {}
        with timed(f, (hd,)):
            tree = grow(hd, root, final, N - 1 - root)
        yield draft_step(tree, root, f["wall_ms"], f["nfe"], f["fed"], W)
        if skip is not None and skip(cycle, root, tree, skipped):
            f = {}
            with timed(f):
                cells, toks, why = committed_unverified(ctx, hd, final, tree, root)
            yield Step("decode", "drafter", 0, f["wall_ms"], cells_of(cells, W), toks, dict(fed=0, verified=False, **why))
            unverified += len(cells)
            root, cycle, skipped = cells[-1], cycle + 1, True
            continue
        f = {}
        with timed(f, (target,)):
            probs, out = verify(target, tree, root, final)
            if greedy is not None and ctx.sampling.temperature == 0.0:
                w = greedy_walk(tree, probs, plain_rows(target, out, tree, root, ctx.sampling), greedy)
            else:
                w = walk(tree, probs, rule, ctx.gen, sampled)
            cells = [root + 1 + i for i in range(len(w.path))]
            toks = [tree.token[n] for n in w.path]
            if root + 1 + len(w.path) < N:            # the token after the path (none past the last cell)
                cells.append(root + 1 + len(w.path))
                toks.append(w.token)
            final[cells] = toks
            if w.path:
                target.adopt(cells[:len(w.path)], toks[:len(w.path)], out["kv"], w.path)
            hd.features[root + 1] = out["hidden"][:, 0]
            for i, n in enumerate(w.path[:-1] if root + 1 + len(w.path) >= N else w.path):
                hd.features[root + 2 + i] = out["hidden"][:, 1 + n]
        tried_total += len(w.tried)
        accepted_total += len(w.path)
        last = cells_of([cells[-1]], W)[0]
        drawn = len(cells) > len(w.path)
        yield Step("verify", "target", f["nfe"], f["wall_ms"], cells_of(cells, W), toks, dict(
            fed=f["fed"], judged=cells_of([root + tree.depth[n] for n, _, _ in w.tried], W),
            accepted=[ok for _, _, ok in w.tried], prob=[round(a, 6) for _, a, _ in w.tried],
            resampled=last if drawn and not w.bonus else None, bonus=last if drawn and w.bonus else None,
            tree=tree_record(tree, probs, w.verdict)))
        root, cycle, skipped = cells[-1], cycle + 1, False
    return Result(tokens=final.reshape(H, W), passed_fraction=accepted_total / max(tried_total, 1),
                  kept_fraction=(accepted_total + unverified) / N)


def run(ctx: MethodContext):
    return (yield from tree_speculate(ctx, dynamic_growth(ctx), point_rule))


def expected_steps(params, grid: tuple[int, int]) -> int:
    """Two steps per cycle, about two cells per cycle at a typical acceptance on image tokens."""
    return grid[0] * grid[1]
