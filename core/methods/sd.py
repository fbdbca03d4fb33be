"""sd: exact speculative sampling (Leviathan et al. 2023; Chen et al. 2023) with a small drafter.

Each cycle:
  1. draft   the same-resolution drafter q samples gamma tokens in raster order
  2. verify  one target forward scores them (and the bonus cell); accept each with min(1, p/q)
             in order; at the first rejection sample normalize(max(0, p - q)) and stop; after a
             full acceptance sample the bonus token from p
The output distribution equals the target's processed p. `speculate` takes the verification rule:
(p, q, drafts) -> (acceptance probabilities, residual rows). sd's is the exact test; LANTERN's
(lantern.py) relaxes p first, COOL-SD's (cool.py) weighs each draft position, all in one loop.
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..acceptance import accepts, exact_accept_prob, residual
from ..decoding import UNKNOWN, MethodContext, cells_of, decode_step, predict, timed
from ..sampling import sample
from ..trace import Step
from . import Result

Relax = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (p (T, V), drafts (T,)) -> p~ (T, V)
# (p (g, V), q (g, V), drafts (g,)) -> (acceptance probability (g,), residual to sample on rejection (g, V))
Rule = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def relaxed_rule(relax: Relax) -> Rule:
    """The exact test min(1, p~/q) and residual normalize(max(0, p~ - q)) on a relaxation p~ of p."""
    def rule(p, q, drafts):
        p_relaxed = relax(p, drafts)
        rows = torch.arange(len(drafts))
        return exact_accept_prob(p_relaxed[rows, drafts], q[rows, drafts]), residual(p_relaxed, q)
    return rule


def speculate(ctx: MethodContext, rule: Rule):
    H, W = ctx.grid
    N, gamma = H * W, ctx.params.gamma
    target = ctx.decoder(ctx.target, ctx.grid)
    drafter = ctx.decoder(ctx.drafter, ctx.grid)
    final = np.full(N, UNKNOWN, dtype=np.int64)
    drafted_total = accepted_total = 0
    t = 0
    while t < N:
        g = min(gamma, N - t)
        # 1. draft: gamma tokens from q, raster order; q's rows are kept for the test
        scratch = final.copy()
        q_rows = []
        for c in range(t, t + g):
            step = decode_step("draft", "drafter", drafter, [c], scratch, ctx.gen)
            q_rows.append(drafter.last_probs[0])
            yield step
        drafts = torch.from_numpy(scratch[t:t + g])
        q = torch.stack(q_rows)                                          # (g, V)
        # 2. verify: one target forward over the drafts (+ the bonus cell when there is one)
        f: dict = {}
        with timed(f, (target,)):
            if target.p0 is None:
                target.prefill()
            judged = list(range(t, min(t + g + 1, N)))
            p = predict(target, judged, scratch)                              # (len(judged), V)
            prob, resid = rule(p[:g], q, drafts)
            accepted, out = [], []
            for i in range(g):
                if accepts(prob[i].item(), ctx.gen):
                    accepted.append(True)
                    out.append(int(drafts[i]))
                    continue
                accepted.append(False)
                out.append(int(sample(resid[i], ctx.gen)))
                break
            bonus = all(accepted) and len(judged) > g
            if bonus:
                out.append(int(sample(p[g], ctx.gen)))
            cells = list(range(t, t + len(out)))
            final[cells] = out
        drafted_total += g
        accepted_total += sum(accepted)
        yield Step("verify", "target", f["nfe"], f["wall_ms"], cells_of(cells, W), out, dict(
            fed=f["fed"], judged=cells_of(range(t, t + g), W), accepted=accepted,
            prob=[round(float(x), 6) for x in prob[:len(accepted)]],
            resampled=None if all(accepted) else cells_of([t + len(accepted) - 1], W)[0],
            bonus=cells_of([cells[-1]], W)[0] if bonus else None))
        t += len(out)
    return Result(tokens=final.reshape(H, W), passed_fraction=accepted_total / max(drafted_total, 1),
                  kept_fraction=accepted_total / N)


def run(ctx: MethodContext):
    return (yield from speculate(ctx, relaxed_rule(lambda p, drafts: p)))


def expected_steps(params, grid: tuple[int, int]) -> int:
    """About (gamma + 1) / 2 steps per cell (draft steps and verify passes, at a typical acceptance)."""
    return grid[0] * grid[1] * (params.gamma + 1) // 2
