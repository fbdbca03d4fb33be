"""The context rule, checked against a cache-free forward: what every query of a mulo run reads.

Every forward the Decoder makes is recorded (what it fed, which slots were readable, what the
method held as committed), then recomputed without any cache by GPT.forward_visible over exactly
the committed tokens. With context=exact the two agree to 1e-4 on every row; the negative controls
(context=verify, and the old refresh rule that only rewrote slots before the first cell of a wave)
must disagree.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from core import decoding, engine
from core.config import RunConfig
from core.decoding import UNKNOWN, Decoder
from core.sampling import processed

PROMPT = "a large red circle center and a small blue square top left on a striped green background"
TAU_SOME = 0.0070   # at k = 4, l = 1 the tiny random target rejects about 5 % of cells: several islands
TOL = 1e-4


class Recorder:
    """Wraps Decoder.plan and Decoder.feed: one record per forward of every decoder."""

    def __init__(self, monkeypatch):
        self.records: list[dict] = []
        plan, feed = Decoder.plan, Decoder.feed
        rec = self

        def planned(dec, inputs, known, context=None):
            dec._known_at_plan = known.copy()
            return plan(dec, inputs, known, context)

        def fed(dec, cells, tokens, write):
            out = feed(dec, cells, tokens, write)
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


def gap(rec: dict, stand_ins: int | None = None) -> float:
    ref, which = reference(rec, stand_ins)
    return float((rec["out"][which] - ref).abs().max())


def run_mulo(pair, **params) -> tuple:
    cfg = RunConfig(method="mulo", prompt=PROMPT, seed=0).with_params(**{"k": 4, "tau": TAU_SOME, **params})
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
        assert gap(r) < TOL
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
    assert worst_gap(rec.records, tuple(embedded.grid), stand_ins=1, most=24) < TOL


def test_context_verify_keeps_stale_key_values_that_exact_rewrites(embedded, monkeypatch):
    """Negative control: the same check fails with context=verify (passed cells keep verify-time K/V)."""
    rec = Recorder(monkeypatch)
    run_mulo(embedded, context="verify", k=16, tau=0.05, scale=4)
    assert worst_gap(rec.records, tuple(embedded.grid), stand_ins=0, above=100 * TOL) > 100 * TOL


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
    assert stale_reads > 0 and worst_gap(rec.records, tuple(embedded.grid), stand_ins=0, above=100 * TOL) > 100 * TOL


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
        assert gap(r) < TOL


def test_pooled_mass_of_a_later_band_equals_a_cache_free_forward(tiny_pair, monkeypatch):
    """pooled in the trace == sum over B_k of the cache-free distribution on the committed bands + proposal."""
    t = run_mulo(tiny_pair, context="exact", draft_rows=2)
    target = tiny_pair.target
    ids, mask = tiny_pair.caption(PROMPT, tiny_pair.grid)
    dec = Decoder(target, tiny_pair.grid, ids, mask, RunConfig().sampling, "cpu")
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
            assert abs(s["pooled"][n // W][n % W] - expected) < TOL
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


def test_the_decoder_names_its_violations(tiny_pair):
    """Decoder.violations is the check the rule promises: a withdrawn proposal and a slot computed
    before an earlier change are both named."""
    ids, mask = tiny_pair.caption(PROMPT, tiny_pair.grid)
    dec = Decoder(tiny_pair.target, tiny_pair.grid, ids, mask, RunConfig().sampling, "cpu", context="exact")
    dec.prefill()
    known = np.full(dec.n_cells, UNKNOWN, dtype=np.int64)
    known[:10] = np.arange(10)
    decoding.predict(dec, list(range(1, 11)), known)                   # slots 0..9 written
    assert dec.violations(known, 9) == []
    known[3] = 99                                                      # cell 3 changes: 3 and all after it
    assert dec.violations(known, 9) == list(range(3, 10))
    assert dec.violations(known, 9, context="verify") == [3]           # verify mode sees the token only
    known[3], known[7] = 3, UNKNOWN                                    # 7 withdrawn: it holds an uncommitted token
    assert 7 in dec.violations(known, 9)
