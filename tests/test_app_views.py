"""The views carry the trace's numbers to the right cells: heatmap, cell card, the FD they report, and
the headline's quality against ar's image (checked against core.likelihood.against_ar of the two traces).

Traces come from the tiny random pair (fast, and sharp enough to reject); multi-band and raster runs
make band offsets and cells judged more than once matter. The expected value of every cell is
assembled here from the verify steps, cell by cell, without app.render's helpers.
"""
import dataclasses
import math
import re

import gradio as gr
import numpy as np
import pytest

from app import generation, inputs, level_rows, panels
from app import plots, render, theme
from core import engine, likelihood
from core.embedded import family
from core.config import RunConfig

PROMPT = "a large red circle center and a small blue square top left on a striped green background"


def mulo(pair, **params):
    return engine.run(RunConfig(method="mulo", prompt=PROMPT, seed=2).with_params(**{"k": 4, "tau": 0.007, "radius": 0, **params}), pair)


def last_judgement(trace, level: int = 0) -> dict[tuple[int, int], tuple[float, bool]]:
    """(i, j) -> (pooled, passed) of the last verify pass of `level` (0: the target; a cascade's deeper
    levels on their own grids) that judged the cell (null: not judged)."""
    W = trace.grid["levels"][level][1]
    out = {}
    for s in trace.steps:
        if s["phase"] != "verify" or s.get("level", 0) != level:
            continue
        r0 = s["band"][0]
        for n, (p, a) in enumerate(zip(sum(s["pooled"], []), sum(s["accepted"], []))):
            if p is not None:
                out[(r0 + n // W, n % W)] = (p, a)
    return out


@pytest.fixture(scope="module", params=[dict(draft_rows=2), dict(draft_rows=2, rejection="raster")],
                ids=["local-4-bands", "raster-4-bands"])
def trace(request, tiny_pair):
    t = mulo(tiny_pair, **request.param)
    assert len([s for s in t.steps if s["phase"] == "verify"]) >= 4
    return t


def test_heatmap_cells_hold_the_pooled_mass_of_the_pass_that_judged_them(trace):
    heat = [d for d in plots.heatmap(trace, render.verdict(trace)).data if d.type == "heatmap"][0]
    z, custom = np.asarray(heat.z, dtype=float), np.asarray(heat.customdata, dtype=object)
    judged = last_judgement(trace)
    H, W = trace.grid["target"]
    assert len(judged) == H * W
    for (i, j), (pooled, passed) in judged.items():
        assert z[i, j] == pytest.approx(min(0.0, max(plots.LOG_FLOOR, math.log10(max(pooled, 1e-12)))), abs=1e-9)
        assert custom[i, j][0] == trace.proposal[i][j]
        assert float(custom[i, j][1]) == pytest.approx(pooled, abs=1e-5)
        assert custom[i, j][2] == ("passed τ" if passed else "below τ")
    # the title counts the passes of the cells as last judged
    title = plots.heatmap(trace, render.verdict(trace)).layout.title.text
    assert f"{sum(a for _, a in judged.values())} of {H * W} passed τ" in title


def test_the_heatmap_is_not_the_transpose_or_a_shifted_band(trace):
    """Negative control: the same comparison against the transposed or row-shifted grid fails."""
    z = np.asarray([d for d in plots.heatmap(trace, render.verdict(trace)).data if d.type == "heatmap"][0].z, dtype=float)
    expected = np.zeros_like(z)
    for (i, j), (pooled, _) in last_judgement(trace).items():
        expected[i, j] = min(0.0, max(plots.LOG_FLOOR, math.log10(max(pooled, 1e-12))))
    assert np.abs(z - expected).max() < 1e-9
    assert np.abs(z - expected.T).max() > 1e-3 and np.abs(z - np.roll(expected, 1, axis=0)).max() > 1e-3


def card_numbers(text: str) -> dict:
    num = lambda pattern: re.search(pattern, text)  # noqa: E731
    out = dict(cell=tuple(map(int, num(r"\*\*Cell \((\d+), (\d+)\)\*\*").groups())),
               raster=int(num(r"raster index (\d+)").group(1)), final=int(num(r"final token: (\d+)").group(1)),
               proposal=int(num(r"proposal token: (\d+)").group(1)))
    low = num(r"low-res cell \((\d+), (\d+)\), token (\d+)")
    out["low"] = tuple(map(int, low.groups()))
    pooled = num(r"pooled mass ([0-9.]+) (≥|<) τ ([0-9.eE-]+): \*\*(passed τ|below τ)\*\*")
    out["pooled"], out["verdict"] = float(pooled.group(1)), pooled.group(4)
    island = num(r"island (\d+)")
    out["island"] = int(island.group(1)) if island else None
    return out


def test_clicking_a_cell_shows_that_cell_s_numbers(trace):
    H, W = trace.grid["target"]
    h_, w_ = trace.grid["draft"]
    judged = last_judgement(trace)
    px = render.SIZE / W
    checked = set()
    for i, j in [(0, 0), (H - 1, W - 1), (3, W - 2), *[c for c, (_, a) in judged.items() if not a][:3]]:
        evt = gr.SelectData(None, {"index": [int((j + 0.5) * px), int((i + 0.5) * px)], "value": None})
        card = card_numbers(panels.inspect_cell({"trace": trace}, evt)[0])
        assert card["cell"] == (i, j) and card["raster"] == i * W + j
        assert card["final"] == trace.tokens[i][j] and card["proposal"] == trace.proposal[i][j]
        a, b = i * h_ // H, j * w_ // W
        assert card["low"] == (a, b, trace.draft[a][b])
        pooled, passed = judged[(i, j)]
        assert card["pooled"] == pytest.approx(pooled, abs=5e-5)
        assert card["verdict"] == ("passed τ" if passed else "below τ")
        checked.add(passed)
    assert checked == {True, False}


def test_the_island_on_the_card_is_the_island_of_the_cell(tiny_pair):
    """Island ids on the card count on across bands: band b's island m is shown as the sum of the
    islands of the bands before it plus m."""
    t = mulo(tiny_pair, draft_rows=2)
    W = t.grid["target"][1]
    px = render.SIZE / W
    before, seen = 0, 0
    for s in (s for s in t.steps if s["phase"] == "verify"):
        ids = np.asarray(s["islands"])
        for a, b in zip(*np.nonzero(ids)):
            i, j = s["band"][0] + int(a), int(b)
            evt = gr.SelectData(None, {"index": [int((j + 0.5) * px), int((i + 0.5) * px)], "value": None})
            assert card_numbers(panels.inspect_cell({"trace": t}, evt)[0])["island"] == before + int(ids[a, b])
            seen += 1
            break
        before += int(ids.max(initial=0))
    assert seen >= 2


def test_frechet_distance_is_finite_zero_for_the_reference_itself_and_positive_for_other_scenes():
    """evaluate.quality's FD (the figure the bench reports) against its definition: the reference
    images of the scenes themselves are at distance 0 (up to rounding); renders of other scenes are not."""
    from core.embedded import data, evaluate
    from core.embedded.domain import render
    scenes, others = evaluate.heldout(6), data.scenes(data.HELDOUT_SEED + 777, 6)
    clf = family.load_classifier()
    same = evaluate.quality([render(s, 64) for s in scenes], scenes, clf)["frechet"]
    other = evaluate.quality([render(s, 64) for s in others], scenes, clf)["frechet"]
    assert math.isfinite(same) and math.isfinite(other)
    assert abs(same) < 1e-3 < other


def test_the_bench_table_never_prints_nan_for_fd():
    """FD and detail FD need 3 prompts or more (nan below): the table says '-' instead."""
    from core import bench
    row = dict(method="ar", target_nfe=1024.0, drafter_nfe=0.0, passes=1024.0, wall_ms=1.0, passes_speedup=1.0,
               wall_speedup=1.0, target_nfe_speedup=1.0, passed=None, kept=None, fed_per_pass=1.0,
               phase_ms={p: 0.0 for p in bench.PHASES}, adherence=1.0, frechet=float("nan"), fd_ar=float("nan"),
               sharpness=1.0, loglik_gap=0.0)
    assert "nan" not in bench.table(dict(prompts=1, seed=0, specs=["ar"], summary={"ar": row})).lower()


@pytest.fixture(scope="module")
def cascade(tiny_pair):
    """16x16 target, its 8x8 level verified with its own τ (0.01, the target's 0.007), drafted at 4x4."""
    t = mulo(tiny_pair, draft_method="mulo/scale=2/tau=0.01")
    assert t.grid["levels"] == [[16, 16], [8, 8], [4, 4]]
    return shipped_tokenizer(t)


def shipped_tokenizer(trace):
    """The tiny pair decodes with the shipped tokenizer, which views() loads by the embedded pair's name."""
    return dataclasses.replace(trace, model="embedded")


def test_a_cascade_level_row_shows_that_level_s_draft_proposal_verdicts_and_islands(cascade, tokenizer):
    v = dict(zip(panels.VIEWS, panels.views({"trace": cascade})))
    assert [row.visible for row in level_rows.rows({"trace": cascade})] == [True, False]
    assert "Level 1 (8×8, verified by the drafter)" in v["level1_title"] and "τ = 0.01" in v["level1_title"]
    assert "No published method has a cascade" in v["level1_title"]
    nested = cascade.levels[0]
    assert (v["level1_draft"] == render.grid_image(nested["draft"], tokenizer)).all()       # the 4x4 grid
    assert (v["level1_proposal"] == render.grid_image(nested["proposal"], tokenizer)).all()
    fig = v["level1_heatmap"]
    heat = [d for d in fig.data if d.type == "heatmap"][0]
    z, custom = np.asarray(heat.z, dtype=float), np.asarray(heat.customdata, dtype=object)
    assert z.shape == (8, 8)
    judged = last_judgement(cascade, 1)
    assert len(judged) == 64 and {a for _, a in judged.values()} == {True, False}
    px = render.SIZE // 8
    for (i, j), (pooled, passed) in judged.items():
        assert passed == (pooled >= 0.01)                       # the level's own τ, not the target's
        assert z[i, j] == pytest.approx(min(0.0, max(plots.LOG_FLOOR, math.log10(max(pooled, 1e-12)))), abs=1e-9)
        assert custom[i, j][0] == nested["proposal"][i][j]
        assert custom[i, j][2] == ("passed τ" if passed else "below τ")
        dot = tuple(v["level1_islands"][int((i + 0.5) * px), int((j + 0.5) * px)])
        assert (dot == theme.rgb(theme.REJECTED)) == (not passed), (i, j)
    assert f"τ = 0.01: {sum(a for _, a in judged.values())} of 64 passed τ" in fig.layout.title.text
    assert f"below τ ({sum(not a for _, a in judged.values())} cells)" in v["level1_key"]
    # the target level's own views keep the target's τ and grid
    assert "τ = 0.007" in v["heatmap"].layout.title.text
    assert np.asarray([d for d in v["heatmap"].data if d.type == "heatmap"][0].z).shape == (16, 16)


def test_the_level_row_is_not_the_target_level_or_the_transpose(cascade):
    """Negative control: the level-1 heatmap differs from its transpose and from the target's grid."""
    z = np.asarray([d for d in panels.views({"trace": cascade})[panels.VIEWS.index("level1_heatmap")].data
                    if d.type == "heatmap"][0].z, dtype=float)
    expected = np.zeros_like(z)
    for (i, j), (pooled, _) in last_judgement(cascade, 1).items():
        expected[i, j] = min(0.0, max(plots.LOG_FLOOR, math.log10(max(pooled, 1e-12))))
    assert np.abs(z - expected).max() < 1e-9 and np.abs(z - expected.T).max() > 1e-3


@pytest.mark.parametrize("params", [dict(), dict(draft_method="pjd/pjd_c=1"), dict(draft_method="zipar/window=2")],
                         ids=["ar-drafter", "pjd-drafter", "zipar-drafter"])
def test_runs_without_a_cascade_hide_the_level_rows(tiny_pair, params):
    """A drafter that ran a method of its own (pjd) is drawn in the low-res draft panel: no level row."""
    state = {"trace": shipped_tokenizer(mulo(tiny_pair, **params))}
    assert [row.visible for row in level_rows.rows(state)] == [False, False]
    v = dict(zip(panels.VIEWS, panels.views(state)))
    for n in level_rows.CASCADE_ROWS:
        assert all(v[f"level{n}{name}"] in (None, "") for name in level_rows.LEVEL_VIEWS)


# ------------------------------------------------------------------------------ quality in the headline

def knobs(**overrides):
    return [{**inputs.DEFAULTS, **overrides}[k] for k in inputs.KNOBS]


@pytest.fixture(scope="module")
def generated():
    """The state a Generate of mulo at τ = 0 leaves (the up-sampled draft, far from ar's image), its
    ar baseline included."""
    return list(generation.generate(None, False, *knobs(tau=0.0)))[-1][0]


def quality_said(stats: str) -> dict:
    """The numbers the Run tab's headline block gives for quality against ar (the line and the table rows)."""
    num = lambda text: float(text.replace("−", "-"))  # noqa: E731
    line = next(p for p in stats.split("\n\n") if p.startswith("Quality against ar's image of this prompt and seed"))
    rows = {r.split(" | ")[0].strip("| "): r.strip("| ").split(" | ")[1:] for r in stats.splitlines() if r.startswith("| ")}
    return dict(sharpness=num(re.search(r"\*\*sharpness ÷ ar ([−\d.]+)\*\*", line).group(1)),
                gap=num(re.search(r"\*\*log-lik gap ([−\d.]+) nats/token\*\*", line).group(1)),
                rows=[(num(a), num(b)) for a, b in (rows["sharpness ÷ ar"], rows["target log-lik per token (nats)"])])


def assert_said(stats: str, want: dict):
    """The headline's figures are `want`'s at the printed digits: the line, and both columns of the table."""
    said = quality_said(stats)
    assert said["sharpness"] == pytest.approx(want["sharpness"], abs=0.0051)
    assert said["gap"] == pytest.approx(want["loglik_gap"], abs=0.0051)
    (s_run, s_ar), (ll_run, ll_ar) = said["rows"]
    assert s_run == pytest.approx(want["sharpness"], abs=0.0051) and s_ar == 1.0
    assert (ll_run, ll_ar) == (pytest.approx(want["loglik"], abs=5.1e-4), pytest.approx(want["ar_loglik"], abs=5.1e-4))


def test_the_headline_gives_the_image_s_sharpness_and_log_lik_gap_against_ar_s(generated):
    """Oracle: likelihood.against_ar of the run and its baseline, computed here (not the state read back)."""
    want = likelihood.against_ar(engine.load_pair("embedded"), generated["trace"], generated["baseline"])
    # a swapped ratio, a flipped sign or swapped columns would be seen at the printed digits
    assert abs(want["sharpness"] - 1 / want["sharpness"]) > 0.05 and want["loglik_gap"] < -0.05
    stats = dict(zip(panels.VIEWS, panels.views(generated)))["stats"]
    assert stats.index("fewer sequential passes") < stats.index("Quality against ar's image")
    assert_said(stats, want)
    assert "0 = as probable as the target's own sample" in stats and "1 = as sharp as ar's" in stats


def test_a_re_render_reads_the_quality_kept_in_the_state_and_runs_no_model(generated, monkeypatch):
    def no_model(*_, **__):
        raise AssertionError("views ran the target")
    shown = dict(zip(panels.VIEWS, panels.views(generated)))["stats"]
    monkeypatch.setattr(likelihood, "token_logprobs", no_model)
    monkeypatch.setattr(engine, "stream", no_model)
    assert dict(zip(panels.VIEWS, panels.views(generated, True)))["stats"] == shown


def test_ar_itself_and_a_replay_without_a_baseline_say_nothing_of_quality(generated):
    ar = list(generation.generate(None, False, *knobs(method="ar")))[-1][0]
    assert ar["quality"] is None
    for state in (ar, {"trace": generated["trace"], "baseline": None}):
        stats = dict(zip(panels.VIEWS, panels.views(state)))["stats"]
        assert "sharpness" not in stats and "log-lik" not in stats


def test_a_replayed_run_gets_its_quality_with_its_baseline(generated):
    """The add-baseline handler measures quality once the replayed trace has an ar run to be judged against."""
    new, status, *shown = list(generation.add_baseline(None, {"trace": generated["trace"], "baseline": None}))[-1]
    assert "ar baseline timed" in status
    want = likelihood.against_ar(engine.load_pair("embedded"), generated["trace"], new["baseline"])
    assert_said(dict(zip(panels.VIEWS, shown))["stats"], want)


def test_the_pinned_cell_is_framed_on_the_proposal_and_the_heatmap_at_its_own_cell(generated):
    """panels.pinned against the definition: the proposal differs from the unmarked one only on the two
    frames round (i, j) (white just outside the cell, black just inside), and the heatmap gains two rects
    centred on column j, row i. The controls: another cell frames other pixels; no cell, a cell off the
    grid or text leaves both views as they are; ar (nothing verified) is left alone."""
    trace = generated["trace"]
    H, W = trace.grid["target"]
    plain = render.grid_image(trace.proposal, engine.load_pair(trace.model).tokenizer, False)
    size = plain.shape[0]
    ch, cw = size // H, size // W
    for i, j in ((3, 7), (0, W - 1)):
        img, fig = panels.pinned(generated, f"{i}, {j}")
        changed = np.argwhere((img != plain).any(-1))
        y0, x0 = i * ch, j * cw
        # every changed pixel lies in the band of 2 px either side of the cell's edge
        ring = lambda y, x: (y0 - 2 <= y < y0 + ch + 2 and x0 - 2 <= x < x0 + cw + 2) and not (  # noqa: E731
            y0 + 2 <= y < y0 + ch - 2 and x0 + 2 <= x < x0 + cw - 2)
        assert len(changed) and all(ring(y, x) for y, x in changed)
        assert (img[y0, x0 + cw // 2] == 0).all() and (img[y0 + ch - 1, x0 + 1] == 0).all()   # black inside
        if i > 0:
            assert (img[y0 - 1, x0 + cw // 2] == 255).all()                                   # white outside
        shapes = [s for s in fig.layout.shapes if s.name == plots.PIN]
        assert len(shapes) == 2 and {(s.x0, s.x1, s.y0, s.y1) for s in shapes} == {(j - 0.5, j + 0.5, i - 0.5, i + 0.5)}
    other, _ = panels.pinned(generated, "4, 7")
    assert (other != img).any()
    for typed in ("", None, f"{H}, 0", "0, -1", "row three"):
        assert panels.pinned(generated, typed) == (gr.skip(), gr.skip())
    ar = dict(generated, trace=generated["baseline"])
    assert panels.pinned(ar, "3, 7") == (gr.skip(), gr.skip())


def test_the_grid_toggle_frames_the_pinned_cell_in_the_same_drawing(generated):
    """regrid draws every view once, the Cell box's cell framed: its proposal and heatmap are pinned's with
    the grid lines, and every other view is views' own. The controls: no cell or a cell off the grid
    gives the unframed views; another cell another proposal."""
    names = list(panels.VIEWS)
    plain = dict(zip(names, panels.views(generated, True)))
    framed = dict(zip(names, panels.regrid(generated, True, "3, 7")))
    img, fig = panels.pinned(generated, "3, 7", True)
    assert np.array_equal(framed["proposal"], img) and not np.array_equal(plain["proposal"], img)
    assert framed["heatmap"].to_json() == fig.to_json()
    assert [s for s in plain["heatmap"].layout.shapes if s.name == plots.PIN] == []
    assert np.array_equal(framed["final"], plain["final"]) and framed["stats"] == plain["stats"]
    for typed in ("", f"{generated['trace'].grid['target'][0]}, 0"):
        again = dict(zip(names, panels.regrid(generated, True, typed)))
        assert np.array_equal(again["proposal"], plain["proposal"])
    assert not np.array_equal(dict(zip(names, panels.regrid(generated, True, "4, 7")))["proposal"], img)


@pytest.mark.parametrize("typed, said", [("3, 7", (3, 7)), ("(3; 7)", (3, 7)), ("", None), (None, None),
                                         ("row three", "cell must be a row and a column, e.g. 3, 7; got 'row three'"),
                                         ("32, 0", "cell must have a row in [0, 31] and a column in [0, 31]; got '32, 0'")])
def test_the_cell_box_is_read_one_way_for_the_card_and_the_frame(typed, said):
    """typed_cell is the one reading of the Cell box: the card (inspect_typed) refuses with its reason, the
    frame (pinned) draws nothing for it."""
    assert panels.typed_cell(typed, (32, 32)) == said
