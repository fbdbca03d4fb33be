"""mulo's drafter decoded by any method (draft_method), cascades of scales, and Jacobi resampling.

References: today's mulo traces (fixture made before draft_method existed), the expansion rule and
8-connectivity by their definitions, forwards counted on the models, and greedy serial resampling.
"""
import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from core import bench, engine
from core.config import ParameterError, RunConfig
from core.trace import Trace

from test_engine import PROMPT, TAU_SOME, _expansion_by_definition, run

FIXTURE = Path(__file__).parent / "fixtures" / "mulo_today.json"
CASCADE = "mulo/scale=2"   # on the 16x16 tiny pair: 4x4 drafts 8x8, which drafts 16x16


def _structure(x):
    """Floats out: pooled masses agree across CPUs to ~1e-8, and any rounding of them has values on its
    edge (0.34064997 rounds to 0.3406 on one CPU, 0.3407 on another); what they decided (accepted,
    rejected, islands, tokens) stays in the hash."""
    if isinstance(x, float):
        return "float"
    if isinstance(x, list):
        return [_structure(v) for v in x]
    if isinstance(x, dict):
        return {k: _structure(v) for k, v in x.items()}
    return x


def digest(tr):
    import hashlib
    steps = [_structure({k: v for k, v in s.items() if k not in ("wall_ms", "level")}) for s in tr.steps]
    return dict(tokens=hashlib.sha256(json.dumps([tr.tokens, tr.proposal, tr.draft]).encode()).hexdigest()[:16],
                steps=hashlib.sha256(json.dumps(steps).encode()).hexdigest()[:16],
                target_nfe=tr.totals["target_nfe"], drafter_nfe=tr.totals["drafter_nfe"])


@pytest.mark.long("four shipped-pair mulo runs, one of them raster rejection at tau 0.02")
@pytest.mark.parametrize("case", json.loads(FIXTURE.read_text()), ids=lambda c: str(c["params"]))
def test_draft_method_ar_reproduces_the_traces_mulo_made_before_it_existed(case):
    """Same tokens, proposal, draft, steps (phases, cells, tokens, NFE) as the code before draft_method."""
    pair = engine.load_pair("embedded")
    made_with = dict(tau=0.05, k=16, radius=1)   # the defaults of the code that made the fixture
    cfg = RunConfig(method="mulo", seed=case["seed"], prompt="a small green triangle top left on a noisy yellow "
                    "background").with_params(draft_method="ar", **{**made_with, **case["params"]})
    got = digest(engine.run(cfg, pair))
    assert got == {k: case[k] for k in got}
    if case["params"] == {"scale": 4}:  # negative control: another seed gives another digest
        assert digest(engine.run(dataclasses.replace(cfg, seed=case["seed"] + 1), pair))["tokens"] != case["tokens"]


def test_draft_window_is_the_shorthand_of_a_zipar_drafter(tiny_pair):
    a = run(tiny_pair, tau=TAU_SOME, draft_window=3)
    b = run(tiny_pair, tau=TAU_SOME, draft_method="zipar/window=3")
    assert a.tokens == b.tokens and a.totals["level_nfe"] == b.totals["level_nfe"]
    assert b.totals["drafter_nfe"] == 8 + 7 * 3                       # ZipAR on the 8x8 drafter grid
    with pytest.raises(ParameterError, match="draft_window"):
        run(tiny_pair, draft_window=3, draft_method="zipar/window=3")


@pytest.mark.parametrize("spec", ["sjd/sjd_window=8", "scd", "pjd/pjd_c=2", "zipar/window=2"])
def test_any_method_drafts_as_the_target_of_its_own_run(tiny_pair, spec):
    """The drafter's grid holds what that method, run on the drafter at that grid, gives for the same seed."""
    t = run(tiny_pair, tau=TAU_SOME, draft_method=spec)
    name, *knobs = spec.split("/")
    sub_pair = dataclasses.replace(tiny_pair, target=tiny_pair.multiscale, grid=(8, 8))
    alone = run(sub_pair, name, k=4, tau=TAU_SOME, **{k: int(v) for k, v in (kv.split("=") for kv in knobs)})
    assert t.draft == alone.tokens
    assert t.totals["level_nfe"][1] == alone.totals["target_nfe"] == t.totals["drafter_nfe"]
    assert all(s["model"] == "drafter" and s.get("level") == 1 for s in t.steps if s["phase"] in ("draft",))


def _level(t, level):
    """(proposal, verify steps) of one level of a trace."""
    proposal = t.proposal if level == 0 else t.levels[level - 1]["proposal"]
    return np.array(proposal), [s for s in t.steps if s["phase"] == "verify" and s.get("level", 0) == level]


def test_a_cascade_at_tau_zero_returns_each_levels_proposal(tiny_pair):
    t = run(tiny_pair, tau=0.0, draft_method=CASCADE)
    assert t.grid["levels"] == [[16, 16], [8, 8], [4, 4]]
    assert t.tokens == t.proposal and t.levels[0]["tokens"] == t.draft
    u = run(tiny_pair, tau=TAU_SOME, draft_method=CASCADE + "/tau=0")          # tau = 0 at level 1 only
    assert u.levels[0]["tokens"] == u.levels[0]["proposal"] and u.tokens != u.proposal


@pytest.mark.parametrize("level", [0, 1])
def test_a_cascades_levels_keep_the_mulo_invariants(tiny_pair, level):
    """At each level: accepted iff pooled >= tau (pooled as at tau = 0), R_X = the expansion rule,
    islands = the 8-connected components of R_X."""
    t = run(tiny_pair, tau=TAU_SOME, radius=1, draft_method=CASCADE)
    # the same run with tau = 0 at this level only (a nested mulo inherits tau unless its spec sets it)
    ref = run(tiny_pair, tau=TAU_SOME, radius=1, draft_method=CASCADE + "/tau=0") if level == 1 else \
        run(tiny_pair, tau=0.0, radius=1, draft_method=CASCADE + f"/tau={TAU_SOME}")
    _, steps = _level(t, level)
    _, ref_steps = _level(ref, level)
    assert len(steps) == 1 and len(ref_steps) == 1
    s, r = steps[0], ref_steps[0]
    pooled, acc = np.array(s["pooled"]), np.array(s["accepted"])
    assert np.array_equal(pooled, np.array(r["pooled"]))                   # the proposal does not depend on tau
    assert np.array_equal(acc, pooled >= TAU_SOME) and not acc.all()
    res, isl = np.array(s["resample"]), np.array(s["islands"])
    assert np.array_equal(res, _expansion_by_definition(~acc, 1))
    assert np.array_equal(isl > 0, res)
    assert_8_connected(isl)
    with pytest.raises(AssertionError):                                     # negative control: a split island
        bad = isl.copy()
        bad[bad == 1] = np.where(np.arange((bad == 1).sum()) % 2, 1, isl.max() + 1)
        assert_8_connected(bad)


def assert_8_connected(isl: np.ndarray) -> None:
    H, W = isl.shape
    for m in range(1, isl.max() + 1):
        cells = set(zip(*np.nonzero(isl == m)))
        seen, todo = set(), [next(iter(cells))]
        while todo:
            c = todo.pop()
            if c not in seen:
                seen.add(c)
                todo += [(c[0] + a, c[1] + b) for a in (-1, 0, 1) for b in (-1, 0, 1) if (c[0] + a, c[1] + b) in cells]
        assert seen == cells
        for i, j in cells:                                                 # no other island touches it
            assert all(isl[a, b] in (0, m) for a in range(max(0, i - 1), min(H, i + 2))
                       for b in range(max(0, j - 1), min(W, j + 2)))


def test_a_cascades_nfe_totals_equal_the_forwards_counted(tiny_pair, monkeypatch):
    from conftest import PassCounter, tiny_gpt
    target, drafter = tiny_gpt(0), tiny_gpt(0)
    pair = dataclasses.replace(tiny_pair, target=target, multiscale=drafter)
    ct, cd = PassCounter(target, monkeypatch), PassCounter(drafter, monkeypatch)
    t = run(pair, tau=TAU_SOME, draft_method=CASCADE + "/resample=jacobi")
    lv = t.totals["level_nfe"]
    assert t.totals["target_nfe"] == ct.n == lv[0]
    assert t.totals["drafter_nfe"] == cd.n == lv[1] + lv[2]
    assert lv[2] == 16 and lv[1] >= 2                                      # 4x4 drafted serially; level 1 verifies
    assert sum(s["nfe"] for s in t.steps) == ct.n + cd.n
    assert Trace.from_json(t.to_json()).levels == t.levels                # the reader keeps every level


def test_a_cascade_the_pair_cannot_serve_is_refused_naming_the_knob(tiny_pair):
    with pytest.raises(ParameterError, match="draft_method.*serves"):
        run(tiny_pair, scale=4, draft_method=CASCADE)                     # 16 / 4 / 2 = 2x2: not served
    with pytest.raises(ParameterError, match="draft_method"):
        run(tiny_pair, draft_method="sjd", draft_rows=2)                  # sjd decodes the whole grid


@pytest.mark.parametrize("spec, word", [
    ("mulo:draft_method=zipar/scale=2", "scale"),                          # zipar reads no scale
    ("mulo:draft_method=mulo/draft_method=zipar/window=2/tau=0.1", "tau"),  # tau after the nested draft_method
    ("mulo:draft_method=nope", "one of ar"), ("mulo:draft_method=zipar/window", "knob=value"),
])
def test_an_ambiguous_or_misplaced_nested_spec_is_refused_in_one_line(tiny_pair, spec, word):
    _, cfg = bench.parse_spec(spec, RunConfig(prompt=PROMPT))
    with pytest.raises(ParameterError, match=word) as e:
        engine.context(cfg, tiny_pair)
    assert "\n" not in str(e.value) and "draft_method" in str(e.value)


def test_a_nested_spec_parses_each_knob_to_its_level(tiny_pair):
    _, cfg = bench.parse_spec("mulo:scale=2:draft_method=mulo/scale=2/tau=0.2/draft_method=zipar/window=2:tau=0.1",
                              RunConfig(prompt=PROMPT))
    assert cfg.params.tau == 0.1 and cfg.params.draft_method == "mulo/scale=2/tau=0.2/draft_method=zipar/window=2"
    engine.context(cfg, tiny_pair)


# --- resample=jacobi ---------------------------------------------------------------------------------

def test_jacobi_resampling_with_nothing_rejected_returns_the_proposal(tiny_pair):
    t = run(tiny_pair, tau=0.0, resample="jacobi")
    assert t.tokens == t.proposal and not any(s["phase"] == "resample" for s in t.steps)


def commits(t) -> tuple[np.ndarray, list[int]]:
    """Replays the resample steps: (the committed grid, tokens committed per pass); raises if a pass
    commits nothing or a cell twice."""
    H, W = t.grid["target"]
    grid, per_pass = np.full(H * W, -1), []
    for s in t.steps:
        if s["phase"] != "resample" or s.get("level", 0):
            continue
        cells = [i * W + j for i, j in s["cells"]]
        assert s["nfe"] == 1 and len(cells) >= 1, "a pass that commits nothing"
        assert (grid[cells] == -1).all(), "a committed token was changed"
        grid[cells] = s["tokens"]
        per_pass.append(len(cells))
    return grid, per_pass


@pytest.mark.parametrize("redraft", ["independent", "coupled"])
def test_jacobi_in_one_island_commits_a_token_per_pass_and_never_changes_one(tiny_pair, redraft):
    t = run(tiny_pair, tau=1.0, radius=1, resample="jacobi", redraft=redraft)
    v = [s for s in t.steps if s["phase"] == "verify"][0]
    assert np.array(v["islands"]).max() == 1                               # one island: every cell from t0 on
    grid, per_pass = commits(t)
    resampled = np.array(v["resample"]).reshape(-1)
    assert np.array_equal(grid != -1, resampled)                           # each R_X cell exactly once
    assert np.array_equal(grid[resampled], np.array(t.tokens).reshape(-1)[resampled])
    assert len(per_pass) < resampled.sum() and max(per_pass) > 1           # parallel: fewer passes than cells
    doctored = dataclasses.replace(t, steps=t.steps + [dict(t.steps[-1], phase="resample", nfe=1)])
    with pytest.raises(AssertionError, match="changed"):                   # negative control
        commits(doctored)


def test_greedy_jacobi_with_one_row_at_a_time_equals_greedy_serial_resampling(tiny_pair):
    """Greedy: p is one-hot, a guess passes iff it is the argmax under its context; with window >= W a
    row starts when the row above is done, so every context is serial resampling's."""
    common = dict(tau=1.0, temperature=0.0, context="exact")
    serial = run_sampled(tiny_pair, resample="serial", **common)
    assert run_sampled(tiny_pair, resample="jacobi", window=16, sjd_window=16, **common).tokens == serial.tokens
    # negative control: rows started early read no guesses of the rows above, and greedy tokens change
    assert run_sampled(tiny_pair, resample="jacobi", window=1, sjd_window=16, **common).tokens != serial.tokens


def run_sampled(pair, temperature, **params):
    cfg = RunConfig(method="mulo", prompt=PROMPT, seed=0).with_params(k=4, **params)
    sampling = engine.resolved(cfg, pair).sampling   # the pair's defaults, at another temperature
    return engine.run(dataclasses.replace(cfg, sampling=dataclasses.replace(sampling, temperature=temperature)), pair)


def test_a_schema_2_trace_reads_with_its_levels(tiny_pair):
    t = run(tiny_pair, tau=TAU_SOME)
    d = json.loads(t.to_json())
    d["schema"] = "mulo-trace/2"
    d["grid"].pop("levels")
    d["totals"].pop("level_nfe")
    for s in d["steps"]:
        s.pop("level", None)
    old = Trace.from_dict(d)
    assert old.grid["levels"] == [[16, 16], [8, 8]] and old.schema == "mulo-trace/3"
    assert [s.get("level", 0) for s in old.steps] == [s.get("level", 0) for s in t.steps]


def test_the_apps_replay_and_verdict_read_each_level_on_its_own_grid(tiny_pair):
    """The target's verdict comes from the level-0 verify step only; replaying every step rebuilds
    the final tokens on the target canvas and level 1's tokens on the drafter canvas."""
    from app import render
    t = run(tiny_pair, tau=TAU_SOME, draft_method=CASCADE + "/resample=jacobi")
    v = render.verdict(t)
    level0 = [s for s in t.steps if s["phase"] == "verify" and not s.get("level", 0)][0]
    assert np.array_equal(v.pooled, np.array(level0["pooled"]))
    rp = render.replay(t, len(t.steps))
    assert rp.target.tolist() == t.tokens and rp.draft.tolist() == t.draft
    # negative control: read without levels, the 16x16 level's verify would land on the target grid
    flat = dataclasses.replace(t, steps=[{k: v for k, v in s.items() if k != "level"} for s in t.steps])
    with pytest.raises((ValueError, IndexError)):
        render.verdict(flat)


def test_the_timeline_has_a_lane_per_level_on_the_runs_clock(tiny_pair):
    from app import plots
    t = run(tiny_pair, tau=TAU_SOME, draft_method=CASCADE)
    fig = plots.timeline(t)
    lanes = {y for tr in fig.data for y in tr.y}
    assert lanes == {"mulo level 0 (16x16)", "mulo level 1 (8x8)", "mulo level 2 (4x4)"}
    for lv in range(3):                     # each lane's bars add up to its level's timed steps
        ms = sum(x for tr in fig.data for x, y in zip(tr.x, tr.y) if y.startswith(f"mulo level {lv}"))
        assert ms == pytest.approx(sum(s["wall_ms"] for s in t.steps if s.get("level", 0) == lv))
    assert "no published method" in fig.layout.title.text
    assert {y for tr in plots.timeline(run(tiny_pair, tau=TAU_SOME)).data for y in tr.y} == {"mulo"}  # one lane


# --- what a run of the drafter's own reports, and the jacobi resampler's wiring ------------------------

@pytest.mark.parametrize("spec", ["zipar/window=2", "mulo/scale=2"])
def test_a_drafters_run_reports_its_own_steps_one_level_down(tiny_pair, spec):
    """Every step of the drafter's run, as that run alone reports it, one level deeper: its decode
    steps are drafting, its forwards are the drafter's, its model-free steps stay model-free."""
    t = run(tiny_pair, tau=TAU_SOME, draft_method=spec)
    name, *knobs = spec.split("/")
    sub_pair = dataclasses.replace(tiny_pair, target=tiny_pair.multiscale, grid=(8, 8))
    alone = run(sub_pair, name, tau=TAU_SOME, **{k: int(v) for k, v in (kv.split("=") for kv in knobs)})
    want = [dict(s, phase="draft" if s["phase"] == "decode" else s["phase"],
                 model=None if s["model"] is None else "drafter", level=s.get("level", 0) + 1) for s in alone.steps]
    got = [s for s in t.steps if s.get("level", 0) >= 1]
    strip = lambda steps: [{k: v for k, v in s.items() if k != "wall_ms"} for s in steps]  # noqa: E731
    assert strip(got) == strip(want)
    assert not any(s["phase"] == "decode" for s in t.steps)
    assert any(s["model"] is None for s in got) == (name == "mulo")       # a nested mulo up-samples


@pytest.mark.parametrize("redraft", ["independent", "coupled", "raster"])
def test_a_jacobi_resampling_run_is_a_function_of_its_seed_alone(tiny_pair, redraft):
    """Its judging and its residual draws use the run's generator, never torch's global one; its
    passes are numbered from 0 in every band, as serial and island resampling number theirs. (So
    are raster rejection's draws of t0: the `raster` case.)"""
    import torch
    runs = []
    for g in (1, 2):
        torch.manual_seed(g)
        knobs = dict(rejection="raster") if redraft == "raster" else dict(resample="jacobi", redraft=redraft)
        runs.append(run(tiny_pair, tau=TAU_SOME, draft_rows=4, **knobs))
    a, b = runs
    assert a.tokens == b.tokens and [s.get("tokens") for s in a.steps] == [s.get("tokens") for s in b.steps]
    bands = []                                                           # the waves after each verify
    for s in a.steps:
        if s["phase"] == "verify":
            bands.append([])
        elif s["phase"] == "resample":
            bands[-1].append(s["wave"])
    assert len(bands) > 1 and all(w == list(range(len(w))) for w in bands) and any(bands), bands


@pytest.mark.parametrize("redraft", ["independent", "coupled"])
def test_jacobi_redraws_with_the_redraft_rule_named_and_the_guesses_q_it_drew_them_from(tiny_pair, monkeypatch,
                                                                                      redraft):
    """redraft=coupled calls scd's coupled redraft, independent sjd's; each call gets, for every
    unaccepted cell, the q its guess was drawn from: one-hot at the proposal, else the q returned
    when that guess was redrawn."""
    import torch
    from core.methods import mulo
    calls, issued = [], {}
    for rule in ("coupled_redraft", "independent_redraft"):
        real = getattr(mulo, rule)

        def spy(p, q, old, gen, real=real, rule=rule):
            new, q_new = real(p, q, old, gen)
            calls.append((rule, q, old, new, q_new))
            return new, q_new
        monkeypatch.setattr(mulo, rule, spy)
    run(tiny_pair, tau=1.0, radius=1, resample="jacobi", redraft=redraft)
    assert calls and {c[0] for c in calls} == {f"{redraft}_redraft"}
    redrawn = 0
    for _, q, old, new, q_new in calls:
        for i, x in enumerate(old.tolist()):
            key = (x, tuple(torch.nonzero(q[i]).reshape(-1).tolist()))
            if q[i].max() < 1:                                           # a q it returned earlier
                redrawn += 1
                assert any(torch.equal(q[i], qq) for qq in issued.get(x, [])), "q is not the one the guess came from"
            else:                                                        # one-hot at the guess itself
                assert key[1] == (x,)
        for x, qq in zip(new.tolist(), q_new):
            issued.setdefault(x, []).append(qq)
    assert redrawn > 0


def test_one_level_down_is_its_definition_on_every_phase_and_model():
    """Direct, since no method the engine drafts with as a run of its own emits `decode` (ar and zipar
    draft in place): decode becomes draft, the rest keep their phase; a model pass becomes the
    drafter's, a model-free step stays model-free; one level deeper; the run's Result comes back."""
    from core.methods.mulo import one_level_down
    from core.trace import Step

    def steps():
        for phase in ("decode", "draft", "upsample", "verify", "resample", "refresh"):
            yield Step(phase, None if phase in ("upsample", "refresh") else "target", 1, 0.0, [[0, 0]], level=1)
        return "result"

    down = one_level_down(steps())
    got = []
    with pytest.raises(StopIteration) as stop:
        while True:
            got.append(next(down))
    assert stop.value.value == "result"
    assert [(s.phase, s.model, s.level) for s in got] == [
        ("draft", "drafter", 2), ("draft", "drafter", 2), ("upsample", None, 2), ("verify", "drafter", 2),
        ("resample", "drafter", 2), ("refresh", None, 2)]


@pytest.mark.parametrize("window, draft_rows", [(16, 4), (1, 1)])
def test_a_jacobi_pass_reports_the_target_forward_the_guesses_it_judged_and_what_it_kept(tiny_pair, window, draft_rows):
    """Each pass: one target forward; `judged` the guesses it tested, `accepted` their verdicts in
    the same order; every accepted guess is committed as is, and every committed cell was judged;
    `fed` at least one predecessor token per judged cell (cell 0 has none)."""
    t = run(tiny_pair, tau=TAU_SOME, resample="jacobi", draft_rows=draft_rows, window=window)
    H, W = t.grid["target"]
    passes = [s for s in t.steps if s["phase"] == "resample" and not s.get("level")]
    assert passes and any(len(s["judged"]) > 1 for s in passes) and not all(all(s["accepted"]) for s in passes)
    tokens = np.array(t.tokens).reshape(-1)
    proposal = np.array(t.proposal).reshape(-1)
    for s in passes:
        assert s["model"] == "target" and s["nfe"] == 1
        judged = [i * W + j for i, j in s["judged"]]
        cells = [i * W + j for i, j in s["cells"]]
        assert len(s["accepted"]) == len(judged) and set(cells) <= set(judged)
        assert s["fed"] >= len(judged) - (0 in judged)
        for c, ok in zip(judged, s["accepted"]):
            if ok:
                assert c in cells
    first = passes[0]                 # the first pass judges the proposal itself: an accepted guess keeps it
    for (i, j), ok in zip(first["judged"], first["accepted"]):
        if ok:
            assert tokens[i * W + j] == proposal[i * W + j]


def test_each_jacobi_guess_is_judged_under_its_own_cells_distribution(tiny_pair, monkeypatch):
    """The p a guess is judged with is a value of the distribution the pass's forward returned for
    that guess's cell (windows laid end to end), however many windows share the pass."""
    from core.methods import mulo
    passes, predict, judge = [], mulo.row_causal_predict, mulo.exact_accept_prob

    def spy_predict(target, windows, *args):
        probs = predict(target, windows, *args)
        passes.append(dict(cells=[c for _, cells in windows for c in cells], probs=probs, p=[], n=len(windows)))
        return probs

    def spy_judge(p, q):
        passes[-1]["p"].append(float(p))
        return judge(p, q)
    monkeypatch.setattr(mulo, "row_causal_predict", spy_predict)
    monkeypatch.setattr(mulo, "exact_accept_prob", spy_judge)
    t = run(tiny_pair, tau=TAU_SOME, resample="jacobi", draft_rows=1, window=1)
    H, W = t.grid["target"]
    steps = [s for s in t.steps if s["phase"] == "resample" and not s.get("level")]
    assert len(steps) == len(passes) and max(r["n"] for r in passes) > 2
    for rec, s in zip(passes, steps):
        judged = [i * W + j for i, j in s["judged"]]
        assert len(rec["p"]) == len(judged)
        for c, p in zip(judged, rec["p"]):
            row = rec["probs"][rec["cells"].index(c)]
            assert bool((row == p).any()), "judged under another cell's distribution"


def test_a_cascade_three_grids_deep_keeps_every_levels_grids(tiny_pair):
    """A drafter that is a mulo whose own drafter is a run of its own (sjd on 4x4): the trace keeps
    both deeper levels, each level's tokens the draft of the level above."""
    t = run(tiny_pair, tau=TAU_SOME, draft_method=CASCADE + "/draft_method=sjd/sjd_window=4")
    assert [lv["grid"] for lv in t.levels] == [[8, 8], [4, 4]]
    assert t.levels[0]["tokens"] == t.draft and t.levels[1]["tokens"] == t.levels[0]["draft"]
    assert [lv["method"] for lv in t.levels] == ["mulo", "sjd"]


@pytest.mark.parametrize("rejection", ["local", "raster"])
def test_the_passed_share_is_the_accepted_verdicts_over_every_judged_cell_of_every_band(tiny_pair, rejection):
    t = run(tiny_pair, tau=TAU_SOME, draft_rows=1, rejection=rejection)
    verdicts = [v for s in t.steps if s["phase"] == "verify" and not s.get("level")
                for row in s["accepted"] for v in row if v is not None]
    assert len([s for s in t.steps if s["phase"] == "verify"]) > 2 and 0 < sum(verdicts) < len(verdicts)
    assert t.totals["passed_fraction"] == pytest.approx(sum(verdicts) / len(verdicts))


@pytest.mark.parametrize("rejection", ["local", "raster"])
def test_the_kept_share_and_island_count_are_what_the_verify_steps_report(tiny_pair, rejection):
    """kept: every cell a band keeps without resampling (local: outside R_X; raster: judged and before
    t0), over the grid; n_islands: the largest island id, 0 when nothing is resampled."""
    t = run(tiny_pair, tau=TAU_SOME, draft_rows=1, rejection=rejection)
    H, W = t.grid["target"]
    kept = 0
    for s in (s for s in t.steps if s["phase"] == "verify" and not s.get("level")):
        res, acc = np.array(s["resample"]), np.array(s["accepted"], dtype=object)
        kept += int((~res & (acc != None)).sum())                          # noqa: E711
        assert s["n_islands"] == np.array(s["islands"]).max()
    assert t.totals["kept_fraction"] == pytest.approx(kept / (H * W)) and 0 < kept < H * W
    assert all(s["n_islands"] == 0 for s in run(tiny_pair, tau=0.0, draft_rows=1, rejection=rejection).steps
               if s["phase"] == "verify")


@pytest.mark.parametrize("resample", ["islands"])   # serial resampling never reads a pending cell
def test_a_pending_cell_a_resampling_forward_reads_stands_in_as_its_proposal(tiny_pair, monkeypatch, resample):
    from core.decoding import Decoder
    fed, feed = [], Decoder.feed

    def spy(dec, cells, tokens, write, cell_mask=None):
        fed.append((dec.grid, list(cells), list(tokens), list(write)))
        return feed(dec, cells, tokens, write, cell_mask)
    monkeypatch.setattr(Decoder, "feed", spy)
    t = run(tiny_pair, tau=TAU_SOME, draft_rows=4, resample=resample, window=1)
    proposal = np.array(t.proposal).reshape(-1)
    stand_ins = [(c, x) for grid, cells, tokens, write in fed if grid == tuple(tiny_pair.grid)
                 for c, x, w in zip(cells, tokens, write) if not w]
    assert stand_ins and all(x == proposal[c] for c, x in stand_ins)


def test_a_raster_rejection_run_is_a_function_of_its_seed_alone_and_names_its_resample_steps(tiny_pair):
    """t0 is drawn with the run's generator, not torch's global one; its step is the target's (its
    distribution, from the verify pass: no forward of its own), wave 0."""
    import torch
    runs = []
    for g in (1, 2):
        torch.manual_seed(g)
        runs.append(run(tiny_pair, tau=TAU_SOME, rejection="raster", draft_rows=1))
    a, b = runs
    assert a.tokens == b.tokens
    resampled = [s for s in a.steps if s["phase"] == "resample"]
    assert resampled and all(s["model"] == "target" and s["nfe"] == 0 and s["wave"] == 0 for s in resampled)


@pytest.mark.parametrize("window", [1, 4])
def test_a_pending_cell_of_the_row_above_stands_in_as_its_current_jacobi_guess(tiny_pair, monkeypatch, window):
    """In a Jacobi pass a window whose first cell's predecessor is the row above's pending end feeds
    that end as a stand-in (unwritten): the guess it holds at that pass, as in pjd."""
    from core.methods import mulo
    from test_context import Recorder
    rec, calls, predict = Recorder(monkeypatch), [], mulo.row_causal_predict

    def spy_predict(target, windows, final, guesses, *rest):
        calls.append((len(rec.records), guesses.copy()))
        return predict(target, windows, final, guesses, *rest)
    monkeypatch.setattr(mulo, "row_causal_predict", spy_predict)
    run(tiny_pair, tau=1.0, radius=1, resample="jacobi", window=window)
    stand_ins = 0
    for at, guesses in calls:
        r = rec.records[at]
        for c, t, wr in zip(r["cells"], r["tokens"], r["write"]):
            if not wr:
                stand_ins += 1
                assert t == guesses[c]
    assert stand_ins > 0


def test_an_accepted_jacobi_guess_is_committed_as_the_guess_it_was(tiny_pair, monkeypatch):
    """Every guess a pass accepts is committed unchanged (the guess that pass judged: the proposal on
    the first pass, a redraw later), in every pass, not only the first; a rejected top-row guess is
    committed as a residual draw, never as itself."""
    from core.methods import mulo
    calls, predict = [], mulo.row_causal_predict

    def spy(target, windows, final, guesses, *rest):
        calls.append(guesses.copy())
        return predict(target, windows, final, guesses, *rest)
    monkeypatch.setattr(mulo, "row_causal_predict", spy)
    t = run(tiny_pair, tau=1.0, radius=1, resample="jacobi", window=4)
    H, W = t.grid["target"]
    passes = [s for s in t.steps if s["phase"] == "resample" and not s.get("level")]
    assert len(passes) == len(calls)
    later = 0
    for n, (s, guesses) in enumerate(zip(passes, calls)):
        committed = {i * W + j: x for (i, j), x in zip(s["cells"], s["tokens"])}
        for (i, j), ok in zip(s["judged"], s["accepted"]):
            c = i * W + j
            if ok:
                assert committed[c] == guesses[c]
                later += n > 0
            elif c in committed:
                assert committed[c] != guesses[c]
    assert later > 10
