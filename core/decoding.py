"""Shared decoding pieces: one model's decoding state, next-cell distributions, timed steps, the context.

A Decoder holds one model's positional KV cache for one image (CFG rows doubled), knows which
token each cell slot holds and *when* it was computed, and counts its forward passes (NFE).
`predict` is the one way every method asks a model for the processed distribution of some cells:
it feeds each cell's raster predecessor (a final token is written to the cache; a pending one is
fed as a stand-in the cache never keeps) and, fused into the same forward, rewrites every slot the
queries can read whose token or context no longer matches the committed tokens, and withdraws
slots that hold a token nobody committed.

The context rule. A query reads slot s only if s holds the committed token and s was computed
under the tokens before it as they now stand. The Decoder tracks, per slot, the clock of its last
write and of its last change (a different token, a withdrawal, or a rewrite of stale K/V); slot s
is stale when a slot before it changed after s was written. Policies (`Decoder.context`):
- "schedule" (every method's default): a cell that the schedule fills *after* s was written does
  not make s stale: ZipAR computes row i + 1 before row i ends, by design. In raster order this is
  the exact rule.
- "exact": filling a cell is a change too, so every slot a query reads equals what a cache-free
  forward over the committed cells would give (mulo's `context=exact`).
- "verify": only the token is checked: a committed cell keeps K/V computed against tokens that have
  since been rejected (mulo's `context=verify`, the paper's cost model). A resampled cell is still
  written before anything reads it, and an uncommitted token is never read.
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch

from .config import MethodParams, SamplingConfig
from .sampling import processed, sample
from .trace import Step

UNKNOWN = -1
CONTEXTS = ("schedule", "exact", "verify")


class Decoder:
    def __init__(self, gpt, grid: tuple[int, int], caption: torch.Tensor, caption_mask: torch.Tensor,
                 sampling: SamplingConfig, device, context: str = "schedule"):
        if context not in CONTEXTS:
            raise ValueError(f"context must be one of {', '.join(CONTEXTS)}; got {context!r}")
        self.gpt, self.grid, self.sampling, self.device, self.context = gpt, grid, sampling, device, context
        B = 1 if sampling.cfg == 1.0 else 2
        self.captions = caption[None].expand(B, *caption.shape).to(device)  # ids (B, P) or features (B, P, C)
        self.masks = caption_mask[None].expand(B, -1).to(device)
        self.drop = torch.tensor([False, True][:B], device=device)  # row 1 reads the null caption
        self.cache = gpt.new_cache(B, grid, device)
        N = grid[0] * grid[1]
        self.cache_tok = np.full(N, UNKNOWN, dtype=np.int64)  # token held by each cell slot (UNKNOWN: none)
        self.written = np.full(N, -1, dtype=np.int64)         # clock of each slot's last write
        self.changed = np.full(N, -1, dtype=np.int64)         # clock of its last change (new token, new K/V, withdrawn)
        self.filled = np.full(N, -1, dtype=np.int64)          # clock of its last write into an empty slot
        self.clock = 0                                        # one tick per forward and per withdrawal
        self.nfe = 0
        self.fed = 0                                          # tokens fed over all forwards
        self.p0: torch.Tensor | None = None  # processed distribution of cell 0
        self.p0_feature: torch.Tensor | None = None  # (B, D) the feature that predicted cell 0 (read by a draft head)
        self.last_probs: torch.Tensor | None = None  # (T, V) distributions of the last sampled cells

    @property
    def n_cells(self) -> int:
        return self.grid[0] * self.grid[1]

    def prefill(self, features: bool = False) -> None:
        out: dict | None = {} if features else None
        kw = {} if out is None else {"out": out}
        logits = self.gpt.prefill(self.cache, self.captions, self.masks, self.grid, drop=self.drop, **kw)
        if out is not None:
            self.p0_feature = out["hidden"]
            self.prefix_features = out["prefix_hidden"]       # (B, P, D): a LANTERN head's caption slots read them
        self.nfe += 1
        self.p0 = processed(logits, self.sampling, cells=0)[0].cpu()  # acceptance and sampling run on the CPU

    def _last_change_before(self, n: int, exact: bool) -> np.ndarray:
        """(n,) clock of the last change of any slot before s (filling a cell counts when exact)."""
        ch = np.maximum(self.changed[:n], self.filled[:n]) if exact else self.changed[:n]
        return np.maximum.accumulate(np.concatenate([[-1], ch[:n - 1]]))

    def stale(self, known: np.ndarray, upto: int, context: str | None = None) -> np.ndarray:
        """(upto + 1,) bool: committed cells among 0..upto whose slot a query may not read as it is: no
        slot or another token; unless the policy is "verify", also K/V written before a change to an
        earlier slot, and every committed cell after a slot that changes now (another token, a token
        nobody committed, or under "exact" a committed cell not written yet)."""
        context = context or self.context
        n = upto + 1
        k, held = known[:n], self.cache_tok[:n]
        committed, present = k != UNKNOWN, held != UNKNOWN
        bad = committed & (held != k)
        if context == "verify":
            return bad
        bad |= committed & present & (self._last_change_before(n, context == "exact") > self.written[:n])
        change = (bad if context == "exact" else bad & present) | (~committed & present)
        first = np.flatnonzero(change)
        if len(first):  # what follows the first change was computed against what is changing
            bad[first[0] + 1:] |= committed[first[0] + 1:]
        return bad

    def violations(self, known: np.ndarray, upto: int, context: str | None = None) -> list[int]:
        """The named check of the context rule: slots among 0..upto that a query would read but must
        not (stale committed cells, and slots holding a token nobody committed)."""
        n = upto + 1
        orphan = (known[:n] == UNKNOWN) & (self.cache_tok[:n] != UNKNOWN)
        return np.flatnonzero(self.stale(known, upto, context) | orphan).tolist()

    def plan(self, inputs: dict[int, tuple[int, bool]], known: np.ndarray, context: str | None = None) -> None:
        """Complete a forward's inputs {cell: (token, write)} so that no query reads a slot against the
        rule: withdraw tokens nobody committed and rewrite stale committed cells, in this forward. Only
        slots a query can read (raster index <= the last fed cell) are touched; the rest wait for the
        forward that reads them."""
        n = max(inputs) + 1
        fed_w = np.zeros(n, dtype=bool)
        fed_w[[c for c, (_, wr) in inputs.items() if wr]] = True
        orphan = (known[:n] == UNKNOWN) & (self.cache_tok[:n] != UNKNOWN) & ~fed_w  # a rejected proposal, an old draft
        if orphan.any():
            self._withdraw(np.flatnonzero(orphan))
        for c in np.flatnonzero(self.stale(known, n - 1, context) & ~fed_w):
            inputs.setdefault(int(c), (int(known[c]), True))

    def _withdraw(self, cells: np.ndarray) -> None:
        self.cache.valid[:, self.cache.prefix_len + torch.as_tensor(cells, device=self.cache.valid.device)] = False
        self.clock += 1
        self.cache_tok[cells] = UNKNOWN
        self.changed[cells] = self.clock

    def feed(self, cells: list[int], tokens: list[int], write: list[bool],
             cell_mask: torch.Tensor | None = None, tree: torch.Tensor | None = None,
             out: dict | None = None) -> torch.Tensor:
        """One forward; returns (T, V) processed distributions, row j predicting cell cells[j] + 1.
        cell_mask (T, N) bool, optional: the cell slots each query may read (see GPT.forward_cells).
        tree (T, T) bool, optional: the stand-ins each query reads (a draft tree's ancestors); out
        (dict, optional) receives the forward's "hidden" features and the stand-ins' "kv" (see adopt)."""
        B = self.captions.shape[0]
        tok = torch.tensor(tokens, device=self.device)[None].expand(B, -1)
        cell_t = torch.tensor(cells, device=self.device)
        if len(cells) == 1 and write[0] and cell_mask is None and out is None:  # the single-token step (compiled when told to)
            logits = self.gpt.step_one(self.cache, tok, cell_t, self.grid)
        elif cell_mask is None and tree is None and out is None:
            logits = self.gpt.forward_cells(self.cache, tok, cell_t, self.grid, torch.tensor(write, device=self.device))
        elif tree is None and out is None:
            logits = self.gpt.forward_cells(self.cache, tok, cell_t, self.grid, torch.tensor(write, device=self.device),
                                            cell_mask.to(self.device))
        else:
            logits = self.gpt.forward_cells(self.cache, tok, cell_t, self.grid, torch.tensor(write, device=self.device),
                                            None if cell_mask is None else cell_mask.to(self.device), tree=tree, out=out)
        self.nfe += 1
        self.fed += len(cells)
        self.clock += 1
        before = self._last_change_before(max(cells) + 1, exact=True)
        for c, t, wr in zip(cells, tokens, write):
            if not wr:
                continue
            if self.cache_tok[c] == UNKNOWN:
                self.filled[c] = self.clock
            elif self.cache_tok[c] != t or before[c] > self.written[c]:  # new K/V: a change for what follows
                self.changed[c] = self.clock
            self.cache_tok[c] = t
            self.written[c] = self.clock
        return processed(logits, self.sampling, cells=[c + 1 for c in cells])[0].cpu()


    def adopt(self, cells: list[int], tokens: list[int], kv: list, index: list[int]) -> None:
        """Compact a draft tree's accepted path into the cache: write the K/V the last forward computed
        for its stand-ins number `index` (their order among that forward's stand-ins) into the slots of
        `cells`, as if they had been written then. Exact: each was computed on its own ancestors, which
        are now the committed cells before it."""
        slots = self.cache.prefix_len + torch.tensor(cells, device=self.cache.valid.device)
        idx = torch.tensor(index, device=self.cache.valid.device)
        for layer, (k, v) in enumerate(kv):
            self.cache.write(layer, slots, k.index_select(2, idx), v.index_select(2, idx))
        self.cache.valid[:, slots] = True
        for c, t in zip(cells, tokens):
            if self.cache_tok[c] == UNKNOWN:
                self.filled[c] = self.clock
            elif self.cache_tok[c] != t:
                self.changed[c] = self.clock
            self.cache_tok[c] = t
            self.written[c] = self.clock


def stand_in(known: np.ndarray, placeholder: np.ndarray | None, cell: int, width: int) -> int:
    """A token to feed for a cell that is not final yet: its placeholder, else the nearest final token
    to its left in its row, else above it, else 0."""
    if placeholder is not None and placeholder[cell] != UNKNOWN:
        return int(placeholder[cell])
    i, j = divmod(cell, width)
    row = known[i * width:i * width + j]
    left = row[row != UNKNOWN]
    if len(left):
        return int(left[-1])
    for a in range(i - 1, -1, -1):
        if known[a * width + j] != UNKNOWN:
            return int(known[a * width + j])
    return 0


def predict(dec: Decoder, targets: list[int], known: np.ndarray, placeholder: np.ndarray | None = None,
            context: str | None = None) -> torch.Tensor:
    """(len(targets), V) processed distributions for the target cells, with at most one forward.

    known (N,) holds the tokens the queries are meant to read (final tokens, plus drafts a method feeds
    on purpose; UNKNOWN elsewhere); placeholder (N,) optional stand-ins for pending predecessors.
    Stale slots the queries can read are rewritten in the same forward (Decoder.plan); `context`
    overrides the decoder's policy for this forward.
    """
    W = dec.grid[1]
    inputs: dict[int, tuple[int, bool]] = {}
    for c in targets:
        p = c - 1
        if p >= 0 and p not in inputs:
            inputs[p] = (int(known[p]), True) if known[p] != UNKNOWN else (stand_in(known, placeholder, p, W), False)
    rows = {}
    if inputs:
        dec.plan(inputs, known, context)
        cells = sorted(inputs)
        out = dec.feed(cells, [inputs[c][0] for c in cells], [inputs[c][1] for c in cells])
        rows = {c: out[n] for n, c in enumerate(cells)}
    return torch.stack([dec.p0 if c == 0 else rows[c - 1] for c in targets])


@dataclass
class MethodContext:
    """What a method gets: models, caption, knobs and the random generator. No I/O."""
    target: object              # GPT serving the target grid
    drafter: object | None      # GPT serving the drafter (multi-resolution target or small drafter)
    tokenizer: object           # ImageTokenizer (encode / decode / neighbours)
    grid: tuple[int, int]       # (H, W)
    caption: Callable           # grid (H, W) -> ((P,) caption ids or (P, C) features, (P,) bool mask)
    sampling: SamplingConfig
    params: MethodParams
    gen: torch.Generator
    device: object = "cpu"
    neighbours: torch.Tensor | None = None  # (V, K) nearest codes, nearest first
    upsampler_net: Callable | None = None   # (name, r) -> the trained up-sampler's network (mulo: sr, learned)
    head: object | None = None              # the EAGLE draft head (tree methods: eagle, lantern, lantern_pp)
    extras: dict = field(default_factory=dict)

    def decoder(self, gpt, grid, context: str = "schedule") -> Decoder:
        ids, mask = self.caption(grid)
        return Decoder(gpt, grid, ids, mask, self.sampling, self.device, context)


@contextmanager
def timed(step_fields: dict, decoders: tuple = ()):
    """Measure wall time, the NFE and the tokens fed of the given decoders across a block; fills
    step_fields (wall_ms, nfe, fed)."""
    before = [(d.nfe, d.fed) for d in decoders]
    t0 = time.perf_counter()
    yield
    step_fields["wall_ms"] = (time.perf_counter() - t0) * 1000.0
    step_fields["nfe"] = sum(d.nfe - b[0] for d, b in zip(decoders, before))
    step_fields["fed"] = sum(d.fed - b[1] for d, b in zip(decoders, before))


def cells_of(idx, width: int) -> list[list[int]]:
    return [[int(t) // width, int(t) % width] for t in idx]


def sample_cells(dec: Decoder, cells: list[int], known: np.ndarray, gen: torch.Generator,
                 placeholder: np.ndarray | None = None) -> tuple[list[int], torch.Tensor]:
    """Sample the given cells in one forward (stale slots rewritten in it); writes known."""
    probs = predict(dec, cells, known, placeholder)
    toks = sample(probs, gen).tolist()
    known[cells] = toks
    dec.last_probs = probs
    return toks, probs


def decode_step(phase: str, model: str, dec: Decoder, cells: list[int], known: np.ndarray, gen,
                placeholder=None, level: int = 0, **extra) -> Step:
    f: dict = {}
    with timed(f, (dec,)):
        if dec.p0 is None:
            dec.prefill()
        toks, _ = sample_cells(dec, cells, known, gen, placeholder)
    return Step(phase, model, f["nfe"], f["wall_ms"], cells_of(cells, dec.grid[1]), toks, dict(extra, fed=f["fed"]),
                level)
