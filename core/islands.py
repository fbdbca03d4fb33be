"""Local rejection geometry on the token grid: expansion of rejected cells and rejection islands.

Pure functions of boolean (H, W) grids; no model, no randomness.
"""
from __future__ import annotations

import numpy as np


def expand(rejected: np.ndarray, radius: int) -> np.ndarray:
    """R_X: every cell within Chebyshev distance `radius` of a rejected cell, at raster index >= t0.

    rejected (H, W) bool (R_T) -> (H, W) bool. t0 is the first rejected cell in raster order; cells
    before it are final and never revisited. Empty R_T gives an empty R_X.
    """
    H, W = rejected.shape
    out = np.zeros_like(rejected, dtype=bool)
    if not rejected.any():
        return out
    for i, j in zip(*np.nonzero(rejected)):
        out[max(0, i - radius):i + radius + 1, max(0, j - radius):j + radius + 1] = True
    t0 = int(np.flatnonzero(rejected.reshape(-1))[0])
    out.reshape(-1)[:t0] = False
    return out


def label_islands(mask: np.ndarray) -> np.ndarray:
    """8-connected components of mask: (H, W) int, 0 outside, 1..M numbered in raster order of first cell."""
    H, W = mask.shape
    labels = np.zeros((H, W), dtype=np.int64)
    current = 0
    for start in np.flatnonzero(mask.reshape(-1)):
        i0, j0 = divmod(int(start), W)
        if labels[i0, j0]:
            continue
        current += 1
        labels[i0, j0] = current
        stack = [(i0, j0)]
        while stack:
            i, j = stack.pop()
            for di in (-1, 0, 1):
                for dj in (-1, 0, 1):
                    a, b = i + di, j + dj
                    if 0 <= a < H and 0 <= b < W and mask[a, b] and not labels[a, b]:
                        labels[a, b] = current
                        stack.append((a, b))
    return labels
