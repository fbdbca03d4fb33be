import dataclasses
import time

import numpy as np
import pytest
import torch

from core import engine
from core.acceptance import exact_accept_prob, relaxed_target, residual
from core.config import RunConfig, SamplingConfig
from core.embedded import family
from core.methods import sd
from core.trace import Trace

PROMPT = "a large red circle center on a striped blue background"


def test_accept_mass_plus_rejection_mass_times_residual_is_exactly_p():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        p = torch.rand(7, generator=g).double() ** 3
        q = torch.rand(7, generator=g).double() ** 3
        p, q = p / p.sum(), q / q.sum()
        accept = q * exact_accept_prob(p, q)                  # P(draft = x and accepted)
        rejection_mass = 1 - accept.sum()
        assert torch.allclose(accept + rejection_mass * residual(p, q), p, atol=1e-12, rtol=0)


def test_relaxation_moves_the_longest_neighbour_prefix_within_delta():
    p = torch.tensor([[0.1, 0.3, 0.05, 0.15, 0.4]])
    neighbours = torch.tensor([[2, 3, 1, 4]] * 5)             # token 0's neighbours: 2, 3, 1, 4
    out = relaxed_target(p, torch.tensor([0]), neighbours, k=4, delta=0.25)
    # 0.05 (n1) + 0.15 (n2) = 0.20 <= 0.25; + 0.3 (n3) would exceed: stop there
    assert torch.allclose(out, torch.tensor([[0.30, 0.3, 0.0, 0.0, 0.4]]))
    assert torch.allclose(relaxed_target(p, torch.tensor([0]), neighbours, 4, 0.0), p)


def test_the_residual_of_p_against_itself_falls_back_to_p():
    p = torch.tensor([[0.5, 0.25, 0.25, 0.0]])
    assert torch.equal(residual(p, p), p)


def test_rules_work_row_by_row_on_a_batch_of_rows():
    """(T, V) inputs: each row's residual, relaxation and pooled share are those of the row alone."""
    from core.acceptance import pooled_mass
    g = torch.Generator().manual_seed(1)
    p = torch.rand(3, 6, generator=g) ** 2
    q = torch.rand(3, 6, generator=g) ** 2
    p, q = p / p.sum(1, keepdim=True), q / q.sum(1, keepdim=True)
    neighbours = torch.stack([torch.roll(torch.arange(6), -s)[1:] for s in range(6)])   # code v: v+1, v+2, ...
    drafts = torch.tensor([0, 3, 5])
    rows = [residual(p[t], q[t]) for t in range(3)]
    assert torch.allclose(residual(p, q), torch.stack(rows))
    relaxed = relaxed_target(p, drafts, neighbours, k=3, delta=0.3)
    assert torch.allclose(relaxed, torch.cat([relaxed_target(p[t:t + 1], drafts[t:t + 1], neighbours, 3, 0.3) for t in range(3)]))
    # pooled is a share of the row's own mass, whatever its scale
    weights = torch.tensor([[2.0, 1.0, 1.0, 0.0], [0.5, 0.25, 0.25, 0.0]])
    assert torch.allclose(pooled_mass(weights, torch.tensor([0, 1]), torch.tensor([[1, 2, 3]] * 4), k=0),
                          torch.tensor([0.5, 0.25], dtype=torch.float64))


def test_relaxation_keeps_a_prefix_that_reaches_delta_exactly_and_honours_k():
    p = torch.tensor([[0.25, 0.25, 0.25, 0.125, 0.125]])      # binary fractions: sums are exact
    neighbours = torch.tensor([[1, 2, 3, 4]] * 5)
    # n1 + n2 = 0.5 == delta: both move
    assert torch.equal(relaxed_target(p, torch.tensor([0]), neighbours, k=4, delta=0.5),
                       torch.tensor([[0.75, 0.0, 0.0, 0.125, 0.125]]))
    # k = 1: only the nearest neighbour may move, whatever delta allows
    assert torch.equal(relaxed_target(p, torch.tensor([0]), neighbours, k=1, delta=0.9),
                       torch.tensor([[0.5, 0.0, 0.25, 0.125, 0.125]]))


@pytest.fixture(scope="module")
def pair8(tiny_pair):
    return dataclasses.replace(tiny_pair, grid=(8, 8))


@pytest.mark.parametrize("method, params", [("sd", {}), ("sd", dict(gamma=7)), ("sjd", {}),
                                            ("sjd", dict(sjd_init="repeat", sjd_window=5))])
def test_at_temperature_zero_speculative_methods_give_ar_tokens(pair8, method, params):
    greedy = SamplingConfig(temperature=0.0)
    ar = engine.run(RunConfig(method="ar", prompt=PROMPT, seed=1, sampling=greedy), pair8)
    other = engine.run(RunConfig(method=method, prompt=PROMPT, seed=1, sampling=greedy).with_params(**params), pair8)
    assert other.tokens == ar.tokens


def test_speculative_traces_record_judged_cells_and_probabilities(pair8):
    t = engine.run(RunConfig(method="sd", prompt=PROMPT, seed=0), pair8)
    v = [s for s in t.steps if s["phase"] == "verify"]
    assert v and all(len(s["prob"]) == len(s["accepted"]) <= len(s["judged"]) for s in v)
    assert sum(len(s["cells"]) for s in v) == 64
    assert t.totals["target_nfe"] == sum(s["nfe"] for s in v)


# ---- statistical: sd samples from p ---------------------------------------------------------
#
# The first three cells of a row from the shipped target and drafter at top_k = 4: sd's per-cell
# marginals against the exact ones (the target's joint of at most 64 outcomes from cache-free forwards,
# exact_joint below; the later cells' marginals spread over 15-25 codes). Measured at 400 rows: sd 0.073
# and 0.091 on two seed ranges (ar at 1 500 rows: 0.047, sd 0.040: the noise of the estimate), the
# always-accept control 1.000. The limit SD_TV sits at twice sd's worst and a fifth of the control's.

N_RUNS = 400
GRID = (1, 3)   # the first three cells of a row, from the shipped target and drafter
SD_TV = 0.2


def _first_cells(pair, method_run, seed0: int, n_runs: int = N_RUNS) -> np.ndarray:
    from core.decoding import MethodContext
    cfg = RunConfig(method="ar", prompt=PROMPT, sampling=SamplingConfig(top_k=4))
    out = []
    for n in range(n_runs):
        ctx = engine.context(dataclasses.replace(cfg, seed=seed0 + n), pair)
        ctx = dataclasses.replace(ctx, drafter=pair.small)
        gen = method_run(ctx)
        try:
            while True:
                next(gen)
        except StopIteration as stop:
            out.append(stop.value.tokens.reshape(-1))
    return np.array(out)                                      # (n_runs, 3)


def _tv(a: np.ndarray, marginals: list[dict]) -> float:
    """Largest total-variation distance between a per-cell empirical marginal and the exact one."""
    worst = 0.0
    for c in range(a.shape[1]):
        va, ca = np.unique(a[:, c], return_counts=True)
        pa, pb = dict(zip(va.tolist(), ca / len(a))), marginals[c]
        worst = max(worst, 0.5 * sum(abs(pa.get(v, 0) - pb.get(v, 0)) for v in set(pa) | set(pb)))
    return worst


@pytest.fixture(scope="module")
def embedded_row():
    pair = engine.load_pair("embedded")
    if pair.small is None:
        pytest.fail("the shipped same-resolution drafter is missing from assets/")
    return dataclasses.replace(pair, grid=GRID, caption=lambda prompt, grid: family.caption(prompt, (32, 32)))


@pytest.fixture(scope="module")
def row_marginals(embedded_row) -> list[dict]:
    """The exact per-cell marginals of the target's first three cells at top_k = 4."""
    marginals: list[dict] = [{} for _ in range(GRID[1])]
    for seq, pr in exact_joint(embedded_row, SamplingConfig(top_k=4)).items():
        for c, v in enumerate(seq):
            marginals[c][v] = marginals[c].get(v, 0.0) + pr
    return marginals


def test_sd_samples_the_target_distribution(embedded_row, row_marginals):
    tv = _tv(_first_cells(embedded_row, sd.run, 20_000), row_marginals)
    assert tv < SD_TV, tv


def test_an_always_accept_rule_fails_the_same_test(embedded_row, row_marginals):
    def always_accept(ctx):  # negative control: p~ so large on the draft that every draft passes
        return sd.speculate(ctx, sd.relaxed_rule(
            lambda p, drafts: p + 1e9 * torch.nn.functional.one_hot(drafts, p.shape[-1])))
    tv = _tv(_first_cells(embedded_row, always_accept, 20_000), row_marginals)
    assert tv > SD_TV, tv


# ---- statistical: the joint distribution of a short row against its exact value -------------------
#
# On a 1 x 4 row at top_k = 2 the target's joint distribution has at most 16 outcomes; each one's
# probability is the product of four conditionals, computed here from cache-free forwards
# (GPT.forward_visible) over its prefix. A method that claims exactness must match it in total
# variation over whole rows (not only per-cell marginals).

ROW, TOP2, N_ROWS, TV_LIMIT = (1, 4), SamplingConfig(top_k=2), 400, 0.15


def exact_joint(pair, s: SamplingConfig) -> dict[tuple, float]:
    from core.decoding import Decoder
    from core.sampling import processed
    ids, mask = pair.caption(PROMPT, pair.grid)
    dec = Decoder(pair.target, pair.grid, ids, mask, s, "cpu")
    dec.prefill()                                            # cell 0: nothing before it to cache
    N, B = pair.grid[0] * pair.grid[1], dec.captions.shape[0]
    out: dict[tuple, float] = {}

    def walk(prefix: list[int], prob: float) -> None:
        c = len(prefix)
        if c == N:
            out[tuple(prefix)] = prob
            return
        if c == 0:
            row = dec.p0
        else:
            tokens = torch.zeros(N, dtype=torch.long)
            tokens[:c] = torch.tensor(prefix)
            visible = torch.arange(N) < c
            logits = pair.target.forward_visible(dec.captions, dec.masks, tokens[None].expand(B, N), pair.grid,
                                                 visible, drop=dec.drop)
            row = processed(logits, s)[0, c - 1]             # row c - 1 predicts cell c
        for v in torch.nonzero(row > 0).flatten().tolist():
            walk(prefix + [v], prob * float(row[v]))
    walk([], 1.0)
    return out


def joint_tv(rows: list[tuple], exact: dict[tuple, float]) -> float:
    seen: dict[tuple, float] = {}
    for r in rows:
        seen[r] = seen.get(r, 0.0) + 1.0 / len(rows)
    return 0.5 * sum(abs(seen.get(k, 0.0) - exact.get(k, 0.0)) for k in set(seen) | set(exact))


def sampled_rows(pair, method: str, **params) -> tuple[list[tuple], list[Trace]]:
    traces = [engine.run(RunConfig(method=method, prompt=PROMPT, seed=30_000 + n, sampling=TOP2)
                         .with_params(**params), pair) for n in range(N_ROWS)]
    return [tuple(np.array(t.tokens).reshape(-1).tolist()) for t in traces], traces


@pytest.fixture(scope="module")
def tiny_row(tokenizer):
    """A random tiny target on a 1 x 4 row, and a drafter that is the target with its weights perturbed:
    they agree often enough for full acceptances (the bonus token) and disagree often enough to reject."""
    from conftest import tiny_gpt
    from core.embedded import data
    target, drafter = tiny_gpt(0), tiny_gpt(0)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for w in drafter.parameters():
            if w.numel() > 1:
                w.add_(SD_NOISE * w.std() * torch.randn(w.shape, generator=g))
    from core.models.eagle import DraftHead
    torch.manual_seed(3)
    head = DraftHead.for_target(target).eval()      # random: the tree methods' drafts, rejected often
    pair = engine.ModelPair("tiny", target, target, drafter, tokenizer, ROW, lambda prompt, grid: data.caption_ids(prompt, 32),
                            tokenizer.neighbours(8), head_net=lambda: head)
    return pair, exact_joint(pair, TOP2)


SD_NOISE = 0.15


def test_sd_over_several_cycles_with_the_bonus_token_samples_the_exact_joint(tiny_row):
    """gamma = 2 on four cells: every run needs a second cycle, and full acceptances add the bonus."""
    pair, exact = tiny_row
    rows, traces = sampled_rows(pair, "sd", gamma=2)
    verifies = [[s for s in t.steps if s["phase"] == "verify"] for t in traces]
    assert all(len(v) >= 2 for v in verifies)
    assert sum(any(s["bonus"] for s in v) for v in verifies) >= N_ROWS // 10
    assert sum(any(s["resampled"] for s in v) for v in verifies) >= N_ROWS // 40
    assert joint_tv(rows, exact) < TV_LIMIT


def test_sd_that_resamples_from_p_instead_of_the_residual_fails_the_same_test(tiny_row, monkeypatch):
    """Negative control: the classic bug, p in place of normalize(max(0, p - q)) after a rejection."""
    pair, exact = tiny_row
    monkeypatch.setattr(sd, "residual", lambda p, q: p)
    rows, _ = sampled_rows(pair, "sd", gamma=2)
    assert joint_tv(rows, exact) > TV_LIMIT


@pytest.fixture(scope="module")
def embedded_row4():
    """The shipped target on a 1 x 4 row: sjd's later guesses come from p under another context, and a
    trained target reacts to that context."""
    pair = dataclasses.replace(engine.load_pair("embedded"), grid=ROW,
                               caption=lambda prompt, grid: family.caption(prompt, (32, 32)))
    return pair, exact_joint(pair, TOP2)


@pytest.mark.parametrize("init", ["random", "repeat"])
def test_sjd_samples_the_exact_joint(embedded_row4, init):
    """A window of 2 over four cells: guesses iterated from an earlier pass are judged against p."""
    pair, exact = embedded_row4
    rows, traces = sampled_rows(pair, "sjd", sjd_window=2, sjd_init=init)
    assert all(len([s for s in t.steps if s["phase"] == "verify"]) >= 2 for t in traces)
    assert joint_tv(rows, exact) < TV_LIMIT


def test_sjd_that_accepts_every_guess_fails_the_same_test(embedded_row4, monkeypatch):
    """Negative control: guesses kept without the min(1, p/q) test."""
    from core.methods import sjd
    pair, exact = embedded_row4
    monkeypatch.setattr(sjd, "exact_accept_prob", lambda p, q: torch.ones_like(torch.as_tensor(p)))
    rows, _ = sampled_rows(pair, "sjd", sjd_window=2)
    assert joint_tv(rows, exact) > TV_LIMIT


# ---- the trace of a cycle against what the cycle did ----------------------------------------------
#
# Each step's fields are checked against the forwards the models actually made during that step
# (recorded at the model, below the Decoder) and the acceptance probabilities against cache-free
# forwards of the target and the drafter: a trace is never compared with itself.

class Passes:
    """Records every forward of the given models: (name, cells fed, write flags, tokens fed, seconds);
    prefill feeds none."""

    def __init__(self, monkeypatch, **models):
        self.log: list[tuple[str, list[int], list[bool], list[int], float]] = []

        def timed(name, f, cells, write, tokens):
            t0 = time.perf_counter()
            out = f()
            self.log.append((name, cells, write, tokens, time.perf_counter() - t0))
            return out
        for name, gpt in models.items():
            def prefill(*a, _f=gpt.prefill, _n=name, **kw):
                return timed(_n, lambda: _f(*a, **kw), [], [], [])

            def forward_cells(cache, tokens, cells, grid, write, *a, _f=gpt.forward_cells, _n=name, **kw):
                return timed(_n, lambda: _f(cache, tokens, cells, grid, write, *a, **kw), cells.tolist(), write.tolist(),
                             tokens[0].tolist())

            def step_one(cache, tokens, cell, grid, _f=gpt.step_one, _n=name):
                return timed(_n, lambda: _f(cache, tokens, cell, grid), cell.reshape(-1).tolist(), [True],
                             tokens[0].tolist())
            monkeypatch.setattr(gpt, "prefill", prefill)
            monkeypatch.setattr(gpt, "forward_cells", forward_cells)
            monkeypatch.setattr(gpt, "step_one", step_one)


def stepped(pair, method: str, seed: int, passes: Passes, **params) -> tuple[list, list, Trace]:
    """Runs a method step by step: the steps (as dicts), the forwards made during each, the trace.
    Each step's wall_ms must lie between the time its forwards took and the time until it arrived."""
    steps, made = [], []
    passes.log.clear()
    t0 = time.perf_counter()
    for out in engine.stream(RunConfig(method=method, prompt=PROMPT, seed=seed, sampling=TOP2).with_params(**params),
                             pair):
        if isinstance(out, Trace):
            return steps, made, out
        waited_ms = (time.perf_counter() - t0) * 1000.0
        steps.append(out.to_dict())
        made.append(passes.log[:])
        passes.log.clear()
        assert 1000.0 * sum(f[4] for f in made[-1]) - 1e-3 <= steps[-1]["wall_ms"] <= waited_ms + 1e-3
        t0 = time.perf_counter()


def cache_free_row(pair, gpt, prefix: list[int], sampling=None) -> torch.Tensor:
    """(V,) processed distribution of cell len(prefix) under `gpt`, given the tokens before it, from a
    forward without any cache (cell 0: the prefill's prediction)."""
    from core.decoding import Decoder
    from core.sampling import processed
    sampling = sampling or TOP2
    ids, mask = pair.caption(PROMPT, pair.grid)
    dec = Decoder(gpt, pair.grid, ids, mask, sampling, "cpu")
    c, N, B = len(prefix), pair.grid[0] * pair.grid[1], dec.captions.shape[0]
    if c == 0:
        dec.prefill()
        return dec.p0
    tokens = torch.zeros(N, dtype=torch.long)
    tokens[:c] = torch.tensor(prefix)
    logits = gpt.forward_visible(dec.captions, dec.masks, tokens[None].expand(B, N), pair.grid,
                                 torch.arange(N) < c, drop=dec.drop)
    return processed(logits, sampling)[0, c - 1]


@pytest.mark.parametrize("width, gamma", [(4, 2), (2, 1)])   # (2, 1): one verdict in all when the first passes
def test_sd_trace_says_what_each_cycle_drafted_judged_and_kept(tiny_row, monkeypatch, width, gamma):
    """Draft steps: one drafter pass per drafted cell. Verify steps: one target pass feeding the
    predecessors of the judged cells and of the bonus cell (and stale cells before the cycle, nothing
    else); judged = the cells drafted since the last verify; accepted a run of passes ending at the
    first rejection; prob = min(1, p/q) of cache-free target and drafter forwards, 6 decimals;
    resampled / bonus the cell after the passes; totals the shares of those verdicts."""
    pair = dataclasses.replace(tiny_row[0], grid=(1, width))
    N = width
    passes = Passes(monkeypatch, target=pair.target, drafter=pair.small)
    seen = dict(bonus=0, resampled=0, fraction=0, single=0)
    for seed in range(12):
        steps, made, trace = stepped(pair, "sd", seed, passes, gamma=gamma)
        final = np.array(trace.tokens).reshape(-1)
        drafted: list[int] = []
        drafts: dict[int, int] = {}
        t = judged_total = accepted_total = 0
        for s, forwards in zip(steps, made):
            by = {m: [f for f in forwards if f[0] == m] for m in ("target", "drafter")}
            cells = [j for _, j in s["cells"]]
            if s["phase"] == "draft":
                assert s["model"] == "drafter" and len(cells) == 1 and not by["target"]
                assert s["nfe"] == len(by["drafter"]) >= 1 and s["fed"] == sum(len(f[1]) for f in by["drafter"])
                drafted += cells
                drafts[cells[0]] = s["tokens"][0]
                continue
            assert (s["phase"], s["model"]) == ("verify", "target") and not by["drafter"]
            assert s["nfe"] == len(by["target"]) and s["fed"] == sum(len(f[1]) for f in by["target"])
            g = len(drafted)
            assert drafted == list(range(t, t + g)) and [j for _, j in s["judged"]] == drafted
            fed = {c for f in by["target"] for c in f[1]}
            needed = set(range(max(t - 1, 0), min(t + g, N - 1)))       # predecessors of judged + bonus cells
            assert needed <= fed and fed - needed <= set(range(t))
            a = s["accepted"]
            assert 1 <= len(a) <= g and all(a[:-1]) and (not a[-1] or len(a) == g)   # stops at a rejection only
            assert s["tokens"][:sum(a)] == [drafts[c] for c in drafted[:sum(a)]]
            prefix = final[:t].tolist()
            for n, c in enumerate(drafted[:len(a)]):
                x = drafts[c]
                p = cache_free_row(pair, pair.target, prefix)[x]
                q = cache_free_row(pair, pair.small, prefix)[x]
                assert abs(s["prob"][n] - min(1.0, float(p / q))) < 1e-4 and round(s["prob"][n], 6) == s["prob"][n]
                seen["fraction"] += 0 < s["prob"][n] < 1
                prefix.append(x)
            bonus_cell = t + g if all(a) and t + g < N else None
            kept = t + len(a) + (bonus_cell is not None)
            assert cells == list(range(t, kept)) and s["tokens"] == final[t:kept].tolist()
            assert s["resampled"] == (None if all(a) else [0, t + len(a) - 1])
            assert s["bonus"] == (None if bonus_cell is None else [0, bonus_cell])
            seen["bonus"] += bonus_cell is not None
            seen["resampled"] += not all(a)
            judged_total, accepted_total = judged_total + g, accepted_total + sum(a)   # judged: every drafted cell
            t, drafted = kept, []
        assert t == N and not drafted
        seen["single"] += judged_total == 1
        assert trace.totals["passed_fraction"] == pytest.approx(accepted_total / judged_total)
        assert trace.totals["kept_fraction"] == pytest.approx(accepted_total / N)
        assert trace.totals["target_nfe"] == sum(f[0] == "target" for m in made for f in m)
        assert trace.totals["drafter_nfe"] == sum(f[0] == "drafter" for m in made for f in m)
    assert seen["bonus"] and seen["resampled"] and (width < 4 or seen["fraction"])
    assert width > 2 or seen["single"]


@pytest.mark.parametrize("init, grid, window", [("random", (1, 4), 3), ("repeat", (2, 3), 4), ("above", (2, 3), 4),
                                                 ("repeat", (1, 8), 3), ("random", (1, 1), 1)])
def test_sjd_trace_says_what_each_pass_guessed_judged_and_kept(tiny_row, monkeypatch, init, grid, window):
    """Each verify step is one target pass that feeds the window's predecessors (the guesses as they
    stand, and stale cells before the window); judged = the window; prob = min(1, p/q) with p a
    cache-free forward over the committed tokens and the guesses before the cell, q one-hot on a fresh
    guess or the previous pass's p at a redrafted one; fresh guesses follow sjd_init; redrafted /
    unchanged count the rest of the window and the guesses the redraft left as they were."""
    pair = dataclasses.replace(tiny_row[0], grid=grid)
    H, W = grid
    N = H * W
    passes = Passes(monkeypatch, target=pair.target)
    seen = dict(fraction=0, redrafted=0, unchanged=0, rejected=0, fresh=0)
    for seed in range(8):
        steps, made, trace = stepped(pair, "sjd", seed, passes, sjd_window=window, sjd_init=init)
        final = np.array(trace.tokens).reshape(-1)
        t = judged_total = accepted_total = 0
        q_prev: dict[int, torch.Tensor] = {}         # cell -> the p its redrafted guess was drawn from
        rest_prev: dict[int, int | None] = {}        # cell -> the guess the last pass left there (None: not fed)
        pending = None                               # the last pass's redrafted cells and its `unchanged`
        for s, forwards in zip(steps, made):
            assert (s["phase"], s["model"]) == ("verify", "target")
            assert s["nfe"] == len(forwards) >= 1 and s["fed"] == sum(len(f[1]) for f in forwards)
            win = list(range(t, min(t + window, N)))
            assert [i * W + j for i, j in s["judged"]] == win
            fed = {c: tok for f in forwards for c, tok in zip(f[1], f[3])}
            needed = set(range(max(t - 1, 0), win[-1]))
            assert needed <= set(fed) and set(fed) - needed <= set(range(t))
            guess = {c: fed.get(c) for c in win}     # the window's guesses (the last one is never fed)
            a = s["accepted"]
            assert 1 <= len(a) <= len(win) and all(a[:-1]) and (not a[-1] or len(a) == len(win))
            out = s["tokens"]
            for n in range(sum(a)):
                assert guess[win[n]] in (None, out[n])
                guess[win[n]] = out[n]
            if pending is not None:                  # the redraft's count of guesses it left alone
                cells, unchanged = pending
                known = [c for c in cells if rest_prev[c] is not None and guess.get(c) is not None]
                same = sum(rest_prev[c] == guess[c] for c in known)
                assert same <= unchanged <= same + len(cells) - len(known)
            for c in win:                            # fresh guesses follow sjd_init
                if c in q_prev or guess[c] is None:
                    continue
                seen["fresh"] += 1
                left = final[c - 1] if c - 1 < t else guess.get(c - 1)
                up = final[c - W] if c - W < t else guess.get(c - W)
                if init == "repeat" and c % W > 0 and left is not None:
                    assert guess[c] == left
                if init == "above" and c >= W and up is not None:
                    assert guess[c] == up
            context = final[:t].tolist()
            p_rows = {}
            for n, c in enumerate(win):
                p_rows[c] = cache_free_row(pair, pair.target, context)
                if n < len(a) and guess[c] is not None:
                    x = guess[c]
                    q = float(q_prev[c][x]) if c in q_prev else 1.0
                    expected = min(1.0, float(p_rows[c][x]) / q)
                    assert abs(s["prob"][n] - expected) < 1e-4 and round(s["prob"][n], 6) == s["prob"][n]
                    seen["fraction"] += 0 < expected < 1
                if guess[c] is None:
                    break
                context.append(guess[c])
            kept = t + len(out)
            assert [i * W + j for i, j in s["cells"]] == list(range(t, kept)) and out == final[t:kept].tolist()
            assert s["resampled"] == (None if all(a) else [(kept - 1) // W, (kept - 1) % W])
            rest = win[len(out):]
            assert s["redrafted"] == len(rest) and 0 <= s["unchanged"] <= len(rest)
            q_prev = {c: p_rows[c] for c in rest if c in p_rows}
            rest_prev = {c: guess[c] for c in rest}
            pending = (rest, s["unchanged"]) if rest else None
            seen["redrafted"] += len(rest)
            seen["unchanged"] += s["unchanged"]
            seen["rejected"] += not all(a)
            judged_total, accepted_total = judged_total + len(a), accepted_total + sum(a)
            t = kept
        assert t == N
        assert trace.totals["passed_fraction"] == pytest.approx(accepted_total / judged_total)
        assert trace.totals["kept_fraction"] == pytest.approx(accepted_total / N)
        assert trace.totals["target_nfe"] == sum(len(m) for m in made)
    if N > 1:
        assert seen["fraction"] and seen["redrafted"] and seen["rejected"] and seen["fresh"]
        assert seen["unchanged"] or window < 3


@pytest.mark.parametrize("init", ["random", "repeat", "above"])
def test_a_fresh_sjd_guess_copies_the_neighbour_its_init_names_else_draws_a_uniform_token(init):
    """sjd.fresh_guess against its definition on random partly known grids: repeat copies the known
    token to the left in the row, above the one above; otherwise the guess is the next uniform draw
    of the run's generator (replayed here from a generator seeded alike)."""
    from core.config import MethodParams
    from core.decoding import UNKNOWN
    from core.methods import sjd
    rng = np.random.default_rng(1)
    gen, replay = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    V, copied, drawn = 7, 0, []
    for _ in range(300):
        H, W = (int(x) for x in rng.integers(1, 5, size=2))
        ctx = engine.MethodContext(None, None, None, (H, W), None, None, MethodParams(sjd_init=init), gen)
        known = np.where(rng.random(H * W) < 0.5, rng.integers(0, V, H * W), UNKNOWN)
        cell = int(rng.integers(0, H * W))
        left = known[cell - 1] if cell % W > 0 else UNKNOWN
        up = known[cell - W] if cell >= W else UNKNOWN
        source = {"repeat": left, "above": up}.get(init, UNKNOWN)
        got = sjd.fresh_guess(ctx, known, cell, V)
        if source != UNKNOWN:
            assert got == source
            copied += 1
        else:
            expected = int(torch.randint(0, V, (1,), generator=replay))
            assert got == expected
            drawn.append(got)
    assert (copied > 50) == (init != "random") and set(drawn) == set(range(V))


@pytest.mark.parametrize("method", ["sd", "sjd", "scd", "gsd", "pjd", "cool"])
def test_a_run_is_a_function_of_its_seed_alone(tiny_row, method):
    """Every draw (drafts, verdicts, residuals, redrafts, fresh guesses) comes from the run's own
    generator: a run leaves torch's global generator as it found it, and disturbing that generator
    between two runs of one seed changes nothing. (The tree methods: tests/test_trees.py.)"""
    pair = dataclasses.replace(tiny_row[0], grid=(1, 4))
    assert_seed_alone(pair, method)


def assert_seed_alone(pair, method: str) -> None:
    """Six seeds of `method` on `pair`, each run twice around a disturbed global generator."""
    def strip(t):
        return [{k: v for k, v in s.items() if k != "wall_ms"} for s in t.steps], t.tokens
    drawn = 0
    for seed in range(6):
        cfg = RunConfig(method=method, prompt=PROMPT, seed=seed, sampling=TOP2).with_params(
            gamma=2, sjd_window=3, cool_delta=0.5, gsd_group=2)
        torch.manual_seed(0)
        state = torch.get_rng_state()
        a = strip(engine.run(cfg, pair))
        assert torch.equal(torch.get_rng_state(), state)
        torch.manual_seed(1)
        assert strip(engine.run(cfg, pair)) == a
        drawn += any(0 < x < 1 for s in a[0] for x in s.get("prob", []))
    assert drawn >= 2


def test_jacobi_reports_the_share_of_judged_guesses_that_passed(tiny_row):
    """passed_fraction = passed / judged and kept_fraction = passed / cells, on runs whose verdicts are
    fixed by the acceptance rule jacobi is given: every guess passes, or none does (one cell too)."""
    from core.methods import sjd
    for grid in [(1, 1), (1, 4)]:
        pair = dataclasses.replace(tiny_row[0], grid=grid)
        for verdict in (1.0, 0.0):
            ctx = engine.context(RunConfig(method="sjd", prompt=PROMPT, seed=0, sampling=TOP2), pair)
            gen = sjd.jacobi(ctx, lambda p, q, x, _v=verdict: _v, sjd.independent_redraft)
            try:
                while True:
                    next(gen)
            except StopIteration as stop:
                result = stop.value
            assert (result.passed_fraction, result.kept_fraction) == (verdict, verdict)


def _relaxed_prob(p: torch.Tensor, q: torch.Tensor, x: int, neighbours: torch.Tensor, k: int, delta: float) -> float:
    """LANTERN by its definition: p(x) plus the mass of the longest prefix of x's k nearest codes whose
    summed p stays <= delta, over q(x), capped at 1."""
    moved, total = 0.0, 0.0
    for y in neighbours[x, :k].tolist():
        total += float(p[y])
        if total > delta:
            break
        moved = total
    return min(1.0, (float(p[x]) + moved) / float(q[x]))


def _annealed_prob(p: torch.Tensor, q: torch.Tensor, x: int, i: int, gamma: int, delta: float, nu: float,
                   norm: str) -> float:
    """COOL-SD by its definition: w_i = delta exp(-nu i - mu), mu making the w average delta (mean) or
    w_1 = delta (first); min(1, w_i p(x) / q(x))."""
    import math
    mu = -nu if norm == "first" else math.log(sum(math.exp(-nu * j) for j in range(1, gamma + 1)) / gamma)
    return min(1.0, delta * math.exp(-nu * i - mu) * float(p[x]) / float(q[x]))


@pytest.mark.parametrize("method, params", [
    ("cool", dict(cool_delta=0.8, cool_nu=0.7, cool_norm="first")),
    ("cool", dict(cool_delta=0.8, cool_nu=0.7, cool_norm="mean"))])
def test_relaxed_methods_report_their_acceptance_probability_from_cache_free_forwards(tiny_row, method, params):
    """Each judged draft's `prob` equals the method's relaxed test computed from cache-free target and
    drafter distributions (1e-4), at settings where the knobs change the answer (asserted): the two
    cool norms (lantern, on a draft tree: tests/test_trees.py)."""
    pair = dataclasses.replace(tiny_row[0], grid=(1, 4))
    sampling = dataclasses.replace(SamplingConfig(), temperature=0.3)   # no top-k, p / q not always >= 1
    gamma = 3
    checked = differs = 0
    for seed in range(3):
        t = engine.run(RunConfig(method=method, prompt=PROMPT, seed=seed, sampling=sampling)
                       .with_params(gamma=gamma, **params), pair)
        final = np.array(t.tokens).reshape(-1)
        drafts: dict[int, int] = {}
        start = 0
        for s in t.steps:
            cells = [j for _, j in s["cells"]]
            if s["phase"] == "draft":
                drafts[cells[0]] = s["tokens"][0]
                continue
            prefix = final[:start].tolist()
            for n, (_, c) in enumerate(s["judged"][:len(s["accepted"])]):
                x = drafts[c]
                p = cache_free_row(pair, pair.target, prefix, sampling)
                q = cache_free_row(pair, pair.small, prefix, sampling)
                if method == "lantern":
                    expected = _relaxed_prob(p, q, x, pair.neighbours, params["lantern_k"], params["delta"])
                    other = _relaxed_prob(p, q, x, pair.neighbours, 10 - params["lantern_k"], params["delta"])
                else:
                    expected = _annealed_prob(p, q, x, n + 1, gamma, params["cool_delta"], params["cool_nu"],
                                              params["cool_norm"])
                    other = _annealed_prob(p, q, x, n + 1, gamma, params["cool_delta"], params["cool_nu"],
                                           "mean" if params["cool_norm"] == "first" else "first")
                assert abs(s["prob"][n] - expected) < 1e-4
                checked += 1
                differs += abs(expected - other) > 1e-3
                prefix.append(x)
            start = max(c for _, c in s["cells"]) + 1
    assert checked >= 6 and differs >= 2


def test_a_verdict_passes_with_probability_exactly_a_at_both_ends():
    """acceptance.accepts draws u ~ U[0, 1) and passes iff u < a: never at a = 0 (u = 0 included),
    always at a = 1; maximal_coupling keeps an old draft by the same rule."""
    from core.acceptance import accepts, maximal_coupling
    zero = torch.Generator().manual_seed(0)
    import unittest.mock as mock
    with mock.patch.object(torch, "rand", lambda *a, **kw: torch.zeros(*a)):
        assert not accepts(0.0, zero) and accepts(1.0, zero) and accepts(1e-9, zero)
        p, q = torch.tensor([[0.0, 1.0]]), torch.tensor([[1.0, 0.0]])
        assert maximal_coupling(p, q, torch.tensor([0]), zero).tolist() == [1]   # p(0) = 0: never kept
    g = torch.Generator().manual_seed(1)
    assert abs(sum(accepts(0.3, g) for _ in range(4000)) / 4000 - 0.3) < 0.03


@pytest.mark.parametrize("method", ["sd", "sjd", "scd", "cool", "pjd"])
def test_no_method_accepts_a_draft_its_target_gives_probability_zero_even_when_u_is_zero(tiny_row, method,
                                                                                        monkeypatch):
    """Every uniform draw pinned to 0 (the edge of [0, 1)): under top-k = 2 drafts outside the target's
    two tokens have p = 0 and must be rejected; the trace's prob of every accepted draft is > 0.
    (The tree methods: tests/test_trees.py.)"""
    assert_zero_never_accepted(dataclasses.replace(tiny_row[0], grid=(1, 4)), method, monkeypatch)


def assert_zero_never_accepted(pair, method: str, monkeypatch) -> None:
    monkeypatch.setattr(torch, "rand", lambda *a, **kw: torch.zeros(*a))
    zero = accepted = 0
    for seed in range(8):
        t = engine.run(RunConfig(method=method, prompt=PROMPT, seed=seed, sampling=TOP2).with_params(
            gamma=2, sjd_window=3, delta=0.0), pair)
        for s in t.steps:
            for prob, ok in zip(s.get("prob", []), s.get("accepted", [])):
                zero += prob == 0.0
                accepted += ok
                assert not (ok and prob == 0.0)
    assert zero > 0 and accepted > 0
