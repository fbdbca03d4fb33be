"""The island schedule against its definition, over random masks and windows.

Rule: cell (i, j) of an island is produced only after its left neighbour in the island row and after
every island cell of row i - 1 with column <= j + w - 1 (all of that row when it ends before).
"""
from __future__ import annotations

import numpy as np
import pytest

from core.islands import label_islands
from core.schedules import zipar_waves


def schedule_violations(labels: np.ndarray, waves: list[list[int]], window: int) -> list[str]:
    """Every breach of the rule, and any cell produced twice, never, or outside the islands."""
    H, W = labels.shape
    when = {}
    for n, wave in enumerate(waves):
        for t in wave:
            if t in when:
                return [f"cell {t} produced twice"]
            when[t] = n
    cells = {int(t) for t in np.flatnonzero(labels.reshape(-1))}
    if set(when) != cells:
        return [f"produced {sorted(set(when) ^ cells)[:5]}... against the islands"]
    out = []
    for t in cells:
        i, j = divmod(t, W)
        m = labels[i, j]
        row = [i * W + c for c in np.flatnonzero(labels[i] == m)]
        left = [c for c in row if c < t]
        if left and when[left[-1]] >= when[t]:
            out.append(f"{(i, j)} before its left neighbour")
        if i > 0:
            above = [(i - 1) * W + c for c in np.flatnonzero(labels[i - 1] == m) if c <= j + window - 1]
            if any(when[a] >= when[t] for a in above):
                out.append(f"{(i, j)} before row {i - 1} up to column {j + window - 1}")
    return out


def cells_counting_zipar(labels: np.ndarray, window: int) -> list[list[int]]:
    """The rule before the fix (kept here as the negative control): a row starts once the row above
    has `window` cells done, whatever their columns."""
    H, W = labels.shape
    rows_of = []
    for m in range(1, int(labels.max()) + 1):
        rows = [[i * W + j for j in np.flatnonzero(labels[i] == m)] for i in range(H)]
        rows_of.append([r for r in rows if r])
    progress = [[0] * len(rows) for rows in rows_of]
    waves = []
    while any(p < len(r) for rows, prog in zip(rows_of, progress) for r, p in zip(rows, prog)):
        wave = []
        for rows, prog in zip(rows_of, progress):
            ready = [n for n, row in enumerate(rows) if prog[n] < len(row)
                     and (n == 0 or prog[n - 1] >= min(window, len(rows[n - 1])))]
            wave += [rows[n][prog[n]] for n in ready]
            for n in ready:
                prog[n] += 1
        waves.append(sorted(wave))
    return waves


def random_islands(rng: np.random.Generator, H: int = 12, W: int = 12) -> np.ndarray:
    return label_islands(rng.random((H, W)) < rng.uniform(0.15, 0.6))


@pytest.mark.parametrize("seed", range(40))
def test_no_island_cell_is_produced_before_its_context(seed):
    rng = np.random.default_rng(seed)
    labels = random_islands(rng)
    window = int(rng.integers(1, 6))
    assert schedule_violations(labels, zipar_waves(labels, window), window) == []


def test_the_cell_counting_rule_is_caught_by_the_same_check():
    breaches = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        labels = random_islands(rng)
        window = int(rng.integers(1, 6))
        breaches += bool(schedule_violations(labels, cells_counting_zipar(labels, window), window))
    assert breaches >= 10


@pytest.mark.parametrize("H, W, w", [(32, 32, 4), (16, 16, 1), (8, 8, 8), (5, 7, 3), (16, 16, 16)])
def test_on_a_full_grid_it_is_zipar(H, W, w):
    full = np.ones((H, W), dtype=np.int64)
    waves = zipar_waves(full, w)
    assert len(waves) == W + (H - 1) * min(w, W)
    assert waves == cells_counting_zipar(full, w)
    assert schedule_violations(full, waves, w) == []
