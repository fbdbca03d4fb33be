"""mulo: Multi-Scale Local Speculative Decoding (arXiv 2601.05149).

One cycle per band of G low-resolution rows (G = all rows by default):
  1. draft     the drafter q decodes the band's low-res rows with `draft_method`: ar or zipar in place,
               band by band; any other method (sjd, scd, gsd, pjd, mulo) decodes the whole low-res grid
               as the target of its own run, its steps one level deeper (mulo: a cascade of scales)
  2. upsample  U_r maps the low-res canvas to the target grid; the band's rows are the proposal
  3. verify    one target forward over the band (teacher forcing); pooled mass on B_k >= tau passes
               (accept=pooled), or the exact test min(1, p/q) of each proposal token (accept=exact: a
               token-space up-sampler's proposal (learned, distilled) is drawn from its q, any other
               proposal has a one-hot q). With
               commit=target a kept cell takes a token drawn from the target's p restricted to B_k, from the
               same pass (no pass more), instead of the proposal's token
  4. reject    R_T = cells that did not pass; R_X = Chebyshev-l expansion clipped to raster >= t0;
               islands = 8-connected components of R_X
  5. resample  R_X from the target's processed distribution: serial (one cell per forward),
               island-parallel (islands concurrently, ZipAR with `window` inside each) or jacobi
               (islands concurrently, each island row a row-causal Jacobi window as in pjd, the proposal
               as the first guesses with one-hot q; sjd's test min(1, p/q); unaccepted guesses redrawn
               from p, independently or coupled as in scd)
  6. refresh   commit the band; the committed band is down-sampled (D_r) into the drafter's prefix

`context` sets what the target reads while resampling: `exact` rewrites every slot whose token or
context changed (fused into the forward that reads it); `verify` lets passed cells keep the K/V of
the verify pass. Verify passes always read the committed bands exactly.

`rejection=raster` is the classic rule instead of steps 4-5: keep the proposal before the first
cell that did not pass (t0), sample t0 from the verify pass's distribution (its context is the
committed prefix; accept=exact: from the residual normalize(max(0, p - q)), which makes every cell
exactly the target's), then draft again from D_r of what is committed, up-sample, and verify from
t0 + 1, cycle after cycle until the band is done.

accept=exact with radius 0 (local rejection) repairs in the verify pass itself: a rejected cell takes
a token from the residual normalize(max(0, p - q)) of that pass, so each cell's token is distributed as
the target's p given the context it was judged in (the proposal before it), and no island is
resampled. With radius > 0 the expanded R_X is resampled as under accept=pooled.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import torch

from ..acceptance import accepts, exact_accept_prob, pooled_mass, residual, restricted, threshold_accept
from ..config import SCHEDULED_DRAFTS, draft_spec
from ..decoding import UNKNOWN, Decoder, MethodContext, cells_of, decode_step, predict, timed
from ..islands import expand, label_islands
from ..sampling import sample
from ..schedules import island_rows, jacobi_windows, raster_waves, zipar_waves
from ..trace import Step
from ..upsampling import TOKEN_SPACE, TRAINED, UPSAMPLERS, learned_logits, pixel_downsample
from . import Result, registry
from .pjd import row_causal_predict
from .scd import coupled_redraft
from .sjd import independent_redraft


def one_level_down(steps):
    """The steps of a run on the drafter's grid as steps of this run: one level deeper, on the
    drafter; decoding a drafter grid is drafting. Returns the run's Result."""
    while True:
        try:
            s = next(steps)
        except StopIteration as stop:
            return stop.value
        yield replace(s, phase="draft" if s.phase == "decode" else s.phase,
                      model=None if s.model is None else "drafter", level=s.level + 1)


def jacobi_resample(ctx: MethodContext, target: Decoder, labels: np.ndarray, final: np.ndarray,
                    proposal: np.ndarray):
    """5. resample=jacobi: every island row of `labels` (H, W) a row-causal Jacobi window, islands
    concurrently, one target forward per wave; fills final (N,) at every island cell."""
    p, W = ctx.params, ctx.grid[1]
    V = ctx.tokenizer.vocab_size
    redraft = coupled_redraft if p.redraft == "coupled" else independent_redraft
    rows = island_rows(labels)
    done = [0] * len(rows)
    guesses = proposal.copy()                 # the proposal is the first iterate
    q_of: dict[int, torch.Tensor] = {}        # the distribution a guess was drawn from; absent: one-hot
    wave = 0
    while active := jacobi_windows(rows, done, p.window, p.sjd_window):
        windows = [(rows[n][1], [rows[n][1] * W + int(j) for j in cols]) for n, _, cols in active]
        f: dict = {}
        with timed(f, (target,)):
            probs = row_causal_predict(target, windows, final, guesses, guesses)            # (T, V)
            judged, accepted, committed = [], [], []
            at = 0
            for (n, top, _), (_, cells) in zip(active, windows):
                q = torch.stack([q_of[c] if c in q_of else torch.nn.functional.one_hot(
                    torch.tensor(int(guesses[c])), V).float() for c in cells])            # (len(cells), V)
                k = 0
                for i, c in enumerate(cells):
                    x = int(guesses[c])
                    ok = accepts(float(exact_accept_prob(probs[at + i, x], q[i, x])), ctx.gen)
                    judged.append(c)
                    accepted.append(ok)
                    if not ok and not top:    # a lower row's context lacks pending cells above: no residual
                        break
                    final[c] = x if ok else int(sample(residual(probs[at + i], q[i]), ctx.gen))
                    committed.append(c)
                    k += 1
                    if not ok:
                        break
                done[n] += k
                rest = cells[k:]
                if rest:                      # the row's unaccepted guesses are redrawn from this pass's p
                    old = torch.from_numpy(guesses[rest].copy())
                    new, q_new = redraft(probs[at + k:at + len(cells)], q[k:], old, ctx.gen)
                    guesses[rest] = new.numpy()
                    q_of.update(zip(rest, q_new))
                at += len(cells)
        committed.sort()
        yield Step("resample", "target", f["nfe"], f["wall_ms"], cells_of(committed, W), final[committed].tolist(),
                   dict(wave=wave, fed=f["fed"], judged=cells_of(judged, W), accepted=accepted))
        wave += 1


def _low_canvas(low: np.ndarray, h: int, w: int, rows_done: int) -> torch.Tensor:
    """The low-res grid so far, rows below `rows_done` filled by repeating the last known row."""
    grid = low.reshape(h, w).copy()
    if rows_done < h:
        grid[rows_done:] = grid[rows_done - 1]
    return torch.from_numpy(grid)


def run(ctx: MethodContext):
    p, (H, W) = ctx.params, ctx.grid
    r = p.scale
    h, w = H // r, W // r
    G = p.draft_rows or h
    draft_method, draft_params = draft_spec(p)
    upsample = UPSAMPLERS[p.upsampler]
    net = ctx.upsampler_net(p.upsampler, r) if p.upsampler in TRAINED else None
    target = ctx.decoder(ctx.target, (H, W), context=p.context)
    drafter = ctx.decoder(ctx.drafter, (h, w))
    final = np.full(H * W, UNKNOWN, dtype=np.int64)       # committed target tokens
    low = np.full(h * w, UNKNOWN, dtype=np.int64)         # drafter prefix (draft, then D_r of commits)
    draft_grid = np.full(h * w, UNKNOWN, dtype=np.int64)  # what the drafter sampled (first draft of each cell)
    proposal = np.full(H * W, UNKNOWN, dtype=np.int64)    # the up-sampled proposal each cell was judged on
    q_rows: dict[int, torch.Tensor] = {}                  # accept=exact, token-space upsampler: q of each proposed cell
    sampled = p.accept == "exact" and p.upsampler in TOKEN_SPACE
    count = dict(judged=0, passed=0, kept=0)
    levels: list[dict] = []                               # the drafter's levels when it is a run of its own

    def draft(lo: int, hi: int):
        """1. draft: low-res cells [lo, hi) (raster indices of the drafter grid) with the drafter."""
        if draft_method in SCHEDULED_DRAFTS:
            mask = np.zeros(h * w, dtype=bool)
            mask[lo:hi] = True
            mask = mask.reshape(h, w)
            waves = raster_waves(mask) if draft_method == "ar" else \
                zipar_waves(mask.astype(np.int64), draft_params.window)
            for wave in waves:
                yield decode_step("draft", "drafter", drafter, wave, low, ctx.gen, level=1)
        else:  # the whole low-res grid (lo = 0, hi = h * w) as the target of a run of its own
            sub = replace(ctx, target=ctx.drafter, grid=(h, w), params=draft_params)
            res = yield from one_level_down(registry()[draft_method](sub))
            low[:] = res.tokens.reshape(-1)
            levels.append(dict(grid=[h, w], method=draft_method, tokens=res.tokens, proposal=res.proposal,
                               draft=res.draft))
            levels.extend(res.extra.get("levels", []))
        fresh = np.arange(lo, hi)[draft_grid[lo:hi] == UNKNOWN]
        draft_grid[fresh] = low[fresh]

    def propose(start: int, stop: int, rows_done: int):
        """2. upsample: the low-res canvas through U_r; cells [start, stop) of the target grid get it."""
        f: dict = {}
        with timed(f):
            canvas = _low_canvas(low, h, w, rows_done)
            if sampled:   # the proposal drawn from the up-sampler's own distribution q at every cell
                q = learned_logits(canvas, r, net, p.upsampler).float().softmax(0).reshape(ctx.tokenizer.vocab_size, -1).T.cpu()
                proposal[start:stop] = sample(q[start:stop], ctx.gen).numpy()
                q_rows.update(zip(range(start, stop), q[start:stop]))
            else:
                up = upsample(canvas, r, ctx.tokenizer, net).reshape(-1).numpy()
                proposal[start:stop] = up[start:stop]
        yield Step("upsample", None, 0, f["wall_ms"], cells_of(range(start, stop), W), proposal[start:stop].tolist())

    def q_of(cells) -> torch.Tensor:
        """(len(cells), V) the distribution each cell's proposal was drawn from: the token-space up-sampler's
        q when sampled, else the one-hot of the (deterministic) proposal."""
        if sampled:
            return torch.stack([q_rows[int(c)] for c in cells])
        x = torch.from_numpy(proposal[np.asarray(cells, dtype=np.int64)])
        return torch.nn.functional.one_hot(x, ctx.tokenizer.vocab_size).float()

    def verify(start: int, stop: int) -> tuple[torch.Tensor, np.ndarray, dict]:
        """3. verify: one target forward over cells [start, stop), the proposal teacher-forced, the
        committed cells read exactly. Returns the (n, V) distributions, the verdicts and step fields
        (accept=exact: `prob`, each cell's min(1, p/q))."""
        f: dict = {}
        with timed(f, (target,)):
            if target.p0 is None:
                target.prefill()
            forced = final.copy()
            forced[start:stop] = proposal[start:stop]
            probs = predict(target, list(range(start, stop)), forced, context="exact")     # (n, V)
            x = torch.from_numpy(proposal[start:stop])
            pooled = pooled_mass(probs, x, ctx.neighbours, p.k)
            if p.accept == "exact":
                rows = torch.arange(stop - start)
                a = exact_accept_prob(probs[rows, x], q_of(range(start, stop))[rows, x])
                passed = (torch.rand(stop - start, generator=ctx.gen) < a).numpy()    # as accepts, per cell
                f["prob"] = [round(float(v), 9) for v in a]
            else:
                passed = threshold_accept(pooled, p.tau).numpy()
        count["judged"] += stop - start
        count["passed"] += int(passed.sum())
        return probs, passed, dict(f, pooled=pooled.numpy())

    def commit_kept(probs: torch.Tensor, start: int, kept: np.ndarray):
        """commit=target: the kept cells start + kept (offsets into the verify pass's rows) take tokens
        drawn from the target's p restricted to their B_k, from the verify pass; one event, no pass."""
        if p.commit != "target" or len(kept) == 0:
            return
        g: dict = {}
        with timed(g):
            cells = start + kept
            x = torch.from_numpy(proposal[cells])
            final[cells] = sample(restricted(probs[torch.from_numpy(kept)], x, ctx.neighbours, p.k), ctx.gen).numpy()
        yield Step("resample", "target", 0, g["wall_ms"], cells_of(cells, W), final[cells].tolist(),
                   dict(rule="B_k", agreed=int((final[cells] == proposal[cells]).sum())))

    def commit_residual(probs: torch.Tensor, start: int, rejected: np.ndarray):
        """accept=exact: rejected cells start + rejected take tokens from the residual normalize(max(0, p - q))
        of the verify pass; one event, no pass."""
        g: dict = {}
        with timed(g):
            cells = start + rejected
            rows = probs[torch.from_numpy(rejected)]
            final[cells] = sample(residual(rows, q_of(cells)), ctx.gen).numpy()
        yield Step("resample", "target", 0, g["wall_ms"], cells_of(cells, W), final[cells].tolist(), dict(rule="residual"))

    def verify_step(f: dict, row0: int, row1: int, start: int, passed: np.ndarray, r_x: np.ndarray,
                    islands: np.ndarray) -> Step:
        """The verify event over band rows [row0, row1); cells before `start` were not judged (null)."""
        n = (row1 - row0) * W
        skip = start - row0 * W
        pooled = [None] * skip + [round(float(x), 9) for x in f["pooled"]]
        verdict = [None] * skip + passed.tolist()
        rows = lambda a: [a[i * W:(i + 1) * W] for i in range(n // W)]  # noqa: E731
        rejected = int((~passed).sum())
        extra = dict(band=[row0, row1], pooled=rows(pooled), accepted=rows(verdict), resample=r_x.tolist(),
                     islands=islands.tolist(), fed=f["fed"], rejected=rejected, n_islands=int(islands.max(initial=0)))
        if "prob" in f:
            extra["prob"] = f["prob"]
        return Step("verify", "target", f["nfe"], f["wall_ms"], cells_of(range(start, row1 * W), W), None, extra)

    def local_band(row_lo: int, row_hi: int):
        band = slice(row_lo * r * W, row_hi * r * W)
        yield from draft(row_lo * w, row_hi * w)
        yield from propose(band.start, band.stop, row_hi)
        probs, passed, f = verify(band.start, band.stop)
        # 4. reject: R_T -> R_X (local expansion) -> islands
        shape = ((row_hi - row_lo) * r, W)
        r_x = expand(~passed.reshape(shape), p.radius)
        islands = label_islands(r_x)
        yield verify_step(f, row_lo * r, row_hi * r, band.start, passed, r_x, islands)
        # 5. resample R_X with the target: cells outside R_X are final, R_X cells pending with the
        #    proposal as their stand-in
        band_final = proposal[band].copy()
        band_final[r_x.reshape(-1)] = UNKNOWN
        final[band] = band_final
        count["kept"] += int((~r_x).sum())
        yield from commit_kept(probs, band.start, np.flatnonzero(~r_x.reshape(-1)))
        if p.accept == "exact" and p.radius == 0:   # repaired in the verify pass: no island
            if r_x.any():
                yield from commit_residual(probs, band.start, np.flatnonzero(r_x.reshape(-1)))
            return
        labels = np.zeros((H, W), dtype=np.int64)
        labels[row_lo * r:row_hi * r] = islands
        if p.resample == "jacobi":
            yield from jacobi_resample(ctx, target, labels, final, proposal)
            return
        waves = raster_waves(labels > 0) if p.resample == "serial" else zipar_waves(labels, p.window)
        for n, wave in enumerate(waves):
            yield decode_step("resample", "target", target, wave, final, ctx.gen, placeholder=proposal, wave=n)

    def raster_band(row_lo: int, row_hi: int):
        band = slice(row_lo * r * W, row_hi * r * W)
        start = band.start
        yield from draft(row_lo * w, row_hi * w)
        yield from propose(start, band.stop, row_hi)
        while True:
            probs, passed, f = verify(start, band.stop)
            fails = np.flatnonzero(~passed)
            t0 = band.stop if len(fails) == 0 else start + int(fails[0])
            final[start:t0] = proposal[start:t0]
            count["kept"] += t0 - start
            kept_step = list(commit_kept(probs, start, np.arange(t0 - start)))
            discarded = np.zeros(band.stop - band.start, dtype=bool)
            discarded[t0 - band.start:] = True
            discarded = discarded.reshape(-1, W)
            yield verify_step(f, row_lo * r, row_hi * r, start, passed, discarded, label_islands(discarded))
            yield from kept_step
            if t0 == band.stop:
                return
            # 4-5. t0 from the verify pass's distribution: its context is exactly the committed prefix
            if p.accept == "exact":
                yield from commit_residual(probs, start, np.array([t0 - start]))
            else:
                g: dict = {}
                with timed(g):
                    final[t0] = int(sample(probs[t0 - start], ctx.gen))
                yield Step("resample", "target", 0, g["wall_ms"], cells_of([t0], W), [int(final[t0])], dict(wave=0))
            start = t0 + 1
            if start == band.stop:
                return
            # the drafter continues from D_r of what is committed: blocks wholly before `start` are
            # down-sampled, the rest of the band is drafted again, up-sampled and verified
            lo = row_lo * w
            while lo < row_hi * w and ((lo // w) * r + r - 1) * W + (lo % w) * r + r - 1 < start:
                lo += 1
            yield from down_sample(row_lo, row_hi, lo)
            low[lo:row_hi * w] = UNKNOWN
            yield from draft(lo, row_hi * w)
            yield from propose(start, band.stop, row_hi)

    def down_sample(row_lo: int, row_hi: int, upto: int):
        """6. refresh: D_r of the committed target rows into drafter cells [row_lo * w, upto)."""
        if upto <= row_lo * w:
            return
        f: dict = {}
        with timed(f):
            rows = np.where(final != UNKNOWN, final, proposal)[row_lo * r * W:row_hi * r * W].reshape(-1, W)
            small = pixel_downsample(torch.from_numpy(rows), r, ctx.tokenizer).reshape(-1).numpy()
            low[row_lo * w:upto] = small[:upto - row_lo * w]
        yield Step("refresh", None, 0, f["wall_ms"], cells_of(range(row_lo * w, upto), w),
                   low[row_lo * w:upto].tolist(), dict(grid="draft"), 1)

    band_of = local_band if p.rejection == "local" else raster_band
    for row_lo in range(0, h, G):
        row_hi = min(h, row_lo + G)
        yield from band_of(row_lo, row_hi)
        if row_hi < h:  # 6. refresh the drafter prefix with the committed band
            yield from down_sample(row_lo, row_hi, row_hi * w)
    return Result(tokens=final.reshape(H, W), proposal=proposal.reshape(H, W), draft=draft_grid.reshape(h, w),
                  passed_fraction=count["passed"] / max(count["judged"], 1), kept_fraction=count["kept"] / (H * W),
                  extra=dict(levels=levels) if levels else {})


def expected_steps(params, grid: tuple[int, int]) -> int:
    """The drafter's grid as a run of its own (the same estimate, one level down), the verify pass, then
    the resampling waves: a few at l = 0 (cells resampled alone), about 8 W / w + h per unit of radius
    when the expansion merges them into islands (measured on the 100-prompt sweep); none with accept=exact at
    radius 0."""
    from . import expected_steps as of_method
    H, W = grid
    h = H // params.scale
    try:
        name, sub = draft_spec(params)
        draft = of_method(name, sub, (h, W // params.scale))
    except ValueError:
        draft = h * (W // params.scale)
    if params.radius == 0 and params.accept == "exact":
        return draft + 1          # rejected cells are repaired in the verify pass
    return draft + 1 + (6 if params.radius == 0 else (8 * W // max(params.window, 1) + h) * params.radius)
