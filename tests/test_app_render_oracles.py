"""app.render against its definitions, on real traces of the tiny pair.

Every expected value here is assembled from the trace's step list cell by cell (or from the pixel
geometry of a grid), without app.render's helpers: the verdict of the verify steps placed at their
band rows, the canvases replayed step by step, the pixel blocks of the cells a view colours, the
numbers a cell card and a step caption name. Traces: mulo with several islands in four bands
(local and raster rejection: the raster passes judge part of a band again and leave the rest
null), sd and sjd (per-position tests), a cascade (mulo/scale=2) and mulo drafted by sjd.
"""
import dataclasses
import math
import re

import numpy as np
import pytest

from app import render, theme
from core import engine
from core.config import MethodParams, RunConfig, draft_spec

PROMPT = "a large red circle center and a small blue square top left on a striped green background"
S = render.SIZE


def mulo(pair, seed=2, **params):
    cfg = RunConfig(method="mulo", prompt=PROMPT, seed=seed).with_params(**{"k": 4, "tau": 0.007, "radius": 1, **params})
    return engine.run(cfg, pair)


@pytest.fixture(scope="module")
def banded(tiny_pair):
    """Four bands, islands in each, refresh steps on the drafter canvas."""
    return mulo(tiny_pair, draft_rows=2)


@pytest.fixture(scope="module")
def raster(tiny_pair):
    """Raster rejection: passes that judge only part of a band (null pooled elsewhere), some with no island."""
    return mulo(tiny_pair, draft_rows=2, rejection="raster")


@pytest.fixture(scope="module")
def whole(tiny_pair):
    """One verify pass over the whole grid (radius 1: islands grow around the cells below tau)."""
    return mulo(tiny_pair)


@pytest.fixture(scope="module")
def jacobi(tiny_pair):
    """resample=jacobi: resample steps that judge guesses (withdrawn) and write only the committed cells."""
    return mulo(tiny_pair, resample="jacobi", window=2)


@pytest.fixture(scope="module")
def sd(tiny_pair):
    return engine.run(RunConfig(method="sd", prompt=PROMPT, seed=3), tiny_pair)


@pytest.fixture(scope="module")
def sjd(tiny_pair):
    return engine.run(RunConfig(method="sjd", prompt=PROMPT, seed=3), tiny_pair)


@pytest.fixture(scope="module")
def cascade(tiny_pair):
    """16x16 verified by the target, its 8x8 drafter grid verified with its own tau, drafted at 4x4."""
    return mulo(tiny_pair, radius=0, draft_method="mulo/scale=2/tau=0.01")


@pytest.fixture(scope="module")
def cascade_sjd(tiny_pair):
    """A cascade whose 8x8 level is mulo and whose 4x4 level ran sjd (tests of its own, level 2)."""
    return mulo(tiny_pair, radius=0, draft_method="mulo/scale=2/draft_method=sjd")


@pytest.fixture(scope="module")
def sjd_drafted(tiny_pair):
    """mulo whose drafter grid ran sjd: level-1 verify steps with per-position tests of their own."""
    return mulo(tiny_pair, draft_method="sjd")


def null(p) -> bool:
    return p is None or (isinstance(p, float) and math.isnan(p))


def expected_verdict(trace, level=0):
    """pooled, accepted, rejected, resample, islands of the level's verify steps, cell by cell: a later
    pass overrides what an earlier one said of the cells it judged (pooled not null); island ids count
    on across passes."""
    H, W = trace.grid["levels"][level]
    pooled, acc = np.full((H, W), np.nan), np.zeros((H, W), bool)
    res, isl = np.zeros((H, W), bool), np.zeros((H, W), np.int64)
    offset = 0
    for s in trace.steps:
        if s["phase"] != "verify" or "band" not in s or s.get("level", 0) != level:
            continue
        r0 = s["band"][0]
        for a, row in enumerate(s["pooled"]):
            for b, p in enumerate(row):
                if not null(p):
                    pooled[r0 + a, b], acc[r0 + a, b] = p, s["accepted"][a][b]
                    res[r0 + a, b] = s["resample"][a][b]
                    isl[r0 + a, b] = s["islands"][a][b] + offset if s["islands"][a][b] else 0
        offset += max(max(row) for row in s["islands"])
    return pooled, acc, ~np.isnan(pooled) & ~acc, res, isl


# ---- verdict ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["banded", "raster", "whole", "cascade"])
def test_verdict_is_the_last_judgement_of_every_target_cell(name, request):
    trace = request.getfixturevalue(name)
    v = render.verdict(trace)
    pooled, acc, rej, res, isl = expected_verdict(trace)
    np.testing.assert_array_equal(v.pooled, pooled)      # NaN exactly where no pass judged the cell
    assert (v.accepted == acc).all() and (v.rejected == rej).all()
    assert (v.resample == res).all() and (v.islands == isl).all()
    assert v.tau == trace.params["tau"] == 0.007
    assert v.accepted.dtype == v.rejected.dtype == v.resample.dtype == bool      # masks, as the views use them
    assert v.islands.dtype.kind == "i" and v.pooled.dtype == np.float64
    assert acc.any() and (name == "raster" or (isl.max() >= 2 and rej.any()))


def test_raster_passes_leave_unjudged_cells_and_empty_bands(raster):
    """The raster trace has what the verdict's null handling and id offsets need: partial passes over
    cells judged before, and passes without an island."""
    verify = [s for s in raster.steps if s["phase"] == "verify"]
    assert any(null(p) for s in verify for row in s["pooled"] for p in row)
    assert any(max(map(max, s["islands"])) == 0 for s in verify[:-1])


def test_raster_rejection_s_resampled_cell_stays_resampled_in_the_verdict(raster):
    """Raster rejection resamples the first cell below tau (t0) with the target, then verifies from t0 + 1:
    the later pass leaves t0 unjudged (null), so t0 keeps the verdict of the pass that rejected it. (The
    verdict used to take the later pass's resample and islands for the whole band: t0 read "below τ,
    kept as proposed", though the target had resampled it.)"""
    v = render.verdict(raster)
    assert v.rejected.any() and (v.rejected <= v.resample).all() and (v.islands[v.rejected] > 0).all()
    resampled = {tuple(c) for s in raster.steps if s["phase"] == "resample" for c in s["cells"]}
    assert {tuple(c) for c in np.argwhere(v.rejected)} <= resampled
    i, j = np.argwhere(v.rejected)[0]
    card = render.cell_details(raster, v, i, j)
    assert f"**resampled** by the target (below τ itself), island {v.islands[i, j]}" in card and "kept" not in card


def test_verdict_of_a_partial_run_leaves_the_unjudged_rows_nan(banded):
    first = next(n for n, s in enumerate(banded.steps) if s["phase"] == "verify")
    part = dataclasses.replace(banded, steps=banded.steps[:first + 1])
    v = render.verdict(part)
    r0, r1 = banded.steps[first]["band"]
    assert not np.isnan(v.pooled[r0:r1]).any() and np.isnan(v.pooled[r1:]).all()
    assert not v.accepted[r1:].any() and not v.rejected[r1:].any() and not v.resample[r1:].any()
    assert not v.islands[r1:].any()
    pooled, acc, rej, res, isl = expected_verdict(part)
    np.testing.assert_array_equal(v.pooled, pooled)
    assert (v.islands == isl).all() and (v.rejected == rej).all()


def test_verdict_ignores_deeper_levels_and_is_none_without_band_passes(cascade, sd, sjd_drafted):
    assert render.verdict(sd) is None
    v = render.verdict(sjd_drafted)
    pooled, *_ = expected_verdict(sjd_drafted)
    np.testing.assert_array_equal(v.pooled, pooled)
    # only the level-1 passes: no verdict of the target grid
    lvl1 = dataclasses.replace(cascade, steps=[s for s in cascade.steps if s.get("level", 0) == 1])
    assert render.verdict(lvl1) is None


def test_island_ids_count_on_across_bands_without_islands(banded):
    """A band whose pass found no island adds nothing to the ids of the bands after it."""
    steps, blanked = [], 0
    for s in banded.steps:
        if s["phase"] == "verify" and blanked < 2:      # the first two bands: every cell passed, no island
            blanked += 1
            s = dict(s, accepted=[[True] * len(r) for r in s["accepted"]], resample=[[False] * len(r) for r in s["resample"]],
                     islands=[[0] * len(r) for r in s["islands"]])
        steps.append(s)
    t = dataclasses.replace(banded, steps=steps)
    v = render.verdict(t)
    *_, isl = expected_verdict(t)
    assert (v.islands == isl).all() and sorted(np.unique(isl[isl > 0])) == list(range(1, isl.max() + 1))
    assert isl.max() >= 2


def test_verdict_tau_defaults_to_zero():
    fake = type("T", (), dict(grid={"target": [2, 2]}, params={}, steps=[
        dict(phase="verify", band=[0, 2], pooled=[[0.5, 0.001], [0.1, None]], accepted=[[True, False], [True, False]],
             resample=[[False, True], [False, False]], islands=[[0, 1], [0, 0]])]))()
    v = render.verdict(fake)
    assert v.tau == 0.0
    assert np.isnan(v.pooled[1, 1]) and not v.accepted[1, 1] and not v.rejected[1, 1] and not v.resample[1, 1]
    assert v.rejected.tolist() == [[False, True], [False, False]] and v.islands.tolist() == [[0, 1], [0, 0]]


# ---- cascade levels ---------------------------------------------------------------------------

def test_the_cascade_level_is_the_drafter_grid_seen_as_a_trace(cascade):
    assert render.cascade_levels(cascade) == [1]
    lv = render.level_trace(cascade, 1)
    assert lv.level == 1 and lv.method == "mulo"
    assert lv.grid == dict(target=[8, 8], draft=[4, 4], levels=[[8, 8], [4, 4]])
    assert lv.steps == [{k: v for k, v in s.items() if k != "level"} for s in cascade.steps if s.get("level") == 1]
    assert lv.steps and all("level" not in s for s in lv.steps)
    nested = cascade.levels[0]
    assert lv.tokens == nested["tokens"] and lv.proposal == nested["proposal"] and lv.draft == nested["draft"]
    _, p = draft_spec(MethodParams(**{k: v for k, v in cascade.params.items() if k in MethodParams.__dataclass_fields__}))
    assert lv.params == dict(cascade.params, **dataclasses.asdict(p))
    assert lv.params["tau"] == 0.01 and lv.params["draft_method"] == "ar" and cascade.params["tau"] == 0.007
    # the level's own verdict: its verify steps on its own grid, its own tau
    v = render.verdict(lv)
    pooled, acc, rej, res, isl = expected_verdict(cascade, level=1)
    np.testing.assert_array_equal(v.pooled, pooled)
    assert (v.accepted == acc).all() and (v.islands == isl).all() and v.tau == 0.01
    assert render.level_trace(cascade, 0) is None and render.level_trace(cascade, 2) is None


def test_a_cascade_level_is_read_from_its_own_entry_of_the_nested_runs(cascade_sjd):
    """Level 1 is nested run 0 (mulo, with a proposal); level 2 (sjd, no proposal) is no cascade level."""
    assert [lv["method"] for lv in cascade_sjd.levels] == ["mulo", "sjd"]
    assert render.cascade_levels(cascade_sjd) == [1]
    lv = render.level_trace(cascade_sjd, 1)
    nested = cascade_sjd.levels[0]
    assert lv.method == "mulo" and lv.tokens == nested["tokens"] and lv.proposal == nested["proposal"]
    assert lv.draft == nested["draft"] and render.level_trace(cascade_sjd, 2) is None
    assert render.tests(cascade_sjd) is None            # the 4x4 level's sjd tests are not the target's
    assert render.cascade_levels(lv) == []              # a level view has no levels of its own


def test_runs_without_a_cascade_have_no_levels(banded, sjd_drafted, sd):
    for t in (banded, sjd_drafted, sd):
        assert render.cascade_levels(t) == [] and render.level_trace(t, 1) is None


def test_a_level_is_a_cascade_level_only_with_a_grid_below_it_and_a_proposal():
    def fake(grids, nested):
        return type("T", (), dict(grid={"levels": grids}, levels=nested))()
    g3 = [[16, 16], [8, 8], [4, 4]]
    with_proposal, without = {"proposal": [[0]]}, {"proposal": None}
    assert render.cascade_levels(fake(g3, [with_proposal])) == [1]
    assert render.cascade_levels(fake(g3, [without])) == []
    assert render.cascade_levels(fake(g3, [without, with_proposal])) == []
    assert render.cascade_levels(fake(g3, [with_proposal, with_proposal])) == [1]     # level 2 has no grid below
    assert render.cascade_levels(fake(g3[:2], [with_proposal])) == []
    assert render.cascade_levels(fake(g3, [])) == [] and render.cascade_levels(fake(g3, None)) == []


def test_level_params_apply_the_draft_spec_once_per_level_and_fall_back_on_bad_knobs(cascade):
    assert render._level_params(cascade, 0) == dict(cascade.params)
    fields = MethodParams.__dataclass_fields__
    p = MethodParams(**{k: v for k, v in cascade.params.items() if k in fields})
    _, p1 = draft_spec(p)
    assert render._level_params(cascade, 1) == dict(cascade.params, **dataclasses.asdict(p1))
    _, p2 = draft_spec(p1)
    assert render._level_params(cascade, 2) == dict(cascade.params, **dataclasses.asdict(p2))
    for bad in (dict(cascade.params, draft_method="nope"), dict(cascade.params, draft_method="mulo/scale=abc")):
        t = dataclasses.replace(cascade, params=bad)
        assert render._level_params(t, 1) == bad


# ---- replay -----------------------------------------------------------------------------------

def my_replay(trace, n):
    """(target, draft) after the first n steps, written out from the step list."""
    H, W = trace.grid["target"]
    has_draft = trace.grid.get("draft") is not None
    target, draft = {}, {}
    for s in trace.steps[:max(n, 0)]:
        level = s.get("level", 0)
        if level == 0:
            canvas = target
        elif level == 1 and has_draft:
            canvas = draft
        else:
            continue
        if s["phase"] == "verify" and "band" in s:
            for a, row in enumerate(s["resample"]):
                for b, r in enumerate(row):
                    if r:
                        canvas.pop((s["band"][0] + a, b), None)
            continue
        for c in s.get("judged") or []:
            canvas.pop(tuple(c), None)
        if s.get("tokens") is not None:
            for c, tok in zip(s["cells"], s["tokens"]):
                canvas[tuple(c)] = tok

    def grid(cells, shape):
        out = np.full(shape, -1)
        for (i, j), tok in cells.items():
            out[i, j] = tok
        return out
    return grid(target, (H, W)), (grid(draft, tuple(trace.grid["draft"])) if has_draft else None)


@pytest.mark.parametrize("name", ["banded", "raster", "cascade", "sjd_drafted", "sjd", "jacobi", "cascade_sjd"])
def test_replay_holds_exactly_the_tokens_of_the_steps_before_n(name, request):
    trace = request.getfixturevalue(name)
    N = len(trace.steps)
    for n in range(0, N + 1):
        rp = render.replay(trace, n)
        target, draft = my_replay(trace, n)
        assert (rp.target == target).all(), n
        if draft is None:
            assert rp.draft is None
        else:
            assert (rp.draft == draft).all(), n
        assert rp.last is (trace.steps[n - 1] if n else None)
    assert (render.replay(trace, N).target == np.asarray(trace.tokens)).all()
    assert (render.replay(trace, N + 7).target == np.asarray(trace.tokens)).all()
    assert (render.replay(trace, -3).target == -1).all() and render.replay(trace, -3).last is None


def test_replay_of_sd_at_its_verify_steps(sd):
    """sd's verify steps withdraw the drafts they judged and write only the tokens they kept."""
    n_steps = [n + 1 for n, s in enumerate(sd.steps) if s["phase"] == "verify"][::7] + [len(sd.steps)]
    for n in n_steps:
        target, _ = my_replay(sd, n)
        assert (render.replay(sd, n).target == target).all(), n
    s = next(s for s in sd.steps if s["phase"] == "verify" and len(s["judged"]) > len(s["cells"]))
    n = sd.steps.index(s) + 1
    rp = render.replay(sd, n)
    gone = {tuple(c) for c in s["judged"]} - {tuple(c) for c in s["cells"]}
    assert gone and all(rp.target[c] == -1 for c in gone)


def test_the_drafter_canvas_takes_level_1_steps_and_the_target_the_rest(banded):
    rp = render.Replay(banded.grid["target"], banded.grid["draft"])
    draft_step = next(s for s in banded.steps if s["phase"] == "draft")
    assert rp.on_draft(draft_step) and not rp.on_draft(dict(draft_step, level=0))
    assert not rp.on_draft({k: v for k, v in draft_step.items() if k != "level"})
    assert not render.Replay(banded.grid["target"], None).on_draft(draft_step)
    rp.apply(dict(draft_step, level=2))                 # a deeper level is not replayed
    assert (rp.draft == -1).all() and (rp.target == -1).all()
    rp.apply(draft_step)
    (i, j), = draft_step["cells"]
    assert rp.draft[i, j] == draft_step["tokens"][0] and (rp.target == -1).all()
    # without a drafter canvas a level-1 step has no canvas here: the target is left alone
    alone = render.Replay(banded.grid["target"], None)
    alone.apply(draft_step)
    assert (alone.target == -1).all() and alone.last is draft_step


def test_a_step_that_judged_guesses_and_committed_none_only_withdraws():
    """A Jacobi wave whose every guess failed without a residual writes nothing (cells and tokens empty)."""
    rp = render.Replay((4, 4), None)
    rp.apply(dict(phase="resample", model="target", cells=[[0, 1], [2, 3]], tokens=[7, 9]))
    rp.apply(dict(phase="resample", model="target", cells=[], tokens=[], judged=[[0, 1]], accepted=[False]))
    assert rp.target[0, 1] == -1 and rp.target[2, 3] == 9 and (rp.target >= 0).sum() == 1


# ---- cell_at ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, size", [((16, 16), 320), ((8, 8), 320), ((4, 8), 320), ((32, 32), 320), ((5, 7), 100)])
def test_cell_at_maps_every_cell_s_pixels_back_to_that_cell(shape, size):
    H, W = shape
    for i in range(H):
        for j in range(W):
            y0, y1 = math.ceil(i * size / H), math.ceil((i + 1) * size / H) - 1    # first and last pixel row
            x0, x1 = math.ceil(j * size / W), math.ceil((j + 1) * size / W) - 1
            last = (min(x1 + 0.99, (j + 1) * size / W - 1e-6), min(y1 + 0.99, (i + 1) * size / H - 1e-6))
            for x, y in ((x0, y0), (x1, y1), ((x0 + x1) / 2, (y0 + y1) / 2), last):
                assert render.cell_at(x, y, shape, size) == (i, j), (x, y)
    assert render.cell_at(-5, -1, shape, size) == (0, 0)
    assert render.cell_at(size, size, shape, size) == (H - 1, W - 1)
    assert render.cell_at(size + 40, 0, shape, size) == (0, W - 1)
    assert render.cell_at(0, size + 40, shape, size) == (H - 1, 0)


def test_cell_at_defaults_to_the_displayed_size():
    assert render.cell_at(S - 1, 0, (16, 16)) == (0, 15) and render.cell_at(0, S // 2, (16, 16)) == (8, 0)
    assert render.cell_at(S // 16, S // 8 - 1, (16, 16)) == (1, 1)


# ---- cell_details -----------------------------------------------------------------------------

def expected_card(trace, i, j):
    H, W = trace.grid["target"]
    out = [f"**Cell ({i}, {j})**, raster index {i * W + j}", f"- final token: {trace.tokens[i][j]}"]
    if trace.proposal is not None:
        out.append(f"- proposal token: {trace.proposal[i][j]}")
    if trace.draft is not None:
        h, w = trace.grid["draft"]
        a, b = i * h // H, j * w // W
        out.append(f"- drafted from low-res cell ({a}, {b}), token {trace.draft[a][b]}")
    return out


@pytest.mark.parametrize("name", ["raster", "whole"])
def test_the_card_names_the_clicked_cell_s_numbers(name, request):
    trace = request.getfixturevalue(name)
    v = render.verdict(trace)
    pooled, acc, rej, res, isl = expected_verdict(trace)
    H, W = trace.grid["target"]
    seen = set()
    for i in range(H):
        for j in range(W):
            card = render.cell_details(trace, v, i, j)
            lines = card.split("\n")
            assert lines[:4] == expected_card(trace, i, j)
            assert lines[4] == (f"- pooled mass {pooled[i, j]:.4f} {'≥' if acc[i, j] else '<'} τ 0.007: "
                                f"**{'passed τ' if acc[i, j] else 'below τ'}**")
            if res[i, j]:
                why = "below τ itself" if rej[i, j] else "passed τ, but swept in by the expansion around a cell below τ"
                assert lines[5] == f"- **resampled** by the target ({why}), island {isl[i, j]}" and isl[i, j] > 0
            else:
                assert lines[5] == "- **kept** as proposed"
            assert len(lines) == 6
            seen.add((bool(acc[i, j]), bool(res[i, j])))
    assert seen >= {(True, False), (False, True)} and (name == "raster" or (True, True) in seen)


def test_the_card_of_a_cell_no_pass_judged_has_no_verdict(banded):
    first = next(n for n, s in enumerate(banded.steps) if s["phase"] == "verify")
    part = dataclasses.replace(banded, steps=banded.steps[:first + 1])
    r1 = banded.steps[first]["band"][1]
    card = render.cell_details(part, render.verdict(part), r1 + 1, 3)
    assert card.split("\n") == expected_card(part, r1 + 1, 3)
    assert render.cell_details(banded, None, 2, 5).split("\n") == expected_card(banded, 2, 5)


@pytest.mark.parametrize("name", ["sd", "sjd"])
def test_the_card_of_sd_and_sjd_names_the_position_s_test(name, request):
    trace = request.getfixturevalue(name)
    tested = {}
    for s in trace.steps:
        if s["phase"] == "verify" and "prob" in s:
            for c, p, ok in zip(s["judged"], s["prob"], s["accepted"]):
                tested[tuple(c)] = (p, ok)
    H, W = trace.grid["target"]
    label = "min(1, p/q)" if name == "sd" else "min(1, p/p_prev) of the Jacobi iterate"
    kinds = set()
    for i in range(0, H, 3):
        for j in range(W):
            lines = render.cell_details(trace, None, i, j).split("\n")
            assert lines[:2] == expected_card(trace, i, j) and len(lines) == 3
            if (i, j) in tested:
                p, ok = tested[(i, j)]
                assert lines[2] == (f"- probability of acceptance {p:.4f} ({label}): "
                                    + ("**passed**, draft kept" if ok else "**failed**, resampled from the residual"))
                kinds.add(ok)
            else:
                assert lines[2].startswith("- never tested")
                kinds.add(None)
    assert kinds >= {True, False} and (name == "sjd" or None in kinds)


# ---- tests(trace) -----------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["sd", "sjd"])
def test_tests_hold_each_position_s_last_test(name, request):
    trace = request.getfixturevalue(name)
    H, W = trace.grid["target"]
    prob, passed = np.full((H, W), np.nan), np.zeros((H, W), bool)
    tested = np.zeros((H, W), bool)
    for s in trace.steps:
        if s["phase"] == "verify":
            for (i, j), p, ok in zip(s["judged"], s["prob"], s["accepted"]):
                prob[i, j], passed[i, j], tested[i, j] = p, ok, True
    t = render.tests(trace)
    assert t.passed.dtype == t.resampled.dtype == bool and t.prob.dtype == np.float64
    np.testing.assert_array_equal(t.prob, prob)
    assert (t.passed == passed).all() and (t.resampled == (tested & ~passed)).all()
    assert passed.any() and (tested & ~passed).any()
    assert t.label == ("min(1, p/q)" if name == "sd" else "min(1, p/p_prev) of the Jacobi iterate")


def test_tests_are_none_for_mulo_even_when_its_drafter_ran_sjd(banded, sjd_drafted):
    assert any("prob" in s for s in sjd_drafted.steps)        # the drafter's own tests, on the 8x8 grid
    assert render.tests(banded) is None and render.tests(sjd_drafted) is None
    lvl = dataclasses.replace(sjd_drafted, method="sjd",
                              steps=[{k: v for k, v in s.items() if k != "level"} for s in sjd_drafted.steps
                                     if s.get("level") == 1 and "prob" in s])
    assert render.tests(lvl) is not None


def test_a_later_test_of_a_position_overrides_the_earlier(sd):
    s = next(s for s in sd.steps if s["phase"] == "verify" and len(s["prob"]) >= 2 and not all(s["accepted"]))
    c = s["judged"][0]
    again = dict(s, judged=[c, c], prob=[0.25, 0.75], accepted=[False, True])
    t = render.tests(dataclasses.replace(sd, method="lantern", steps=[s, again]))
    assert t.prob[tuple(c)] == 0.75 and t.passed[tuple(c)] and not t.resampled[tuple(c)]
    assert t.label.startswith("p̃(x) with q = 1")    # lantern tests EAGLE-2's tree (chosen drafts, q = 1)
    assert render.tests(dataclasses.replace(sd, method="cool")).label == render.RULES["cool"]   # its own rule
    assert render.tests(dataclasses.replace(sd, method="unknown")).label == "probability of acceptance"


# ---- images: crisp, with_grid, tint, dots, grid_image ---------------------------------------------

def pix(mask, size=S):
    """(H, W) cell mask -> (size, size) pixel mask, for sizes that the grid divides."""
    H, W = mask.shape
    assert size % H == 0 and size % W == 0
    return np.repeat(np.repeat(mask, size // H, 0), size // W, 1)


def blocks(img, shape):
    """(H, W, 3) colour of each cell's block, asserting the block is one colour."""
    H, W = shape
    h, w = img.shape[0] // H, img.shape[1] // W
    out = img[::h, ::w][:H, :W]
    assert (np.repeat(np.repeat(out, h, 0), w, 1) == img[:H * h, :W * w]).all()
    return out


def blend(base, colour, alpha):
    return ((1 - alpha) * base.astype(np.float32) + alpha * np.array(theme.rgb(colour), np.float32)).astype(np.uint8)


def test_crisp_repeats_every_token_pixel_as_a_square():
    rng = np.random.default_rng(0)
    for h, w in ((16, 16), (8, 8), (16, 8)):
        img = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        out = render.crisp(img)
        assert out.shape == (S, S, 3)
        ys, xs = np.arange(S) * h // S, np.arange(S) * w // S
        assert (out == img[ys][:, xs]).all()
    assert render.crisp(img, 64).shape == (64, 64, 3)


@pytest.mark.parametrize("rows, cols", [(16, 16), (4, 8), (5, 3)])
def test_with_grid_darkens_exactly_the_cell_borders(rows, cols):
    img = np.full((S, S, 3), 200, np.uint8)
    img[:, :, 1] = 100
    out = render.with_grid(img, rows, cols)
    ys = {k * S // rows for k in range(1, rows)}
    xs = {k * S // cols for k in range(1, cols)}
    for y in range(S):
        for x in (0, 1, S - 1, *xs):
            times = (y in ys) + (x in xs)
            want = img[y, x].astype(np.float64)
            for _ in range(times):
                want = np.floor(want * 0.45)
            assert (out[y, x] == want).all(), (y, x)
    row = 1 if 1 not in ys else 2
    assert (out[row, [x for x in range(S) if x not in xs]] == img[0, 0]).all()
    assert (img == np.where(True, img, 0)).all() and img[0, 0, 0] == 200     # the input is left alone


def test_tint_blends_the_colour_over_the_masked_cells_only():
    rng = np.random.default_rng(1)
    base = render.crisp(rng.integers(0, 256, (4, 8, 3), dtype=np.uint8))
    mask = np.zeros((4, 8), bool)
    mask[0, 0] = mask[1, 5] = mask[3, 7] = True
    for colour, alpha in ((theme.ACCEPTED, 0.35), (theme.REJECTED, 0.7), (theme.PENDING, 1.0)):
        out = render.tint(base, mask, colour, alpha)
        b, o = blocks(base, (4, 8)), blocks(out, (4, 8))
        assert (o[~mask] == b[~mask]).all()
        assert (o[mask] == blend(b[mask], colour, alpha)).all()
    assert (render.tint(base, mask, theme.PENDING, 1.0)[:S // 4, :S // 8] == theme.rgb(theme.PENDING)).all()


def dot_box(i, j, shape, size=S):
    """Rows and columns of the dot of cell (i, j): the middle 40 % of the cell, rounded outwards."""
    H, W = shape
    ch, cw = size / H, size / W
    return slice(int((i + 0.3) * ch), math.ceil((i + 0.7) * ch)), slice(int((j + 0.3) * cw), math.ceil((j + 0.7) * cw))


def test_dots_sit_in_the_middle_of_the_masked_cells():
    base = np.full((S, S, 3), 77, np.uint8)
    mask = np.zeros((16, 8), bool)
    mask[0, 0] = mask[15, 7] = mask[5, 2] = True
    out = render._dots(base, mask)
    want = base.copy()
    for i, j in zip(*np.nonzero(mask)):
        ys, xs = dot_box(i, j, (16, 8))
        assert (ys.start, ys.stop) == (20 * i + 6, 20 * i + 14) and (xs.start, xs.stop) == (40 * j + 12, 40 * j + 28)
        want[ys, xs] = theme.rgb(theme.REJECTED)
    assert (out == want).all() and (base == 77).all()
    odd = render._dots(np.zeros((100, 100, 3), np.uint8), np.ones((3, 3), bool))
    for i in range(3):
        ys, xs = dot_box(i, i, (3, 3), 100)
        assert (odd[ys, xs] == theme.rgb(theme.REJECTED)).all()
        assert (odd[ys.start - 1, xs] == 0).all() and (odd[ys.stop, xs] == 0).all()


def test_grid_image_decodes_and_paints_unknown_cells_pending(banded, tokenizer):
    assert render.grid_image(None, tokenizer) is None
    tokens = np.asarray(banded.tokens)
    full = render.crisp(engine.decode_image(tokens, tokenizer))
    assert (render.grid_image(tokens, tokenizer) == full).all()
    assert (render.grid_image(tokens, tokenizer, grid=True) == render.with_grid(full, 16, 16)).all()
    assert render.grid_image(tokens, tokenizer, size=64).shape == (64, 64, 3)
    part = tokens.copy()
    part[3:, :] = -1
    part[0, 4] = -1
    img = render.grid_image(part, tokenizer)
    known = render.crisp(engine.decode_image(np.where(part < 0, 0, part), tokenizer))
    m = pix(part < 0, S)
    assert (img[m] == theme.rgb(theme.PENDING)).all() and (img[~m] == known[~m]).all()
    assert m[0, 4 * S // 16] and m[-1, 0] and not m[0, 0] and m.sum() == (13 * 16 + 1) * (S // 16) ** 2


# ---- islands_image, failed_image, islands_key -------------------------------------------------

def island_colour(n):
    return theme.ISLANDS[(n - 1) % len(theme.ISLANDS)]


@pytest.mark.parametrize("name", ["banded", "cascade", "whole"])
def test_islands_image_colours_each_island_and_dots_the_cells_below_tau(name, request, tokenizer):
    trace = request.getfixturevalue(name)
    v = render.verdict(trace)
    _, _, rej, _, isl = expected_verdict(trace)
    proposal = render.grid_image(trace.proposal, tokenizer)
    out = render.islands_image(proposal, v)
    want = proposal.copy()
    for n in range(1, isl.max() + 1):
        m = pix(isl == n, S)
        want[m] = blend(proposal[m], island_colour(n), 0.6)
    for i, j in zip(*np.nonzero(rej)):
        want[dot_box(i, j, isl.shape)] = theme.rgb(theme.REJECTED)
    assert (out == want).all()
    assert (render.islands_image(proposal, v, grid=True) == render.with_grid(want, 16, 16)).all()
    if name == "cascade":
        assert isl.max() > len(theme.ISLANDS)          # the colours cycle


def test_the_key_names_each_island_s_colour_and_size(whole, cascade):
    for trace in (whole, cascade):
        v = render.verdict(trace)
        _, _, rej, _, isl = expected_verdict(trace)
        key = render.islands_key(v)
        assert f"below τ ({render.cells(int(rej.sum()))})" in key
        found = re.findall(r"background:(#[0-9a-f]{6});[^>]*></span> island (\d+): (\d+) cells?", key)
        assert [(c, int(n), int(k)) for c, n, k in found] == \
            [(island_colour(n), n, int((isl == n).sum())) for n in range(1, isl.max() + 1)]
        assert "no islands" not in key
        dot = theme.swatch(theme.REJECTED, round_=True)
        assert key == ("<div class='key'>" + " · ".join(
            [f"{dot} below τ ({render.cells(int(rej.sum()))})"]
            + [f"{theme.swatch(island_colour(n))} island {n}: {render.cells(int((isl == n).sum()))}"
               for n in range(1, isl.max() + 1)])
            + "</div>")
    none = render.verdict(whole)
    none.islands[:] = 0
    none.rejected[:] = False
    assert render.islands_key(none) == ("<div class='key'>" + theme.swatch(theme.REJECTED, round_=True)
                                        + " below τ (0 cells) · no islands: every cell kept</div>")
    assert render.islands_key(None) == "" and render.islands_key(None, None) == ""


def test_failed_image_dots_exactly_the_failed_drafts(sd, tokenizer):
    t = render.tests(sd)
    final = render.grid_image(sd.tokens, tokenizer)
    out = render.failed_image(final, t)
    want = final.copy()
    for i, j in zip(*np.nonzero(t.resampled)):
        want[dot_box(i, j, (16, 16))] = theme.rgb(theme.REJECTED)
    assert t.resampled.any() and (out == want).all()
    assert (render.failed_image(final, t, grid=True) == render.with_grid(want, 16, 16)).all()
    assert render.islands_key(None, t) == (
        f"<div class='key'>{theme.swatch(theme.REJECTED, round_=True)} draft failed its test, token resampled from "
        f"the residual ({render.cells(int(t.resampled.sum()))}); every other written cell kept its draft or was drawn from p.</div>")


# ---- the step canvas and its caption ----------------------------------------------------------

def expected_panel(canvas, step, marked, tokenizer, grid=False):
    img = render.grid_image(canvas, tokenizer, grid)
    if not marked:
        return img
    H, W = canvas.shape
    if step["phase"] == "verify" and "band" in step:
        passed, below, swept = (np.zeros((H, W), bool) for _ in range(3))
        r0 = step["band"][0]
        for a, row in enumerate(step["pooled"]):
            for b, p in enumerate(row):
                if null(p):
                    continue
                ok, res = step["accepted"][a][b], step["resample"][a][b]
                (passed if ok and not res else swept if ok else below)[r0 + a, b] = True
        layers = ((passed, theme.ACCEPTED, 0.35), (below, theme.REJECTED, 0.7), (swept, theme.RESAMPLED, 0.7))
    else:
        mask = np.zeros((H, W), bool)
        for i, j in step["cells"]:
            mask[i, j] = True
        layers = ((mask, theme.WRITTEN, theme.WRITTEN_ALPHA),)
    for mask, colour, alpha in layers:
        m = pix(mask, S)
        img[m] = blend(img[m], colour, alpha)
    return img


def pick_steps(trace):
    """1-based step numbers: the first of every (phase, level), and every verify step."""
    seen, out = set(), []
    for n, s in enumerate(trace.steps, 1):
        key = (s["phase"], s.get("level", 0))
        if key not in seen or s["phase"] == "verify":
            seen.add(key)
            out.append(n)
    return out


@pytest.mark.parametrize("name", ["raster", "sd"])
def test_the_step_canvas_shows_the_replayed_canvases_with_the_step_s_cells_marked(name, request, tokenizer):
    trace = request.getfixturevalue(name)
    gap = S // 20
    for n in pick_steps(trace)[:14]:
        step = trace.steps[n - 1]
        target, draft = my_replay(trace, n)
        img = render.canvas_image(render.replay(trace, n), tokenizer)
        on_draft = draft is not None and step.get("level", 0) == 1
        if draft is None:
            assert img.shape == (S + render.LABEL, S, 3)
            assert (img[:S] == expected_panel(target, step, True, tokenizer)).all(), n
            continue
        assert img.shape == (S + render.LABEL, 2 * S + gap, 3)
        assert (img[:S, :S] == expected_panel(draft, step, on_draft, tokenizer)).all(), n
        assert (img[:, S:S + gap] == 255).all()
        assert (img[:S, S + gap:] == expected_panel(target, step, not on_draft, tokenizer)).all(), n
    start = render.canvas_image(render.replay(trace, 0), tokenizer)
    assert start.dtype == np.uint8 and (start[:S, -S:] == theme.rgb(theme.PENDING)).all()
    # grid lines (under the marks) and a smaller size reach every panel
    n = pick_steps(trace)[1]
    step, (target, draft) = trace.steps[n - 1], my_replay(trace, n)
    lined = render.canvas_image(render.replay(trace, n), tokenizer, grid=True)
    H, W = target.shape
    on_target = draft is None or step.get("level", 0) != 1
    assert (lined[:S, -S:] == expected_panel(target, step, on_target, tokenizer, grid=True)).all()
    assert (lined[:S, -S:] != render.canvas_image(render.replay(trace, n), tokenizer)[:S, -S:]).any()
    if draft is not None:
        assert (lined[:S, :S] == expected_panel(draft, step, not on_target, tokenizer, grid=True)).all()
    small = render.canvas_image(render.replay(trace, n), tokenizer, size=160)
    assert small.shape == (160 + render.LABEL, 160 if draft is None else 2 * 160 + 8, 3)
    # each panel's caption names its model and its grid
    blank = np.zeros((S, S, 3), np.uint8)
    H, W = trace.grid["target"]
    assert (start[S:, -S:] == render._labelled(blank, f"target p, {H}x{W} tokens")[S:]).all()
    if trace.grid.get("draft"):
        h, w = trace.grid["draft"]
        assert (start[S:, :S] == render._labelled(blank, f"drafter q, {h}x{w} tokens")[S:]).all()


def test_a_verify_step_marks_passed_below_and_swept_cells(raster):
    """The three verdict colours of a verify pass land on the cells of each kind (and nowhere for cells
    the pass did not judge)."""
    kinds = set()
    for s in raster.steps:
        if s["phase"] == "verify":
            for a, row in enumerate(s["pooled"]):
                for b, p in enumerate(row):
                    if not null(p):
                        kinds.add((s["accepted"][a][b], s["resample"][a][b]))
    assert kinds == {(True, False), (False, True), (True, True)}
    s = next(s for s in raster.steps if s["phase"] == "verify" and any(null(p) for row in s["pooled"] for p in row))
    base = np.full((S, S, 3), 128, np.uint8)
    out = blocks(render._mark_step(base, s, (16, 16)), (16, 16))
    r0 = s["band"][0]
    for a, row in enumerate(s["pooled"]):
        for b, p in enumerate(row):
            if null(p):
                assert (out[r0 + a, b] == 128).all()
    assert (out[:r0] == 128).all() and (out[s["band"][1]:] == 128).all()


def caption_of(step, n, total, steps=None):
    passes = None if steps is None else sum(int(s["nfe"]) for s in steps)
    so_far = None if steps is None else sum(int(s["nfe"]) for s in steps[:n])
    who = f"{step['model']}, {step['nfe']} NFE" if step["model"] else "no model pass"
    if step["phase"] == "verify" and "band" in step:
        r0, r1 = step["band"]
        resample = sum(map(sum, step["resample"]))
        what = f"rows {r0}-{r1 - 1}: {step['rejected']} rejected, {resample} to resample in {step['n_islands']} island(s)"
    else:
        k = len(step["cells"])
        what = f"{k} cell" + ("" if k == 1 else "s") + (f", wave {step['wave'] + 1}" if "wave" in step else "")
    line = f"Step {n} of {total}: **{step['phase']}** ({who}, {step['wall_ms']:.1f} ms), {what}."
    if passes is not None and passes != total:   # a step holding two passes: both counts said
        line += f" Passes so far: {so_far} of {passes}."
    return line


@pytest.mark.parametrize("name", ["banded", "sd"])
def test_step_captions_name_the_step_s_phase_model_and_counts(name, request):
    trace = request.getfixturevalue(name)
    total = len(trace.steps)
    for n in range(1, total + 1, 1 if name == "banded" else 5):
        assert render.step_caption(trace, n) == caption_of(trace.steps[n - 1], n, total, trace.steps), n
    assert render.step_caption(trace, total + 3) == caption_of(trace.steps[-1], total, total, trace.steps)
    assert render.step_caption(trace, 0) == render.step_caption(trace, -2) == f"Before step 1 of {total}: nothing written yet."


def test_captions_count_cells_and_waves():
    base = dict(phase="resample", model="target", nfe=1, wall_ms=1.25, cells=[[0, 1]], tokens=[3], wave=0)
    t = type("T", (), dict(steps=[base, dict(base, cells=[[0, 1], [2, 2]], wave=2),
                                   dict(base, model=None, cells=[], phase="upsample"),
                                   dict(phase="verify", model="target", nfe=2, wall_ms=10.04, cells=[], band=[4, 8],
                                        resample=[[True, False], [True, True]])]))()
    # four steps, five passes (the last step holds two): every caption counts the passes too
    assert render.step_caption(t, 1).endswith("(target, 1 NFE, 1.2 ms), 1 cell, wave 1. Passes so far: 1 of 5.")
    assert render.step_caption(t, 2).endswith("2 cells, wave 3. Passes so far: 2 of 5.")
    assert render.step_caption(t, 3).endswith("**upsample** (no model pass, 1.2 ms), 0 cells, wave 1. Passes so far: 3 of 5.")
    assert render.step_caption(t, 4).endswith("rows 4-7: 0 rejected, 3 to resample in 0 island(s). Passes so far: 5 of 5.")
    one = type("T", (), dict(steps=[base, dict(base, wave=1)]))()      # one pass a step: no tally
    assert render.step_caption(one, 2).endswith("1 cell, wave 2.")


# ---- message_image ----------------------------------------------------------------------------

def test_a_message_is_wrapped_inside_the_panel_and_centred():
    blank = render.message_image("")
    bg = np.array(theme.rgb("#f1f2f6"))
    assert blank.shape == (S, S, 3) and (blank == bg).all()
    text = "This method verifies nothing, so there is no acceptance to map on this panel at all today"
    img = render.message_image(text)
    ink = (img != bg).any(axis=2)
    rows, cols = np.nonzero(ink)
    assert cols.min() >= 14 and cols.max() <= S - 14
    lines = (rows.max() - rows.min()) // 24 + 1
    assert 3 <= lines <= 4                       # wrapped at the panel's width, not word by word
    assert abs((S - rows.max()) - rows.min()) <= 24                     # centred vertically
    one = (render.message_image("nothing to show here") != bg).any(axis=2)
    assert np.nonzero(one)[0].max() - np.nonzero(one)[0].min() < 24
    small = render.message_image(text, size=160)
    assert small.shape == (160, 160, 3)
    c = np.nonzero((small != bg).any(axis=2))[1]
    assert c.max() <= 160 - 14


def test_a_panel_caption_names_rows_then_columns(tokenizer):
    rp = render.Replay((4, 8), (2, 4))
    img = render.canvas_image(rp, tokenizer)
    blank = np.zeros((S, S, 3), np.uint8)
    assert (img[S:, -S:] == render._labelled(blank, "target p, 4x8 tokens")[S:]).all()
    assert (img[S:, :S] == render._labelled(blank, "drafter q, 2x4 tokens")[S:]).all()
