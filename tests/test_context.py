"""The context rule, checked against a cache-free forward: what every query of a mulo run reads.

Every forward the Decoder makes is recorded (what it fed, which slots were readable, what the
method held as committed), then recomputed without any cache by GPT.forward_visible over exactly
the committed tokens. With context=exact the two agree on every row (`p_gap`: the error relative to
each probability, floored at the uniform mass); the negative controls (context=verify, and the old
refresh rule that only rewrote slots before the first cell of a wave) must disagree.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from core import decoding, engine
from core.config import RunConfig, SamplingConfig
from core.decoding import UNKNOWN, Decoder
from core.sampling import processed

PROMPT = "a large red circle center and a small blue square top left on a striped green background"
TAU_SOME = 0.0070   # at k = 4, l = 1 the tiny random target rejects about 5 % of cells: several islands
TOL = 1e-4          # on pooled masses, relative
TOL_P = 1e-5        # on distributions, by p_gap: the tiny target (its clean runs: ~6e-7)
TOL_P_SHIPPED = 1e-3  # the same on the shipped 6-layer target under guidance (float noise: ~1e-4)



class Recorder:
    """Wraps Decoder.plan and Decoder.feed: one record per forward of every decoder."""

    def __init__(self, monkeypatch):
        self.records: list[dict] = []
        plan, feed = Decoder.plan, Decoder.feed
        rec = self

        def planned(dec, inputs, known, context=None):
            dec._known_at_plan = known.copy()
            return plan(dec, inputs, known, context)

        def fed(dec, cells, tokens, write, cell_mask=None):
            out = feed(dec, cells, tokens, write, cell_mask)
            P = dec.cache.prefix_len
            rec.records.append(dict(dec=dec, cells=list(cells), tokens=list(tokens), write=list(write), out=out,
                                    known=dec._known_at_plan, held=dec.cache_tok.copy(),
                                    readable=dec.cache.valid[0, P:].cpu().numpy().copy()))
            return out
        monkeypatch.setattr(Decoder, "plan", planned)
        monkeypatch.setattr(Decoder, "feed", fed)


def reference(rec: dict, stand_ins: int | None = None) -> tuple[torch.Tensor, list[int]]:
    """(T', V) processed distributions of the recorded forward's rows (all written rows, and the first
    `stand_ins` stand-in rows: each costs a forward of its own) from a cache-free forward that sees the
    committed tokens (the method's `known`) and, for a stand-in row, its own stand-in token; and the
    indices of those rows in the record."""
    dec, known = rec["dec"], rec["known"]
    B, N = dec.captions.shape[0], dec.n_cells
    visible = torch.from_numpy(known != UNKNOWN)

    def forward(tokens: np.ndarray) -> torch.Tensor:
        logits = dec.gpt.forward_visible(dec.captions, dec.masks, torch.from_numpy(tokens)[None].expand(B, N),
                                         dec.grid, visible, drop=dec.drop)
        return processed(logits, dec.sampling, cells=list(range(1, N + 1)))[0]       # (N, V), row t -> t + 1
    committed = np.where(known != UNKNOWN, known, 0)
    shared = forward(committed)
    rows, which = [], []
    for n, (c, t, wr) in enumerate(zip(rec["cells"], rec["tokens"], rec["write"])):
        if wr:
            assert t == known[c]                # a written token is a committed one (or a draft fed on purpose)
            rows.append(shared[c])
        elif stand_ins is None or stand_ins > 0:  # a stand-in: seen by its own query only
            stand_ins = None if stand_ins is None else stand_ins - 1
            alone = committed.copy()
            alone[c] = t
            rows.append(forward(alone)[c])
        else:
            continue
        which.append(n)
    return torch.stack(rows), which


def p_gap(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest |a - b| / max(b, 1/V) over every token: relative error for every token at or above the
    uniform mass, V times the absolute error below it. Not the absolute error: on a near-uniform model
    (the tiny random target: max p ~ 0.01) K/V computed against the wrong context move a probability
    by ~1e-6, i.e. ~1e-4 of it. Not the log either: a sharp model's tokens of mass ~1e-9 carry float32
    noise of ~1e-4 in their logs."""
    a, b = a.double(), b.double()
    return float(((a - b).abs() / b.clamp(min=1.0 / b.shape[-1])).max())


def gap(rec: dict, stand_ins: int | None = None) -> float:
    ref, which = reference(rec, stand_ins)
    return p_gap(rec["out"][which], ref)


def run_mulo(pair, **params) -> tuple:
    cfg = RunConfig(method="mulo", prompt=PROMPT, seed=0).with_params(**{"k": 4, "tau": TAU_SOME, "radius": 0, **params})
    return engine.run(cfg, pair)


def worst_gap(records, dec_grid, stand_ins: int | None = None, most: int | None = None,
              above: float | None = None) -> float:
    """Largest |engine - reference| over the rows of the forwards of the decoder on dec_grid: all of
    them, or `most` spread evenly; stops at the first gap over `above`."""
    mine = [r for r in records if r["dec"].grid == dec_grid]
    if most is not None and len(mine) > most:
        mine = [mine[i] for i in np.linspace(0, len(mine) - 1, most).round().astype(int)]
    worst = 0.0
    for r in mine:
        worst = max(worst, gap(r, stand_ins))
        if above is not None and worst > above:
            break
    return worst


SETTINGS = [dict(), dict(resample="serial"), dict(scale=4), dict(draft_rows=2), dict(scale=4, draft_rows=2, resample="serial"),
            dict(draft_rows=1, window=2)]


@pytest.mark.parametrize("params", SETTINGS, ids=lambda p: ",".join(f"{k}={v}" for k, v in p.items()) or "defaults")
def test_every_query_reads_the_committed_tokens_computed_under_the_committed_prefix(tiny_pair, monkeypatch, params):
    rec = Recorder(monkeypatch)
    t = run_mulo(tiny_pair, context="exact", **params)
    final = np.array(t.tokens).reshape(-1)
    verify = [s for s in t.steps if s["phase"] == "verify"]
    assert sum(s["n_islands"] for s in verify) >= 2 and any(s["phase"] == "resample" for s in t.steps)
    target = [r for r in rec.records if r["dec"].grid == tuple(tiny_pair.grid)]
    assert len(target) == t.totals["target_nfe"] - 1                      # every pass but the prefill
    for r in target:
        reach = max(r["cells"]) + 1
        committed = r["known"][:reach] != UNKNOWN
        # readable slots (before the reach) are exactly the committed cells, holding the committed token
        assert np.array_equal(r["readable"][:reach], committed)
        assert np.array_equal(r["held"][:reach][committed], r["known"][:reach][committed])
        # ... and the distributions equal a cache-free forward on those tokens
        assert gap(r) < TOL_P
    # committed tokens never change once committed: what resampling read is in the finished image
    for r in target:
        resampling = [c + 1 for c, wr in zip(r["cells"], r["write"]) if r["known"][c + 1 if c + 1 < len(final) else c] == UNKNOWN]
        if resampling:
            k = r["known"][:max(r["cells"]) + 1]
            assert np.array_equal(k[k != UNKNOWN], final[:len(k)][k != UNKNOWN])


@pytest.fixture(scope="module")
def embedded():
    """The shipped family: trained attention reacts to its context (a random tiny model barely does)."""
    return engine.load_pair("embedded")


def test_on_the_shipped_models_exact_context_matches_the_cache_free_forward(embedded, monkeypatch):
    rec = Recorder(monkeypatch)
    run_mulo(embedded, context="exact", k=16, tau=0.05, scale=4)
    assert worst_gap(rec.records, tuple(embedded.grid), stand_ins=1, most=24) < TOL_P_SHIPPED


def test_context_verify_keeps_stale_key_values_that_exact_rewrites(embedded, monkeypatch):
    """Negative control: the same check fails with context=verify (passed cells keep verify-time K/V)."""
    rec = Recorder(monkeypatch)
    run_mulo(embedded, context="verify", k=16, tau=0.05, scale=4)
    assert worst_gap(rec.records, tuple(embedded.grid), stand_ins=0, above=100 * TOL_P_SHIPPED) > 100 * TOL_P_SHIPPED


def _old_plan(dec, inputs, known, context=None):
    """The rule before the fix: rewrite only cells whose slot holds another token, and only before the
    first cell fed; leave rejected proposals readable."""
    first = min(inputs)
    for c in np.flatnonzero((known[:first] != UNKNOWN) & (dec.cache_tok[:first] != known[:first])):
        inputs.setdefault(int(c), (int(known[c]), True))


def test_the_old_refresh_rule_fails_the_same_check(embedded, monkeypatch):
    """Negative control: re-broken (refresh up to min(wave) only), resampled cells read stale slots."""
    monkeypatch.setattr(Decoder, "plan", _old_plan)
    rec = Recorder(monkeypatch)
    run_mulo(embedded, context="exact", k=16, tau=0.05, scale=4)
    target = [r for r in rec.records if r["dec"].grid == tuple(embedded.grid)]
    stale_reads = sum(not np.array_equal(r["readable"][:max(r["cells"]) + 1],
                                         r["known"][:max(r["cells"]) + 1] != UNKNOWN) for r in target)
    assert stale_reads > 0 and worst_gap(rec.records, tuple(embedded.grid), stand_ins=0, above=100 * TOL_P_SHIPPED) > 100 * TOL_P_SHIPPED


def test_multi_band_verification_reads_committed_bands_exactly_in_both_modes(tiny_pair, monkeypatch):
    """With several bands, every verify pass (not only resampling) equals the cache-free forward, even
    with context=verify."""
    rec = Recorder(monkeypatch)
    t = run_mulo(tiny_pair, context="verify", draft_rows=1)
    bands = [s for s in t.steps if s["phase"] == "verify"]
    assert len(bands) == 8
    verify_records = [r for r in rec.records if r["dec"].grid == tuple(tiny_pair.grid)
                      and len(r["cells"]) >= tiny_pair.grid[1] * 2 - 1 and r["known"][max(r["cells"])] != UNKNOWN
                      and all(w for w in r["write"])]
    assert len(verify_records) >= 7
    for r in verify_records:
        assert gap(r) < TOL_P


def test_pooled_mass_of_a_later_band_equals_a_cache_free_forward(tiny_pair, monkeypatch):
    """pooled in the trace == sum over B_k of the cache-free distribution on the committed bands + proposal."""
    t = run_mulo(tiny_pair, context="exact", draft_rows=2)
    target = tiny_pair.target
    ids, mask = tiny_pair.caption(PROMPT, tiny_pair.grid)
    dec = Decoder(target, tiny_pair.grid, ids, mask, SamplingConfig(), "cpu")
    final, proposal = np.array(t.tokens).reshape(-1), np.array(t.proposal).reshape(-1)
    H, W = tiny_pair.grid
    nb = tiny_pair.neighbours.cpu()
    checked = 0
    for s in (s for s in t.steps if s["phase"] == "verify"):
        r0, r1 = s["band"]
        tokens = np.concatenate([final[:r0 * W], proposal[r0 * W:r1 * W], np.zeros((H - r1) * W, np.int64)])
        visible = torch.zeros(H * W, dtype=torch.bool)
        visible[:r1 * W] = True
        tok = torch.from_numpy(tokens)[None].expand(dec.captions.shape[0], -1)
        logits = target.forward_visible(dec.captions, dec.masks, tok, dec.grid, visible, drop=dec.drop)
        p = processed(logits, dec.sampling, cells=list(range(1, H * W + 1)))[0]   # row t predicts t + 1
        for n, t_cell in enumerate(range(r0 * W, r1 * W)):
            if t_cell == 0:
                continue
            row = p[t_cell - 1].double()
            x = int(proposal[t_cell])
            b_k = [x] + nb[x, :4].tolist()
            expected = float(row[b_k].sum() / row.sum())
            assert abs(s["pooled"][n // W][n % W] - expected) < TOL * expected
            checked += 1
    assert checked > 200


def test_tau_one_with_every_neighbour_passes_every_cell(tiny_pair):
    V = tiny_pair.vocab_size
    t = run_mulo(tiny_pair, tau=1.0, k=V - 1)
    assert t.totals["passed_fraction"] == 1.0 and t.tokens == t.proposal


def test_k_beyond_the_neighbour_table_is_refused_naming_the_limit(tiny_pair):
    from core.config import ParameterError
    pair = dataclasses.replace(tiny_pair, neighbours=tiny_pair.neighbours[:, :32])
    with pytest.raises(ParameterError, match=r"^k must be at most 32 .*got 33"):
        run_mulo(pair, k=33)


def ten_known_cells(pair, context: str):
    """A prefilled decoder under `context` and a known-token array whose cells 0..9 hold 0..9."""
    ids, mask = pair.caption(PROMPT, pair.grid)
    dec = Decoder(pair.target, pair.grid, ids, mask, SamplingConfig(), "cpu", context=context)
    dec.prefill()
    known = np.full(dec.n_cells, UNKNOWN, dtype=np.int64)
    known[:10] = np.arange(10)
    return dec, known


def test_the_decoder_names_its_violations(tiny_pair):
    """Decoder.violations is the check the rule promises: a withdrawn proposal and a slot computed
    before an earlier change are both named."""
    dec, known = ten_known_cells(tiny_pair, "exact")
    decoding.predict(dec, list(range(1, 11)), known)                   # slots 0..9 written
    assert dec.violations(known, 9) == []
    known[3] = 99                                                      # cell 3 changes: 3 and all after it
    assert dec.violations(known, 9) == list(range(3, 10))
    assert dec.violations(known, 9, context="verify") == [3]           # verify mode sees the token only
    known[3], known[7] = 3, UNKNOWN                                    # 7 withdrawn: it holds an uncommitted token
    assert 7 in dec.violations(known, 9)


# ---- pooled mass and verdicts against their definition, for several k ----------------------------

def nearest_codes(tokenizer, k: int) -> torch.Tensor:
    """(V, k) the k nearest other codes of each code by L2 on the code vectors: B_k by its definition,
    computed here from the codebook, not read from the pair's neighbour table."""
    codes = tokenizer.quantize.codes().float()
    d = torch.cdist(codes, codes)
    d.fill_diagonal_(float("inf"))
    return d.argsort(dim=1)[:, :k]


@pytest.fixture(scope="module")
def one_band(tiny_pair):
    """A single-band run's proposal and the cache-free distributions of its verify pass: the context of
    cell t is the prefix and the proposal before t. Returns (proposal (N,), rows (N, V): row t is cell t)."""
    t = run_mulo(tiny_pair, tau=0.0)
    proposal = np.array(t.proposal).reshape(-1)
    return proposal, cache_free_rows(tiny_pair, proposal)


def cache_free_rows(pair, tokens: np.ndarray) -> torch.Tensor:
    """(N, V) float64: row t is the target's processed distribution of cell t given every token before
    it, from one cache-free forward (row 0 from the prefill)."""
    ids, mask = pair.caption(PROMPT, pair.grid)
    dec = Decoder(pair.target, pair.grid, ids, mask, SamplingConfig(), "cpu")
    dec.prefill()
    B, N = dec.captions.shape[0], dec.n_cells
    logits = pair.target.forward_visible(dec.captions, dec.masks, torch.from_numpy(tokens)[None].expand(B, N),
                                         dec.grid, torch.ones(N, dtype=torch.bool), drop=dec.drop)
    later = processed(logits, dec.sampling, cells=list(range(1, N + 1)))[0]      # row t predicts t + 1
    return torch.cat([dec.p0[None], later[:-1]]).double()


def pooled_by_definition(rows: torch.Tensor, proposal: np.ndarray, nearest: torch.Tensor) -> np.ndarray:
    x = torch.from_numpy(proposal)
    b_k = torch.cat([x[:, None], nearest[x]], dim=1)                                # (N, 1 + k)
    return (rows.gather(1, b_k).sum(1) / rows.sum(1)).numpy()


def test_pooled_mass_and_verdicts_follow_k_as_the_definition_says(tiny_pair, tokenizer, one_band):
    """For k = 0, 1, 16 at one tau: the trace's pooled mass equals the mass of the cache-free verify
    distribution on the proposal and its k nearest codes (within 1e-4), every verdict is that mass
    >= tau, and a larger k passes more cells. Built-in control: the masses of different k differ by ten times
    more than the tolerance, so a pooled mass that ignored k could not pass."""
    proposal, rows = one_band
    ks = (0, 1, 16)
    expected = {k: pooled_by_definition(rows, proposal, nearest_codes(tokenizer, k)) for k in ks}
    tau = float(np.median(expected[1]))
    tau += 1e-6 if min(np.abs(e - tau).min() for e in expected.values()) < 1e-6 else 0.0
    assert min(np.abs(e - tau).min() for e in expected.values()) >= 1e-6   # no verdict sits on the edge
    passed = []
    for k in ks:
        t = run_mulo(tiny_pair, k=k, tau=tau)
        (v,) = [s for s in t.steps if s["phase"] == "verify"]
        assert np.array_equal(np.array(t.proposal).reshape(-1), proposal)
        pooled, accepted = np.array(v["pooled"]).reshape(-1), np.array(v["accepted"]).reshape(-1)
        assert (np.abs(pooled - expected[k]) / expected[k]).max() < TOL, k
        assert np.array_equal(accepted, expected[k] >= tau), k
        passed.append(int(accepted.sum()))
    assert passed[0] < passed[1] < passed[2]
    for a, b in ((0, 1), (1, 16)):
        assert np.median(np.abs(expected[a] - expected[b]) / expected[b]) > 10 * TOL


# ---- resampled cells are draws from the distribution of the context they were sampled under -------

def randomized_pit(rows: torch.Tensor, tokens: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """u = F(x-) + U p(x) with tokens ranked by descending probability: uniform on [0, 1], independently
    cell after cell, exactly when each token x was drawn from its row (the Rosenblatt transform)."""
    order = rows.argsort(dim=1, descending=True, stable=True)
    ranked = rows.gather(1, order)
    rank = (order == torch.from_numpy(tokens)[:, None]).float().argmax(1)
    before = (ranked.cumsum(1) - ranked).gather(1, rank[:, None])[:, 0]
    own = ranked.gather(1, rank[:, None])[:, 0]
    return (before + torch.from_numpy(rng.random(len(tokens))) * own).numpy()


def ks_distance(u: np.ndarray) -> float:
    """Kolmogorov-Smirnov distance between the sample u and the uniform distribution on [0, 1]."""
    u = np.sort(u)
    n = len(u)
    return float(max((np.arange(1, n + 1) / n - u).max(), (u - np.arange(n) / n).max()))


@pytest.fixture(scope="module")
def serial_resampling(embedded):
    """A single-band serial run of the shipped models: when cell t is resampled every cell before it is
    committed for good, so its distribution is row t - 1 of a cache-free forward over the final tokens.
    Returns (final (N,), proposal (N,), R_X cells, their cache-free distributions (n, V))."""
    t = run_mulo(embedded, context="exact", k=16, tau=0.05, resample="serial")
    (v,) = [s for s in t.steps if s["phase"] == "verify"]
    final, proposal = np.array(t.tokens).reshape(-1), np.array(t.proposal).reshape(-1)
    cells = np.flatnonzero(np.array(v["resample"]).reshape(-1))
    rows = cache_free_rows(embedded, final)[cells]
    return final, proposal, cells, rows


KS_CRITICAL = 1.95   # / sqrt(n): the Kolmogorov-Smirnov test at level 0.001


def test_resampled_cells_are_draws_from_the_cache_free_distribution_of_their_context(serial_resampling):
    final, _, cells, rows = serial_resampling
    assert len(cells) >= 100
    u = randomized_pit(rows, final[cells], np.random.default_rng(0))
    assert ks_distance(u) < KS_CRITICAL / np.sqrt(len(cells))


def test_tokens_not_drawn_from_that_distribution_fail_the_same_check(serial_resampling):
    """Negative controls: keeping the proposal, writing the most likely token, or one constant token."""
    final, proposal, cells, rows = serial_resampling
    limit = KS_CRITICAL / np.sqrt(len(cells))
    for name, tokens in (("proposal", proposal[cells]), ("argmax", rows.argmax(1).numpy()),
                         ("constant", np.full(len(cells), int(np.bincount(final).argmax())))):
        assert ks_distance(randomized_pit(rows, tokens, np.random.default_rng(0))) > limit, name


# ---- the decoder's small pieces against their definitions ---------------------------------------

def test_a_stand_in_is_the_placeholder_else_the_nearest_final_token_left_else_above_else_zero():
    """decoding.stand_in against its definition, cell by cell, on random partly known grids."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        H, W = rng.integers(1, 5, size=2)
        known = np.where(rng.random(H * W) < 0.4, rng.integers(1, 50, H * W), UNKNOWN)
        placeholder = None if rng.random() < 0.3 else np.where(rng.random(H * W) < 0.3, rng.integers(50, 99, H * W),
                                                               UNKNOWN)
        for cell in range(H * W):
            i, j = divmod(cell, W)
            left = [known[i * W + jj] for jj in range(j - 1, -1, -1) if known[i * W + jj] != UNKNOWN]
            above = [known[ii * W + j] for ii in range(i - 1, -1, -1) if known[ii * W + j] != UNKNOWN]
            if placeholder is not None and placeholder[cell] != UNKNOWN:
                expected = placeholder[cell]
            else:
                expected = (left + above + [0])[0]
            assert decoding.stand_in(known, placeholder, cell, W) == expected


def test_an_unknown_context_policy_is_refused_naming_the_choices(tiny_pair):
    ids, mask = tiny_pair.caption(PROMPT, tiny_pair.grid)
    for context in decoding.CONTEXTS:
        assert Decoder(tiny_pair.target, tiny_pair.grid, ids, mask, SamplingConfig(), "cpu", context).context == context
    with pytest.raises(ValueError, match=r"^context must be one of schedule, exact, verify; got 'cached'$"):
        Decoder(tiny_pair.target, tiny_pair.grid, ids, mask, SamplingConfig(), "cpu", context="cached")


def test_timed_counts_the_passes_and_tokens_of_every_decoder_it_watches_and_the_wall_time():
    """decoding.timed by its definition: per-decoder differences over the block, summed; wall time in
    ms between the clock readings around the block."""
    import time
    from types import SimpleNamespace
    a, b = SimpleNamespace(nfe=5, fed=40), SimpleNamespace(nfe=2, fed=7)
    f: dict = {}
    t0 = time.perf_counter()
    with decoding.timed(f, (a, b)):
        time.sleep(0.02)
        a.nfe, a.fed, b.nfe, b.fed = a.nfe + 3, a.fed + 11, b.nfe + 1, b.fed + 2
    elapsed_ms = (time.perf_counter() - t0) * 1000.0
    assert (f["nfe"], f["fed"]) == (4, 13)
    assert 20.0 <= f["wall_ms"] <= elapsed_ms
    assert decoding.cells_of([0, 5, 7], 3) == [[0, 0], [1, 2], [2, 1]]


@pytest.mark.parametrize("method, params", [("ar", {}), ("zipar", dict(window=4))])
def test_raster_and_zipar_orders_feed_every_cell_once_and_rewrite_nothing(tiny_pair, method, params):
    """Under the schedule rule a cell the schedule fills after a slot was written does not make that
    slot stale: ar and ZipAR write each of the first N - 1 cells exactly once (ZipAR also feeds the
    end of a row as an unwritten stand-in to the row below before that end is sampled)."""
    rec = Recorder(monkeypatch := pytest.MonkeyPatch())
    try:
        t = engine.run(RunConfig(method=method, prompt=PROMPT, seed=2).with_params(**params), tiny_pair)
    finally:
        monkeypatch.undo()
    N = tiny_pair.grid[0] * tiny_pair.grid[1]
    written = [c for r in rec.records for c, w in zip(r["cells"], r["write"]) if w]
    assert sorted(written) == list(range(N - 1))
    assert sum(s["fed"] for s in t.steps) == sum(len(r["cells"]) for r in rec.records) >= N - 1
    assert method != "ar" or sum(s["fed"] for s in t.steps) == N - 1


def test_a_decoder_holds_one_row_per_guidance_branch_and_one_slot_per_cell(tiny_pair):
    """One caption row without guidance (cfg = 1), the conditional and the null-caption row with it; the
    bookkeeping spans the H x W cells of a grid that is not square."""
    ids, mask = tiny_pair.caption(PROMPT, tiny_pair.grid)
    for cfg, rows in [(1.0, 1), (2.0, 2), (4.0, 2)]:
        s = dataclasses.replace(SamplingConfig(), cfg=cfg)
        dec = Decoder(tiny_pair.target, (3, 5), ids, mask, s, "cpu")
        assert dec.captions.shape[0] == dec.masks.shape[0] == rows and dec.drop.tolist() == [False, True][:rows]
        assert all(len(a) == 15 for a in (dec.cache_tok, dec.written, dec.changed, dec.filled))


def test_a_pending_predecessor_is_fed_as_its_placeholder_through_every_entry_point(tiny_pair, monkeypatch):
    """predict, sample_cells and decode_step hand the placeholder on: the stand-in fed for a cell that is
    not final is its placeholder token, unwritten; without a placeholder, the nearest final token."""
    ids, mask = tiny_pair.caption(PROMPT, tiny_pair.grid)
    gen = torch.Generator().manual_seed(0)
    calls = [lambda dec, known, ph: decoding.predict(dec, [6], known, ph),
             lambda dec, known, ph: decoding.sample_cells(dec, [6], known, gen, ph),
             lambda dec, known, ph: decoding.decode_step("resample", "target", dec, [6], known, gen, placeholder=ph)]
    for call in calls:
        for ph_token in (77, None):
            rec = Recorder(monkeypatch)
            dec = Decoder(tiny_pair.target, tiny_pair.grid, ids, mask, SamplingConfig(), "cpu")
            dec.prefill()
            known = np.full(dec.n_cells, UNKNOWN, dtype=np.int64)
            known[:5] = [3, 1, 4, 1, 5]
            placeholder = None if ph_token is None else np.full(dec.n_cells, UNKNOWN, dtype=np.int64)
            if placeholder is not None:
                placeholder[5] = ph_token
            call(dec, known, placeholder)
            r = rec.records[-1]
            assert (r["cells"][-1], r["write"][-1]) == (5, False)
            assert r["tokens"][-1] == (5 if ph_token is None else ph_token)
            monkeypatch.undo()


def test_a_forward_can_ask_for_a_stricter_policy_than_its_decoder_and_every_method_gets_the_one_it_asks(tiny_pair):
    """predict(..., context="exact") on a "verify" decoder rewrites what exact calls stale in that same
    forward; MethodContext.decoder builds the decoder with the policy asked for."""
    dec, known = ten_known_cells(tiny_pair, "verify")
    decoding.predict(dec, list(range(1, 11)), known)
    known[3] = 99
    decoding.predict(dec, [11], known)                                 # verify: rewrites 3 only
    assert dec.violations(known, 9, context="verify") == [] and dec.violations(known, 9, context="exact") == list(range(4, 10))
    decoding.predict(dec, [11], known, context="exact")
    assert dec.violations(known, 10, context="exact") == []
    ctx = engine.context(RunConfig(method="ar", prompt=PROMPT), tiny_pair)
    for context in decoding.CONTEXTS:
        assert ctx.decoder(tiny_pair.target, tiny_pair.grid, context).context == context


def test_withdrawing_a_slot_makes_every_committed_slot_after_it_stale(tiny_pair):
    """A withdrawal is a change (docstring of decoding): the slots written before it and after it in
    raster order were computed against the withdrawn token."""
    dec, known = ten_known_cells(tiny_pair, "exact")
    decoding.predict(dec, list(range(1, 11)), known)
    decoding.predict(dec, [11], known)                                 # a later forward: the clock moves on
    known[5] = UNKNOWN
    dec._withdraw(np.array([5]))
    assert dec.violations(known, 9) == list(range(6, 10))
    assert dec.violations(known, 9, context="schedule") == list(range(6, 10))


def test_filling_an_earlier_cell_is_a_change_under_exact_only(tiny_pair):
    """The policies by their definitions: a cell filled after later slots were written leaves them
    readable under "schedule" (ZipAR's order) and stale under "exact"; under "exact" a committed cell
    not written yet already makes every slot after it stale."""
    dec, known = ten_known_cells(tiny_pair, "schedule")
    known[5] = UNKNOWN
    decoding.predict(dec, list(range(1, 11)), known)   # 0..4 and 6..9 written, 5 fed as a stand-in only
    assert dec.violations(known, 9) == [] and dec.cache_tok[:10].tolist() == [0, 1, 2, 3, 4, UNKNOWN, 6, 7, 8, 9]
    known[5] = 42
    assert dec.violations(known, 9, context="exact") == list(range(5, 10))
    assert dec.violations(known, 9, context="schedule") == [5]
    decoding.predict(dec, [6], known)                                   # schedule: writes 5, keeps 6..9
    assert dec.violations(known, 9, context="schedule") == []
    assert dec.violations(known, 9, context="exact") == list(range(6, 10))
    decoding.predict(dec, [11], known, context="exact")
    assert dec.violations(known, 10, context="exact") == []


def test_guidance_stops_after_cfg_interval_as_in_a_cache_free_forward(tiny_pair, monkeypatch):
    """With cfg_interval = c only cells 0..c + 1 are guided (LlamaGen's rule): every row of every
    forward of a run that crosses that edge equals the cache-free forward processed with the raster
    index of the cell it predicts. Negative control: the same rows against a reference that guides
    every cell differ past the edge."""
    sampling = dataclasses.replace(SamplingConfig(), cfg=4.0, cfg_interval=5)
    rec = Recorder(monkeypatch)
    cfg = RunConfig(method="mulo", prompt=PROMPT, seed=0, sampling=sampling).with_params(k=4, tau=TAU_SOME)
    engine.run(cfg, tiny_pair)
    target = [r for r in rec.records if r["dec"].grid == tuple(tiny_pair.grid)]
    assert any(c + 1 <= 6 for r in target for c in r["cells"]) and any(c + 1 > 6 for r in target for c in r["cells"])
    assert max(gap(r) for r in target) < TOL_P
    everywhere = dataclasses.replace(sampling, cfg_interval=-1)
    gaps = []
    for r in target:
        r["dec"].sampling = everywhere
        gaps.append(gap(r))
        r["dec"].sampling = sampling
    assert max(gaps) > 100 * TOL_P


class _Routes:
    """Counts which GPT entry a Decoder.feed reaches: the single-token step or the general forward."""

    def __init__(self, monkeypatch):
        from core.models.gpt import GPT
        self.calls: list[tuple[str, int, bool, bool]] = []   # (entry, tokens, all written, masked)
        self.entry: list[str] = []
        step_one, forward_cells, feed = GPT.step_one, GPT.forward_cells, Decoder.feed
        me = self

        def one(gpt, cache, tokens, cell, grid):
            me.entry.append("step_one")
            return step_one(gpt, cache, tokens, cell, grid)

        def cells(gpt, cache, tokens, cell_t, grid, write=None, cell_mask=None):
            me.entry.append("forward_cells")
            return forward_cells(gpt, cache, tokens, cell_t, grid, write, cell_mask)

        def fed(dec, cells_, tokens, write, cell_mask=None):
            me.entry.clear()
            out = feed(dec, cells_, tokens, write, cell_mask)
            assert len(me.entry) == 1
            me.calls.append((me.entry[0], len(cells_), all(write), cell_mask is not None))
            return out
        monkeypatch.setattr(GPT, "step_one", one)
        monkeypatch.setattr(GPT, "forward_cells", cells)
        monkeypatch.setattr(Decoder, "feed", fed)


@pytest.mark.parametrize("method, params", [("ar", {}), ("mulo", dict(k=4, tau=TAU_SOME)), ("pjd", {}),
                                            ("zipar", dict(window=4))])
def test_a_single_written_token_takes_the_compilable_step_and_every_other_forward_the_general_one(
        tiny_pair, monkeypatch, method, params):
    """Decoder.feed routes one written token without a visibility mask through GPT.step_one (the step
    MULO_COMPILE compiles) and everything else through forward_cells: with the mask when one is given."""
    routes = _Routes(monkeypatch)
    engine.run(RunConfig(method=method, prompt=PROMPT, seed=1).with_params(**params), tiny_pair)
    assert routes.calls
    for entry, n, written, masked in routes.calls:
        assert entry == ("step_one" if n == 1 and written and not masked else "forward_cells")
    if method == "ar":
        assert {c[0] for c in routes.calls} == {"step_one"}
    if method in ("mulo", "pjd"):
        assert {c[0] for c in routes.calls} == {"step_one", "forward_cells"} or method == "pjd"
    if method == "pjd":
        assert any(masked for *_, masked in routes.calls)


def _kv(dec: Decoder, cell: int) -> torch.Tensor:
    s = dec.cache.prefix_len + cell
    return torch.stack([dec.cache.k[:, :, :, s], dec.cache.v[:, :, :, s]]).clone()


def test_a_rewrite_is_a_change_exactly_when_the_slot_s_key_values_change(tiny_pair):
    """Decoder.feed marks a rewritten slot changed when its token or its K/V differ from the last
    write, and K/V differ exactly when a slot before it changed or was filled since (the cache itself
    is the oracle: the slot's keys and values before and after the rewrite)."""
    # the same token under the same context: K/V equal, not a change, nothing after it stale
    dec, known = ten_known_cells(tiny_pair, "exact")
    decoding.predict(dec, list(range(1, 11)), known)
    before = _kv(dec, 5)
    decoding.predict(dec, [6], known)                                  # feeds 5 again, same token
    assert float((_kv(dec, 5) - before).abs().max()) < 1e-5
    assert dec.changed[5] < dec.written[5] and dec.violations(known, 9) == []
    # the same token after an earlier cell was filled: K/V differ, a change, what follows is stale
    dec, known = ten_known_cells(tiny_pair, "schedule")
    known[5] = UNKNOWN
    decoding.predict(dec, list(range(1, 11)), known)                   # 5 fed as a stand-in only
    known[5] = 42
    decoding.predict(dec, [6], known)                                  # fills 5 (no change under schedule)
    assert dec.violations(known, 9) == []
    before = _kv(dec, 7)
    decoding.predict(dec, [8], known)                                  # feeds 7 again, same token, 5 now visible
    assert float((_kv(dec, 7) - before).abs().max()) > 1e-3
    assert dec.changed[7] == dec.written[7] == dec.clock
    assert dec.violations(known, 9) == [8, 9]


@pytest.mark.parametrize("method, params", [("mulo", dict(k=4, tau=TAU_SOME, radius=1, draft_rows=2)),
                                            ("pjd", {}), ("zipar", dict(window=4)), ("sjd", {}), ("sd", {})])
def test_the_cache_holds_keys_exactly_where_the_decoder_says_a_token_is(tiny_pair, monkeypatch, method, params):
    """After every forward of a run the readable cell slots are the ones the decoder records as holding
    a token; stand-ins (write=False) leave no key behind."""
    rec = Recorder(monkeypatch)
    engine.run(RunConfig(method=method, prompt=PROMPT, seed=3).with_params(**params), tiny_pair)
    assert any(not all(r["write"]) for r in rec.records) or method in ("sd", "sjd")
    for r in rec.records:
        assert np.array_equal(r["readable"], r["held"] != UNKNOWN)

