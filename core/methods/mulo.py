"""mulo: Multi-Scale Local Speculative Decoding (arXiv 2601.05149).

One cycle per band of G low-resolution rows (G = all rows by default):
  1. draft     the drafter q samples the band's low-res rows (serial, or ZipAR with draft_window)
  2. upsample  U_r maps the low-res canvas to the target grid; the band's rows are the proposal
  3. verify    one target forward over the band (teacher forcing); pooled mass on B_k >= tau accepts
  4. reject    R_T = rejected cells; R_X = Chebyshev-l expansion clipped to raster >= t0 (local),
               or the whole suffix from t0 (raster); islands = 8-connected components of R_X
  5. resample  R_X from the target's processed distribution: serial (one cell per forward) or
               island-parallel (islands concurrently, ZipAR with `window` inside each)
  6. refresh   commit the band; stale target slots are rewritten in the next verify forward
               (fused); the committed band is down-sampled (D_r) into the drafter's prefix
"""
from __future__ import annotations

import numpy as np
import torch

from ..acceptance import pooled_mass, threshold_accept
from ..decoding import UNKNOWN, MethodContext, cells_of, decode_step, predict, timed
from ..islands import expand, label_islands, raster_suffix
from ..schedules import raster_waves, zipar_waves
from ..trace import Step
from ..upsampling import UPSAMPLERS, pixel_downsample
from . import Result


def _band_mask(shape: tuple[int, int], row0: int, row1: int) -> np.ndarray:
    m = np.zeros(shape, dtype=bool)
    m[row0:row1] = True
    return m


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
    target = ctx.decoder(ctx.target, (H, W))
    drafter = ctx.decoder(ctx.drafter, (h, w))
    final = np.full(H * W, UNKNOWN, dtype=np.int64)       # committed target tokens
    low = np.full(h * w, UNKNOWN, dtype=np.int64)         # drafter prefix (draft, then D_r of commits)
    draft_grid = np.full(h * w, UNKNOWN, dtype=np.int64)  # what the drafter sampled
    proposal_grid = np.full(H * W, UNKNOWN, dtype=np.int64)
    kept = passed = 0
    for row_lo in range(0, h, G):
        row_hi = min(h, row_lo + G)
        band = slice(row_lo * r * W, row_hi * r * W)     # raster range of the band on the target grid
        # 1. draft: low-res rows [row_lo, row_hi) with the drafter
        band_lo = _band_mask((h, w), row_lo, row_hi)
        waves = raster_waves(band_lo) if p.draft_window == 0 else zipar_waves(band_lo.astype(np.int64), p.draft_window)
        for wave in waves:
            yield decode_step("draft", "drafter", drafter, wave, low, ctx.gen)
        draft_grid[row_lo * w:row_hi * w] = low[row_lo * w:row_hi * w]

        # 2. upsample: the low-res canvas through U_r; keep the band's target rows
        f: dict = {}
        with timed(f):
            up = upsample(_low_canvas(low, h, w, row_hi), r, ctx.tokenizer).reshape(-1).numpy()
            proposal_grid[band] = up[band]
        band_cells = np.arange(band.start, band.stop)
        yield Step("upsample", None, 0, f["wall_ms"], cells_of(band_cells, W), proposal_grid[band].tolist())

        # 3. verify: one target forward over the band, proposal teacher-forced, stale slots refreshed
        f = {}
        with timed(f, (target,)):
            if target.p0 is None:
                target.prefill()
            refresh = target.stale(final, range(band.start))
            forced = final.copy()
            forced[band] = proposal_grid[band]
            probs = predict(target, band_cells.tolist(), forced, refresh=refresh)     # (n, V)
            prop = torch.from_numpy(proposal_grid[band])
            pooled = pooled_mass(probs, prop, ctx.neighbours, p.k)
            accepted = threshold_accept(pooled, p.tau).numpy()
            # 4. reject: R_T -> R_X (local expansion or raster suffix) -> islands
            shape = (row_hi * r - row_lo * r, W)
            rejected = ~accepted.reshape(shape)
            r_x = expand(rejected, p.radius) if p.rejection == "local" else raster_suffix(rejected)
            islands = label_islands(r_x)
        yield Step("verify", "target", f["nfe"], f["wall_ms"], cells_of(band_cells, W), None, dict(
            band=[row_lo * r, row_hi * r], pooled=pooled.reshape(shape).tolist(),
            accepted=accepted.reshape(shape).tolist(), resample=r_x.tolist(), islands=islands.tolist(),
            refreshed=len(refresh), rejected=int(rejected.sum()), n_islands=int(islands.max())))

        # 5. resample R_X with the target: accepted cells are final, R_X cells pending with the
        #    proposal as their stand-in
        band_final = proposal_grid[band].copy()
        band_final[r_x.reshape(-1)] = UNKNOWN
        final[band] = band_final
        kept += int((~r_x).sum())
        passed += int(accepted.sum())
        offset_labels = np.zeros((H, W), dtype=np.int64)
        offset_labels[row_lo * r:row_hi * r] = islands
        waves = raster_waves(offset_labels > 0) if p.resample == "serial" else zipar_waves(offset_labels, p.window)
        for n, wave in enumerate(waves):
            yield decode_step("resample", "target", target, wave, final, ctx.gen, placeholder=proposal_grid,
                              wave=n)

        # 6. refresh the drafter prefix: D_r of the committed band (only if another band follows)
        if row_hi < h:
            f = {}
            with timed(f):
                rows = torch.from_numpy(final[band].reshape(-1, W))
                low[row_lo * w:row_hi * w] = pixel_downsample(rows, r, ctx.tokenizer).reshape(-1).numpy()
            yield Step("refresh", None, 0, f["wall_ms"], cells_of(range(row_lo * w, row_hi * w), w),
                       low[row_lo * w:row_hi * w].tolist(), dict(grid="draft"))
    return Result(tokens=final.reshape(H, W), proposal=proposal_grid.reshape(H, W),
                  draft=draft_grid.reshape(h, w), passed_fraction=passed / (H * W),
                  kept_fraction=kept / (H * W))
