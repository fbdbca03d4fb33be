"""ar: the baseline. Raster order, one token per target forward (the reference for speed and quality)."""
from __future__ import annotations

import numpy as np

from ..decoding import UNKNOWN, MethodContext, decode_step
from ..schedules import raster_waves
from . import Result


def decode_waves(ctx: MethodContext, waves: list[list[int]]):
    """Produce every cell of the target grid wave by wave; one target forward per wave."""
    H, W = ctx.grid
    dec = ctx.decoder(ctx.target, ctx.grid)
    known = np.full(H * W, UNKNOWN, dtype=np.int64)
    for wave in waves:
        # 1. decode: sample the wave's cells from the processed target distribution
        yield decode_step("decode", "target", dec, wave, known, ctx.gen)
    return Result(tokens=known.reshape(H, W))


def run(ctx: MethodContext):
    H, W = ctx.grid
    return (yield from decode_waves(ctx, raster_waves(np.ones((H, W), dtype=bool))))


def expected_steps(params, grid: tuple[int, int]) -> int:
    """One step per cell."""
    return grid[0] * grid[1]
