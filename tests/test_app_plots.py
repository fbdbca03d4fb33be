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
    return engine.run(RunConfig(method="mulo", prompt=PROMPT, seed=2).with_params(**{"k": 4, "tau": 0.009, "radius": 0, **params}), pair)


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
def tested_trace(request, tiny_pair, tokenizer):
    """sd on the tiny pair; lantern (a tree method) on the tiny target with a random EAGLE head."""
    if request.param == "lantern":
        from test_trees import _pair
        return engine.run(RunConfig(method="lantern", seed=3), _pair(tokenizer, (16, 16)))
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
            assert z[i, j] == p and custom[i, j][0] == pytest.approx(p, abs=5.1e-5)   # 4 decimals
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
    assert fig.layout.title.text.startswith(
        f"Probability of acceptance<br><sup>{render.RULES[tested_trace.method]}</sup><br><sup>{passed} of {len(tested)} "
        f"tested drafts passed; {len(failed)} resampled; {H * W - len(tested)} never tested</sup>")
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
    assert marks.mode == "markers"                                     # crosses, not a line through them
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


# ---------------------------------------------------------------------------------------------- timeline

def runs_of_phase(steps):
    """(phase, start_ms, length_ms, steps, nfe) per run of consecutive steps of one phase, the clock
    summing the wall_ms of every step before."""
    out, clock = [], 0.0
    for s in steps:
        if out and out[-1][0] == s["phase"]:
            out[-1][2] += s["wall_ms"]
            out[-1][3] += 1
            out[-1][4] += s["nfe"]
        else:
            out.append([s["phase"], clock, s["wall_ms"], 1, s["nfe"]])
        clock += s["wall_ms"]
    return [tuple(r) for r in out]


def bars_of(fig):
    """{(lane, phase, start, length, steps, nfe)} of a timeline, each bar checked to be drawn in its phase's colour."""
    out = []
    for d in fig.data:
        assert d.type == "bar" and d.orientation == "h" and d.marker.color == theme.PHASES[d.name]
        assert f"{d.name}: %{{customdata[0]}} step(s), %{{customdata[1]}} NFE" in d.hovertemplate
        assert len(d.x) == len(d.base) == len(d.y) == len(d.customdata)
        for lane, start, length, (n, nfe) in zip(d.y, d.base, d.x, d.customdata):
            out.append((lane, d.name, float(start), float(length), int(n), int(nfe)))
    return out


def expected_bars(lane, segments):
    return [(lane, ph, start, length, n, nfe) for ph, start, length, n, nfe in segments if ph != "gap"]


def same_bars(got, want):
    key = lambda b: (b[0], b[1], round(b[2], 6))  # noqa: E731
    got, want = sorted(got, key=key), sorted(want, key=key)
    assert [(b[0], b[1], b[4], b[5]) for b in got] == [(b[0], b[1], b[4], b[5]) for b in want]
    for g, w in zip(got, want):
        assert g[2] == pytest.approx(w[2], rel=1e-9, abs=1e-9) and g[3] == pytest.approx(w[3], rel=1e-9, abs=1e-9)


def test_phase_colours_differ_from_each_other():
    assert set(theme.PHASES) == set(PHASES)
    assert len(set(theme.PHASES.values())) == len(PHASES)


@pytest.fixture(scope="module")
def baseline(tiny_pair):
    return engine.run(RunConfig(method="ar", prompt=PROMPT, seed=2), tiny_pair)


def test_timeline_draws_each_run_of_one_phase_at_its_wall_clock_time_on_its_lane(mulo_trace, baseline):
    fig = plots.timeline(mulo_trace, baseline)
    want = expected_bars("mulo", runs_of_phase(mulo_trace.steps)) + expected_bars("ar baseline", runs_of_phase(baseline.steps))
    same_bars(bars_of(fig), want)
    assert len({d.name for d in fig.data}) == len(fig.data)            # one Plotly trace per phase
    assert fig.layout.barmode == "overlay"
    assert list(fig.layout.yaxis.categoryarray) == ["mulo", "ar baseline"] and fig.layout.yaxis.autorange == "reversed"
    # the run's lane covers its whole wall clock
    lane = sorted((b for b in bars_of(fig) if b[0] == "mulo"), key=lambda b: b[2])
    assert lane[0][2] == 0.0 and sum(b[3] for b in lane) == pytest.approx(sum(s["wall_ms"] for s in mulo_trace.steps))
    for a, b in zip(lane, lane[1:]):
        assert a[2] + a[3] == pytest.approx(b[2]) and a[1] != b[1]
    assert "cascade" not in fig.layout.title.text


def test_timeline_without_a_baseline_has_one_lane(mulo_trace):
    fig = plots.timeline(mulo_trace)
    same_bars(bars_of(fig), expected_bars("mulo", runs_of_phase(mulo_trace.steps)))
    assert list(fig.layout.yaxis.categoryarray) == ["mulo"]


def test_past_most_bars_a_lane_is_drawn_in_slices_keeping_its_steps_nfe_and_time(mulo_trace, baseline):
    most = 5
    assert len(runs_of_phase(mulo_trace.steps)) > most >= len(runs_of_phase(baseline.steps))
    fig = plots.timeline(mulo_trace, baseline, most=most)
    got = bars_of(fig)
    same_bars([b for b in got if b[0] == "ar baseline"], expected_bars("ar baseline", runs_of_phase(baseline.steps)))
    same_bars([b for b in got if b[0] == "mulo"], expected_bars("mulo", sliced(mulo_trace.steps, most)))
    lane = [b for b in got if b[0] == "mulo"]
    assert len(lane) <= most
    assert sum(b[3] for b in lane) == pytest.approx(sum(s["wall_ms"] for s in mulo_trace.steps))
    assert sum(b[4] for b in lane) == len(mulo_trace.steps) and sum(b[5] for b in lane) == sum(s["nfe"] for s in mulo_trace.steps)


def sliced(steps, most):
    """The documented rule by brute force: `most` equal slices of the wall clock, each in the phase that
    spent most time inside it, each step counted in the slice of its middle, runs of one phase merged."""
    total = sum(s["wall_ms"] for s in steps)
    width = total / most
    spans, clock = [], 0.0
    for s in steps:
        spans.append((clock, clock + s["wall_ms"], s))
        clock += s["wall_ms"]
    order = list(PHASES) + ["gap"]
    out = []
    for k in range(most):
        a, b = k * width, (k + 1) * width
        spent = {p: 0.0 for p in order}
        n = nfe = 0
        for s0, s1, s in spans:
            spent[s["phase"]] += max(0.0, min(b, s1) - max(a, s0))
            mid = (s0 + s1) / 2
            if a <= mid < b or (k == most - 1 and mid >= b):
                n, nfe = n + 1, nfe + s["nfe"]
        phase = max(order, key=lambda p: (spent[p], -order.index(p)))
        if out and out[-1][0] == phase:
            out[-1][2] += b - a
            out[-1][3] += n
            out[-1][4] += nfe
        else:
            out.append([phase, a, b - a, n, nfe])
    return [tuple(r) for r in out]


def step(phase, ms, nfe=1):
    return dict(phase=phase, model="target", nfe=nfe, wall_ms=ms, cells=[])


def test_segments_merge_consecutive_steps_of_one_phase():
    steps = [step("draft", 1.5, 1), step("draft", 2.0, 2), step("verify", 4.0, 3), step("draft", 0.5, 4),
             step("resample", 1.0, 5), step("resample", 3.0, 6), step("resample", 0.25, 7)]
    assert plots._segments(steps) == [("draft", 0.0, 3.5, 2, 3), ("verify", 3.5, 4.0, 1, 3), ("draft", 7.5, 0.5, 1, 4),
                                      ("resample", 8.0, 4.25, 3, 18)]
    assert plots._segments([]) == []


@pytest.mark.parametrize("most", [1, 3, 4, 7, 40])
def test_slices_follow_the_phase_that_took_most_of_each_slice(most):
    rng = np.random.default_rng(most)
    phases = list(PHASES) + ["gap"]
    steps = [step(phases[int(p)], float(ms), int(n)) for p, ms, n in
             zip(rng.integers(0, len(phases), 60), rng.exponential(3.0, 60) + 0.01, rng.integers(0, 5, 60))]
    got = plots._slices(steps, most)
    want = sliced(steps, most)
    assert [(g[0], g[3], g[4]) for g in got] == [(w[0], w[3], w[4]) for w in want]
    for g, w in zip(got, want):
        assert g[1] == pytest.approx(w[1], abs=1e-9) and g[2] == pytest.approx(w[2], abs=1e-9)
    assert sum(g[2] for g in got) == pytest.approx(sum(s["wall_ms"] for s in steps))
    assert sum(g[3] for g in got) == len(steps) and sum(g[4] for g in got) == sum(s["nfe"] for s in steps)
    assert all(a[0] != b[0] for a, b in zip(got, got[1:])) and len(got) <= most


SMALL_RUNS = {
    "under-1-ms": ([("draft", 0.0, 0), ("verify", 0.0, 1), ("upsample", 0.0, 1), ("verify", 0.0, 2), ("upsample", 0.533, 2)], 4),
    "long-first-step": ([("upsample", 0.0, 1), ("draft", 1.101, 0), ("verify", 1.511, 1), ("upsample", 0.0, 1),
                         ("verify", 0.0, 2)], 3),
    "empty-last-slice": ([("upsample", 0.147, 2), ("verify", 0.733, 2), ("upsample", 0.997, 0)], 4),
}


@pytest.mark.parametrize("name", SMALL_RUNS)
def test_slices_of_short_runs_with_instant_steps(name):
    """Runs under a millisecond, instant steps at the end, a first step spanning slices, a last slice
    holding no step's middle: time, steps and NFE all kept, each slice in its phase."""
    steps = [step(ph, ms, nfe) for ph, ms, nfe in SMALL_RUNS[name][0]]
    most = SMALL_RUNS[name][1]
    got, want = plots._slices(steps, most), sliced(steps, most)
    assert [(g[0], g[3], g[4]) for g in got] == [(w[0], w[3], w[4]) for w in want]
    for g, w in zip(got, want):
        assert g[1] == pytest.approx(w[1], abs=1e-12) and g[2] == pytest.approx(w[2], abs=1e-12)
    assert sum(g[3] for g in got) == len(steps) and sum(g[4] for g in got) == sum(s["nfe"] for s in steps)


def test_slices_of_a_run_that_took_no_time_are_its_first_segments():
    steps = [step("draft", 0.0), step("verify", 0.0), step("verify", 0.0, 2), step("resample", 0.0), step("draft", 0.0)]
    assert plots._slices(steps, 2) == [("draft", 0.0, 0.0, 1, 1), ("verify", 0.0, 0.0, 2, 3)]
    assert plots._slices([], 3) == []


def test_a_slice_goes_to_the_phase_with_most_time_not_most_steps():
    """Two slices of 10 ms: the first holds nine 0.1 ms draft steps and 9.1 ms of one verify step."""
    steps = [step("draft", 0.1)] * 9 + [step("verify", 9.1, 5), step("resample", 10.0, 2)]
    assert plots._slices(steps, 2) == [("verify", 0.0, 10.0, 10, 14), ("resample", 10.0, 10.0, 1, 2)]


@pytest.fixture(scope="module")
def cascade(tiny_pair):
    t = mulo(tiny_pair, tau=0.007, draft_method="mulo/scale=2/tau=0.01")
    assert t.grid["levels"] == [[16, 16], [8, 8], [4, 4]] and t.levels
    return t


def test_a_cascade_has_a_lane_per_level_on_the_run_s_clock(cascade):
    lanes = plots._level_lanes(cascade)
    names = [f"mulo level {n} ({h}x{w})" for n, (h, w) in enumerate(cascade.grid["levels"])]
    assert [name for name, _ in lanes] == names
    for n, (_, steps) in enumerate(lanes):
        assert len(steps) == len(cascade.steps)
        for mine, s in zip(steps, cascade.steps):
            if s.get("level", 0) == n:
                assert mine is s
            else:
                assert mine["phase"] == "gap" and mine["wall_ms"] == s["wall_ms"] and mine["nfe"] == 0
    fig = plots.timeline(cascade)
    want = [b for n, name in enumerate(names) for b in expected_bars(name, runs_of_phase(lanes[n][1]))]
    same_bars(bars_of(fig), want)
    assert {b[0] for b in bars_of(fig)} == set(names)
    assert list(fig.layout.yaxis.categoryarray) == names
    assert "cascade" in fig.layout.title.text
    # every step's time is drawn once, on its own level's lane
    assert sum(b[3] for b in bars_of(fig)) == pytest.approx(sum(s["wall_ms"] for s in cascade.steps))


def test_a_drafter_with_a_method_of_its_own_has_two_lanes_and_no_cascade(tiny_pair):
    t = mulo(tiny_pair, tau=0.007, draft_method="pjd/pjd_c=1")
    fig = plots.timeline(t)
    assert list(fig.layout.yaxis.categoryarray) == ["mulo level 0 (16x16)", "mulo level 1 (8x8)"]
    assert "cascade" not in fig.layout.title.text
    assert {b[0] for b in bars_of(fig)} == {"mulo level 0 (16x16)", "mulo level 1 (8x8)"}


# ------------------------------------------------------------------------------ comparison bars, sweep

ROWS = [dict(method="ar", target_nfe=256.0, drafter_nfe=0.0, wall_ms=900.0, kept_fraction=None, quality=0.61,
             sharpness=1.0, loglik_gap=0.0),
        dict(method="mulo", target_nfe=12.0, drafter_nfe=64.0, wall_ms=210.5, kept_fraction=0.93, quality=0.58,
             sharpness=0.38, loglik_gap=-3.37),
        dict(method="zipar", target_nfe=40.0, drafter_nfe=3.0, wall_ms=333.0, kept_fraction=1.0, quality=None,
             sharpness=1.12, loglik_gap=0.04)]


def panel_title(fig, bar):
    """The subplot title over a bar trace's panel: the annotation centred on its x domain, at the top of its y domain."""
    xd = fig.layout[bar.xaxis.replace("x", "xaxis")].domain
    yd = fig.layout[bar.yaxis.replace("y", "yaxis")].domain
    hits = [a.text for a in fig.layout.annotations
            if a.x == pytest.approx((xd[0] + xd[1]) / 2) and a.y == pytest.approx(yd[1])]
    assert len(hits) == 1
    return hits[0]


def test_compare_bars_put_each_row_s_numbers_under_their_panel_s_title():
    fig = plots.compare_bars(ROWS, "FD")
    want = {"passes (target + drafter)": [256.0, 76.0, 43.0], "wall clock (ms)": [900.0, 210.5, 333.0],
            "kept (not resampled)": [0, 0.93, 1.0], "FD": [0.61, 0.58, 0],
            "sharpness ÷ ar": [1.0, 0.38, 1.12], "log-lik gap (nats/token)": [0.0, -3.37, 0.04]}
    got = {}
    for bar in fig.data:
        assert bar.type == "bar" and list(bar.x) == ["ar", "mulo", "zipar"]
        assert "%{x}" in bar.hovertemplate and "%{y}" in bar.hovertemplate       # the hover reads the value
        got[panel_title(fig, bar)] = [float(y) for y in bar.y]
    assert got == want
    assert len({(b.xaxis, b.yaxis) for b in fig.data}) == 6           # six panels, one each
    assert sorted(k for k in fig.layout.to_plotly_json() if k.startswith("xaxis")) == \
        ["xaxis", "xaxis2", "xaxis3", "xaxis4", "xaxis5", "xaxis6"]


AR_POINT = dict(method="ar", speedup=1.0, quality=0.5, label="ar", sharpness=1.0, loglik_gap=0.0)
SWEEP = [dict(method="mulo", speedup=3.0, quality=0.5, label="τ=0.01", sharpness=0.7, loglik_gap=-0.8),
         dict(method="ar", speedup=1.0, quality=0.62, label="ar", sharpness=1.0, loglik_gap=0.0),
         dict(method="mulo", speedup=1.5, quality=0.6, label="τ=0", sharpness=0.4, loglik_gap=-3.4),
         dict(method="zipar", speedup=2.0, quality=0.55, label="w=4", sharpness=1.1, loglik_gap=0.05),
         dict(method="mulo", speedup=6.0, quality=0.3, label="τ=0.1", sharpness=0.9, loglik_gap=-0.2)]


def sweep_panel(fig, yaxis: str, mode: str) -> list:
    """The traces of one sweep panel ('y' top, 'y2' bottom) drawn in `mode`."""
    return [d for d in fig.data if d.mode == mode and d.yaxis == yaxis]


def point(d) -> dict:
    """The sweep point a marker trace draws, found by its legend name (what the user reads)."""
    return next(p for p in SWEEP if d.name == (p["label"] if p["method"] == "ar" else f"{p['method']} {p['label']}"))


def test_sweep_puts_every_run_at_its_speedup_and_quality_with_its_label():
    points = SWEEP
    fig = plots.sweep_figure(points, "prompt adherence")
    lines = sweep_panel(fig, "y", "lines")
    marks = sweep_panel(fig, "y", "markers")
    assert [d.legendgroup for d in lines] == ["mulo", "ar", "zipar"]         # methods in order of first appearance
    for line in lines:
        pts = sorted((p for p in points if p["method"] == line.legendgroup), key=lambda p: p["speedup"])
        assert list(line.x) == [p["speedup"] for p in pts] and list(line.y) == [p["quality"] for p in pts]
        assert line.showlegend is False
        mine = [m for m in marks if m.legendgroup == line.legendgroup]
        assert [(m.x[0], m.y[0]) for m in mine] == [(p["speedup"], p["quality"]) for p in pts]
        assert len({m.marker.symbol for m in mine}) == len(mine)            # each point its own marker
        assert all(m.marker.color == line.line.color for m in mine)         # one colour per method
        for m in mine:
            assert len(m.x) == len(m.y) == 1 and m.name in m.hovertemplate
    names = {(m.x[0], m.y[0]): m.name for m in marks}
    assert names == {(p["speedup"], p["quality"]): p["label"] if p["method"] == "ar" else f"{p['method']} {p['label']}"
                     for p in points}
    # ar, mulo and zipar (the methods the page sweeps) each have a colour of their own, never Plotly's cycle
    assert all(line.line.color for line in lines) and len({line.line.color for line in lines}) == 3
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.title.text == "prompt adherence"
    lo, hi = fig.layout.yaxis.range
    assert lo < 0.3 and hi > 0.62


def test_the_sweep_s_second_panel_puts_every_run_at_its_speedup_and_log_lik_gap():
    """The detail axis: same x as the top panel, y = each point's gap (not its adherence or sharpness),
    ar at 0 on a dashed line; the hover names each point's sharpness ÷ ar; one legend entry per run."""
    fig = plots.sweep_figure(SWEEP, "prompt adherence")
    marks, lines = sweep_panel(fig, "y2", "markers"), sweep_panel(fig, "y2", "lines")
    assert len(marks) == len(SWEEP) and len(sweep_panel(fig, "y", "markers")) == len(SWEEP)
    for m in marks:
        p = point(m)
        assert (m.x[0], m.y[0]) == (p["speedup"], p["loglik_gap"]) and m.xaxis == "x2"
        assert m.showlegend is False and f"sharpness ÷ ar {p['sharpness']:.2f}" in m.hovertemplate
        assert "log-lik gap (nats/token) %{y:.3f}" in m.hovertemplate
    assert point(next(m for m in marks if m.name == "ar"))["loglik_gap"] == 0.0
    for line in lines:
        pts = sorted((p for p in SWEEP if p["method"] == line.legendgroup), key=lambda p: p["speedup"])
        assert list(line.y) == [p["loglik_gap"] for p in pts]
    top = {m.name: m for m in sweep_panel(fig, "y", "markers")}
    assert all(f"sharpness ÷ ar {point(m)['sharpness']:.2f}" in m.hovertemplate for m in top.values())
    assert fig.layout.yaxis2.title.text.startswith("log-lik gap") and fig.layout.xaxis2.type == "log"
    assert fig.layout.xaxis2.matches == "x" or fig.layout.xaxis.matches == "x2"     # one speed axis
    assert [(s.y0, s.y1, s.line.dash) for s in fig.layout.shapes] == [(0.0, 0.0, "dash")]
    assert fig.layout.shapes[0].yref == "y2"


def test_sweep_of_one_quality_still_has_a_range_around_it_and_none_when_empty():
    fig = plots.sweep_figure([AR_POINT], "q")
    lo, hi = fig.layout.yaxis.range
    assert lo < 0.5 < hi
    empty = plots.sweep_figure([], "q")
    assert not empty.data and empty.layout.yaxis.range is None


def test_more_points_than_symbols_reuse_the_symbols_in_order():
    points = [dict(AR_POINT, method="mulo", speedup=float(n + 1), label=str(n)) for n in range(10)]
    marks = sweep_panel(plots.sweep_figure(points, "q"), "y", "markers")
    assert [m.marker.symbol for m in marks] == [plots.SYMBOLS[n % len(plots.SYMBOLS)] for n in range(10)]
    assert len(set(plots.SYMBOLS)) == len(plots.SYMBOLS)


def test_a_lane_of_exactly_most_runs_is_drawn_run_by_run(mulo_trace):
    runs = runs_of_phase(mulo_trace.steps)
    fig = plots.timeline(mulo_trace, most=len(runs))
    same_bars(bars_of(fig), expected_bars("mulo", runs))
    assert len(bars_of(plots.timeline(mulo_trace, most=len(runs) - 1))) < len(runs)


def test_every_figure_has_an_explicit_height(mulo_trace, baseline):
    """The module's contract: Gradio renders autosized Plotly figures unreliably."""
    v = render.verdict(mulo_trace)
    tests = render.Tests(np.array([[0.1, 0.9]]), np.array([[False, True]]), np.array([[True, False]]), "r")
    figs = [plots.message("x"), plots.heatmap(mulo_trace, v), plots.heatmap(SimpleNamespace(method="sd"), None, tests),
            plots.heatmap(SimpleNamespace(method="ar"), None, None), plots.timeline(mulo_trace, baseline),
            plots.compare_bars(ROWS, "FD"), plots.sweep_figure([AR_POINT], "q"),
            plots.sweep_figure([], "q")]
    for fig in figs:
        assert isinstance(fig.layout.height, int) and fig.layout.height > 0


def test_the_heatmap_title_says_when_the_islands_merged_into_one_covering_most_of_the_grid(tiny_pair):
    """The words come from the island map: the largest island's share, said only past half the grid."""
    grid = np.zeros((10, 10), int)
    grid[:6] = 1                                  # one island of 60 cells
    grid[9, 9] = 2
    assert plots.merged_islands(grid) == "the islands merged: the largest covers 60% of the grid"
    grid[:6] = 0
    grid[0, :5], grid[5, :5] = 3, 4                # small islands only: nothing said (the control)
    assert plots.merged_islands(grid) == "" and plots.merged_islands(np.zeros((4, 4), int)) == ""
    said = []
    for radius, tau in ((0, 0.005), (4, 0.5)):     # real runs: said exactly when the largest island passes half
        trace = mulo(tiny_pair, radius=radius, tau=tau)
        v = render.verdict(trace)
        title = plots.heatmap(trace, v, None).layout.title.text
        sizes = np.unique(v.islands[v.islands > 0], return_counts=True)[1]
        said.append("merged" in title)
        assert said[-1] == (len(sizes) > 0 and sizes.max() > v.islands.size / 2), (radius, title)
    assert said == [False, True]                   # one run of each kind
