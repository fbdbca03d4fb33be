"""Generation schedules: which cells are produced in each sequential wave (one forward per wave).

Pure functions: a schedule depends on the set of cells to produce and the window, never on samples.
- raster: one cell per wave in raster order (ar; serial resampling).
- zipar: rows advance together; a row may start once the row above has `window` cells done (or is
  done). Applied per island: an island's rows are its cells in each grid row, in column order,
  and disjoint islands advance concurrently. On a full grid with window = W it equals raster.
"""
from __future__ import annotations

import numpy as np


def raster_waves(mask: np.ndarray) -> list[list[int]]:
    """One wave per masked cell, raster order. mask (H, W) bool -> [[t], ...]."""
    return [[int(t)] for t in np.flatnonzero(mask.reshape(-1))]


def zipar_waves(labels: np.ndarray, window: int) -> list[list[int]]:
    """ZipAR waves inside every island of labels (H, W) int (0 = not produced), islands concurrently."""
    H, W = labels.shape
    rows_of = []  # per island: list of rows, each a list of raster indices in column order
    for m in range(1, int(labels.max()) + 1):
        rows = [[i * W + j for j in np.flatnonzero(labels[i] == m)] for i in range(H)]
        rows_of.append([r for r in rows if r])
    progress = [[0] * len(rows) for rows in rows_of]
    waves = []
    while any(p < len(r) for rows, prog in zip(rows_of, progress) for r, p in zip(rows, prog)):
        wave = []
        for rows, prog in zip(rows_of, progress):
            ready = []
            for n, row in enumerate(rows):
                if prog[n] >= len(row):
                    continue
                above_ok = n == 0 or prog[n - 1] >= min(window, len(rows[n - 1]))
                if above_ok:
                    ready.append(n)
            for n in ready:
                wave.append(int(rows[n][prog[n]]))
            for n in ready:
                prog[n] += 1
        waves.append(sorted(wave))
    return waves
