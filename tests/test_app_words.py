"""One meaning per word for every method: each method's explanations, acceptance rule,
heatmap title and canvas key are its own; the two 'passed' shares say what each counts; the headline says
how drafter passes are counted and which figure is stable; colours stay apart; counts agree in number.
Checked against the outputs of the real render / plot / panel functions on runs of the shipped pair."""
import numpy as np
import pytest
import torch

from app import inputs, panels, plots, render, replays, theme
from core import engine
from core.config import METHODS
from core.embedded.domain import RGB

TESTED = ("sd", "cool", "sjd", "scd", "gsd", "pjd")


@pytest.fixture(scope="module")
def runs():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    out = {}
    for m in ("sd", "scd", "pjd", "cool", "gsd"):
        kn = {**inputs.DEFAULTS, "method": m, "radius": 1}
        out[m] = engine.run(inputs.run_config(*[kn[k] for k in inputs.KNOBS]))
    torch.set_num_threads(before)
    return out


def test_every_method_has_its_own_explanations_and_only_mulo_speaks_of_pooled_mass_and_islands():
    for m in METHODS:
        assert m in panels.METHOD_EXPLAIN, m
        images, heat, islands = panels.explain_method(m)
        if m != "mulo":
            assert "pooled mass" not in heat and "τ" not in heat and "radius l" not in islands, m
        assert "Each square is one token" not in images
        assert "2×2" in images                      # a token is 2x2 pixels of the embedded pair's image
    for m in TESTED:
        assert m in panels.explain_method(m)[0]     # names its own method, not mulo's drafter
        assert m in render.RULES and render.RULES[m] != "probability of acceptance"
    assert "gsd" in panels.NO_DRAFT and "pjd" in panels.NO_DRAFT and "scd" in panels.NO_DRAFT
    # the τ contour is said to ring the red cells, where it is drawn
    assert "rings the red" in panels.explain_method("mulo")[1]


def test_the_heatmap_title_names_the_method_s_rule_and_says_what_each_passed_share_counts(runs):
    for m, tr in runs.items():
        t = render.tests(tr)
        title = plots.heatmap(tr, None, t).layout.title.text
        assert "probability of acceptance, probability of acceptance" not in title.lower(), m
        assert render.RULES[m] in title
        shown = f"{100 * tr.totals['passed_fraction']:.1f}%"
        assert f"table's {shown} counts every test" in title and "last test per position" in title, title
        assert f"{int(t.passed.sum())} of {int((~np.isnan(t.prob)).sum())} tested drafts passed" in title
        md = panels.stats_markdown(tr, None)
        assert f"| passed the test (of every test; the heatmap: each position's last) | {shown} |" in md
    # the two shares do differ on these runs: saying what each counts is needed
    pjd = runs["pjd"]
    t = render.tests(pjd)
    assert abs(t.passed.sum() / (~np.isnan(t.prob)).sum() - pjd.totals["passed_fraction"]) > 0.05


def test_the_headline_says_drafter_passes_count_like_target_passes_and_passes_are_the_stable_figure(runs):
    sd = runs["sd"]
    md = panels.stats_markdown(sd, None)
    assert md.startswith("### sd: ") and "more sequential passes than ar" in md
    assert f"Every drafter pass ({sd.totals['drafter_nfe']} here) is counted like a target pass" in md
    assert "sd's drafter, the pair's small model, runs once per drafted token" in md
    assert "ms/pass" in md and "python -m core bench" in md
    assert "Every drafter pass" not in panels.stats_markdown(runs["pjd"], None)   # no drafter: no note
    with_ar = panels.stats_markdown(sd, sd, {"run": 1.0, "baseline": 2.0})
    assert "Sequential passes are the stable figure" in with_ar
    assert "Sequential passes are the stable figure" not in md                    # no wall ratio shown


def test_the_canvas_key_speaks_of_tau_only_for_mulo_and_the_written_colour_is_not_orange_on_red():
    assert "τ" in panels.canvas_key("mulo") and "swept into an island" in panels.canvas_key("mulo")
    for m in METHODS:
        if m != "mulo":
            key = panels.canvas_key(m)
            assert "τ" not in key and "island" not in key and "written by this step" in key, m
    red = np.array(RGB["red"], float)
    written = (1 - theme.WRITTEN_ALPHA) * red + theme.WRITTEN_ALPHA * np.array(theme.rgb(theme.WRITTEN))
    swept = 0.3 * red + 0.7 * np.array(theme.rgb(theme.RESAMPLED))
    assert np.linalg.norm(written - swept) > 80      # was ~40 with the yellow highlight


def test_every_island_tint_shows_on_every_background_of_the_domain_and_the_text_says_tints_repeat():
    for c in theme.ISLANDS:
        for name, bg in RGB.items():
            moved = 0.6 * np.linalg.norm(np.array(theme.rgb(c), float) - np.array(bg, float))
            assert moved >= 60, (c, name, moved)     # the old blue moved the blue background by 40
    assert len(set(theme.ISLANDS)) == len(theme.ISLANDS)
    assert "past the eighth island a tint comes back" in panels.explain_method("mulo")[2]


def test_counts_agree_in_number_and_the_caption_counts_passes_beside_steps(runs):
    assert render.cells(1) == "1 cell" and render.cells(2) == "2 cells" and render.cells(0) == "0 cells"
    t = render.tests(runs["pjd"])
    one = render.Tests(t.prob, t.passed, np.zeros_like(t.resampled), t.label)
    one.resampled[0, 0] = True
    assert "(1 cell);" in render.islands_key(None, one)
    tr = runs["pjd"]
    passes = tr.totals["target_nfe"] + tr.totals["drafter_nfe"]
    assert len(tr.steps) == passes - 1               # the prefill rides with the first verify step
    last = render.step_caption(tr, len(tr.steps))
    assert f"Step {len(tr.steps)} of {len(tr.steps)}" in last and f"Passes so far: {passes} of {passes}." in last


def test_a_replayed_trace_s_knobs_are_the_sidebar_s(runs):
    tr = runs["scd"]
    out = replays.knobs_of({"trace": tr})
    got = dict(zip(inputs.KNOBS, out[:-1]))
    assert got["radius"] == 1 and got["method"] == "scd" and got["prompt"] == tr.prompt and out[-1] is None
    assert all(not isinstance(v, dict) for v in got.values())       # every value inside its slider
    assert replays.knobs_of(None)[0] is not None


def test_a_slower_run_says_slower_and_the_headline_names_the_knobs_it_ran_with(runs):
    """"0.43× wall clock" read as a speed-up; the headline says slower, and which zipar it was."""
    import dataclasses
    sd = runs["sd"]
    slower = dataclasses.replace(sd, totals=dict(sd.totals, wall_ms=sd.totals["wall_ms"] * 2))
    head = panels.stats_markdown(slower, sd).splitlines()[0]           # the run took twice ar's wall clock
    assert head.endswith("· 2.00× slower than ar on the wall clock") and "faster" not in head
    head = panels.stats_markdown(sd, slower).splitlines()[0]           # ar took twice the run's
    assert head.endswith("· 2.00× faster than ar on the wall clock") and "slower" not in head
    zipar = dataclasses.replace(sd, method="zipar", params=dict(sd.params, window=16, tau=0.9))
    assert panels.stats_markdown(zipar, None).startswith("### zipar\\:window\\=16: ")   # tau is not zipar's
