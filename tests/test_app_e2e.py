"""The app driven over its public API with gradio_client, against an in-process server."""
import json
from dataclasses import replace

import pytest
from gradio_client import Client, handle_file

from app import comparison, inputs, panels
from appserver import running_app
from core import engine, likelihood
from core.config import MethodParams
from core.trace import Trace


@pytest.fixture(scope="module")
def client():
    with running_app() as url:
        yield Client(url, verbose=False)


def knobs(**overrides):
    return [{**inputs.DEFAULTS, **overrides}[k] for k in inputs.KNOBS]


def ar_run(**overrides) -> Trace:
    """The ar run of the knobs' prompt, seed and sampling, made here: what the app's baseline must equal."""
    run = inputs.run_config(*knobs(**overrides))
    return engine.run(replace(run, method="ar", params=MethodParams()), engine.load_pair(run.model))


def against_ar(trace: Trace, **overrides) -> dict:
    """The oracle: likelihood.against_ar of a run and the ar run made here."""
    return likelihood.against_ar(engine.load_pair(trace.model), trace, ar_run(**overrides))


def test_the_public_endpoints_are_named(client):
    named = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert {"/generate", "/compare", "/replay", "/scrub", "/preset", "/sweep"} <= set(named)


def test_generate_returns_images_plots_and_a_trace(client):
    out = client.predict(False, *knobs(tau=0.0), api_name="/generate")
    status, trace_path, *views = out
    v = dict(zip(panels.VIEWS, views[-len(panels.VIEWS):]))
    assert "Done" in status
    assert all(v[k] and v[k].endswith(".png") for k in ("draft", "proposal", "final", "baseline", "canvas"))
    assert v["heatmap"]["type"] == "plotly" and "τ = 0" in v["heatmap"]["plot"]
    traces = json.loads(v["heatmap"]["plot"])["data"]
    assert [t["type"] for t in traces] == ["heatmap"]                        # τ = 0: every cell passes, no contour
    assert "fewer sequential passes than ar (target + drafter)" in v["stats"]
    with open(trace_path) as f:
        assert json.load(f)["schema"] == "mulo-trace/3"
    # the session keeps the run: the scrubber replays it
    canvas, caption = client.predict(3, False, api_name="/scrub")
    assert canvas.endswith(".png") and "Step 3 of" in caption


def test_tau_one_says_the_speed_came_from_resampling_everything(client):
    _, _, *views = client.predict(False, *knobs(tau=1.0), api_name="/generate")
    stats = dict(zip(panels.VIEWS, views[-len(panels.VIEWS):]))["stats"]
    assert "Nothing of the draft was kept: every cell was resampled by the target" in stats
    assert "| kept (not resampled, of all cells) | 0.0% |" in stats


def test_an_sjd_run_maps_each_tested_position_and_says_why_panels_are_empty(client):
    _, _, *views = client.predict(False, *knobs(method="sjd"), api_name="/generate")
    v = dict(zip(panels.VIEWS, views[-len(panels.VIEWS):]))
    fig = json.loads(v["heatmap"]["plot"])
    assert fig["layout"]["title"]["text"].startswith("Probability of acceptance<br><sup>min(1, p/p_prev)")
    assert "tested drafts passed" in fig["layout"]["title"]["text"]
    assert "verifies nothing" not in v["heatmap"]["plot"]
    assert v["draft"].endswith(".png") and v["proposal"].endswith(".png")   # panels of words, not blanks
    assert "draft failed its test" in v["islands_key"]


@pytest.mark.long("Compare runs every method of the menu on the embedded pair")
def test_a_repeated_comparison_is_answered_from_the_remembered_one_and_a_changed_knob_is_not(monkeypatch):
    """Two runs (ar, zipar) through the comparison's own loop: the second press of the same knobs runs no
    model and says so; another seed, or another window, runs again."""
    monkeypatch.setattr(comparison, "REMEMBERED", type(comparison.REMEMBERED)(2 ** 26, lambda out: 0))
    run = inputs.run_config(*knobs())

    def compare(r):
        jobs = [("zipar", replace(r, method="zipar"), "zipar")]
        out = None
        for out in comparison._side_by_side(None, r, engine.load_pair(r.model), jobs, "two methods"):
            pass
        return out
    first = compare(run)
    assert "Compared two methods" in first[3] and "Remembered" not in first[3]

    def no_model(*args, **kw):
        raise AssertionError("the comparison ran a model")
    monkeypatch.setattr(comparison, "run_stoppable", no_model)
    monkeypatch.setattr(comparison, "ar_baseline", no_model)
    again = compare(run)
    assert again[1] == first[1] and len(again[0]) == len(first[0])
    assert again[3].startswith(first[3]) and "Remembered: this comparison of these knobs finished" in again[3]
    for other in (replace(run, seed=run.seed + 1), run.with_params(window=2)):
        with pytest.raises(AssertionError, match="the comparison ran a model"):
            compare(other)


def _image(item) -> "np.ndarray":
    import numpy as np
    from PIL import Image
    path = item["image"]["path"] if isinstance(item.get("image"), dict) else item["image"]
    return np.asarray(Image.open(path).convert("RGB"))


def test_compare_upsamplers_shows_each_proposal_beside_its_final_image(client):
    """τ = 0 keeps every proposal, so each final image is its proposal; each up-sampler's proposal is the
    engine's for the same knobs (the oracle: a run outside the app, decoded the same way)."""
    import numpy as np
    from app import render
    gallery, table, plot, status = client.predict(*knobs(tau=0.0, scale=4), api_name="/compare_upsamplers")
    col = {name: n for n, name in enumerate(comparison.COMPARE_COLUMNS)}
    labels = [row[0] for row in table["data"]]
    assert labels == ["ar"] + [f"mulo:tau=0:scale=4:upsampler={u}" for u in ("pixel", "nearest", "sr", "learned",
                                                                                 "distilled")]
    assert all(row[col["passed test"]] == "100.0%" for row in table["data"][1:]), table["data"]
    assert all(row[col["note"]].startswith("up-sampling ") for row in table["data"][1:])
    captions = [g["caption"] for g in gallery]
    assert captions == ["ar: final"] + [f"{u}: {w}" for u in ("pixel", "nearest", "sr", "learned",
                                                                                 "distilled")
                                        for w in ("proposal", "final")]
    images = {c: _image(g) for c, g in zip(captions, gallery)}
    pair = engine.load_pair("embedded")
    for u in ("pixel", "sr", "learned", "distilled"):
        run = replace(inputs.run_config(*knobs(tau=0.0, scale=4)), method="mulo").with_params(upsampler=u)
        want = render.crisp(engine.decode_image(engine.run(run, pair).proposal, pair.tokenizer))
        assert np.array_equal(images[f"{u}: proposal"], want), u
        assert np.array_equal(images[f"{u}: final"], want), u
    assert not np.array_equal(images["sr: proposal"], images["pixel: proposal"])
    assert status.startswith("Compared the 5 up-samplers at r = 4 on seed")


@pytest.mark.long("a Generate, then its trace uploaded and replayed through the server")
def test_an_uploaded_trace_replays(client, tmp_path):
    _, trace_path, *_ = client.predict(False, *knobs(method="zipar", window=16), api_name="/generate")
    status, _, *views = client.predict(handle_file(trace_path), False, api_name="/replay")
    assert "no model ran" in status and "zipar" in status and "no ar baseline" in status
    v = dict(zip(panels.VIEWS, views))
    assert "wall clock: no ar run to compare" in v["stats"] and "sharpness ÷ ar" not in v["stats"]
    # the page offers to time one: the replayed run gets its ar baseline, a wall-clock ratio and its quality
    status, *views = client.predict(False, api_name="/baseline")
    v = dict(zip(panels.VIEWS, views))
    assert "ar baseline timed" in status and "than ar on the wall clock" in v["stats"] and "a rough ratio" in v["stats"]
    with open(trace_path) as f:
        want = against_ar(Trace.from_json(f.read()), method="zipar", window=16)
    gap = f"{want['loglik_gap']:.2f}".replace("-", "−")
    assert f"**sharpness ÷ ar {want['sharpness']:.2f}**" in v["stats"]
    assert f"**log-lik gap {gap} nats/token**" in v["stats"]


def test_bad_input_comes_back_as_an_error_and_the_app_stays_up(client, tmp_path):
    with pytest.raises(Exception, match="unknown word 'elephant'"):
        client.predict(False, *knobs(prompt="a red elephant center on a striped blue background"),
                       api_name="/generate")
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "mulo-trace/9"}')
    with pytest.raises(Exception, match="unsupported trace schema"):
        client.predict(handle_file(str(bad)), False, api_name="/replay")
    out = client.predict("Raster rejection", api_name="/preset")
    assert out[inputs.KNOBS.index("rejection")] == "raster"


def test_the_sweep_tab_opens_a_precomputed_summary_and_refuses_a_malformed_one(client, bench_folder, tmp_path):
    fig, status = client.predict(handle_file(str(bench_folder / "summary.json")), api_name="/open_summary")
    assert fig["type"] == "plotly" and "Speed–quality frontier" in fig["plot"]
    assert status.startswith("Opened a precomputed sweep: 3 settings on 3 prompts") and "no model ran" in status
    bad = tmp_path / "summary.json"
    bad.write_text('{"schema": "mulo-bench/2", "summary": {"mulo": {"method": "mulo", "passes": "many"}}}')
    with pytest.raises(Exception, match="cannot open this summary: the figures of 'mulo' lack passes_speedup"):
        client.predict(handle_file(str(bad)), api_name="/open_summary")


@pytest.mark.long("a three-level cascade run with its ar baseline through gradio_client")
def test_a_cascade_run_fills_its_level_row_and_a_bad_draft_method_is_named(client):
    status, _, *views = client.predict(False, *knobs(draft_method="mulo/scale=2"), api_name="/generate")
    v = dict(zip(panels.VIEWS, views[-len(panels.VIEWS):]))
    assert "Done" in status
    assert "Level 1 (16×16, verified by the drafter)" in v["level1_title"]
    assert all(v[k] and v[k].endswith(".png") for k in ("level1_draft", "level1_proposal", "level1_islands"))
    fig = json.loads(v["level1_heatmap"]["plot"])
    assert fig["data"][0]["z"]["shape"] == "16, 16" and "of 256 passed τ" in fig["layout"]["title"]["text"]
    assert not v["level2_title"] and v["level2_draft"] is None
    status, _, *views = client.predict(False, *knobs(draft_method="zipar/window=2"), api_name="/generate")
    v = dict(zip(panels.VIEWS, views[-len(panels.VIEWS):]))
    assert "Done" in status and not v["level1_title"] and v["level1_draft"] is None
    with pytest.raises(Exception, match="draft_method must be name or name/knob=value"):
        client.predict(False, *knobs(draft_method="zipar/scale=2"), api_name="/generate")
