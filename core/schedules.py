"""Generation schedules: which cells are produced in each sequential wave (one forward per wave).

Pure functions: a schedule depends on the set of cells to produce and the window, never on samples.
- raster: one cell per wave in raster order (ar; serial resampling).
- zipar: cell (i, j) is produced once its left neighbour in its row is and every cell of row i - 1
  with column <= j + window - 1 is (all of row i - 1 when it ends before that column). Applied per
  island: an island's rows are its cells in each grid row, in column order (gaps skipped), "row
  i - 1" is the island's cells in grid row i - 1, and disjoint islands advance concurrently. On a
  full H x W grid this is ZipAR: W + (H - 1) * window waves, and window = W is raster order.
"""
from __future__ import annotations

import numpy as np


def raster_waves(mask: np.ndarray) -> list[list[int]]:
    """One wave per masked cell, raster order. mask (H, W) bool -> [[t], ...]."""
    return [[int(t)] for t in np.flatnonzero(mask.reshape(-1))]


def zipar_waves(labels: np.ndarray, window: int) -> list[list[int]]:
    """ZipAR waves inside every island of labels (H, W) int (0 = not produced), islands concurrently.
    Each wave lists raster indices, sorted; one forward per wave."""
    H, W = labels.shape
    rows = []  # (island, grid row, columns in order): one entry per island row
    for m in range(1, int(labels.max()) + 1):
        for i in range(H):
            cols = np.flatnonzero(labels[i] == m)
            if len(cols):
                rows.append((m, i, cols))
    above = {(m, i): n for n, (m, i, _) in enumerate(rows)}  # island row -> its index, for lookups of i - 1
    done = [0] * len(rows)
    waves = []
    while any(d < len(cols) for d, (_, _, cols) in zip(done, rows)):
        wave = []
        for n, (m, i, cols) in enumerate(rows):
            if done[n] == len(cols):
                continue
            j = cols[done[n]]                    # the left neighbour in the island row is done
            up = above.get((m, i - 1))
            if up is None or done[up] >= np.searchsorted(rows[up][2], j + window - 1, side="right"):
                wave.append(i * W + int(j))
        for t in wave:
            n = above[(int(labels.reshape(-1)[t]), t // W)]
            done[n] += 1
        waves.append(sorted(wave))
    return waves
