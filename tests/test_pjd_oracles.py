"""pjd against its definitions, pass by pass (oracles for the module docstring's rule).

Most tests run pjd on the toy model of toy_ar.py (3 tokens, next-cell distribution a fixed table of
the last two raster cells a query may see), whose every conditional is known in closed form: the
oracle of a pass's p is that table read at what the docstring says each row may read (committed
tokens, its own row's guesses, a stand-in for the row above's pending last cell). Two tests call
row_causal_predict on the tiny GPT and compare with a cache-free forward (GPT.forward_visible).
"""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from core.acceptance import residual
from core.config import MethodParams, SamplingConfig
from core.decoding import UNKNOWN, Decoder, MethodContext
from core.methods import pjd
from core.sampling import processed
from toy_ar import MISSING, ToyAR

V = 3
TOY = SamplingConfig(cfg=1.0)


class _Recorder:
    """The toy's forwards, as made: per forward the cells fed, their tokens and write flags."""

    def __init__(self, toy: ToyAR):
        self.log: list[tuple[list[int], list[int], list[bool]]] = []
        self.prefills = 0
        prefill, forward_cells = toy.prefill, toy.forward_cells

        def pre(*a, **kw):
            self.prefills += 1
            return prefill(*a, **kw)

        def fc(cache, tokens, cells, grid, write=None, cell_mask=None):
            w = [True] * len(cells) if write is None else write.tolist()
            self.log.append((cells.tolist(), tokens[0].tolist(), w))
            return forward_cells(cache, tokens, cells, grid, write, cell_mask)
        toy.prefill, toy.forward_cells = pre, fc
        toy.step_one = lambda cache, tokens, cell, grid: fc(cache, tokens, cell.reshape(-1), grid)


def _toy_ctx(toy, grid, seed, sampling=TOY, **params):
    return MethodContext(target=toy, drafter=None, tokenizer=SimpleNamespace(vocab_size=V), grid=grid,
                         caption=lambda g: (torch.zeros(1, dtype=torch.long), torch.ones(1, dtype=torch.bool)),
                         sampling=sampling, params=MethodParams(**params), gen=torch.Generator().manual_seed(seed))


def _drain(gen):
    steps = []
    try:
        while True:
            steps.append(next(gen))
    except StopIteration as stop:
        return steps, stop.value


def _windows_by_definition(front, W, c, L):
    """The docstring's schedule, cell by cell: (r, j) is in row r's window iff every row above r has
    at least c committed tokens (or is done), row r is not done, and f_r <= j < min(f_r + L, f_(r-1))
    with f_(-1) = W. Written per cell on purpose, not as pjd.windows' loop over rows."""
    H = len(front)
    active = [all(front[a] >= min(c, W) for a in range(r)) and front[r] < W for r in range(H)]
    limit = [W if r == 0 else front[r - 1] for r in range(H)]
    cells = {r: [r * W + j for j in range(W) if active[r] and front[r] <= j < min(front[r] + L, limit[r])]
             for r in range(H)}
    return [(r, cells[r]) for r in range(H) if cells[r]]


def _stand_in_by_definition(final, cell, W):
    """decoding.stand_in without a placeholder: the nearest committed token to the left in the cell's
    row, else the one above it (nearest first), else 0."""
    i, j = divmod(cell, W)
    for jj in range(j - 1, -1, -1):
        if final[i * W + jj] != UNKNOWN:
            return int(final[i * W + jj])
    for a in range(i - 1, -1, -1):
        if final[a * W + j] != UNKNOWN:
            return int(final[a * W + j])
    return 0


def _toy_p(toy, cell, prev2, prev1, sampling=TOY):
    """The toy's processed distribution of `cell` given the two raster cells before it as a query sees
    them (MISSING where hidden)."""
    return processed(toy._logits(cell, prev2, prev1)[None], sampling, cells=cell)[0]


@pytest.mark.parametrize("init, grid, window, c", [
    ("random", (4, 3), 2, 1),     # three and four rows active at once
    ("repeat", (3, 4), 2, 2),
    ("above", (3, 4), 3, 1),
    ("repeat", (2, 3), 1, 3),     # one row at a time, one guess a pass
    ("random", (1, 1), 1, 1),     # one cell: one verdict in all
])
def test_each_pjd_pass_judges_the_scheduled_windows_with_the_row_causal_p_and_commits_by_the_rule(init, grid, window, c):
    """Every verify step against the docstring, on the toy model: rows = the active rows of the
    schedule and judged = a prefix of each row's window ending at its first rejection; one target
    forward (plus the prefill on the first) feeding each window cell's predecessor, a stand-in
    (not written) for a row above's pending last cell; prob = min(1, p/q) to 6 decimals, p the toy's
    table at what the row may read, q one-hot on a fresh guess, else the previous pass's p; commits =
    the accepted guesses, and in the top row its first rejected cell from normalize(max(0, p - q));
    fresh guesses follow sjd_init; totals the shares of the verdicts."""
    H, W = grid
    N = H * W
    seen = dict(rows2=0, rows3=0, fraction=0, redrafted=0, resampled=0, fresh_copy_of_residual=0,
                accepted=0, rejected=0, lower_rejected=0)
    for seed in range(12):
        toy = ToyAR(V, N, seed=seed % 3)
        rec = _Recorder(toy)
        run = pjd.run(_toy_ctx(toy, grid, seed, sjd_window=window, pjd_c=c, sjd_init=init))
        final = np.full(N, UNKNOWN, dtype=np.int64)
        q_prev: dict[int, torch.Tensor] = {}          # cell -> the p its redrafted guess was drawn from
        opened: set[int] = set()                      # cells that were in a window before this pass
        residual_cells: set[int] = set()              # committed from a residual, not as guessed
        judged_total = accepted_total = passes = 0
        while True:
            logged, prefilled = len(rec.log), rec.prefills
            try:
                s = next(run).to_dict()
            except StopIteration as stop:
                result = stop.value
                break
            passes += 1
            assert passes <= N                        # every pass commits at least one token
            made = rec.log[logged:]
            assert (s["phase"], s["model"]) == ("verify", "target")
            front = [int((final[r * W:(r + 1) * W] != UNKNOWN).sum()) for r in range(H)]
            rows = _windows_by_definition(front, W, c, window)
            # the prefill on the first pass, and one forward unless the only window cell is cell 0
            assert s["nfe"] == len(made) + rec.prefills - prefilled == (passes == 1) + (rows != [(0, [0])])
            assert s["fed"] == sum(len(f[0]) for f in made)
            fed = {cell: (tok, w) for f in made for cell, tok, w in zip(*f)}
            assert s["rows"] == [r for r, _ in rows]
            seen["rows2"] += len(rows) >= 2
            seen["rows3"] += len(rows) >= 3
            judged = [i * W + j for i, j in s["judged"]]
            assert len(judged) == len(s["accepted"]) == len(s["prob"])
            tokens = {i * W + j: x for (i, j), x in zip(s["cells"], s["tokens"])}
            # the window cells' guesses as they stand: fed (every window cell but a row's last), or committed as guessed
            # (a row's last window cell is fed only as the next row's stand-in, not written, or not at all)
            guess = {cell: fed[cell][0] for _, cells in rows for cell in cells if cell in fed and fed[cell][1]}
            at, expected_commits, resampled, p_ref = 0, [], None, {}
            for r, cells in rows:
                top = r == rows[0][0]
                verdicts = s["accepted"][at:at + len(cells)]
                n_judged = next((n + 1 for n, a in enumerate(verdicts) if not a), len(verdicts))
                verdicts, probs = verdicts[:n_judged], s["prob"][at:at + n_judged]
                assert judged[at:at + n_judged] == cells[:n_judged]
                at += n_judged
                k = sum(verdicts) + (top and not verdicts[-1])
                expected_commits += cells[:k]
                if top and not verdicts[-1]:
                    resampled = cells[n_judged - 1]
                for n, cell in enumerate(cells[:sum(verdicts)]):
                    assert guess.setdefault(cell, tokens[cell]) == tokens[cell]   # accepted as guessed
                for cell in cells:
                    prev, prev2 = cell - 1, cell - 2
                    if prev < 0:
                        p_ref[cell] = _toy_p(toy, 0, MISSING, MISSING)
                        continue
                    if final[prev] != UNKNOWN:        # what the query for `cell` reads
                        assert fed[prev] == (int(final[prev]), True)
                        x1 = int(final[prev])
                    elif prev // W == r:
                        x1 = guess[prev]
                    else:                             # the row above's pending last cell: a stand-in
                        x1 = _stand_in_by_definition(final, prev, W)
                        assert fed[prev] == (x1, False)
                    x2 = MISSING
                    if prev2 >= 0 and final[prev2] != UNKNOWN:
                        x2 = int(final[prev2])
                    elif prev2 >= 0 and prev2 // W == r:
                        x2 = guess[prev2]
                    p_ref[cell] = _toy_p(toy, cell, x2, x1)
                for n, cell in enumerate(cells[:n_judged]):
                    if cell in guess:
                        x = guess[cell]
                        q = float(q_prev[cell][x]) if cell in q_prev else 1.0
                        expected = min(1.0, float(p_ref[cell][x]) / q)
                        assert abs(probs[n] - expected) < 1e-5 and round(probs[n], 6) == probs[n]
                        seen["fraction"] += 0 < expected < 1
                    seen["accepted" if verdicts[n] else "rejected"] += 1
                    seen["lower_rejected"] += not verdicts[n] and not top
            assert at == len(judged)
            assert sorted(tokens) == sorted(expected_commits)
            assert s["resampled"] == (None if resampled is None else [resampled // W, resampled % W])
            if resampled is not None:
                seen["resampled"] += 1
                residual_cells.add(resampled)
                x = guess.get(resampled)
                if x is not None or resampled in q_prev:  # the token lies in normalize(max(0, p - q))
                    q = q_prev.get(resampled)
                    q = torch.nn.functional.one_hot(torch.tensor(x), V).float() if q is None else q
                    assert residual(p_ref[resampled][None], q[None])[0, tokens[resampled]] > 0
            for _, cells in rows:                     # fresh guesses follow sjd_init
                for cell in cells:
                    if cell in opened or cell not in guess:
                        continue
                    src = dict(repeat=cell - 1 if cell % W else None, above=cell - W if cell >= W else None).get(init)
                    if src is not None:
                        assert guess[cell] == (int(final[src]) if final[src] != UNKNOWN else guess[src])
                        seen["fresh_copy_of_residual"] += src in residual_cells
            for cell, tok in tokens.items():
                assert final[cell] == UNKNOWN
                final[cell] = tok
                q_prev.pop(cell, None)
            for _, cells in rows:                     # redrafted: the next pass tests them against this p
                for cell in cells:
                    if final[cell] == UNKNOWN:
                        q_prev[cell] = p_ref[cell]
                        seen["redrafted"] += 1
            opened |= {cell for _, cells in rows for cell in cells}
            judged_total += len(judged)
            accepted_total += sum(s["accepted"])
        assert (final != UNKNOWN).all() and (result.tokens.reshape(-1) == final).all()
        assert result.passed_fraction == pytest.approx(accepted_total / judged_total)
        assert result.kept_fraction == pytest.approx(accepted_total / N)
    assert seen["accepted"] and seen["rejected"] and seen["resampled"]
    if N > 1:
        assert seen["fraction"]
    if window > 1:
        assert seen["redrafted"]
    if c < W:
        assert seen["rows2"] and seen["lower_rejected"]
    if H >= 4:
        assert seen["rows3"]
    if init != "random":
        assert seen["fresh_copy_of_residual"]


def test_a_pjd_run_draws_only_from_its_own_generator():
    """Every draw of a run (verdicts, residuals, redrafts, fresh guesses) comes from ctx.gen: a run
    leaves torch's global generator as it found it, and disturbing that generator between two runs of
    one seed changes neither the steps nor the image."""
    grid, drawn = (3, 3), 0
    for seed in range(4):
        toy = ToyAR(V, 9, seed=seed)                  # (its embedding table is drawn from the global generator)

        def once():
            steps, result = _drain(pjd.run(_toy_ctx(toy, grid, seed, sjd_window=3, pjd_c=1)))
            return [{k: v for k, v in s.to_dict().items() if k != "wall_ms"} for s in steps], result.tokens.tolist()
        torch.manual_seed(0)
        state = torch.get_rng_state()
        a = once()
        assert torch.equal(torch.get_rng_state(), state)
        torch.manual_seed(1)
        assert once() == a
        drawn += sum(s["resampled"] is not None for s in a[0])
    assert drawn >= 4                                 # residual draws (and the redrafts after them) happened


def test_a_guess_the_target_gives_probability_zero_is_never_accepted_even_by_a_uniform_draw_of_zero(monkeypatch):
    """min(1, p/q) is the acceptance probability: a guess with p(x) = 0 must be rejected for every
    u in [0, 1), u = 0 included (the test is u < a; u <= a would accept it once in 2^24 draws). With
    every draw pinned to 0 and one active row (pjd_c = W, exact), each image must have positive
    probability under the toy's exact top-2 joint."""
    s = SamplingConfig(cfg=1.0, top_k=2)
    monkeypatch.setattr(torch, "rand", lambda *a, **kw: torch.zeros(1))
    grid, zero_p = (2, 3), 0
    for seed in range(6):
        toy = ToyAR(V, 6, seed=seed)
        steps, result = _drain(pjd.run(_toy_ctx(toy, grid, seed, s, sjd_window=3, pjd_c=3)))
        zero_p += sum(p == 0.0 for st in steps for p in st.extra["prob"])
        x = result.tokens.reshape(-1).tolist()
        for cell in range(6):
            p = _toy_p(toy, cell, x[cell - 2] if cell >= 2 else MISSING, x[cell - 1] if cell else MISSING, s)
            assert p[x[cell]] > 0
    assert zero_p                                     # some guesses had p = 0 (fresh uniform guesses)


@pytest.fixture(scope="module")
def gpt34(tiny_pair):
    return dataclasses.replace(tiny_pair, grid=(3, 4))


def _decoder(pair):
    ids, mask = pair.caption("a large red circle center on a striped blue background", pair.grid)
    dec = Decoder(pair.target, pair.grid, ids, mask, SamplingConfig(), "cpu", context=pjd.CONTEXT)
    dec.prefill()
    return dec


def _cache_free(dec, tokens: np.ndarray, visible: np.ndarray) -> torch.Tensor:
    """(N, V) log of the processed distributions of a cache-free forward: [t] predicts t + 1."""
    B = dec.captions.shape[0]
    logits = dec.gpt.forward_visible(dec.captions, dec.masks, torch.from_numpy(tokens)[None].expand(B, -1),
                                     dec.grid, torch.from_numpy(visible), drop=dec.drop)
    return processed(logits, dec.sampling)[0].log()


def test_a_rows_first_cell_reads_the_placeholder_given_for_the_row_above_pending_last_cell(gpt34):
    """row_causal_predict's contract: a row's first cell, whose predecessor (the row above's last
    cell) is not committed, is fed that cell's placeholder when one is given (mulo passes its
    guesses), else decoding.stand_in's nearest committed token to its left. Oracle: a cache-free
    forward over the committed tokens with the stand-in as that query's own token."""
    W = 4
    final = np.full(12, UNKNOWN, dtype=np.int64)
    final[[0, 1]] = [11, 22]                          # row 0 holds two committed tokens; 2 and 3 pending
    guesses = np.full(12, UNKNOWN, dtype=np.int64)
    guesses[[2, 3, 4]] = [33, 44, 55]
    rows = [(0, [2, 3]), (1, [4, 5])]
    for placeholder, stand in ((guesses, 44), (None, 22)):
        dec = _decoder(gpt34)
        out = pjd.row_causal_predict(dec, rows, final, guesses, placeholder)[2].log()   # cell 4, read at 3
        tokens = np.where(final != UNKNOWN, final, 0)
        tokens[3] = stand
        ref = _cache_free(dec, tokens, final != UNKNOWN)[3]
        assert float((out - ref).abs().max()) < 1e-4
        other = tokens.copy()
        other[3] = 22 + 44 - stand                    # the other candidate is far off: the check can tell
        assert float((out - _cache_free(dec, other, final != UNKNOWN)[3]).abs().max()) > 1e-2
    assert W == gpt34.grid[1]


def test_a_committed_slot_rewritten_in_a_row_causal_forward_reads_no_rows_guesses(gpt34):
    """No query reads another row's guesses, not even through the K/V of a committed slot that the
    Decoder rewrites in the same forward. Row 0 has a hole (mulo's islands leave such rows: 0 and 3
    committed, 1 and 2 guessed) and slot 3 was never written, so the forward rewrites it; row 1's
    query then reads slot 3. Oracle: a cache-free forward over the committed tokens (0, 3 and 4); the
    tolerance is relative to each probability (log p), as the tiny target is near uniform."""
    final = np.full(12, UNKNOWN, dtype=np.int64)
    final[[0, 3, 4]] = [11, 22, 33]
    guesses = np.full(12, UNKNOWN, dtype=np.int64)
    guesses[[1, 2, 5]] = [44, 55, 66]
    dec = _decoder(gpt34)
    out = pjd.row_causal_predict(dec, [(0, [1, 2]), (1, [5])], final, guesses)          # 5 is read at 4
    committed = final != UNKNOWN
    ref = _cache_free(dec, np.where(committed, final, 0), committed)
    # float noise here is ~5e-7; slot 3 computed with row 0's guess at 1 in view moves it by ~2e-4
    assert float((out[2].log() - ref[4]).abs().max()) < 2e-5
