"""The app driven over its public API with gradio_client, against an in-process server."""
import json

import pytest
from gradio_client import Client, handle_file

from app import handlers as h
from appserver import running_app


@pytest.fixture(scope="module")
def client():
    with running_app() as url:
        yield Client(url, verbose=False)


def knobs(**overrides):
    return [{**h.DEFAULTS, **overrides}[k] for k in h.KNOBS]


def test_the_public_endpoints_are_named(client):
    named = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert {"/generate", "/compare", "/replay", "/scrub", "/preset", "/sweep"} <= set(named)


def test_generate_returns_images_plots_and_a_trace(client):
    out = client.predict(False, *knobs(tau=0.0), api_name="/generate")
    status, trace_path, *views = out
    v = dict(zip(h.VIEWS, views))
    assert "Done" in status
    assert all(v[k] and v[k].endswith(".png") for k in ("draft", "proposal", "final", "baseline", "canvas"))
    assert v["heatmap"]["type"] == "plotly" and "τ = 0" in v["heatmap"]["plot"]
    assert "fewer target passes" in v["stats"]
    with open(trace_path) as f:
        assert json.load(f)["schema"] == "mulo-trace/2"
    # the session keeps the run: the scrubber replays it
    canvas, caption = client.predict(3, False, api_name="/scrub")
    assert canvas.endswith(".png") and "Step 3 of" in caption


def test_compare_runs_every_method_on_one_seed(client):
    gallery, table, plot, status = client.predict(*knobs(tau=0.0), api_name="/compare")
    rows = {row[0]: row for row in table["data"]}
    assert {"ar", "zipar", "mulo"} <= set(rows)
    assert rows["ar"][5] == 1 and rows["mulo"][5] > 100          # tau = 0: NFE speedup over ar
    assert all(0 <= row[7] <= 1 for row in rows.values() if row[7] is not None)   # quality beside speed
    assert len(gallery) >= 3 and "Compared" in status


def test_an_uploaded_trace_replays(client, tmp_path):
    _, trace_path, *_ = client.predict(False, *knobs(method="zipar", window=16), api_name="/generate")
    status, _, *views = client.predict(handle_file(trace_path), False, api_name="/replay")
    assert "no model ran" in status and "zipar" in status


def test_bad_input_comes_back_as_an_error_and_the_app_stays_up(client, tmp_path):
    with pytest.raises(Exception, match="unknown word 'elephant'"):
        client.predict(False, *knobs(prompt="a red elephant center on a striped blue background"),
                       api_name="/generate")
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "mulo-trace/9"}')
    with pytest.raises(Exception, match="unsupported trace schema"):
        client.predict(handle_file(str(bad)), False, api_name="/replay")
    out = client.predict("Raster rejection", api_name="/preset")
    assert out[h.KNOBS.index("rejection")] == "raster"


def test_the_sweep_tab_opens_a_precomputed_summary_and_refuses_a_malformed_one(client, bench_folder, tmp_path):
    fig, status = client.predict(handle_file(str(bench_folder / "summary.json")), api_name="/open_summary")
    assert fig["type"] == "plotly" and "Speed–quality frontier" in fig["plot"]
    assert status.startswith("Opened a precomputed sweep: 3 settings on 3 prompts") and "no model ran" in status
    bad = tmp_path / "summary.json"
    bad.write_text('{"schema": "mulo-bench/1", "summary": {"mulo": {"method": "mulo", "passes": "many"}}}')
    with pytest.raises(Exception, match="cannot open this summary: the figures of 'mulo' lack passes_speedup"):
        client.predict(handle_file(str(bad)), api_name="/open_summary")
