"""mulo: Multi-Scale Local Speculative Decoding (arXiv 2601.05149).

One cycle per band of G low-resolution rows (G = all rows by default):
  1. draft     the drafter q samples the band's low-res rows (serial, or ZipAR with draft_window)
  2. upsample  U_r maps the low-res canvas to the target grid; the band's rows are the proposal
  3. verify    one target forward over the band (teacher forcing); pooled mass on B_k >= tau passes
  4. reject    R_T = cells that did not pass; R_X = Chebyshev-l expansion clipped to raster >= t0;
               islands = 8-connected components of R_X
  5. resample  R_X from the target's processed distribution: serial (one cell per forward) or
               island-parallel (islands concurrently, ZipAR with `window` inside each)
  6. refresh   commit the band; the committed band is down-sampled (D_r) into the drafter's prefix

`context` sets what the target reads while resampling: `exact` rewrites every slot whose token or
context changed (fused into the forward that reads it); `verify` lets passed cells keep the K/V of
the verify pass. Verify passes always read the committed bands exactly.

`rejection=raster` is the classic rule instead of steps 4-5: keep the proposal before the first
cell that did not pass (t0), sample t0 from the verify pass's distribution (its context is the
committed prefix), then draft again from D_r of what is committed, up-sample, and verify from
t0 + 1, cycle after cycle until the band is done.
"""
from __future__ import annotations

import numpy as np
import torch

from ..acceptance import pooled_mass, threshold_accept
from ..decoding import UNKNOWN, MethodContext, cells_of, decode_step, predict, timed
from ..islands import expand, label_islands
from ..sampling import sample
from ..schedules import raster_waves, zipar_waves
from ..trace import Step
from ..upsampling import UPSAMPLERS, pixel_downsample
from . import Result


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
    upsample = UPSAMPLERS[p.upsampler]
    target = ctx.decoder(ctx.target, (H, W), context=p.context)
    drafter = ctx.decoder(ctx.drafter, (h, w))
    final = np.full(H * W, UNKNOWN, dtype=np.int64)       # committed target tokens
    low = np.full(h * w, UNKNOWN, dtype=np.int64)         # drafter prefix (draft, then D_r of commits)
    draft_grid = np.full(h * w, UNKNOWN, dtype=np.int64)  # what the drafter sampled (first draft of each cell)
    proposal = np.full(H * W, UNKNOWN, dtype=np.int64)    # the up-sampled proposal each cell was judged on
    count = dict(judged=0, passed=0, kept=0)

    def draft(lo: int, hi: int):
        """1. draft: low-res cells [lo, hi) (raster indices of the drafter grid) with the drafter."""
        mask = np.zeros(h * w, dtype=bool)
        mask[lo:hi] = True
        mask = mask.reshape(h, w)
        waves = raster_waves(mask) if p.draft_window == 0 else zipar_waves(mask.astype(np.int64), p.draft_window)
        for wave in waves:
            yield decode_step("draft", "drafter", drafter, wave, low, ctx.gen)
        fresh = np.arange(lo, hi)[draft_grid[lo:hi] == UNKNOWN]
        draft_grid[fresh] = low[fresh]

    def propose(start: int, stop: int, rows_done: int):
        """2. upsample: the low-res canvas through U_r; cells [start, stop) of the target grid get it."""
        f: dict = {}
        with timed(f):
            up = upsample(_low_canvas(low, h, w, rows_done), r, ctx.tokenizer).reshape(-1).numpy()
            proposal[start:stop] = up[start:stop]
        yield Step("upsample", None, 0, f["wall_ms"], cells_of(range(start, stop), W), proposal[start:stop].tolist())

    def verify(start: int, stop: int) -> tuple[torch.Tensor, np.ndarray, dict]:
        """3. verify: one target forward over cells [start, stop), the proposal teacher-forced, the
        committed cells read exactly. Returns the (n, V) distributions, the verdicts and step fields."""
        f: dict = {}
        with timed(f, (target,)):
            if target.p0 is None:
                target.prefill()
            forced = final.copy()
            forced[start:stop] = proposal[start:stop]
            probs = predict(target, list(range(start, stop)), forced, context="exact")     # (n, V)
            pooled = pooled_mass(probs, torch.from_numpy(proposal[start:stop]), ctx.neighbours, p.k)
            passed = threshold_accept(pooled, p.tau).numpy()
        count["judged"] += stop - start
        count["passed"] += int(passed.sum())
        return probs, passed, dict(f, pooled=pooled.numpy())

    def verify_step(f: dict, row0: int, row1: int, start: int, passed: np.ndarray, r_x: np.ndarray,
                    islands: np.ndarray) -> Step:
        """The verify event over band rows [row0, row1); cells before `start` were not judged (null)."""
        n = (row1 - row0) * W
        skip = start - row0 * W
        pooled = [None] * skip + [round(float(x), 9) for x in f["pooled"]]
        verdict = [None] * skip + passed.tolist()
        rows = lambda a: [a[i * W:(i + 1) * W] for i in range(n // W)]  # noqa: E731
        rejected = int((~passed).sum())
        return Step("verify", "target", f["nfe"], f["wall_ms"], cells_of(range(start, row1 * W), W), None, dict(
            band=[row0, row1], pooled=rows(pooled), accepted=rows(verdict), resample=r_x.tolist(),
            islands=islands.tolist(), fed=f["fed"], rejected=rejected, n_islands=int(islands.max(initial=0))))

    def local_band(row_lo: int, row_hi: int):
        band = slice(row_lo * r * W, row_hi * r * W)
        yield from draft(row_lo * w, row_hi * w)
        yield from propose(band.start, band.stop, row_hi)
        _, passed, f = verify(band.start, band.stop)
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
        labels = np.zeros((H, W), dtype=np.int64)
        labels[row_lo * r:row_hi * r] = islands
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
            discarded = np.zeros(band.stop - band.start, dtype=bool)
            discarded[t0 - band.start:] = True
            discarded = discarded.reshape(-1, W)
            yield verify_step(f, row_lo * r, row_hi * r, start, passed, discarded, label_islands(discarded))
            if t0 == band.stop:
                return
            # 4-5. t0 from the verify pass's distribution: its context is exactly the committed prefix
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
                   low[row_lo * w:upto].tolist(), dict(grid="draft"))

    band_of = local_band if p.rejection == "local" else raster_band
    for row_lo in range(0, h, G):
        row_hi = min(h, row_lo + G)
        yield from band_of(row_lo, row_hi)
        if row_hi < h:  # 6. refresh the drafter prefix with the committed band
            yield from down_sample(row_lo, row_hi, row_hi * w)
    return Result(tokens=final.reshape(H, W), proposal=proposal.reshape(H, W), draft=draft_grid.reshape(h, w),
                  passed_fraction=count["passed"] / max(count["judged"], 1), kept_fraction=count["kept"] / (H * W))
