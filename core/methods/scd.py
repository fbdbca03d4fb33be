"""scd: Speculative Coupled Decoding (So, Kook, Jang, Park; ICML 2026; first titled MC-SJD), lossless.

sjd's iteration (verify the window in one target forward, commit the accepted prefix and one residual
token) with another redraft of the rest of the window: instead of a fresh independent sample from the
new p, each slot draws from the maximal coupling of (new p, the q its old draft came from): the old
draft is kept with probability min(1, p(x)/q(x)), else a token comes from normalize(max(0, p - q)).
The new draft is still distributed as p, so the next test stays exact, but a draft that the context
change did not contradict stays put: the trajectory settles and later passes accept more of it.
Knobs: sjd_window (the papers gain up to L = 64) and sjd_init.
"""
from __future__ import annotations

import torch

from ..acceptance import maximal_coupling
from ..decoding import MethodContext
from .sjd import exact_accept, jacobi


def coupled_redraft(p: torch.Tensor, q: torch.Tensor, old: torch.Tensor, gen: torch.Generator):
    """New guesses from the maximal coupling of (p, q) with the old ones; each is distributed as p."""
    return maximal_coupling(p, q, old, gen), p


def run(ctx: MethodContext):
    return (yield from jacobi(ctx, exact_accept, coupled_redraft))
