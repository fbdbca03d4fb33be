"""The app's handlers and renderers, called as plain functions (no server)."""
import dataclasses
import json
import math
import re
from concurrent.futures import ThreadPoolExecutor

import gradio as gr
import numpy as np
import pytest
import torch

from app import comparison, generation, inputs, level_rows, links, panels, replays
from app import plots, render, theme
from app.messages import markdown_text
from core import engine, likelihood
from core.config import MethodParams, RunConfig
from core.embedded.domain import parse_prompt
from core.trace import Trace


def knobs(**overrides):
    return [{**inputs.DEFAULTS, **overrides}[k] for k in inputs.KNOBS]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """The small models are latency-bound: one intra-op thread avoids oversubscribing two cores
    when anything else runs (two threads ran 30x slower beside a training job)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def generated(one_thread):
    """Every update of one default mulo generation run live (with its ar baseline; Generate itself would
    answer these settings from the shipped runs, tests/test_shipped.py)."""
    return list(generation.generate_live(None, False, *knobs()))


@pytest.fixture(scope="module")
def state(generated):
    return generated[-1][0]


@pytest.fixture(scope="module")
def tok():
    return engine.load_pair("embedded").tokenizer


def shown(out):
    """The views of a generate update (state, status, trace file, live canvas, results column, *VIEWS)
    or of a replay (state, status, trace file, *VIEWS)."""
    return dict(zip(panels.VIEWS, out[-len(panels.VIEWS):]))


def test_generate_ends_with_every_view_and_a_downloadable_trace(generated):
    state, status, path, *_ = generated[-1]
    assert state["trace"].method == "mulo" and state["baseline"].method == "ar"
    assert "Done" in status
    with open(path) as f:
        assert Trace.from_json(f.read()).to_dict() == state["trace"].to_dict()


def test_token_grids_are_shown_crisp_at_320_px(generated):
    v = shown(generated[-1])
    for name in ("draft", "proposal", "final", "baseline", "islands"):
        assert v[name].shape == (render.SIZE, render.SIZE, 3) and v[name].dtype == np.uint8, name
    assert v["canvas"].shape[0] == render.SIZE + render.LABEL
    # nearest neighbour: every 10x10 block of the 16x16 draft is one colour
    block = v["draft"][:10, :10].reshape(-1, 3)
    assert (block == block[0]).all()


def test_grid_overlay_draws_lines_between_cells(state, tok):
    plain = render.grid_image(state["trace"].tokens, tok, grid=False)
    lined = render.grid_image(state["trace"].tokens, tok, grid=True)
    assert (lined[render.SIZE // 32] <= plain[render.SIZE // 32]).all()
    assert (lined != plain).any()


def test_heatmap_marks_tau_with_a_contour_and_hovers_the_numbers(state):
    trace = state["trace"]
    fig = plots.heatmap(trace, render.verdict(trace))
    contour = [t for t in fig.data if t.type == "contour"]
    assert contour and contour[0].name == f"τ = {trace.params['tau']:g}"
    assert math.isclose(contour[0].contours.start, math.log10(trace.params["tau"]))
    heat = [t for t in fig.data if t.type == "heatmap"][0]
    assert np.asarray(heat.z).shape == (32, 32)
    assert "proposal token" in heat.hovertemplate and "pooled mass" in heat.hovertemplate
    assert any("island" in str(c[3]) for row in heat.customdata for c in row)


def test_verdict_reassembles_the_verify_steps(state):
    trace = state["trace"]
    v = render.verdict(trace)
    assert ((v.pooled >= v.tau) == v.accepted).all()
    assert (v.rejected <= v.resample).all()            # every rejected cell is resampled
    assert ((v.islands > 0) == v.resample).all()
    assert render.verdict(state["baseline"]) is None   # ar verifies nothing


def test_replaying_every_step_rebuilds_the_final_tokens(state):
    for trace in (state["trace"], state["baseline"]):
        rp = render.replay(trace, len(trace.steps))
        assert (rp.target == np.asarray(trace.tokens)).all(), trace.method


def test_scrubber_canvas_changes_from_one_step_to_the_next(state):
    trace = state["trace"]
    for n in (0, 5, len(trace.steps) - 1):
        a, _ = panels.scrub(state, n)
        b, caption = panels.scrub(state, n + 1)
        assert (a != b).any(), n
        assert f"Step {n + 1} of {len(trace.steps)}" in caption


def test_scrubber_at_zero_shows_nothing_written(state, tok):
    img = render.canvas_image(render.replay(state["trace"], 0), tok)
    assert (img[:render.SIZE, -render.SIZE:] == theme.rgb(theme.PENDING)).all()


def test_clicking_a_proposal_cell_reports_its_pooled_mass(state):
    evt = gr.SelectData(None, {"index": [5, 318], "value": None})
    text, cell = panels.inspect_cell(state, evt)
    assert "Cell (31, 0)" in text and "pooled mass" in text and "τ" in text and cell == "31, 0"
    assert panels.inspect_typed(state, " (31, 0) ") == (text, cell)      # typed, the same card
    assert panels.inspect_typed(state, "") == (panels.NO_CELL, "")
    for bad, word in (("31", "a row and a column"), ("x, 2", "a row and a column"), ("32, 0", "a row in [0, 31]")):
        with pytest.raises(gr.Error, match=re.escape(word)):
            panels.inspect_typed(state, bad)


def test_timeline_has_a_lane_for_the_run_and_for_the_baseline(state):
    fig = plots.timeline(state["trace"], state["baseline"])
    lanes = {y for t in fig.data for y in t.y}
    assert lanes == {"mulo", "ar baseline"}
    assert {t.name for t in fig.data} >= {"draft", "upsample", "verify", "decode"}


def test_the_headline_counts_every_sequential_pass_and_target_nfe_is_a_labelled_detail(generated, state):
    stats = shown(generated[-1])["stats"]
    trace, base = state["trace"], state["baseline"]
    passes, wall, target = panels.speedup(trace, base)
    t = trace.totals
    assert passes == 1024 / (t["target_nfe"] + t["drafter_nfe"]) and target == 1024 / t["target_nfe"]
    assert wall == base.totals["wall_ms"] / t["wall_ms"]
    assert stats.startswith(f"### {markdown_text(panels.run_name(trace))}: {passes:.2f}× fewer sequential passes than ar "
                            f"(target + drafter) · {wall:.2f}× faster than ar on the wall clock")
    assert f"Target passes alone: {target:.2f}× fewer" in stats and "drafter passes not counted" in stats
    assert "ar remembered from" in stats or "ar timed right after it" in stats   # when each wall was measured


def test_a_run_that_kept_nothing_says_so_beside_its_speedup(state):
    trace = state["trace"]
    none_kept = dataclasses.replace(trace, totals=dict(trace.totals, kept_fraction=0.0))
    assert "Nothing of the draft was kept: every cell was resampled" in panels.stats_markdown(none_kept, None)
    assert "Nothing of the draft" not in panels.stats_markdown(trace, None)


def test_heatmap_words_are_passed_tau_and_kept_counted_from_the_verify_steps(state):
    trace = state["trace"]
    verify = [s for s in trace.steps if s["phase"] == "verify"]
    passed = sum(int(np.sum(s["accepted"])) for s in verify)
    resampled = sum(int(np.sum(s["resample"])) for s in verify)
    fig = plots.heatmap(trace, render.verdict(trace))
    assert fig.layout.title.text.startswith(f"Pooled mass vs τ = {trace.params['tau']:g}: {passed} of 1024 passed τ")
    assert f"{1024 - resampled} kept, {resampled} resampled" in fig.layout.title.text
    heat = [t for t in fig.data if t.type == "heatmap"][0]
    fates = {str(c[3]).split(" island")[0] for row in heat.customdata for c in row}
    assert fates <= {"kept", "resampled,", "swept into"} and "kept" in fates
    assert "accepted" not in heat.hovertemplate + fig.layout.title.text


def test_tau_zero_draws_no_tau_contour(state):
    trace = state["trace"]
    v = render.verdict(trace)
    v.tau = 0.0
    assert not [t for t in plots.heatmap(trace, v).data if t.type == "contour"]


def test_sd_heatmap_shows_each_tested_position_s_probability_and_verdict(tiny_pair):
    from core.config import RunConfig
    trace = engine.run(RunConfig(method="sd", seed=3), tiny_pair)
    t = render.tests(trace)
    tested = [(tuple(c), p, ok) for s in trace.steps if s["phase"] == "verify"
              for c, p, ok in zip(s["judged"], s["prob"], s["accepted"])]
    assert len({c for c, _, _ in tested}) == len(tested)          # sd tests each position once
    for (i, j), p, ok in tested:
        assert t.prob[i, j] == p and t.passed[i, j] == ok and t.resampled[i, j] == (not ok)
    fig = plots.heatmap(trace, None, t)
    assert "Probability of acceptance<br><sup>min(1, p/q)</sup>" in fig.layout.title.text
    assert f"{sum(ok for *_, ok in tested)} of {len(tested)} tested drafts passed" in fig.layout.title.text
    marks = [d for d in fig.data if d.type == "scatter"][0]
    assert len(marks.x) == sum(not ok for *_, ok in tested) > 0
    failed = next(c for c, _, ok in tested if not ok)
    assert "**failed**, resampled from the residual" in render.cell_details(trace, None, *failed)


def test_views_of_an_ar_trace_say_in_words_why_panels_are_empty(state):
    v = dict(zip(panels.VIEWS, panels.views(dict(trace=state["baseline"]))))
    blank = render.message_image("")
    for name in ("draft", "proposal", "islands", "baseline"):   # a panel of words, not a missing image
        assert v[name].shape == blank.shape and (v[name] != blank).any(), name
    assert "no acceptance to map" in v["heatmap"].layout.annotations[0].text
    assert v["islands_key"] == ""
    assert panels.explain_method("sd")[1].startswith("Each tested position's probability of acceptance, min(1, p/q)")


def test_generate_can_be_resumed_on_any_thread_and_stopped_midway():
    """Gradio advances a generator handler on whichever worker thread is free; Stop abandons it."""
    pools = [ThreadPoolExecutor(1), ThreadPoolExecutor(1)]

    def drive(gen, most):
        out = []
        for i in range(most):
            try:
                out.append(pools[i % 2].submit(next, gen).result())
            except StopIteration:
                break
        return out

    stopped = generation.generate_live(None, False, *knobs())   # live: Generate would answer from the file
    assert all("Running" in u[1] for u in drive(stopped, 2))
    pools[1].submit(stopped.close).result()
    assert "Done" in drive(generation.generate_live(None, False, *knobs()), 10_000)[-1][1]
    for pool in pools:
        assert not pool.submit(torch.is_inference_mode_enabled).result()
        pool.shutdown()


def test_a_prompt_outside_the_vocabulary_is_a_gr_error():
    with pytest.raises(gr.Error, match="elephant"):
        list(generation.generate(None, False, *knobs(prompt="a purple elephant center on a striped blue background")))


def test_a_parameter_out_of_range_is_a_gr_error_naming_it():
    with pytest.raises(gr.Error, match="tau"):
        list(generation.generate(None, False, *knobs(tau=2.0)))
    with pytest.raises(gr.Error, match="seed must be an integer"):
        list(generation.generate(None, False, *knobs(seed=1.5)))


def test_an_uploaded_trace_replays_without_a_model_run(state, tmp_path):
    path = tmp_path / "t.json"
    path.write_text(state["trace"].to_json())
    out = replays.replay(str(path))
    assert out[0]["trace"].to_dict() == state["trace"].to_dict() and "no model ran" in out[1]
    assert (shown(out)["final"] == render.grid_image(state["trace"].tokens, engine.load_pair().tokenizer)).all()


@pytest.mark.parametrize("content, problem", [
    (b"{not json", "not valid JSON"),
    (json.dumps({"schema": "mulo-trace/0"}).encode(), "unsupported trace schema"),
    (json.dumps({"schema": "mulo-trace/1", "method": "ar"}).encode(), "lacks the field"),
])
def test_bad_uploads_are_gr_errors_naming_the_problem(tmp_path, content, problem):
    path = tmp_path / "bad.json"
    path.write_bytes(content)
    with pytest.raises(gr.Error, match=problem):
        replays.replay(str(path))


def test_an_oversized_upload_is_refused_before_reading(tmp_path):
    path = tmp_path / "big.json"
    with open(path, "wb") as f:
        f.truncate(33 * 2 ** 20)
    with pytest.raises(gr.Error, match="MiB"):
        replays.replay(str(path))


def test_an_upload_with_tokens_outside_the_codebook_is_refused(state, tmp_path):
    d = state["trace"].to_dict()
    d["tokens"][0][0] = 10 ** 6
    path = tmp_path / "t.json"
    path.write_text(json.dumps(d))
    with pytest.raises(gr.Error, match="codebook"):
        replays.replay(str(path))


def test_every_preset_gives_a_valid_configuration():
    pair = engine.load_pair()
    for name in links.PRESETS:
        out = links.preset(name)
        assert len(out) == len(inputs.KNOBS) + 1 and name in out[-1]
        values = [inputs.DEFAULTS[k] if isinstance(v, type(gr.skip())) else v for k, v in zip(inputs.KNOBS, out)]
        engine.context(inputs.run_config(*values), pair)


def test_a_share_link_names_the_page_the_preset_and_every_knob():
    link = links.share_link("http://127.0.0.1:7860/?old=1", "Raster rejection", *knobs(tau=0.25, method="zipar"))
    assert link.startswith("http://127.0.0.1:7860/?preset=Raster+rejection&method=zipar&prompt=a+large")
    assert "tau=0.25" in link and "gradio_api" not in link


def _preset_run(name, seed=0):
    """(trace, island sizes) of a preset's run on the default prompt."""
    values = dict(zip(inputs.KNOBS, links.preset(name)))
    cfg = inputs.run_config(*knobs(**{k: v for k, v in values.items() if k in inputs.KNOBS
                                      and not isinstance(v, type(gr.skip()))}))
    trace = engine.run(dataclasses.replace(cfg, seed=seed))
    v = render.verdict(trace)
    _, sizes = np.unique(v.islands[v.islands > 0], return_counts=True)
    return trace, sizes


def test_the_few_islands_preset_shows_a_few_small_islands_and_keeps_most_cells():
    """What the preset's text promises, on the default prompt and seed."""
    trace, sizes = _preset_run("A few rejection islands")
    assert 1 <= len(sizes) <= 10 and sizes.max() <= 64, sizes
    assert trace.totals["kept_fraction"] >= 0.8 and trace.totals["passed_fraction"] >= 0.9


@pytest.mark.parametrize("seed", [0, 1])
def test_the_default_preset_rejects_about_a_quarter_and_one_island_covers_most_of_the_image(seed):
    """What the default's text promises, on the default prompt: about a quarter of the proposal below
    tau, the radius sweeping the rejections into one island over most of the image."""
    trace, sizes = _preset_run("Default operating point", seed)
    assert 0.6 <= trace.totals["passed_fraction"] <= 0.85 and sizes.max() >= 0.8 * 1024, sizes
    assert trace.totals["drafter_nfe"] == 256 and trace.totals["kept_fraction"] < 0.2


@pytest.mark.parametrize("seed", [0, 1])
def test_the_rubber_stamp_preset_accepts_a_blur_and_the_yardsticks_show_its_price(seed):
    """The old default: about 1 % below tau, and, against ar's image of the same prompt and seed (the
    definitions in core.likelihood and core.yardsticks), a blurred image the target finds improbable."""
    from core import likelihood
    trace, sizes = _preset_run("Rubber stamp: the old default (τ = 0.01, k = 128)", seed)
    assert 0.97 <= trace.totals["passed_fraction"] < 1.0 and sizes.max() <= 4, sizes
    pair = engine.load_pair("embedded")
    ar = engine.run(dataclasses.replace(RunConfig(method="ar", prompt=trace.prompt), seed=seed), pair)
    q = likelihood.against_ar(pair, trace, ar)
    assert q["sharpness"] < 0.7 and q["loglik_gap"] < -3.0, q


@pytest.mark.parametrize("seed", [0, 1])
def test_the_strict_preset_grows_one_island_over_most_of_the_image(seed):
    trace, sizes = _preset_run("Strict verification: one big island", seed)
    assert 0.80 <= trace.totals["passed_fraction"] <= 0.92
    assert sizes.max() >= 512, sizes                        # half of the 32 x 32 cells


def test_toggling_grid_lines_before_any_run_changes_nothing():
    assert all(isinstance(v, type(gr.skip())) for v in panels.regrid(None, True))


def test_the_prompt_builder_writes_a_caption_the_domain_reads():
    text = inputs.build_prompt("small", "red", "circle", "top left", "medium", "blue", "square", "center",
                               "striped", "green")
    assert text == "a small red circle top left and a medium blue square center on a striped green background"
    assert len(parse_prompt(text).objects) == 2
    with pytest.raises(gr.Error, match="position"):
        inputs.build_prompt("small", "red", "circle", "center", "small", "red", "cross", "center", "noisy", "red")


def _read_back(choice: tuple) -> tuple:
    """The builder's choices of the prompt build_prompt writes, as the domain's parser reads them."""
    scene = parse_prompt(inputs.build_prompt(*choice))
    objects = [(o.size, o.colour, o.shape, o.position_words()) for o in scene.objects]
    return scene, objects


def test_every_choice_of_every_prompt_builder_menu_writes_a_prompt_the_parser_reads_back():
    # the page's defaults
    assert all(v in choices for (_, choices), v in zip(inputs.PROMPT_MENUS, inputs.PROMPT_CHOSEN))
    assert inputs.build_prompt(*inputs.PROMPT_CHOSEN) == inputs.DEFAULTS["prompt"]
    second = list(inputs.PROMPT_CHOSEN[:6]) + ["square"] + list(inputs.PROMPT_CHOSEN[7:])
    for menu, (_, choices) in enumerate(inputs.PROMPT_MENUS):
        for v in choices:
            choice = list(second)
            choice[menu] = v
            if menu in (3, 7) and choice[3] == choice[7]:
                continue                                    # one place for both: refused below
            scene, objects = _read_back(tuple(choice))
            want = [tuple(choice[:4])] + ([tuple(choice[4:8])] if choice[6] != inputs.NO_OBJECT else [])
            assert sorted(objects) == sorted(want) and (scene.background, scene.bg_colour) == tuple(choice[8:])
    places = inputs.PROMPT_MENUS[3][1]
    for p1 in places:                                       # every pair of places: both read back, or refused
        for p2 in places:
            choice = (*second[:3], p1, *second[4:7], p2, *second[8:])
            if p1 == p2:
                with pytest.raises(gr.Error, match="share one position"):
                    inputs.build_prompt(*choice)
            else:
                assert sorted(o[3] for o in _read_back(choice)[1]) == sorted((p1, p2))


@pytest.mark.parametrize("menu", range(10))
def test_a_prompt_builder_choice_off_its_menu_is_named_short(menu):
    choice = list(inputs.PROMPT_CHOSEN)
    choice[menu] = "<b>" + "x" * 5000
    with pytest.raises(gr.Error) as refused:
        inputs.build_prompt(*choice)
    label = inputs.PROMPT_MENUS[menu][0]
    assert refused.value.message.startswith(f"{label} must be one of ") and "&lt;b&gt;xxx" in refused.value.message
    assert len(refused.value.message) < 300


def test_sweep_plots_speedup_against_quality_for_mulo_and_zipar():
    *_, (fig, status) = comparison.sweep(None, "0", "16", *knobs())
    assert {t.legendgroup for t in fig.data} == {"ar", "mulo", "zipar"}
    names = [t.name for t in fig.data if t.showlegend is not False]
    assert names == ["ar", "mulo τ=0, 100.0% kept", "zipar w=16"]     # one legend entry per run, no label piles
    mulo = [t for t in fig.data if t.name and t.name.startswith("mulo")][0]
    # tau = 0: one verify pass, but the drafter's 256 serial passes count too (r = 2)
    assert 1 < mulo.x[0] <= 1024 / 256
    assert "sequential passes, target + drafter" in fig.layout.xaxis2.title.text
    assert all(0.0 <= y <= 1.0 for t in fig.data if t.yaxis == "y" for y in t.y)
    assert fig.layout.yaxis.title.text == "prompt adherence (classifier)"
    assert "Swept 2 settings" in status
    # the detail axis: each point's log-lik gap against ar's image, from likelihood.against_ar of the
    # same runs made here (ar at 0); the hover gives its sharpness ÷ ar
    pair = engine.load_pair("embedded")
    run = inputs.run_config(*knobs())
    ar = engine.run(dataclasses.replace(run, method="ar", params=MethodParams()), pair)
    gaps = {t.name: t for t in fig.data if t.yaxis == "y2" and t.mode == "markers"}
    for name, cfg in (("mulo τ=0, 100.0% kept", run.with_params(tau=0.0)),
                      ("zipar w=16", dataclasses.replace(run, method="zipar").with_params(window=16))):
        want = likelihood.against_ar(pair, engine.run(cfg, pair), ar)
        assert gaps[name].y[0] == pytest.approx(want["loglik_gap"], abs=1e-9), name
        assert gaps[name].x[0] == [t for t in fig.data if t.name == name and t.yaxis == "y"][0].x[0]
        assert f"sharpness ÷ ar {want['sharpness']:.2f}" in gaps[name].hovertemplate
    assert gaps["mulo τ=0, 100.0% kept"].y[0] < -0.05 and gaps["ar"].y[0] == 0.0


def _official_files(folder, pair: str, t5: bool = True):
    from core.models import llamagen as lg
    for key in lg.pair_files(pair):
        (folder / lg.CHECKPOINTS[key].file).write_bytes(b"")
    if t5:
        (folder / "t5-ckpt" / "flan-t5-xl").mkdir(parents=True)


def test_the_model_picker_lists_the_pairs_whose_weights_are_here(tmp_path, monkeypatch):
    from core.models import llamagen as lg
    monkeypatch.setenv(lg.ENV_DIR, str(tmp_path))
    monkeypatch.delenv("MULO_T5_DIR", raising=False)
    assert list(engine.found_pairs()) == ["embedded"]                  # nothing in the folder yet
    _official_files(tmp_path, "llamagen-c2i-B-256", t5=False)
    _official_files(tmp_path, "llamagen-t2i", t5=False)
    assert list(engine.found_pairs()) == ["embedded", "llamagen-c2i-B-256"]  # t2i still lacks its T5
    (tmp_path / "t5-ckpt" / "flan-t5-xl").mkdir(parents=True)
    assert list(engine.found_pairs()) == ["embedded", "llamagen-t2i", "llamagen-c2i-B-256"]
    top_k, cfg, temperature, interval, lantern_k, scale, info = inputs.pick_model("llamagen-t2i")
    assert top_k["maximum"] == 16384 and scale["choices"] == [2] and "FLAN-T5-XL" in info
    # LlamaGen's official sampling: CFG 7.5 and top-k 1000 for t2i, CFG 4 and top-k 2000 for c2i
    assert (cfg["value"], top_k["value"], temperature["value"], interval["value"]) == (7.5, 1000, 1.0, -1)
    top_k, cfg, *_ = inputs.pick_model("llamagen-c2i-B-256")
    assert (cfg["value"], top_k["value"]) == (4.0, 2000)
    top_k, cfg, _, _, _, scale, info = inputs.pick_model("embedded")
    assert top_k["maximum"] == 512 and scale["choices"] == [2, 4] and "Found 3 pair(s)" in info
    assert (cfg["value"], top_k["value"]) == (inputs.DEFAULTS["cfg"], inputs.DEFAULTS["top_k"])


def test_a_picked_pair_without_its_weights_is_a_gr_error_naming_the_files(tmp_path, monkeypatch):
    from core.models import llamagen as lg
    monkeypatch.setenv(lg.ENV_DIR, str(tmp_path))
    engine.load_pair.cache_clear()
    with pytest.raises(gr.Error, match="c2i_B_256.pt"):
        list(generation.generate(None, False, *knobs(model="llamagen-c2i-B-256", prompt="207", method="ar")))


def test_draft_method_and_redraft_are_knobs_of_the_page_the_link_and_the_presets():
    assert {"draft_method", "redraft"} <= set(inputs.KNOBS) and inputs.DEFAULTS["draft_method"] == "ar"
    link = links.share_link("http://127.0.0.1:7860/", None, *knobs(draft_method="mulo/scale=2", resample="jacobi",
                                                                   redraft="coupled"))
    assert "draft_method=mulo%2Fscale%3D2" in link and "resample=jacobi" in link and "redraft=coupled" in link
    out = links.preset("Cascade of scales (8×8 → 16×16 → 32×32)")
    assert dict(zip(inputs.KNOBS, out))["draft_method"] == "mulo/scale=2"
    assert "No published method has a cascade" in out[-1]
    zipar = dict(zip(inputs.KNOBS, links.preset("Any method drafts: ZipAR drafter")))
    assert zipar["draft_method"] == "zipar/window=2" and zipar["window"] == 2
    # any other preset puts the drafter back to ar
    assert dict(zip(inputs.KNOBS, links.preset("Raster rejection")))["draft_method"] == "ar"


@pytest.mark.parametrize("spec", ["zipar/scale=2", "mulo/scale=4", "nope", "zipar/window"])
def test_a_bad_draft_method_is_a_gr_error_naming_it(spec):
    with pytest.raises(gr.Error, match="draft_method"):
        list(generation.generate(None, False, *knobs(draft_method=spec)))


def test_the_step_estimate_follows_the_drafter_s_method(monkeypatch):
    """'step n of about N': the drafter's grid is estimated as a run of its own (ZipAR's count is exact)."""
    monkeypatch.setattr(generation, "_steps_seen", {})    # no remembered run of these knobs
    grid = (32, 32)
    ar = generation.expected_steps(inputs.run_config(*knobs()), grid)
    zipar = generation.expected_steps(inputs.run_config(*knobs(draft_method="zipar/window=2")), grid)
    assert ar - zipar == 16 * 16 - (16 + 15 * 2)
    assert generation.expected_steps(inputs.run_config(*knobs(draft_window=2)), grid) == zipar   # the shorthand
    cascade = generation.expected_steps(inputs.run_config(*knobs(draft_method="mulo/scale=2")), grid)
    assert zipar < cascade < ar            # 64 drafter passes at 8x8, plus the 16x16 level's verify and islands


@pytest.mark.parametrize("overrides", [{}, dict(tau=0.05, k=16, radius=1)])
def test_the_step_estimate_is_near_the_steps_a_run_takes(monkeypatch, overrides):
    """Before any run is remembered, 'about N' is within 20 % of the steps of the default run and of
    the strict preset's (big islands), on the default prompt."""
    monkeypatch.setattr(generation, "_steps_seen", {})
    run = inputs.run_config(*knobs(**overrides))
    steps = len(engine.run(run).steps)
    assert abs(generation.expected_steps(run, (32, 32)) - steps) <= 0.2 * steps, steps


def test_generate_and_replay_show_the_level_rows_of_a_cascade_only(generated, tmp_path):
    """The rows' columns come after the results column (generate) or the trace file (replay), before VIEWS."""
    n = len(level_rows.ROWS)
    assert [c.visible for c in generated[-1][5:5 + n]] == [False, False]          # the default run: one level
    cascade = list(generation.generate(None, False, *knobs(draft_method="mulo/scale=2")))[-1]
    assert [c.visible for c in cascade[5:5 + n]] == [True, False]
    assert "Level 1 (16×16" in shown(cascade)["level1_title"]
    path = tmp_path / "cascade.json"
    path.write_text(cascade[0]["trace"].to_json())
    out = replays.replay(str(path))
    assert [c.visible for c in out[3:3 + n]] == [True, False] and len(out) == 3 + n + len(panels.VIEWS)
    assert (shown(out)["level1_proposal"] == shown(cascade)["level1_proposal"]).all()
