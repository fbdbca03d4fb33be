"""zipar (arXiv 2412.04062): row i+1 starts once row i has w tokens; each forward emits one token per
active row. NFE = W + (H - 1) w for w <= W; w = W is raster order (ar)."""
from __future__ import annotations

import numpy as np

from ..decoding import MethodContext
from ..schedules import zipar_waves
from .ar import decode_waves


def run(ctx: MethodContext):
    H, W = ctx.grid
    return (yield from decode_waves(ctx, zipar_waves(np.ones((H, W), dtype=np.int64), ctx.params.window)))


def expected_steps(params, grid: tuple[int, int]) -> int:
    """The first row alone, then a wave per later row's window: W + (H - 1) min(w, W) steps."""
    H, W = grid
    return W + (H - 1) * min(params.window, W)
