"""sjd: Speculative Jacobi Decoding (arXiv 2410.01699), training free, target model only.

A window of L guessed tokens, each with the distribution q it was drawn from (one-hot for a fresh
guess). Each iteration:
  1. verify  one target forward over the window; accept guesses in order with min(1, p/q); at the
             first rejection sample normalize(max(0, p - q)) there and stop (>= 1 token per pass)
  2. iterate the rest of the window is redrafted from this pass's p (q := p), and fresh guesses
             refill it to L: uniform random tokens, the token to the left in the row (repeat), or
             the token above (above)
`jacobi` takes the two pieces the later Jacobi methods change: the acceptance probability of a
guess (gsd sums it over a cluster) and the redraft of the rest (sjd draws independently from p;
scd couples the new draft with the old one so that drafts settle).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..acceptance import accepts, exact_accept_prob, residual
from ..decoding import UNKNOWN, MethodContext, cells_of, predict, timed
from ..sampling import sample
from ..trace import Step
from . import Result

Accept = Callable[[torch.Tensor, torch.Tensor, int], float]  # (p (V,), q (V,), guess x) -> probability
# (p (R, V), q (R, V), old guesses (R,), gen) -> (new guesses (R,), the distribution (R, V) each was
# drawn from, which the next pass tests it against)
Redraft = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Generator], tuple[torch.Tensor, torch.Tensor]]


def fresh_guess(ctx: MethodContext, known: np.ndarray, cell: int, V: int) -> int:
    """A new guess for a cell (q one-hot on it): sjd_init random, repeat (left) or above."""
    W = ctx.grid[1]
    init = ctx.params.sjd_init
    if init == "repeat" and cell % W > 0 and known[cell - 1] != UNKNOWN:
        return int(known[cell - 1])
    if init == "above" and cell >= W and known[cell - W] != UNKNOWN:
        return int(known[cell - W])
    return int(torch.randint(0, V, (1,), generator=ctx.gen))


def exact_accept(p: torch.Tensor, q: torch.Tensor, x: int) -> float:
    return float(exact_accept_prob(p[x], q[x]))


def independent_redraft(p: torch.Tensor, q: torch.Tensor, old: torch.Tensor, gen: torch.Generator):
    return sample(p, gen), p


def jacobi(ctx: MethodContext, accept: Accept, redraft: Redraft):
    H, W = ctx.grid
    N, L = H * W, ctx.params.sjd_window
    V = ctx.tokenizer.vocab_size
    target = ctx.decoder(ctx.target, ctx.grid)
    final = np.full(N, UNKNOWN, dtype=np.int64)
    guesses = np.full(N, UNKNOWN, dtype=np.int64)      # current Jacobi iterate
    q_of: dict[int, torch.Tensor | None] = {}           # None = one-hot of the guess
    judged_total = accepted_total = 0
    t = 0
    while t < N:
        window = list(range(t, min(t + L, N)))
        for c in window:                                # refill with fresh guesses
            if guesses[c] == UNKNOWN:
                scratch = np.where(final != UNKNOWN, final, guesses)
                guesses[c] = fresh_guess(ctx, scratch, c, V)
                q_of[c] = None
        q_rows = torch.stack([q_of[c] if q_of[c] is not None
                              else torch.nn.functional.one_hot(torch.tensor(int(guesses[c])), V).float()
                              for c in window])        # (len(window), V)
        # 1. verify: the window's guesses teacher-forced in one target forward
        f: dict = {}
        with timed(f, (target,)):
            if target.p0 is None:
                target.prefill()
            forced = final.copy()
            forced[window] = guesses[window]
            p = predict(target, window, forced)                                     # (len(window), V)
            accepted, out, probs = [], [], []
            for n, c in enumerate(window):
                x = int(guesses[c])
                a = accept(p[n], q_rows[n], x)
                probs.append(round(a, 6))
                if accepts(a, ctx.gen):
                    accepted.append(True)
                    out.append(x)
                    continue
                accepted.append(False)
                out.append(int(sample(residual(p[n], q_rows[n]), ctx.gen)))
                break
            cells = window[:len(out)]
            final[cells] = out
            # 2. iterate: later window cells are redrafted from this pass's p, which becomes their q
            n_out = len(out)
            rest = window[n_out:]
            unchanged = 0
            if rest:
                old = torch.from_numpy(guesses[rest].copy())
                nxt, q_next = redraft(p[n_out:], q_rows[n_out:], old, ctx.gen)
                unchanged = int((nxt == old).sum())
                guesses[rest] = nxt.numpy()
                for i, c in enumerate(rest):
                    q_of[c] = q_next[i]
        judged_total += len(accepted)
        accepted_total += sum(accepted)
        yield Step("verify", "target", f["nfe"], f["wall_ms"], cells_of(cells, W), out, dict(
            fed=f["fed"], judged=cells_of(window, W), accepted=accepted, prob=probs,
            resampled=None if all(accepted) else cells_of([cells[-1]], W)[0],
            redrafted=len(rest), unchanged=unchanged))
        t += len(out)
    return Result(tokens=final.reshape(H, W), passed_fraction=accepted_total / max(judged_total, 1),
                  kept_fraction=accepted_total / N)


def run(ctx: MethodContext):
    return (yield from jacobi(ctx, exact_accept, independent_redraft))
