"""Shared decoding pieces: one model's decoding state, next-cell distributions, timed steps, the context.

A Decoder holds one model's positional KV cache for one image (CFG rows doubled), knows which
token each cell slot holds, and counts its forward passes (NFE). `predict` is the one way every
method asks a model for the processed distribution of some cells: it feeds each cell's raster
predecessor (a final token is written to the cache; a pending one is fed as a stand-in the cache
never keeps) plus any final tokens whose slots are stale, in one forward.
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


class Decoder:
    def __init__(self, gpt, grid: tuple[int, int], caption: torch.Tensor, caption_mask: torch.Tensor,
                 sampling: SamplingConfig, device):
        self.gpt, self.grid, self.sampling, self.device = gpt, grid, sampling, device
        B = 1 if sampling.cfg == 1.0 else 2
        self.captions = caption[None].expand(B, *caption.shape).to(device)  # ids (B, P) or features (B, P, C)
        self.masks = caption_mask[None].expand(B, -1).to(device)
        self.drop = torch.tensor([False, True][:B], device=device)  # row 1 reads the null caption
        self.cache = gpt.new_cache(B, grid, device)
        self.cache_tok = np.full(grid[0] * grid[1], UNKNOWN, dtype=np.int64)  # token held by each cell slot
        self.nfe = 0
        self.p0: torch.Tensor | None = None  # processed distribution of cell 0
        self.last_probs: torch.Tensor | None = None  # (T, V) distributions of the last sampled cells

    @property
    def n_cells(self) -> int:
        return self.grid[0] * self.grid[1]

    def prefill(self) -> None:
        logits = self.gpt.prefill(self.cache, self.captions, self.masks, self.grid, drop=self.drop)
        self.nfe += 1
        self.p0 = processed(logits, self.sampling, cells=0)[0].cpu()  # acceptance and sampling run on the CPU

    def feed(self, cells: list[int], tokens: list[int], write: list[bool]) -> torch.Tensor:
        """One forward; returns (T, V) processed distributions, row j predicting cell cells[j] + 1."""
        B = self.captions.shape[0]
        tok = torch.tensor(tokens, device=self.device)[None].expand(B, -1)
        cell_t = torch.tensor(cells, device=self.device)
        if len(cells) == 1 and write[0]:  # the single-token step (compiled when the model was told to)
            logits = self.gpt.step_one(self.cache, tok, cell_t, self.grid)
        else:
            logits = self.gpt.forward_cells(self.cache, tok, cell_t, self.grid, torch.tensor(write, device=self.device))
        self.nfe += 1
        for c, t, wr in zip(cells, tokens, write):
            if wr:
                self.cache_tok[c] = t
        return processed(logits, self.sampling, cells=[c + 1 for c in cells])[0].cpu()

    def stale(self, known: np.ndarray, cells=None) -> list[int]:
        """Cells with a final token whose slot holds another token (or none)."""
        idx = np.arange(self.n_cells) if cells is None else np.asarray(cells, dtype=np.int64)
        k = known[idx]
        return [int(c) for c in idx[(k != UNKNOWN) & (self.cache_tok[idx] != k)]]


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
            refresh: list[int] = ()) -> torch.Tensor:
    """(len(targets), V) processed distributions for the target cells, with at most one forward.

    known (N,) holds final tokens (UNKNOWN elsewhere); placeholder (N,) optional stand-ins.
    refresh: final cells to (re)write in the same forward.
    """
    W = dec.grid[1]
    inputs: dict[int, tuple[int, bool]] = {c: (int(known[c]), True) for c in refresh}
    for c in targets:
        p = c - 1
        if p >= 0 and p not in inputs:
            inputs[p] = (int(known[p]), True) if known[p] != UNKNOWN else (stand_in(known, placeholder, p, W), False)
    rows = {}
    if inputs:
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
    extras: dict = field(default_factory=dict)

    def decoder(self, gpt, grid) -> Decoder:
        ids, mask = self.caption(grid)
        return Decoder(gpt, grid, ids, mask, self.sampling, self.device)


@contextmanager
def timed(step_fields: dict, decoders: tuple = ()):
    """Measure wall time and the NFE of the given decoders across a block; fills step_fields."""
    before = [d.nfe for d in decoders]
    t0 = time.perf_counter()
    yield
    step_fields["wall_ms"] = (time.perf_counter() - t0) * 1000.0
    step_fields["nfe"] = sum(d.nfe - b for d, b in zip(decoders, before))


def cells_of(idx, width: int) -> list[list[int]]:
    return [[int(t) // width, int(t) % width] for t in idx]


def sample_cells(dec: Decoder, cells: list[int], known: np.ndarray, gen: torch.Generator,
                 placeholder: np.ndarray | None = None) -> tuple[list[int], torch.Tensor]:
    """Sample the given cells in one forward (refreshing stale final cells before them); writes known."""
    first = min(cells)
    probs = predict(dec, cells, known, placeholder, refresh=dec.stale(known, range(first)))
    toks = sample(probs, gen).tolist()
    known[cells] = toks
    dec.last_probs = probs
    return toks, probs


def decode_step(phase: str, model: str, dec: Decoder, cells: list[int], known: np.ndarray, gen,
                placeholder=None, **extra) -> Step:
    f: dict = {}
    with timed(f, (dec,)):
        if dec.p0 is None:
            dec.prefill()
        toks, _ = sample_cells(dec, cells, known, gen, placeholder)
    return Step(phase, model, f["nfe"], f["wall_ms"], cells_of(cells, dec.grid[1]), toks, extra)
