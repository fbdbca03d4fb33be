"""A toy autoregressive model over a tiny grid whose exact joint distribution can be enumerated.

It serves the engine's model protocol (new_cache, prefill, forward_cells, step_one, tok_embeddings)
with the same visibility rules as the GPT: a query reads the valid cell slots up to its own (and,
given a cell mask, only those it allows) plus its own token. The next-cell distribution depends on
the last two raster cells the query can see, through a fixed random table, so an exact sampler
must get every conditional right and a context error shows up as a wrong joint.
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

MISSING = -1  # a context cell the query cannot see


class ToyCache:
    """Cell slots only (prefix_len 0); `valid` (batch, N) as the GPT's cache keeps it, so the engine can
    withdraw a slot."""
    prefix_len = 0

    def __init__(self, batch: int, n_cells: int):
        self.tokens = np.full((batch, n_cells), MISSING, dtype=np.int64)
        self.valid = np.zeros((batch, n_cells), dtype=bool)   # numpy: has .device, takes a tensor index


class ToyAR:
    def __init__(self, vocab: int, n_cells: int, seed: int = 0, sharpness: float = 2.0):
        g = torch.Generator().manual_seed(seed)
        self.V, self.N = vocab, n_cells
        # logits of cell t given (cell t-2, cell t-1), MISSING mapped to index vocab
        self.table = sharpness * torch.randn(n_cells, vocab + 1, vocab + 1, vocab, generator=g)
        self.tok_embeddings = torch.nn.Embedding(vocab, 4)
        torch.nn.init.normal_(self.tok_embeddings.weight, generator=g)
        self.forwards = 0

    def _logits(self, cell: int, prev2: int, prev1: int) -> torch.Tensor:
        return self.table[cell, prev2 if prev2 >= 0 else self.V, prev1 if prev1 >= 0 else self.V]

    def conditional(self, cell: int, prev2: int, prev1: int) -> torch.Tensor:
        return self._logits(cell, prev2, prev1).softmax(-1)

    def joint(self) -> dict[tuple, float]:
        """The exact probability of every token sequence over the N cells."""
        out = {}
        for seq in itertools.product(range(self.V), repeat=self.N):
            pr = 1.0
            for t, x in enumerate(seq):
                before = [seq[t - 2] if t >= 2 else MISSING, seq[t - 1] if t >= 1 else MISSING]
                pr *= float(self.conditional(t, *before)[x])
            out[seq] = pr
        return out

    # ---- the engine's model protocol ----
    def new_cache(self, batch, grid, device):
        return ToyCache(batch, grid[0] * grid[1])

    def prefill(self, cache, captions, masks, grid, drop=None):
        self.forwards += 1
        return self._logits(0, MISSING, MISSING)[None].expand(cache.tokens.shape[0], -1).clone()

    def forward_cells(self, cache, tokens, cells, grid, write=None, cell_mask=None):
        self.forwards += 1
        cells = cells.tolist()
        toks = tokens[0].tolist()
        write = [True] * len(cells) if write is None else write.tolist()
        for c, x, w in zip(cells, toks, write):
            if w:
                cache.tokens[:, c], cache.valid[:, c] = x, True
        out = []
        for j, (c, x) in enumerate(zip(cells, toks)):
            prev = c - 1
            seen = prev >= 0 and cache.valid[0, prev] and (cell_mask is None or bool(cell_mask[j, prev]))
            prev1 = int(cache.tokens[0, prev]) if seen else MISSING
            out.append(self._logits(c + 1, prev1, x) if c + 1 < self.N else torch.zeros(self.V))
        return torch.stack(out)[None].expand(tokens.shape[0], -1, -1).clone()

    def step_one(self, cache, tokens, cell, grid):
        return self.forward_cells(cache, tokens, cell, grid)


def chi_square_p_value(samples: list[tuple], joint: dict[tuple, float], min_expected: float = 5.0) -> float:
    """Pearson's test of the samples against the joint; outcomes expected fewer than min_expected
    times are pooled into one bin."""
    n = len(samples)
    counts: dict[tuple, int] = {}
    for s in samples:
        counts[s] = counts.get(s, 0) + 1
    bins, pooled_obs, pooled_exp = [], 0, 0.0
    for seq, pr in joint.items():
        if n * pr >= min_expected:
            bins.append((counts.get(seq, 0), n * pr))
        else:
            pooled_obs += counts.get(seq, 0)
            pooled_exp += n * pr
    if pooled_exp > 0:
        bins.append((pooled_obs, pooled_exp))
    stat = sum((o - e) ** 2 / e for o, e in bins)
    dof = len(bins) - 1
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))
