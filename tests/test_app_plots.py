"""app.plots against the trace: every number a figure draws is checked against what the trace recorded.

The oracles are the trace's own values and the documented rules, assembled here without app.plots'
helpers: the heatmap's z is log10 of each cell's pooled mass clipped to [LOG_FLOOR, 0], its hover
the cell's proposal token, pooled mass, verdict and fate; the colour scale turns from red to green
at τ's place on the axis; the test heatmap shows each tested position's probability and verdict;
the timeline draws one bar per run of consecutive steps of one phase (or per equal slice of wall
clock past `most` bars), at the wall-clock time the steps took, on the lane of their level; the
comparison bars and the sweep put every row and point at its values. Colours are checked only where
they carry meaning (red below τ, green above; one colour per phase, distinct).
"""
import math
from types import SimpleNamespace

import numpy as np
import pytest

from app import plots, render, theme
from core import engine
from core.config import RunConfig
from core.trace import PHASES

PROMPT = "a large red circle center and a small blue square top left on a striped green background"


def mulo(pair, **params):
    return engine.run(RunConfig(method="mulo", prompt=PROMPT, seed=2).with_params(**{"k": 4, "tau": 0.009, **params}), pair)


def reddish(colour: str) -> bool:
    r, g, _ = theme.rgb(colour)
    return r > g


def clipped_log(p: float) -> float:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return float("nan")
    return min(0.0, max(plots.LOG_FLOOR, math.log10(max(p, 1e-12))))


def heat_of(fig):
    return [d for d in fig.data if d.type == "heatmap"][0]


# --------------------------------------------------------------------------------------- heatmap (mulo)

@pytest.fixture(scope="module")
def mulo_trace(tiny_pair):
    """Four bands at τ = 0.009: both verdicts, several islands, every cell verified."""
    t = mulo(tiny_pair, draft_rows=2)
    v = render.verdict(t)
    assert v.accepted.any() and v.rejected.any() and len(np.unique(v.islands)) > 3
    return t


def verdict_from_steps(trace):
    """(i, j) -> (pooled, passed, resampled, island) from the verify steps, the last pass of a cell
    winning, island ids counted on across bands."""
    W = trace.grid["target"][1]
    out, before = {}, 0
    for s in trace.steps:
        if s["phase"] != "verify" or s.get("level", 0):
            continue
        r0 = s["band"][0]
        for a, row in enumerate(s["pooled"]):
            for j, p in enumerate(row):
                isl = s["islands"][a][j]
                out[(r0 + a, j)] = (p, s["accepted"][a][j], s["resample"][a][j], before + isl if isl else 0)
        before += max(max(r) for r in s["islands"])
    assert len(out) == trace.grid["target"][0] * W
    return out


def test_heatmap_cell_data_and_hover_are_the_cell_s_recorded_verdict(mulo_trace):
    fig = plots.heatmap(mulo_trace, render.verdict(mulo_trace))
    heat = heat_of(fig)
    z, custom = np.asarray(heat.z, dtype=float), np.asarray(heat.customdata, dtype=object)
    assert (heat.zmin, heat.zmax) == (plots.LOG_FLOOR, 0.0)
    fates = set()
    for (i, j), (pooled, passed, resampled, island) in verdict_from_steps(mulo_trace).items():
        assert z[i, j] == pytest.approx(clipped_log(pooled), abs=1e-12)
        assert custom[i, j][0] == mulo_trace.proposal[i][j]
        assert custom[i, j][1] == round(pooled, 5)
        assert custom[i, j][2] == ("passed τ" if passed else "below τ")
        fate = "kept" if not resampled else (f"resampled, island {island}" if not passed else f"swept into island {island}")
        assert custom[i, j][3] == fate, (i, j)
        fates.add(fate.split(" island")[0])
    assert fates >= {"kept", "resampled,"}
    # the hover names each field of customdata in order
    tpl = heat.hovertemplate
    order = [tpl.index(s) for s in ("cell (%{y}, %{x})", "proposal token %{customdata[0]}",
                                   "pooled mass %{customdata[1]}", "%{customdata[2]}", "%{customdata[3]}")]
    assert order == sorted(order)


def test_heatmap_title_counts_the_passed_kept_resampled_cells_and_islands(mulo_trace):
    v = render.verdict(mulo_trace)
    cells = verdict_from_steps(mulo_trace)
    passed = sum(bool(c[1]) for c in cells.values())
    resampled = sum(bool(c[2]) for c in cells.values())
    islands = len({c[3] for c in cells.values() if c[3]})
    title = plots.heatmap(mulo_trace, v).layout.title.text
    assert f"Pooled mass vs τ = {v.tau:g}: {passed} of 256 passed τ" in title
    assert f"{256 - resampled} kept, {resampled} resampled in {islands} island(s)" in title


def test_heatmap_rows_run_down_like_the_image(mulo_trace):
    fig = plots.heatmap(mulo_trace, render.verdict(mulo_trace))
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.yaxis.scaleanchor == "x"


def synthetic_verdict(tau):
    """A 3x4 verdict with every case: masses below the floor, at and past 1, unverified (NaN), kept,
    rejected and resampled, passed but swept into an island."""
    pooled = np.array([[1e-15, 2e-5, 1e-4, 0.5],
                       [np.nan, 0.003, 0.05, 1.0],
                       [0.2, 0.007, 1.5, 0.0004]])
    accepted = np.nan_to_num(pooled, nan=-1) >= tau
    rejected = ~accepted & ~np.isnan(pooled)
    resample = rejected.copy()
    resample[2, 0] = True                                   # passed, swept into the island of (1, 1)
    islands = np.zeros(pooled.shape, np.int64)
    islands[resample] = np.arange(1, resample.sum() + 1)
    islands[2, 0] = islands[1, 1] if resample[1, 1] else 7
    return render.Verdict(pooled, accepted, rejected, resample, islands, tau)


def test_heatmap_clips_to_the_floor_and_names_unverified_and_swept_cells():
    v = synthetic_verdict(0.006)
    proposal = (np.arange(12).reshape(3, 4) * 7 + 3).tolist()
    heat = heat_of(plots.heatmap(SimpleNamespace(method="mulo", proposal=proposal), v))
    z, custom = np.asarray(heat.z, dtype=float), np.asarray(heat.customdata, dtype=object)
    for (i, j), p in np.ndenumerate(v.pooled):
        if np.isnan(p):
            assert np.isnan(z[i, j]) and custom[i, j][2] == "not verified"
        else:
            assert z[i, j] == pytest.approx(clipped_log(p), abs=1e-12)
            assert custom[i, j][1] == round(p, 5)
            assert custom[i, j][2] == ("passed τ" if p >= 0.006 else "below τ")
        assert custom[i, j][0] == proposal[i][j]
    assert z[0, 0] == z[0, 1] == plots.LOG_FLOOR and z[1, 3] == z[2, 2] == 0.0
    assert custom[2, 0][3] == f"swept into island {v.islands[2, 0]}"
    assert custom[1, 1][3] == f"resampled, island {v.islands[1, 1]}"
    assert custom[0, 3][3] == "kept"
    # no proposal grid: the hover says -1
    heat = heat_of(plots.heatmap(SimpleNamespace(method="mulo", proposal=None), v))
    assert {c[0] for row in heat.customdata for c in row} == {-1}


def stops(scale):
    return [(float(p), c) for p, c in scale]


@pytest.mark.parametrize("tau", [0.009, 0.05, 1e-3, 0.3])
def test_the_colour_scale_turns_from_red_to_green_at_tau_s_place_on_the_axis(tau):
    fig = plots.heatmap(SimpleNamespace(method="mulo", proposal=None), synthetic_verdict(tau))
    heat = heat_of(fig)
    at = (math.log10(tau) - plots.LOG_FLOOR) / -plots.LOG_FLOOR
    sc = stops(heat.colorscale)
    assert sc[0][0] == 0.0 and sc[-1][0] == 1.0 and [p for p, _ in sc] == sorted(p for p, _ in sc)
    below = [c for p, c in sc if p < at - 1e-9]
    above = [c for p, c in sc if p >= at - 1e-9]
    assert below and above and all(map(reddish, below)) and not any(map(reddish, above))
    assert max(p for p, c in sc if p < at - 1e-9) == pytest.approx(at, abs=1e-5)
    assert min(p for p, c in sc if p >= at - 1e-9) == pytest.approx(at, abs=1e-12)
    assert sc[0][1] == theme.REJECTED and sc[-1][1] == theme.ACCEPTED
    # the τ contour: at log10 τ on the same z, named by τ
    contour = [d for d in fig.data if d.type == "contour"]
    assert len(contour) == 1
    c = contour[0]
    assert c.contours.start == c.contours.end == pytest.approx(math.log10(tau), abs=1e-12)
    assert c.contours.coloring == "none" and c.showscale is False and c.showlegend is True
    assert c.name == f"τ = {tau:g}"
    assert np.array_equal(np.asarray(c.z, dtype=float), np.asarray(heat.z, dtype=float), equal_nan=True)


@pytest.mark.parametrize("tau", [0.0, 1e-5, 1e-4])
def test_at_or_below_the_floor_every_colour_is_green_and_only_tau_0_has_no_contour(tau):
    fig = plots.heatmap(SimpleNamespace(method="mulo", proposal=None), synthetic_verdict(tau))
    sc = stops(heat_of(fig).colorscale)
    assert sc[0][0] == 0.0 and sc[-1][0] == 1.0 and not any(reddish(c) for _, c in sc)
    assert sc[-1][1] == theme.ACCEPTED
    assert bool([d for d in fig.data if d.type == "contour"]) == (tau > 0)


@pytest.mark.parametrize("tau", [1.0, 2.0])
def test_at_or_above_one_every_colour_is_red(tau):
    sc = stops(heat_of(plots.heatmap(SimpleNamespace(method="mulo", proposal=None), synthetic_verdict(tau))).colorscale)
    assert sc[0][0] == 0.0 and sc[-1][0] == 1.0 and all(reddish(c) for _, c in sc)
    assert sc[0][1] == theme.REJECTED


DECADES = {-4: "1e-4", -3: "1e-3", -2: "0.01", -1: "0.1", 0: "1"}


@pytest.mark.parametrize("tau", [0.0, 1e-5, 1e-4, 0.0009, 0.0015, 0.007, 0.05, 0.5, 1.0])
def test_the_colour_bar_ticks_every_decade_and_tau_leaving_out_decades_near_tau(tau):
    bar = heat_of(plots.heatmap(SimpleNamespace(method="mulo", proposal=None), synthetic_verdict(tau))).colorbar
    ticks = dict(zip(bar.tickvals, bar.ticktext))
    assert len(ticks) == len(bar.tickvals) == len(bar.ticktext)
    at = math.log10(tau) if tau > 0 else plots.LOG_FLOOR
    at = min(0.0, max(plots.LOG_FLOOR, at))
    taus = [v for v, s in ticks.items() if s.startswith("τ=")]
    assert len(taus) == 1 and taus[0] == pytest.approx(at, abs=1e-12) and ticks[taus[0]] == f"τ={tau:g}"
    for v, s in DECADES.items():
        assert float(s) == pytest.approx(10.0 ** v)
        assert (ticks.get(v) == s) == (abs(v - at) > 0.3), (v, at)
    assert len(ticks) == 1 + sum(abs(v - at) > 0.3 for v in DECADES)
    assert bar.title.text == "pooled mass"


def test_a_method_without_verification_gets_words_not_a_map(tiny_pair):
    trace = engine.run(RunConfig(method="ar", seed=3), tiny_pair)
    fig = plots.heatmap(trace, render.verdict(trace), render.tests(trace))
    assert not fig.data
    assert fig.layout.annotations[0].text.startswith("ar drafts and verifies nothing")


def test_message_is_an_empty_figure_with_the_text():
    fig = plots.message("nothing here", height=123)
    assert not fig.data and [a.text for a in fig.layout.annotations] == ["nothing here"]
    a = fig.layout.annotations[0]
    assert (a.x, a.y, a.xref, a.yref, a.showarrow) == (0.5, 0.5, "paper", "paper", False)
    assert fig.layout.height == 123 and fig.layout.xaxis.visible is False and fig.layout.yaxis.visible is False
    assert plots.message("x").layout.height == 320


# ------------------------------------------------------------------------ test heatmap (sd, lantern, sjd)

@pytest.fixture(scope="module", params=["sd", "lantern"])
def tested_trace(request, tiny_pair):
    return engine.run(RunConfig(method=request.param, seed=3), tiny_pair)


def last_tests(trace):
    out = {}
    for s in trace.steps:
        if s["phase"] == "verify" and "prob" in s and not s.get("level", 0):
            for c, p, ok in zip(s["judged"], s["prob"], s["accepted"]):
                out[tuple(c)] = (p, ok)
    return out


def test_the_test_heatmap_shows_each_tested_position_s_probability_and_verdict(tested_trace):
    t = render.tests(tested_trace)
    fig = plots.heatmap(tested_trace, None, t)
    heat = heat_of(fig)
    z, custom = np.asarray(heat.z, dtype=float), np.asarray(heat.customdata, dtype=object)
    H, W = tested_trace.grid["target"]
    assert z.shape == (H, W) and (heat.zmin, heat.zmax) == (0.0, 1.0)
    tested = last_tests(tested_trace)
    assert 0 < len(tested) < H * W
    for i in range(H):
        for j in range(W):
            if (i, j) not in tested:
                assert np.isnan(z[i, j]) and custom[i, j][1] == "never tested (drawn from p)"
                continue
            p, ok = tested[(i, j)]
            assert z[i, j] == p and custom[i, j][0] == round(p, 4)
            assert custom[i, j][1] == ("passed: draft kept" if ok else "failed: resampled")
    tpl = heat.hovertemplate
    order = [tpl.index(s) for s in ("cell (%{y}, %{x})", "probability of acceptance %{customdata[0]}", "%{customdata[1]}")]
    assert order == sorted(order)
    # a cross on every failed test, at (x=j, y=i)
    marks = [d for d in fig.data if d.type == "scatter"]
    assert len(marks) == 1
    failed = {c for c, (_, ok) in tested.items() if not ok}
    assert sorted(zip(marks[0].y, marks[0].x)) == sorted(failed)
    passed = sum(ok for _, ok in tested.values())
    assert (f"Probability of acceptance, {render.RULES[tested_trace.method]}<br><sup>{passed} of {len(tested)} tested "
            f"drafts passed; {len(failed)} resampled; {H * W - len(tested)} never tested</sup>") == fig.layout.title.text
    # every cell in view, row 0 on top
    assert tuple(fig.layout.yaxis.range) == (H - 0.5, -0.5) and tuple(fig.layout.xaxis.range) == (-0.5, W - 0.5)


def test_the_test_heatmap_is_not_transposed():
    """Synthetic 2x3 tests (not square): z and the crosses at (row, column), never tested cells NaN."""
    prob = np.array([[0.9, np.nan, 0.2], [0.4, 1.0, np.nan]])
    passed = np.array([[True, False, False], [False, True, False]])
    resampled = np.array([[False, False, True], [True, False, False]])
    fig = plots.heatmap(SimpleNamespace(method="sd"), None, render.Tests(prob, passed, resampled, "rule"))
    heat = heat_of(fig)
    assert np.array_equal(np.asarray(heat.z, dtype=float), prob, equal_nan=True)
    words = [[c[1] for c in row] for row in heat.customdata]
    assert words == [["passed: draft kept", "never tested (drawn from p)", "failed: resampled"],
                     ["failed: resampled", "passed: draft kept", "never tested (drawn from p)"]]
    marks = [d for d in fig.data if d.type == "scatter"][0]
    assert list(marks.x) == [2, 0] and list(marks.y) == [0, 1]
    assert "2 of 4 tested drafts passed; 2 resampled; 2 never tested" in fig.layout.title.text
    assert tuple(fig.layout.yaxis.range) == (1.5, -0.5) and tuple(fig.layout.xaxis.range) == (-0.5, 2.5)


def test_the_test_colour_scale_is_red_below_one_half_and_green_above():
    fig = plots.heatmap(SimpleNamespace(method="sd"), None,
                        render.Tests(np.array([[0.1, 0.9]]), np.array([[False, True]]), np.array([[True, False]]), "r"))
    sc = stops(heat_of(fig).colorscale)
    assert sc[0] == (0.0, theme.REJECTED) and sc[-1] == (1.0, theme.ACCEPTED)
    assert [p for p, _ in sc] == sorted(p for p, _ in sc)
    for p, c in sc:
        assert reddish(c) == (p <= 0.5), (p, c)
    assert max(p for p, c in sc if reddish(c)) == pytest.approx(0.5, abs=1e-3)
    assert min(p for p, c in sc if not reddish(c)) == pytest.approx(0.5, abs=1e-3)
