"""sjd: Speculative Jacobi Decoding (arXiv 2410.01699), training free, target model only.

A window of L guessed tokens, each with the distribution q it was drawn from (one-hot for a fresh
guess). Each iteration:
  1. verify  one target forward over the window; accept guesses in order with min(1, p/q); at the
             first rejection sample normalize(max(0, p - q)) there and stop (>= 1 token per pass)
  2. iterate the rest of the window becomes this pass's samples from p (q := p), and fresh guesses
             refill it to L: uniform random tokens, or (repeat) the token to the left in the row
"""
from __future__ import annotations

import numpy as np
import torch

from ..acceptance import exact_accept_prob, residual
from ..decoding import UNKNOWN, MethodContext, cells_of, predict, timed
from ..sampling import sample
from ..trace import Step
from . import Result


def _fresh_guess(ctx: MethodContext, known: np.ndarray, cell: int, V: int) -> int:
    W = ctx.grid[1]
    if ctx.params.sjd_init == "repeat" and cell % W > 0 and known[cell - 1] != UNKNOWN:
        return int(known[cell - 1])
    return int(torch.randint(0, V, (1,), generator=ctx.gen))


def run(ctx: MethodContext):
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
                guesses[c] = _fresh_guess(ctx, scratch, c, V)
                q_of[c] = None
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
                q = q_of[c] if q_of[c] is not None else torch.nn.functional.one_hot(torch.tensor(x), V).float()
                a = float(exact_accept_prob(p[n, x], q[x]))
                probs.append(round(a, 6))
                if torch.rand(1, generator=ctx.gen).item() <= a:
                    accepted.append(True)
                    out.append(x)
                    continue
                accepted.append(False)
                out.append(int(sample(residual(p[n], q), ctx.gen)))
                break
            cells = window[:len(out)]
            final[cells] = out
            # 2. iterate: later window cells take this pass's samples from p as their next guess
            rest = window[len(out):]
            if rest:
                idx = [window.index(c) for c in rest]
                nxt = sample(p[idx], ctx.gen).tolist()
                for c, i, x in zip(rest, idx, nxt):
                    guesses[c], q_of[c] = x, p[i]
        judged_total += len(accepted)
        accepted_total += sum(accepted)
        yield Step("verify", "target", f["nfe"], f["wall_ms"], cells_of(cells, W), out, dict(
            fed=f["fed"], judged=cells_of(window, W), accepted=accepted, prob=probs,
            resampled=None if all(accepted) else cells_of([cells[-1]], W)[0]))
        t += len(out)
    return Result(tokens=final.reshape(H, W), passed_fraction=accepted_total / max(judged_total, 1),
                  kept_fraction=accepted_total / N)
