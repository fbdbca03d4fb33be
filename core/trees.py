"""Draft trees: the EAGLE head's decoding state, tree growth (EAGLE-2 dynamic, LANTERN++ static),
one-forward tree verification and the walk down the tree.

A cycle starts at a root: the last committed cell t, whose token the target sampled. The head
drafts a tree over the cells t + 1, t + 2, ... (a node at depth d sits at cell t + d; siblings are
alternatives for one cell). The target scores every node in one forward: the root is written, the
nodes are stand-ins that each read the committed cells and their own ancestors only (the tree
mask), so the distribution at a node equals the one a raster decoder would have after the path to
it. The walk then goes down from the root: at each node its children are tried in order by the
method's rule; the first accepted child becomes the next node, each rejected one turns the node's
distribution into its residual; where no child is accepted (or at a leaf) one token is drawn from
what is left. The accepted path is committed, its K/V adopted into the cache (Decoder.adopt), and
its features feed the head's next cycle.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np
import torch

from .acceptance import accepts, relaxed_target
from .config import SamplingConfig
from .decoding import Decoder
from .sampling import processed, sample

ROOT = -1


@dataclass
class Tree:
    """Nodes in the order the target reads them; parent ROOT for the root's children."""
    parent: list[int] = field(default_factory=list)
    token: list[int] = field(default_factory=list)
    depth: list[int] = field(default_factory=list)
    q: list[float] = field(default_factory=list)        # the head's probability of the token at its parent
    q_rows: dict = field(default_factory=dict)           # parent (ROOT or node) -> (V,) the head's distribution there

    def __len__(self) -> int:
        return len(self.token)

    def children(self, node: int) -> list[int]:
        return [n for n, p in enumerate(self.parent) if p == node]

    def ancestors(self, node: int) -> list[int]:
        out = []
        while self.parent[node] != ROOT:
            node = self.parent[node]
            out.append(node)
        return out[::-1]

    def mask(self) -> torch.Tensor:
        """(n, n) bool: node i reads node j iff j is an ancestor of i (itself is added by the forward)."""
        m = torch.zeros(len(self), len(self), dtype=torch.bool)
        for i in range(len(self)):
            for a in self.ancestors(i):
                m[i, a] = True
        return m


class HeadDecoder:
    """The draft head's cache for one image beside the target's Decoder: slot c holds x_c read with
    the target's feature that predicted it. `features[c]` (B, D) is that feature, for every cell the
    target has scored; `done` cells have their slot written with it."""

    def __init__(self, head, target: Decoder):
        self.head, self.target = head, target
        B = target.captions.shape[0]
        self.cache = head.new_cache(B, target.n_cells, target.device, target.cache.k.dtype)
        self.features: dict[int, torch.Tensor] = {}
        self.captions: torch.Tensor | None = None
        self.done = 0
        self.nfe = 0
        self.fed = 0

    def _rope(self, cells: list[int]) -> torch.Tensor:
        gpt = self.target.gpt
        return gpt.rope(self.target.grid, self.target.device)[gpt.cfg.prefix_len + torch.tensor(cells)]

    def _captions(self) -> torch.Tensor | None:
        """A LANTERN head's caption-slot values, from the target's prefix features (once per image)."""
        if not getattr(self.head.cfg, "caption_slots", False):
            return None
        if self.captions is None:
            feats = self.target.prefix_features[:, :-1]
            self.captions = self.head.caption_values(feats.to(self.cache.k.dtype))
        return self.captions

    def _cond(self, cells: list[int], B: int, D: int, dtype) -> torch.Tensor | None:
        cache = self.target.cache
        if cache.cond is None:
            return None
        zeros = torch.zeros(B, len(cells), D, dtype=dtype, device=self.target.device)
        return self.target.gpt._add_cell_conditioning(zeros, cache, torch.tensor(cells, device=self.target.device))

    def forward(self, cells: list[int], tokens: list[int], feats: torch.Tensor, write: list[bool],
                tree: torch.Tensor | None = None) -> torch.Tensor:
        """One head pass; feats (B, T, D) the feature each token reads -> (B, T, D) predicted features."""
        B, dev = self.cache.k.shape[1], self.target.device
        tok = torch.tensor(tokens, device=dev)[None].expand(B, -1)
        out = self.head.forward_cells(self.cache, tok, feats, torch.tensor(cells, device=dev), self._rope(cells),
                                      torch.tensor(write, device=dev), tree,
                                      self._cond(cells, B, feats.shape[-1], feats.dtype), self._captions())
        self.nfe += 1
        self.fed += len(cells)
        return out

    @torch.no_grad()
    def distribution(self, predicted: torch.Tensor, cells: list[int], plain: bool = False) -> torch.Tensor:
        """(B, T, D) predicted features at cells -> (T, V) the head's processed distribution of the
        next cells (the target's output head, then CFG, temperature, top-k / top-p as the target's);
        plain: the softmax of the guided logits alone (no temperature, top-k or top-p)."""
        logits = self.target.gpt.output(predicted).float()
        return processed(logits, plain_sampling(self.target.sampling) if plain else self.target.sampling,
                         cells=[c + 1 for c in cells])[0].cpu()


    @torch.no_grad()
    def catch_up(self, root: int, final: np.ndarray) -> torch.Tensor:
        """The first pass of a cycle: the committed cells done..root with their true features;
        returns the root's predicted feature (B, D)."""
        cells = list(range(self.done, root + 1))
        feats = torch.stack([self.features[c] for c in cells], dim=1)
        out = self.forward(cells, [int(final[c]) for c in cells], feats, [True] * len(cells))
        self.done = root + 1
        return out[:, -1]


def plain_sampling(s: SamplingConfig) -> SamplingConfig:
    """The sampling whose processed distribution is the softmax of the guided logits: what the released
    LANTERN code relaxes and tests at temperature 0."""
    return replace(s, temperature=1.0, top_k=0, top_p=1.0)


def _feed_nodes(hd: HeadDecoder, tree: Tree, nodes: list[int], root: int, predicted: dict) -> torch.Tensor:
    """A head pass over `nodes` (and their ancestors, re-fed as stand-ins: the positional cache holds
    one token per cell, a tree several); each reads its parent's predicted feature. -> (B, len(nodes), D)."""
    fed = sorted({a for n in nodes for a in tree.ancestors(n)} | set(nodes))
    feats = torch.stack([predicted[tree.parent[n]] for n in fed], dim=1)
    m = torch.zeros(len(fed), len(fed), dtype=torch.bool)
    pos = {n: i for i, n in enumerate(fed)}
    for n in fed:
        for a in tree.ancestors(n):
            m[pos[n], pos[a]] = True
    out = hd.forward([root + tree.depth[n] for n in fed], [tree.token[n] for n in fed], feats, [False] * len(fed), m)
    for n in fed:
        predicted[n] = out[:, pos[n]]
    return torch.stack([predicted[n] for n in nodes], dim=1)


def grow_dynamic(hd: HeadDecoder, root: int, final: np.ndarray, total: int, depth: int, top_k: int) -> Tree:
    """EAGLE-2: the root's top_k children; then depth - 1 times the current frontier (the top_k nodes
    of the newest level by path score, the sum of log q) is expanded by top_k children each; finally
    the total - 1 best nodes of every level (ancestors kept) form the tree. depth head passes."""
    predicted = {ROOT: hd.catch_up(root, final)}
    q_root = hd.distribution(predicted[ROOT][:, None], [root])[0]
    cand = Tree()                                            # every candidate; pruned at the end
    cand.q_rows[ROOT] = q_root
    score: list[float] = []

    def add_children(parent: int, q: torch.Tensor, base: float) -> None:
        v, ix = torch.topk(q, min(top_k, int((q > 0).sum())))
        for p_, x in zip(v.tolist(), ix.tolist()):
            cand.parent.append(parent)
            cand.token.append(x)
            cand.depth.append(1 if parent == ROOT else cand.depth[parent] + 1)
            cand.q.append(p_)
            score.append(base + math.log(max(p_, 1e-30)))

    add_children(ROOT, q_root, 0.0)
    level = list(range(len(cand)))
    for _ in range(depth - 1):
        frontier = sorted(level, key=lambda n: -score[n])[:top_k]
        if not frontier:
            break
        out = _feed_nodes(hd, cand, frontier, root, predicted)
        qs = hd.distribution(out, [root + cand.depth[n] for n in frontier])
        start = len(cand)
        for n, q in zip(frontier, qs):
            cand.q_rows[n] = q
            add_children(n, q, score[n])
        level = list(range(start, len(cand)))
    keep = set(sorted(range(len(cand)), key=lambda n: (-score[n], cand.depth[n]))[:max(total - 1, 1)])
    keep |= {a for n in list(keep) for a in cand.ancestors(n)}
    return _subtree(cand, sorted(keep))


def _subtree(cand: Tree, nodes: list[int]) -> Tree:
    """The candidates `nodes` (closed under ancestors, sorted) renumbered in that order."""
    new = {n: i for i, n in enumerate(nodes)}
    t = Tree(parent=[ROOT if cand.parent[n] == ROOT else new[cand.parent[n]] for n in nodes],
             token=[cand.token[n] for n in nodes], depth=[cand.depth[n] for n in nodes], q=[cand.q[n] for n in nodes])
    t.q_rows = {(ROOT if p == ROOT else new[p]): row for p, row in cand.q_rows.items() if p == ROOT or p in new}
    return t


# LANTERN++'s static tree for the shipped 512-code family (ours, shaped as LANTERN's naive_extend_57,
# scaled down: 4 + 7 + 7 + 5 nodes over 4 depths, wider at the low ranks). A path (a, b, ...) is the
# a-th sampled child of the root, then its b-th sampled child, ...
STATIC_TREE = ((0,), (1,), (2,), (3,),
               (0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (2, 0), (3, 0),
               (0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0), (0, 2, 0), (1, 1, 0), (2, 0, 0),
               (0, 0, 0, 0), (0, 0, 1, 0), (0, 1, 0, 0), (1, 0, 0, 0), (0, 0, 0, 1))


def tree_of_counts(children: dict[tuple, int]) -> tuple[tuple, ...]:
    """The static tree whose node `path` has children[path] children (ranks 0, 1, ...), as paths in
    breadth-first order (a node's children listed by rank); a node not in `children` is a leaf."""
    paths, level = [], [()]
    while level:
        level = [(*node, r) for node in level for r in range(children.get(node, 0))]
        paths += level
    return tuple(paths)


# The released LANTERN++ tree (naive_extend_57 of the LANTERN code): 57 nodes over 5 levels, 5 + 13 +
# 16 + 14 + 9, written here as the number of sampled children under each node.
PAPER_STATIC_TREE = tree_of_counts({
    (): 5,
    (0,): 4, (1,): 3, (2,): 3, (3,): 2, (4,): 1,
    (0, 0): 4, (0, 1): 3, (0, 2): 3, (0, 3): 2, (1, 0): 2, (1, 1): 1, (2, 0): 1,
    (0, 0, 0): 4, (0, 0, 1): 3, (0, 0, 2): 2, (0, 0, 3): 1, (0, 1, 0): 2, (0, 1, 1): 1, (0, 2, 0): 1,
    (0, 0, 0, 0): 3, (0, 0, 0, 1): 2, (0, 0, 1, 0): 2, (0, 0, 1, 1): 1, (0, 0, 2, 0): 1})
STATIC_TREE_OF = {"cpu": STATIC_TREE, "paper": PAPER_STATIC_TREE}


def grow_static(hd: HeadDecoder, root: int, final: np.ndarray, paths, gen: torch.Generator,
                depth_cap: int, predicted: dict | None = None) -> Tree:
    """LANTERN++: the static tree's shape, each node's children sampled from the head's processed
    distribution without replacement (the i-th child is a draw from q with the earlier siblings
    removed: what the verifier's residual assumes); at temperature 0 the head's top-ranked tokens of
    its plain softmax, as the released code. One head pass per depth that has children.
    predicted (dict, optional) receives the head's predicted feature (B, D) per node (ROOT: the root's)."""
    paths = [p for p in paths if len(p) <= depth_cap]
    predicted = {} if predicted is None else predicted
    predicted[ROOT] = hd.catch_up(root, final)
    t = Tree()
    index: dict[tuple, int] = {}
    greedy = hd.target.sampling.temperature == 0.0     # the released code: the head's top-k, not samples
    q_root = hd.distribution(predicted[ROOT][:, None], [root], plain=greedy)[0]
    t.q_rows[ROOT] = q_root
    for d in range(1, max((len(p) for p in paths), default=0) + 1):
        parents = sorted({index[p[:-1]] if len(p) > 1 else ROOT for p in paths if len(p) == d
                          if len(p) == 1 or p[:-1] in index})
        if d > 1:
            nodes = [n for n in parents if n != ROOT]
            if not nodes:
                break
            out = _feed_nodes(hd, t, nodes, root, predicted)
            for n, q in zip(nodes, hd.distribution(out, [root + t.depth[n] for n in nodes], plain=greedy)):
                t.q_rows[n] = q
        for par in parents:
            q = t.q_rows[par]
            wanted = [p for p in paths if len(p) == d and (p[:-1] == () if par == ROOT else index.get(p[:-1]) == par)]
            n_draw = min(max(p[-1] for p in wanted) + 1, int((q > 0).sum()))
            drawn = (torch.topk(q, n_draw).indices if greedy else
                     torch.multinomial(q, n_draw, replacement=False, generator=gen)).tolist()
            for p in sorted(wanted):
                if p[-1] >= n_draw:
                    continue
                index[p] = len(t)
                t.parent.append(par)
                t.token.append(drawn[p[-1]])
                t.depth.append(d)
                t.q.append(float(q[drawn[p[-1]]]))
    return t


def verify(dec: Decoder, tree: Tree, root: int, final: np.ndarray) -> tuple[torch.Tensor, dict]:
    """One target forward: the root written (with any stale committed cell), the nodes as stand-ins
    under the tree mask. -> ((1 + n, V) processed distributions, root's first; the forward's out)."""
    inputs = {root: (int(final[root]), True)}
    dec.plan(inputs, final)
    written = sorted(inputs)
    cells = written + [root + d for d in tree.depth]
    tokens = [inputs[c][0] for c in written] + tree.token
    write = [True] * len(written) + [False] * len(tree)
    m = torch.zeros(len(cells), len(cells), dtype=torch.bool)
    m[len(written):, len(written):] = tree.mask()
    out: dict = {}
    probs = dec.feed(cells, tokens, write, tree=m, out=out)
    r = written.index(root)
    rows = torch.cat([probs[r:r + 1], probs[len(written):]])
    out["hidden"] = torch.cat([out["hidden"][:, r:r + 1], out["hidden"][:, len(written):]], dim=1)
    return rows, out


# A rule tries one child x at a node: (p_cur (V,), x, q_cur (V,) or None) -> (acceptance probability,
# the node's distribution after x is rejected, q_cur after x is rejected or None)
Rule = Callable[[torch.Tensor, int, torch.Tensor | None], tuple[float, torch.Tensor, torch.Tensor | None]]


def _normalized(v: torch.Tensor, fallback: torch.Tensor) -> torch.Tensor:
    z = v.sum()
    return v / z if z > 0 else fallback


def point_rule(p: torch.Tensor, x: int, q) -> tuple[float, torch.Tensor, None]:
    """EAGLE-2's lossless test for deterministic (top-k selected) drafts: accept x with p(x); on
    rejection x leaves p, which is renormalised (recursive rejection without replacement)."""
    a = float(p[x])
    rest = p.clone()
    rest[x] = 0.0
    return a, _normalized(rest, p), None


@dataclass
class Walk:
    path: list[int]               # accepted nodes, root's child first
    token: int                    # the token drawn after the path (residual or bonus)
    bonus: bool                   # drawn from the last path node's own distribution (a leaf, or no child tried)
    tried: list[tuple[int, float, bool]]   # (node, acceptance probability, accepted) in the order tried
    verdict: list[int]            # per node: 1 accepted, 0 rejected, -1 not tried


def walk(tree: Tree, probs: torch.Tensor, rule: Rule, gen: torch.Generator, sampled: bool = False) -> Walk:
    """Down the tree from the root with `rule`; probs (1 + n, V): the root's row, then the nodes'.
    sampled: the children were drawn from the head's q (the rule reads q and updates it)."""
    verdict = [-1] * len(tree)
    tried: list[tuple[int, float, bool]] = []
    path: list[int] = []
    node, p_cur = ROOT, probs[0]
    q_cur = tree.q_rows.get(ROOT) if sampled else None
    untouched = True
    while True:
        for child in tree.children(node):
            a, p_next, q_next = rule(p_cur, tree.token[child], q_cur)
            ok = accepts(a, gen)
            tried.append((child, a, ok))
            verdict[child] = int(ok)
            if ok:
                break
            p_cur, q_cur, untouched = p_next, q_next, False
        else:
            tok = int(sample(p_cur[None], gen)[0])
            return Walk(path, tok, untouched, tried, verdict)
        path.append(child)
        node, p_cur, untouched = child, probs[1 + child], True
        q_cur = tree.q_rows.get(child) if sampled else None


# temperature 0 as the released LANTERN code: (the plain softmax at the parent (V,), x) -> x passes
GreedyTest = Callable[[torch.Tensor, int], bool]


def greedy_relaxed_test(neighbours: torch.Tensor, k: int, delta: float | None = None,
                        lam: float | None = None) -> GreedyTest:
    """x passes iff it is the argmax (the first, on a tie) of the plain softmax p with p(x) alone raised
    to p~(x): the mass of x's nearest neighbours within delta (lantern) or within (lam - 1) p(x)
    (lantern_pp) added to it; the neighbours keep their own mass."""
    def test(p: torch.Tensor, x: int) -> bool:
        budget = delta if lam is None else (lam - 1.0) * float(p[x])
        raised = p.clone()
        raised[x] = relaxed_target(p[None], torch.tensor([x]), neighbours, k, budget)[0][x]
        return int(raised.argmax()) == x
    return test


def greedy_walk(tree: Tree, probs: torch.Tensor, plain: torch.Tensor, test: GreedyTest) -> Walk:
    """Temperature 0 as the released LANTERN code: every root-to-leaf path is tested node by node
    against the plain softmax at its parent (plain: (1 + n, V), root's row first); the longest
    passing prefix wins (the first leaf in node order on a tie), and the token after it is the argmax
    of the processed row (probs, one-hot at T = 0) at its last node. The walk records that path and the
    node that stopped it."""
    best: list[int] = []
    stop: int | None = None
    for leaf in (n for n in range(len(tree)) if not tree.children(n)):
        passed, failed = [], None
        for n in tree.ancestors(leaf) + [leaf]:
            if not test(plain[0 if tree.parent[n] == ROOT else 1 + tree.parent[n]], tree.token[n]):
                failed = n
                break
            passed.append(n)
        if len(passed) > len(best) or stop is None and not best and failed is not None and not passed:
            best, stop = passed, failed
    verdict = [-1] * len(tree)
    for n in best:
        verdict[n] = 1
    tried = [(n, 1.0, True) for n in best]
    if stop is not None:
        verdict[stop] = 0
        tried.append((stop, 0.0, False))
    token = int(probs[0 if not best else 1 + best[-1]].argmax())
    return Walk(best, token, stop is None, tried, verdict)
