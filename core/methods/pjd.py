"""pjd: Parallel Jacobi Decoding (CVPR 2026), a 2-D Jacobi window over the rows of the grid.

Row i + 1 becomes active once row i has pjd_c committed tokens (ZipAR's schedule); each active row
holds a Jacobi window of guesses right after its committed tokens, at most sjd_window long and never
past the committed tokens of the row above. Each iteration:
  1. verify  one target forward over every active row's window, row-causal: a guess reads the
             committed tokens and the guesses before it in its own row, never another row's guesses;
             each row accepts guesses in order with min(1, p/q) until its first rejection; only the
             top active row (all rows above it done, so its p is exact) samples its first rejected
             cell from normalize(max(0, p - q)) and commits it; lower rows postpone theirs
  2. iterate every row's unaccepted guesses are redrafted from this pass's p (q := p); fresh guesses
             (sjd_init: random, repeat, above) fill the windows as they open
With pjd_c >= W one row is active at a time: sjd with row-bounded windows, exact. Below that, lower
rows are judged without the right part of the row above: faster, not lossless.
"""
from __future__ import annotations

import numpy as np
import torch

from ..acceptance import accepts, exact_accept_prob, residual
from ..decoding import UNKNOWN, Decoder, MethodContext, cells_of, stand_in, timed
from ..sampling import sample
from ..trace import Step
from . import Result
from .sjd import fresh_guess


# The Decoder's context policy. Committed tokens never change and no query reads another row's
# guesses, so a committed slot is only stale if it holds another token (a residual or an unwritten
# cell); K/V computed before the row above grew are kept, as ZipAR's schedule keeps them. "exact"
# would also rewrite those (more tokens per pass, the same passes).
CONTEXT = "verify"


def windows(front: list[int], W: int, c: int, L: int) -> list[tuple[int, list[int]]]:
    """(row, window cells) of the active rows, top first. front[i]: committed tokens of row i."""
    out = []
    for r, f in enumerate(front):
        if f == W:
            continue
        above = W if r == 0 else front[r - 1]
        if above < min(c, W):
            break                                   # this row and those below are not active yet
        n = min(L, above - f)
        if n > 0:                                   # a row level with the row above waits
            out.append((r, list(range(r * W + f, r * W + f + n))))
    return out


def row_causal_predict(dec: Decoder, rows: list[tuple[int, list[int]]], final: np.ndarray,
                       guesses: np.ndarray, placeholder: np.ndarray | None = None) -> torch.Tensor:
    """(T, V) processed distributions of every window cell, rows in order, in one forward.

    Feeds each window cell's raster predecessor (committed token, own-row guess, or for a row's
    first cell a stand-in the cache never keeps: its placeholder if given); the Decoder adds, in the same forward, the
    committed slots that hold another token. A visibility mask hides every uncommitted slot of
    another row from each query, so no query reads another row's guesses."""
    H, W = dec.grid
    inputs: dict[int, tuple[int, bool]] = {}
    owner: dict[int, int] = {}                       # the row whose query reads through this input
    known = final.copy()                             # committed tokens and the guesses fed on purpose
    targets = [c for _, cells in rows for c in cells]
    for r, cells in rows:
        for c in cells:
            p = c - 1
            if p < 0 or p in inputs:
                continue
            if final[p] != UNKNOWN:
                inputs[p] = (int(final[p]), True)
            elif p // W == r:
                inputs[p] = (int(guesses[p]), True)
                known[p] = guesses[p]
            else:                                    # the row above's last cell: not committed yet
                inputs[p] = (stand_in(final, placeholder, p, W), False)
            owner[p] = r
    rows_out: dict[int, torch.Tensor] = {}
    if inputs:
        dec.plan(inputs, known)                      # + committed slots holding another token
        cells = sorted(inputs)
        committed = torch.from_numpy(final != UNKNOWN)
        cell_row = torch.arange(H * W) // W
        # a committed slot the Decoder rewrites here has no owner: it reads committed slots only, since
        # every row reads its K/V (a row with a hole, as mulo's islands leave, has guesses before it)
        own = torch.tensor([owner.get(c, -1) for c in cells])
        visible = committed[None, :] | (cell_row[None, :] == own[:, None])              # (T, N)
        out = dec.feed(cells, [inputs[c][0] for c in cells], [inputs[c][1] for c in cells], visible)
        rows_out = {c: out[n] for n, c in enumerate(cells)}
    return torch.stack([dec.p0 if c == 0 else rows_out[c - 1] for c in targets])


def run(ctx: MethodContext):
    H, W = ctx.grid
    N, L, c = H * W, ctx.params.sjd_window, ctx.params.pjd_c
    V = ctx.tokenizer.vocab_size
    target = ctx.decoder(ctx.target, ctx.grid, context=CONTEXT)
    final = np.full(N, UNKNOWN, dtype=np.int64)
    guesses = np.full(N, UNKNOWN, dtype=np.int64)
    q_of: dict[int, torch.Tensor | None] = {}        # None = one-hot of the guess
    front = [0] * H
    judged_total = accepted_total = 0
    while front[-1] < W:
        rows = windows(front, W, c, L)
        for _, cells in rows:                        # open windows get fresh guesses
            for cell in cells:
                if guesses[cell] == UNKNOWN:
                    guesses[cell] = fresh_guess(ctx, np.where(final != UNKNOWN, final, guesses), cell, V)
                    q_of[cell] = None
        # 1. verify: every active row's window in one row-causal target forward
        f: dict = {}
        with timed(f, (target,)):
            if target.p0 is None:
                target.prefill()
            p = row_causal_predict(target, rows, final, guesses)                # (T, V)
            judged, accepted, probs, committed, tokens, resampled = [], [], [], [], [], None
            n = 0
            for r, cells in rows:
                top = r == rows[0][0]
                q = torch.stack([q_of[x] if q_of[x] is not None else
                                 torch.nn.functional.one_hot(torch.tensor(int(guesses[x])), V).float() for x in cells])
                k = 0                                # committed in this row
                for i, cell in enumerate(cells):
                    x = int(guesses[cell])
                    a = float(exact_accept_prob(p[n + i, x], q[i, x]))
                    judged.append(cell)
                    probs.append(round(a, 6))
                    ok = accepts(a, ctx.gen)                 # u < a: p(x) = 0 never passes
                    accepted.append(ok)
                    if ok:
                        committed.append(cell)
                        tokens.append(x)
                        k += 1
                        continue
                    if top:                          # exact context: commit a residual sample here
                        committed.append(cell)
                        tokens.append(int(sample(residual(p[n + i], q[i]), ctx.gen)))
                        resampled = cell
                        k += 1
                    break
                final[committed[len(committed) - k:]] = tokens[len(tokens) - k:]
                front[r] += k
                # 2. iterate: the row's unaccepted guesses are redrafted from this pass's p
                rest = cells[k:]
                if rest:
                    guesses[rest] = sample(p[n + k:n + len(cells)], ctx.gen).numpy()
                    for i, cell in enumerate(rest):
                        q_of[cell] = p[n + k + i]
                n += len(cells)
        judged_total += len(judged)
        accepted_total += sum(accepted)
        order = np.argsort(committed)
        yield Step("verify", "target", f["nfe"], f["wall_ms"], cells_of(np.asarray(committed)[order], W),
                   [tokens[i] for i in order], dict(
                       fed=f["fed"], judged=cells_of(judged, W), accepted=accepted, prob=probs,
                       resampled=None if resampled is None else cells_of([resampled], W)[0],
                       rows=[r for r, _ in rows]))
    return Result(tokens=final.reshape(H, W), passed_fraction=accepted_total / max(judged_total, 1),
                  kept_fraction=accepted_total / N)
