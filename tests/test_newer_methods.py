"""pjd, scd, gsd and cool: their rules against their definitions, their losslessness (or its absence)
on a toy model whose joint is enumerable, their reductions to sjd / sd, and their NFE and traces."""
import dataclasses
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from core import engine
from core.acceptance import (annealed_accept_prob, annealed_residual, annealed_weights, exact_accept_prob,
                             grouped_accept_prob, maximal_coupling, rank_cluster, residual)
from core.config import MethodParams, ParameterError, RunConfig, SamplingConfig
from core.decoding import MethodContext
from core.methods import cool, pjd, registry, sjd
from core.sampling import sample
from core.trace import Trace
from toy_ar import ToyAR, chi_square_p_value

PROMPT = "a large red circle center on a striped blue background"
NEW = ("scd", "gsd", "pjd", "cool")


def _rand_dist(g, V, power=3.0):
    p = torch.rand(V, generator=g).double() ** power
    return p / p.sum()


# ---- scd: the maximal coupling ----------------------------------------------------------------

def _coupling_kernel(p, q, x):
    """By definition: keep x with probability min(1, p(x)/q(x)), else draw normalize(max(0, p - q))."""
    keep = min(1.0, float(p[x] / q[x]))
    r = (p - q).clamp_min(0)
    r = r / r.sum() if r.sum() > 0 else p
    return keep * torch.nn.functional.one_hot(torch.tensor(x), len(p)).double() + (1 - keep) * r


def _broken_coupling(p, q, x, gen):
    """Negative control: the old draft kept with the same probability, else an independent draw from p."""
    rows = torch.arange(len(x))
    keep = torch.rand(len(x), generator=gen) <= exact_accept_prob(p[rows, x], q[rows, x])
    return torch.where(keep, x, torch.multinomial(p, 1, generator=gen).squeeze(1))


def test_the_coupling_keeps_the_old_draft_with_probability_min_1_p_over_q_else_draws_the_residual():
    g = torch.Generator().manual_seed(0)
    V, n = 6, 40_000
    p, q = _rand_dist(g, V), _rand_dist(g, V)
    for x in range(V):
        out = maximal_coupling(p.float().expand(n, V), q.float().expand(n, V), torch.full((n,), x), g)
        empirical = torch.bincount(out, minlength=V).double() / n
        assert 0.5 * (empirical - _coupling_kernel(p, q, x)).abs().sum() < 0.02


def test_the_coupling_marginal_is_p_and_it_keeps_the_draft_with_probability_one_minus_tv():
    g = torch.Generator().manual_seed(1)
    for _ in range(20):
        V = 7
        p, q = _rand_dist(g, V), _rand_dist(g, V)
        marginal = sum(q[x] * _coupling_kernel(p, q, x) for x in range(V))
        assert torch.allclose(marginal, p, atol=1e-12)
        stay = sum(q[x] * _coupling_kernel(p, q, x)[x] for x in range(V))
        assert abs(float(stay) - (1 - 0.5 * float((p - q).abs().sum()))) < 1e-12


def test_an_independent_redraw_in_place_of_the_residual_does_not_keep_the_marginal():
    g = torch.Generator().manual_seed(2)
    V, n = 6, 60_000
    p, q = _rand_dist(g, V), _rand_dist(g, V)
    x = torch.multinomial(q.float(), n, replacement=True, generator=g)
    good = torch.bincount(maximal_coupling(p.float().expand(n, V), q.float().expand(n, V), x, g), minlength=V) / n
    bad = torch.bincount(_broken_coupling(p.float().expand(n, V), q.float().expand(n, V), x, g), minlength=V) / n
    assert 0.5 * (good.double() - p).abs().sum() < 0.01
    assert 0.5 * (bad.double() - p).abs().sum() > 0.05


# ---- gsd: the cluster and its acceptance --------------------------------------------------------

def _cluster_by_definition(p, x, G, gap, close):
    ranked = sorted(range(len(p)), key=lambda y: (-float(p[y]), y))   # descending, ties by id (stable)
    r = ranked.index(x)
    above = (G - 1) // 2
    window = ranked[max(0, r - above):r + (G - above)]
    return {y for y in window if y == x or (abs(float(p[y] - p[x])) < gap and bool(close[y]))}


@pytest.mark.parametrize("G", [1, 2, 5, 14])
def test_the_cluster_is_the_filtered_rank_window_holding_the_draft_token_and_at_most_G_members(G):
    g = torch.Generator().manual_seed(G)
    for _ in range(200):
        V = 30
        p = _rand_dist(g, V).float()
        p[torch.rand(V, generator=g) < 0.3] = 0.0                     # ties at zero, as outside top-k
        p = p / p.sum()
        x = int(torch.randint(0, V, (1,), generator=g))
        close = torch.rand(V, generator=g) < 0.7
        gap = float(torch.rand(1, generator=g)) * 0.2
        c = rank_cluster(p, x, G, gap, close)
        assert set(c.tolist()) == _cluster_by_definition(p, x, G, gap, close)
        assert x in c.tolist() and len(c) <= G
        q = _rand_dist(g, V).float()
        a = grouped_accept_prob(p, q, c)
        assert abs(float(a) - min(1.0, float(p[c].sum() / q[c].sum()))) < 1e-6


def test_a_window_one_rank_too_wide_breaks_the_size_bound():  # negative control of the bound above
    p = torch.linspace(1, 2, 20).softmax(0)
    assert len(rank_cluster(p, 10, 6, 1.0, torch.ones(20, dtype=torch.bool))) == 6
    assert len(_cluster_by_definition(p, 10, 7, 1.0, torch.ones(20, dtype=torch.bool))) > 6


def test_with_a_one_hot_q_the_cluster_test_accepts_at_least_as_often_as_the_token_test():
    g = torch.Generator().manual_seed(3)
    for _ in range(100):
        p = _rand_dist(g, 40).float()
        x = int(torch.randint(0, 40, (1,), generator=g))
        q = torch.nn.functional.one_hot(torch.tensor(x), 40).float()
        c = rank_cluster(p, x, 14, 0.15, torch.ones(40, dtype=torch.bool))
        assert float(grouped_accept_prob(p, q, c)) >= float(exact_accept_prob(p[x], q[x])) - 1e-7


# ---- cool: the schedule and its residual ---------------------------------------------------------

def test_the_schedule_is_delta_exp_minus_nu_i_minus_mu_and_its_mean_offset_averages_delta():
    w = annealed_weights(5, 2.0, 0.7, 0.3)
    assert torch.allclose(w, torch.tensor([2.0 * np.exp(-0.7 * i - 0.3) for i in range(1, 6)], dtype=torch.float32))
    mu = cool.offset(5, 0.7, "mean")
    assert abs(float(annealed_weights(5, 2.0, 0.7, mu).mean()) - 2.0) < 1e-5
    assert abs(float(annealed_weights(5, 2.0, 0.7, cool.offset(5, 0.7, "first"))[0]) - 2.0) < 1e-6
    assert torch.all(annealed_weights(5, 2.0, 0.7, mu)[:-1] > annealed_weights(5, 2.0, 0.7, mu)[1:])


def test_the_annealed_residual_is_a_distribution_by_its_definition_and_sds_where_the_weight_reaches_1():
    g = torch.Generator().manual_seed(4)
    for _ in range(50):
        V = 9
        p, q = _rand_dist(g, V).float(), _rand_dist(g, V).float()
        for w in (0.3, 0.9, 1.0, 1.7):
            got = annealed_residual(p[None], q[None], torch.tensor([w]))[0]
            mass = torch.tensor([max(0.0, float(p[y]) - min(float(q[y]), w * float(p[y]))) for y in range(V)])
            assert torch.all(got >= 0) and abs(float(got.sum()) - 1) < 1e-5
            assert torch.allclose(got, mass / mass.sum(), atol=1e-6)
            if w >= 1:
                assert torch.allclose(got, residual(p, q), atol=1e-6)
            x = int(torch.randint(0, V, (1,), generator=g))
            a = float(annealed_accept_prob(p[x], q[x], torch.tensor(w)))
            assert abs(a - min(1.0, w * float(p[x] / q[x]))) < 1e-6
    p, q = torch.tensor([[0.5, 0.3, 0.2]]), torch.tensor([[0.2, 0.3, 0.5]])
    assert not torch.allclose(annealed_residual(p, q, torch.tensor([0.5])), residual(p, q))  # differs below 1


# ---- reductions on the tiny pair -----------------------------------------------------------------

@pytest.fixture(scope="module")
def pair8(tiny_pair):
    return dataclasses.replace(tiny_pair, grid=(8, 8))


def _run(pair, method, seed=1, sampling=SamplingConfig(), **params):
    return engine.run(RunConfig(method=method, prompt=PROMPT, seed=seed, sampling=sampling).with_params(**params), pair)


def test_gsd_with_a_group_of_one_gives_sjd_tokens_and_nfe(pair8):
    for seed in (1, 2):
        a, b = _run(pair8, "sjd", seed), _run(pair8, "gsd", seed, gsd_group=1)
        assert (a.tokens, a.totals["target_nfe"]) == (b.tokens, b.totals["target_nfe"])
    assert _run(pair8, "gsd", 1, gsd_group=14, gsd_dist=1.0).tokens != _run(pair8, "sjd", 1).tokens


def test_gsd_clusters_only_tokens_whose_embedding_lies_within_the_distance_quantile(pair8, monkeypatch):
    """The `close` set gsd hands to rank_cluster is, for each judged guess x, the tokens whose row of the
    target's embedding table lies within squared L2 distance thr of x's row, thr the gsd_dist quantile
    of the squared distances between distinct rows (computed here with torch.cdist; ties at thr left
    out, as float rounding decides them)."""
    from core.methods import gsd
    seen, real = [], gsd.rank_cluster

    def spy(p, x, group, gap, close):
        seen.append((x, close.clone()))
        return real(p, x, group, gap, close)
    monkeypatch.setattr(gsd, "rank_cluster", spy)
    _run(pair8, "gsd", 1, gsd_group=8, gsd_dist=0.3)
    emb = pair8.target.tok_embeddings.weight.detach().double()
    d2 = torch.cdist(emb, emb).pow(2)
    thr = float(torch.quantile(d2[~torch.eye(len(emb), dtype=torch.bool)].float(), 0.3))
    assert len(seen) > 10
    for x, close in seen:
        clear = (d2[x] - thr).abs() > 1e-3 * thr
        assert torch.equal(close[clear], (d2[x] <= thr)[clear])
    assert 0.15 < float(torch.stack([c.double().mean() for _, c in seen]).mean()) < 0.45   # about gsd_dist


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_cool_with_delta_1_and_nu_0_gives_sd_tokens(pair8, temperature):
    s = SamplingConfig(temperature=temperature)
    a = _run(pair8, "sd", 4, s)
    b = _run(pair8, "cool", 4, s, cool_delta=1.0, cool_nu=0.0)
    assert (a.tokens, a.totals) == (b.tokens, {**b.totals, "wall_ms": a.totals["wall_ms"]})
    if temperature:
        assert _run(pair8, "cool", 4, s, cool_delta=2.0).tokens != a.tokens


def test_cool_relaxation_passes_more_drafts_than_sd(pair8):
    s = SamplingConfig(temperature=1.0)
    assert _run(pair8, "cool", 4, s, cool_delta=3.0).totals["passed_fraction"] > \
        _run(pair8, "sd", 4, s).totals["passed_fraction"]


@pytest.mark.parametrize("method, params", [("scd", {}), ("gsd", dict(gsd_group=1)), ("pjd", dict(pjd_c=8))])
def test_at_temperature_zero_the_exact_jacobi_methods_give_ar_tokens(pair8, method, params):
    greedy = SamplingConfig(temperature=0.0)
    assert _run(pair8, method, 1, greedy, **params).tokens == _run(pair8, "ar", 1, greedy).tokens


# ---- pjd: schedule, visibility, commits --------------------------------------------------------------

def test_pjd_windows_open_row_by_row_and_stop_at_the_committed_tokens_above():
    assert pjd.windows([0, 0, 0], 8, 3, 4) == [(0, [0, 1, 2, 3])]
    assert pjd.windows([3, 0, 0], 8, 3, 4) == [(0, [3, 4, 5, 6]), (1, [8, 9, 10])]
    assert pjd.windows([8, 5, 5], 8, 3, 4) == [(1, [13, 14, 15]), (2, [])][:1]   # row 2 level with row 1 waits
    assert pjd.windows([8, 2, 0], 8, 3, 16) == [(1, [10, 11, 12, 13, 14, 15])]   # row 2 not active yet


class _Visibility:
    """Records, per pjd forward, the cells fed and the attention mask the model actually used."""

    def __init__(self, gpt, monkeypatch):
        from core.models import gpt as gpt_mod
        self.calls = []
        original_fc, original_keys = gpt.forward_cells, gpt_mod._CachedContext.keys

        def forward_cells(cache, tokens, cells, grid, write=None, cell_mask=None):
            self.calls.append(dict(cells=cells.tolist(), mask=None))
            return original_fc(cache, tokens, cells, grid, write, cell_mask=cell_mask)

        def keys(ctx, layer, k, v):
            out = original_keys(ctx, layer, k, v)
            if layer == 0 and self.calls and self.calls[-1]["mask"] is None:
                mask = out[2][0, 0]                                  # (T, S [+ stand-ins]), bool or additive
                self.calls[-1]["mask"] = mask.clone() if mask.dtype == torch.bool else mask == 0
            return out
        monkeypatch.setattr(gpt, "forward_cells", forward_cells)
        monkeypatch.setattr(gpt_mod._CachedContext, "keys", keys)


def _check_row_causal(calls, steps, P, W, N):
    committed: set[int] = set()
    verify = [s for s in steps if s["phase"] == "verify"]
    assert len(verify) == len(calls)
    other_row_guesses_seen = 0
    for call, step in zip(calls, verify):
        for j, c in enumerate(call["cells"]):
            row = (c + 1) // W                          # the row of the cell this query predicts
            seen = set(torch.nonzero(call["mask"][j, P:P + N]).squeeze(1).tolist())
            other_row_guesses_seen += len({s for s in seen - committed if s // W != row})
            assert {s for s in committed if s <= c and s != c} <= seen | {c}   # committed context is read
        committed |= {i * W + jj for i, jj in step["cells"]}
    return other_row_guesses_seen


def test_pjd_guesses_read_committed_tokens_and_never_another_rows_guesses(tiny_pair, monkeypatch):
    from conftest import tiny_gpt
    target = tiny_gpt(0)
    pair = dataclasses.replace(tiny_pair, target=target)
    vis = _Visibility(target, monkeypatch)
    t = _run(pair, "pjd", 2, pjd_c=3, sjd_window=6)
    assert max(len(s["rows"]) for s in t.steps) >= 3                # several rows were active at once
    H, W = pair.grid
    assert _check_row_causal(vis.calls, t.steps, target.cfg.prefix_len, W, H * W) == 0


def test_without_the_row_mask_the_visibility_check_finds_other_rows_guesses(tiny_pair, monkeypatch):
    from conftest import tiny_gpt
    target = tiny_gpt(0)
    pair = dataclasses.replace(tiny_pair, target=target)
    original = target.forward_cells
    monkeypatch.setattr(target, "forward_cells", lambda cache, tokens, cells, grid, write=None, cell_mask=None:
                        original(cache, tokens, cells, grid, write))
    vis = _Visibility(target, monkeypatch)
    t = _run(pair, "pjd", 2, pjd_c=3, sjd_window=6)
    H, W = pair.grid
    assert _check_row_causal(vis.calls, t.steps, target.cfg.prefix_len, W, H * W) > 0


def _pjd_reference_gap(pair, monkeypatch) -> float:
    """Largest |log p engine - log p reference| over every row of every pjd forward, the reference being a
    cache-free forward (GPT.forward_visible) over exactly what that row may read: the committed
    tokens, its own row's guesses fed in that forward, and for a stand-in its own token. The Decoder
    runs its exact context policy here, so that the only thing left to differ is what each row sees."""
    from core.decoding import UNKNOWN, Decoder
    from core.sampling import processed
    records, feed = [], Decoder.feed

    def fed(dec, cells, tokens, write, cell_mask=None):
        out = feed(dec, cells, tokens, write, cell_mask)
        records.append(dict(dec=dec, cells=list(cells), tokens=list(tokens), write=list(write), out=out))
        return out
    monkeypatch.setattr(Decoder, "feed", fed)
    monkeypatch.setattr(pjd, "CONTEXT", "exact")    # rewrite K/V computed before the row above grew
    t = _run(pair, "pjd", 2, pjd_c=3, sjd_window=6)
    H, W = pair.grid
    committed = np.full(H * W, UNKNOWN)
    verify = [s for s in t.steps if s["phase"] == "verify"]
    assert len(records) == len(verify)
    worst = 0.0
    for rec, step in zip(records, verify):
        dec, refs = rec["dec"], {}
        for j, (c, tok, wr) in enumerate(zip(rec["cells"], rec["tokens"], rec["write"])):
            row = (c + 1) // W                          # the row of the cell this query predicts
            key = (row, None if wr else c)
            if key not in refs:
                tokens, visible = np.where(committed != UNKNOWN, committed, 0), committed != UNKNOWN
                for c2, t2, w2 in zip(rec["cells"], rec["tokens"], rec["write"]):
                    if w2 and c2 // W == row and committed[c2] == UNKNOWN:
                        tokens[c2], visible[c2] = t2, True
                if not wr:
                    tokens[c] = tok                     # a stand-in: read by its own query only
                B = dec.captions.shape[0]
                logits = dec.gpt.forward_visible(dec.captions, dec.masks, torch.from_numpy(tokens)[None].expand(B, -1),
                                                 dec.grid, torch.from_numpy(visible), drop=dec.drop)
                refs[key] = processed(logits, dec.sampling)[0]
            worst = max(worst, float((rec["out"][j].log() - refs[key][c].log()).abs().max()))
        for (i, jj), x in zip(step["cells"], step["tokens"]):
            committed[i * W + jj] = x
    return worst


def test_every_pjd_query_matches_a_cache_free_forward_over_what_its_row_may_read(tiny_pair, monkeypatch):
    assert _pjd_reference_gap(tiny_pair, monkeypatch) < 1e-4


def test_without_the_row_mask_pjd_queries_disagree_with_that_reference(tiny_pair, monkeypatch):
    from conftest import tiny_gpt
    target = tiny_gpt(0)
    original = target.forward_cells
    monkeypatch.setattr(target, "forward_cells", lambda cache, tokens, cells, grid, write=None, cell_mask=None:
                        original(cache, tokens, cells, grid, write))
    assert _pjd_reference_gap(dataclasses.replace(tiny_pair, target=target), monkeypatch) > 0.01


def test_pjd_commits_every_cell_once_never_changes_it_and_needs_fewer_passes_than_ar(tiny_pair):
    t = _run(tiny_pair, "pjd", 3, pjd_c=4)
    H, W = tiny_pair.grid
    written = {}
    for s in t.steps:
        if s["phase"] == "verify":
            for (i, j), x in zip(s["cells"], s["tokens"]):
                assert (i, j) not in written
                written[(i, j)] = x
    assert len(written) == H * W
    assert all(t.tokens[i][j] == x for (i, j), x in written.items())
    assert t.totals["target_nfe"] <= _run(tiny_pair, "ar", 3).totals["target_nfe"]


# ---- exactness on a toy model with an enumerable joint -----------------------------------------------

TOY_RUNS = 3000


def _toy_samples(method_run, grid, seed0, **params):
    V = 3
    N = grid[0] * grid[1]
    toy = ToyAR(V, N, seed=7)
    out = []
    for n in range(TOY_RUNS):
        ctx = MethodContext(target=toy, drafter=None, tokenizer=SimpleNamespace(vocab_size=V), grid=grid,
                            caption=lambda g: (torch.zeros(1, dtype=torch.long), torch.ones(1, dtype=torch.bool)),
                            sampling=SamplingConfig(cfg=1.0), params=MethodParams(**params),
                            gen=torch.Generator().manual_seed(seed0 + n))
        gen = method_run(ctx)
        try:
            while True:
                next(gen)
        except StopIteration as stop:
            out.append(tuple(int(x) for x in stop.value.tokens.reshape(-1)))
    return out, toy.joint()


def _redraw_treated_as_kept(p, q, old, gen):
    """Negative control: an independent redraw from p, tested next pass as if the old draft had been
    kept (against its old q)."""
    return sample(p, gen), q


def _scd_with(redraft):
    def run(ctx):
        return (yield from sjd.jacobi(ctx, sjd.exact_accept, redraft))
    return run


P_MIN = 1e-3  # an exact sampler fails this with probability 0.001; each test below is one draw


def test_scd_samples_the_exact_joint_of_a_toy_model():
    samples, joint = _toy_samples(registry()["scd"], (1, 4), 0, sjd_window=4)
    assert chi_square_p_value(samples, joint) > P_MIN


def test_scd_with_an_independent_redraw_treated_as_kept_fails_the_same_test():
    samples, joint = _toy_samples(_scd_with(_redraw_treated_as_kept), (1, 4), 0, sjd_window=4)
    assert chi_square_p_value(samples, joint) < P_MIN


def test_gsd_with_a_group_of_one_is_exact_and_with_larger_groups_is_not():
    exact, joint = _toy_samples(registry()["gsd"], (1, 4), 10_000, sjd_window=4, gsd_group=1)
    assert chi_square_p_value(exact, joint) > P_MIN
    grouped, _ = _toy_samples(registry()["gsd"], (1, 4), 10_000, sjd_window=4, gsd_group=3, gsd_gap=1.0, gsd_dist=1.0)
    assert chi_square_p_value(grouped, joint) < P_MIN


def test_pjd_with_one_active_row_samples_the_exact_joint_and_with_several_does_not():
    exact, joint = _toy_samples(registry()["pjd"], (2, 2), 20_000, sjd_window=2, pjd_c=2)
    assert chi_square_p_value(exact, joint) > P_MIN
    parallel, _ = _toy_samples(registry()["pjd"], (2, 2), 20_000, sjd_window=2, pjd_c=1)
    assert chi_square_p_value(parallel, joint) < P_MIN


# ---- every new method: NFE, trace, validation ----------------------------------------------------------



@pytest.mark.parametrize("method, params", [("scd", {}), ("gsd", {}), ("pjd", dict(pjd_c=3)), ("cool", {})])
def test_trace_nfe_totals_equal_the_forward_passes_made(tiny_pair, monkeypatch, method, params):
    from conftest import PassCounter, tiny_gpt
    target, small = tiny_gpt(0), tiny_gpt(1, n_layer=1)
    pair = dataclasses.replace(tiny_pair, target=target, multiscale=target, small=small)
    ct, cd = PassCounter(target, monkeypatch), PassCounter(small, monkeypatch)
    t = _run(pair, method, 0, **params)
    assert t.totals["target_nfe"] == ct.n == sum(s["nfe"] for s in t.steps if s["model"] == "target")
    assert t.totals["drafter_nfe"] == cd.n == (0 if method != "cool" else cd.n)
    assert (cd.n > 0) == (method == "cool")


@pytest.mark.parametrize("method", NEW)
def test_each_new_method_writes_a_valid_trace_with_per_position_acceptance(pair8, method):
    t = _run(pair8, method, 0)
    d = json.loads(t.to_json())
    assert Trace.from_json(t.to_json()).to_dict() == d
    v = [s for s in d["steps"] if s["phase"] == "verify"]
    assert v and all(len(s["prob"]) == len(s["accepted"]) <= len(s["judged"]) for s in v)
    assert all(0.0 <= x <= 1.0 for s in v for x in s["prob"])
    assert sum(len(s["cells"]) for s in v) == 64
    assert 0.0 < d["totals"]["passed_fraction"] <= 1.0 and 0.0 < d["totals"]["kept_fraction"] <= 1.0
    for key in ("sjd_window", "gsd_group", "gsd_gap", "gsd_dist", "pjd_c", "cool_delta", "cool_nu", "cool_norm"):
        assert key in d["params"]


@pytest.mark.parametrize("params, name", [
    (dict(gsd_group=0), "gsd_group"), (dict(gsd_gap=1.5), "gsd_gap"), (dict(gsd_dist=-0.1), "gsd_dist"),
    (dict(pjd_c=0), "pjd_c"), (dict(cool_delta=0.0), "cool_delta"), (dict(cool_nu=-1.0), "cool_nu"),
    (dict(cool_norm="median"), "cool_norm"), (dict(sjd_init="diagonal"), "sjd_init"),
])
def test_bad_new_parameters_name_the_parameter_and_its_range(pair8, params, name):
    with pytest.raises(ParameterError) as e:
        _run(pair8, "gsd", 0, **params)
    assert str(e.value).startswith(f"{name} must be")


# ---- scd against sjd on the shipped models -------------------------------------------------------------

def test_on_the_shipped_models_scd_drafts_settle_and_accept_longer_runs_than_sjd():
    from core.embedded.evaluate import heldout
    pair = engine.load_pair("embedded")
    nfe, settled = {"sjd": 0, "scd": 0}, {"sjd": 0.0, "scd": 0.0}
    for i, scene in enumerate(heldout(2)):
        for m in nfe:
            t = engine.run(RunConfig(method=m, prompt=scene.caption(), seed=i).with_params(sjd_window=32), pair)
            nfe[m] += t.totals["target_nfe"]
            steps = [s for s in t.steps if s["phase"] == "verify"]
            settled[m] += sum(s["unchanged"] for s in steps) / max(1, sum(s["redrafted"] for s in steps))
    assert nfe["scd"] < nfe["sjd"]                    # the same 2 x 1024 cells in fewer passes
    assert settled["scd"] > settled["sjd"]


# ---- the app's views read the new methods' traces ------------------------------------------------------

@pytest.mark.parametrize("method", NEW)
def test_the_app_views_and_the_step_replay_read_each_new_method(pair8, method):
    from app import panels, render
    t = dataclasses.replace(_run(pair8, method, 0), model="embedded")   # the tiny pair shares its tokenizer
    shown = dict(zip(panels.VIEWS, panels.views(dict(trace=t))))
    assert shown["final"] is not None and shown["canvas"] is not None and shown["timeline"] is not None
    for n in range(len(t.steps) + 1):
        render.step_caption(t, n)
    assert (render.replay(t, len(t.steps)).target == np.asarray(t.tokens)).all()
