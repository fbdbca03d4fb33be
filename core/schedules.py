"""Generation schedules: which cells are produced in each sequential wave (one forward per wave).

Pure functions: a schedule depends on the set of cells to produce and the window, never on samples.
- raster: one cell per wave in raster order (ar; serial resampling).
- zipar: cell (i, j) is produced once its left neighbour in its row is and every cell of row i - 1
  with column <= j + window - 1 is (all of row i - 1 when it ends before that column). Applied per
  island: an island's rows are its cells in each grid row, in column order (gaps skipped), "row
  i - 1" is the island's cells in grid row i - 1, and disjoint islands advance concurrently. On a
  full H x W grid this is ZipAR: W + (H - 1) * window waves, and window = W is raster order.
- jacobi: the same island rows hold Jacobi windows instead of one cell per wave (pjd's rule per
  island): a row starts once the island row above has `start` committed cells (all of it when
  shorter), its window is its next `length` pending cells, never at or past the first pending
  column of the row above. A row with no pending row above it in its island is a top row: its
  context holds every committed cell before it, so it may commit a residual sample.
"""
from __future__ import annotations

import numpy as np


def raster_waves(mask: np.ndarray) -> list[list[int]]:
    """One wave per masked cell, raster order. mask (H, W) bool -> [[t], ...]."""
    return [[int(t)] for t in np.flatnonzero(mask.reshape(-1))]


def island_rows(labels: np.ndarray) -> list[tuple[int, int, np.ndarray]]:
    """(island, grid row, its columns in order): one entry per island row, islands in label order,
    rows top to bottom. labels (H, W) int, 0 = no island."""
    H = labels.shape[0]
    rows = []
    for m in range(1, int(labels.max(initial=0)) + 1):
        for i in range(H):
            cols = np.flatnonzero(labels[i] == m)
            if len(cols):
                rows.append((m, i, cols))
    return rows


def jacobi_windows(rows: list[tuple[int, int, np.ndarray]], done: list[int], start: int,
                   length: int) -> list[tuple[int, bool, np.ndarray]]:
    """(island row index, top row?, window columns) of the island rows active now; done[n] counts the
    committed cells of island row n (always a prefix of its columns)."""
    above = {(m, i): n for n, (m, i, _) in enumerate(rows)}
    out = []
    for n, (m, i, cols) in enumerate(rows):
        if done[n] == len(cols):
            continue
        up = above.get((m, i - 1))
        top = up is None or done[up] == len(rows[up][2])
        window = cols[done[n]:done[n] + length]
        if not top:
            ucols = rows[up][2]
            if done[up] < min(start, len(ucols)):
                continue
            window = window[:np.searchsorted(window, ucols[done[up]])]   # columns before the pending one above
        if len(window):
            out.append((n, top, window))
    return out


def zipar_waves(labels: np.ndarray, window: int) -> list[list[int]]:
    """ZipAR waves inside every island of labels (H, W) int (0 = not produced), islands concurrently.
    Each wave lists raster indices, sorted; one forward per wave."""
    W = labels.shape[1]
    rows = island_rows(labels)
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
