"""A hosted app meets clients that send anything: every knob of the wrong type is named, private
events do no more than the page can, uploads are bounded and read once, Stop stays in its session
and the memory it keeps is bounded. Driven over HTTP against a launched app."""
import math
import os
import uuid

import httpx
import pytest
from gradio_client import Client, handle_file

from app import files
from app import handlers as h
from appserver import call, running_app
from core.trace import MAX_BYTES


@pytest.fixture(scope="module")
def url():
    with running_app() as u:
        yield u


@pytest.fixture(scope="module")
def client(url):
    return Client(url, verbose=False)


def knobs(**overrides):
    return [{**h.DEFAULTS, "scale": 4, "tau": 0.0, **overrides}[k] for k in h.KNOBS]


@pytest.mark.parametrize("knob, value", [
    ("seed", None), ("seed", ""), ("seed", "abc"), ("seed", [1]), ("seed", 1.5), ("seed", 2 ** 63),
    ("tau", "abc"), ("tau", None), ("tau", [0.1]), ("tau", math.nan), ("k", "many"), ("radius", 1e9),
    ("temperature", 1e-40), ("temperature", 1e-300), ("cfg", math.inf), ("cfg", 1e308), ("method", ["mulo"]),
    ("prompt", 7), ("model", "../../etc"), ("gamma", 10 ** 6),
])
def test_a_knob_of_the_wrong_type_or_range_is_named(url, knob, value):
    msg = call(url, "generate", [False, *knobs(**{knob: value})])
    assert not msg["success"] and knob in (msg["output"].get("error") or ""), msg


def test_a_seed_keeps_its_exact_value(client):
    seed = 2 ** 63 - 1
    out = client.predict(False, *knobs(seed=seed), api_name="/generate")
    assert f"seed {seed}" in out[0]
    with open(out[1]) as f:
        assert f'"seed": {seed}' in f.read()


def test_an_unknown_prompt_word_is_echoed_short(client):
    with pytest.raises(Exception) as refused:
        client.predict(False, *knobs(prompt="a " + "x" * 400 + " circle center on a striped blue background"),
                       api_name="/generate")
    assert "'" + "x" * 37 + "...'" in str(refused.value) and "x" * 41 not in str(refused.value)
    with pytest.raises(Exception, match="prompt must be at most 500 characters"):
        client.predict(False, *knobs(prompt="a " + "x" * 5000), api_name="/generate")


def test_scrubbing_with_a_non_number_is_refused(url):
    session = uuid.uuid4().hex[:11]
    assert call(url, "generate", [False, *knobs()], session_hash=session)["success"]
    for step in (math.nan, math.inf, -math.inf, "abc", [3], 1.5):
        msg = call(url, "scrub", [None, step, False], session_hash=session)
        assert not msg["success"] and "step must be a whole number" in msg["output"]["error"], (step, msg)
    shown = call(url, "scrub", [None, 2, False], session_hash=session)   # the session's run is still there
    assert "Step 2 of" in shown["output"]["data"][1]


def test_stop_affects_only_its_own_session(url):
    mine, other = uuid.uuid4().hex[:11], uuid.uuid4().hex[:11]
    assert call(url, "stop", [], session_hash=other)["success"]
    done = call(url, "generate", [False, *knobs()], session_hash=mine)
    assert done["success"] and "Done" in done["output"]["data"][1]


def test_stop_requests_are_bounded(url, monkeypatch):
    monkeypatch.setattr(h, "STOPS_KEPT", 8)
    for _ in range(20):
        call(url, "stop", [])
    assert len(h._stop_requests) <= 8


@pytest.mark.parametrize("api_name, data, event_data", [
    ("pick_model", ["../../../etc/passwd"], None),
    ("pick_model", ["llamagen-t2i"], None),
    ("pick_model", [["embedded"]], None),
    ("regrid", [None, True], None),
    ("inspect_cell", [None], {"index": [10 ** 9, -5], "value": None}),
    ("build_prompt", [""] * 10, None),
    ("share_link", ["x" * 100] * (2 + len(h.KNOBS)), None),   # page address, preset, knobs
])
def test_private_events_do_no_more_than_the_page(url, api_name, data, event_data):
    msg = call(url, api_name, data, event_data=event_data)
    text = repr(msg)
    assert "Traceback" not in text and "pretrained_models" not in text and "/etc/passwd" not in text.replace(
        "../../../etc/passwd", "")
    if not msg["success"]:
        assert msg["output"].get("error"), msg   # a named gr.Error, not a generic failure


def test_an_upload_over_the_trace_limit_is_refused_at_the_door(url):
    before = set(files.cache_folder().rglob("*"))
    big = b"{" + b" " * MAX_BYTES + b"}"
    r = httpx.post(url + "gradio_api/upload", files={"files": ("big.json", big, "application/json")}, timeout=60)
    assert r.status_code == 413
    assert not [p for p in set(files.cache_folder().rglob("*")) - before if p.name == "big.json"]


def test_an_uploaded_trace_is_read_once_and_removed(client, url):
    _, trace_path, *_ = client.predict(False, *knobs(), api_name="/generate")
    with open(trace_path, "rb") as f:
        r = httpx.post(url + "gradio_api/upload", files={"files": ("mine.json", f.read(), "application/json")})
    uploaded = r.json()[0]
    assert os.path.exists(uploaded)
    msg = call(url, "replay", [dict(path=uploaded, meta={"_type": "gradio.FileData"}), False])
    assert msg["success"] and "no model ran" in msg["output"]["data"][1]
    assert not os.path.exists(uploaded)


def test_a_cell_click_from_any_client_is_clamped_or_named(url):
    session = uuid.uuid4().hex[:11]
    assert call(url, "generate", [False, *knobs()], session_hash=session)["success"]
    far = call(url, "inspect_cell", [None], session_hash=session, event_data={"index": [10 ** 9, -5], "value": None})
    assert far["success"] and "Cell (0, 31)" in far["output"]["data"][0]
    for index in (["a", None], [math.nan, 1], 7):
        msg = call(url, "inspect_cell", [None], session_hash=session, event_data={"index": index, "value": None})
        assert not msg["success"] and "a cell is picked by its pixel" in msg["output"]["error"], (index, msg)


def test_markup_in_a_knob_comes_back_inert(url):
    msg = call(url, "generate", [False, *knobs(method="<img src=x onerror=alert(1)>")])
    error = msg["output"]["error"]
    assert not msg["success"] and "&lt;img" in error and "<img" not in error


@pytest.mark.parametrize("knob, value", [("cfg_interval", 2 ** 64), ("cfg_interval", 10 ** 30), ("gsd_group", 10 ** 30),
                                         ("pjd_c", 2 ** 64), ("seed", 10 ** 30)])
def test_an_integer_knob_past_its_bound_is_named_with_its_range(url, knob, value):
    msg = call(url, "generate", [False, *knobs(**{knob: value})])
    error = msg["output"].get("error") or ""
    assert not msg["success"] and error.startswith(h.with_symbol(f"{knob} must be ")) and "got " in error, msg


@pytest.mark.parametrize("value", ["x" * 100_000, "<a href='https://example.com/p'>p</a>", ["Raster rejection"], 7])
def test_the_preset_endpoint_names_an_unknown_preset_short_and_inert(url, value):
    msg = call(url, "preset", [value])
    error = msg["output"].get("error") or ""
    assert not msg["success"] and error.startswith("unknown preset ") and len(error) < 1000, len(error)
    assert "<a" not in error and "x" * 41 not in error
    assert call(url, "preset", ["Raster rejection"])["success"]


def test_the_prompt_builder_takes_the_page_s_own_defaults_and_each_choice_its_menus_offer(url):
    from core.embedded.domain import parse_prompt
    config = httpx.get(url + "config", timeout=60).json()
    props = {c["id"]: c.get("props", {}) for c in config["components"]}
    dep = next(d for d in config["dependencies"] if d.get("api_name") == "build_prompt")
    menus = [props[i] for i in dep["inputs"]]
    chosen = [m["value"] for m in menus]
    for n, menu in enumerate(menus):
        for _, value in menu["choices"]:
            choice = [*chosen[:n], value, *chosen[n + 1:]]
            if choice[6] != h.NO_OBJECT and choice[3] == choice[7]:
                continue                                      # two objects in one place: refused by name
            msg = call(url, "build_prompt", choice)
            assert msg["success"], (menu["label"], value, msg)
            assert parse_prompt(msg["output"]["data"][0])     # the parser reads what the menus wrote
    assert call(url, "build_prompt", chosen)["output"]["data"][0] == h.DEFAULTS["prompt"]


def test_a_damaged_or_packed_summary_upload_is_named_and_the_app_stays_up(client, bench_folder, tmp_path):
    import gzip
    import json
    raw = (bench_folder / "summary.json").read_bytes()
    d = json.loads(raw)
    del d["prompts"]
    cases = {"missing.json": (json.dumps(d).encode(), "cannot open this summary: the summary lacks the field 'prompts'"),
             "deep.json": (b'{"schema": "mulo-bench/2", "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}",
                           "cannot open this summary: the summary nests deeper than 6 levels"),
             "packed.json": (gzip.compress(raw), "cannot open this summary: the file is gzip-compressed")}
    for name, (data, words) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(Exception) as refused:
            client.predict(handle_file(str(tmp_path / name)), api_name="/open_summary")
        assert words in str(refused.value), (name, str(refused.value))
    _, status = client.predict(handle_file(str(bench_folder / "summary.json")), api_name="/open_summary")
    assert status.startswith("Opened a precomputed sweep")


LINK = "[see](https://example.com/k)"   # a short word a trace's knobs may hold that Markdown would make a link


def test_markup_in_an_uploaded_cascade_s_knobs_reaches_the_level_title_as_plain_text(client, tmp_path):
    import json
    _, trace_path, *_ = client.predict(False, *knobs(scale=2, draft_method="mulo/scale=2"), api_name="/generate")
    with open(trace_path) as f:
        d = json.load(f)
    d["params"]["k"] = LINK
    (tmp_path / "marked.json").write_text(json.dumps(d))
    status, _, *views = client.predict(handle_file(str(tmp_path / "marked.json")), False, api_name="/replay")
    title = dict(zip(h.VIEWS, views[-len(h.VIEWS):]))["level1_title"]
    assert "Level 1 (16×16, verified by the drafter)" in title
    assert r"k = \[see\]\(https\:\/\/example\.com\/k\)" in title and LINK not in title
