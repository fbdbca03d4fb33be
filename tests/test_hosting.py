"""A hosted app meets clients that send anything: every knob of the wrong type is named, private
events do no more than the page can, uploads are bounded in size and volume and read from a copy of
the session's own that only it removes, Stop stays in its session and the memory it keeps is
bounded. Driven over HTTP against a launched app."""
import math
import os
import re
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from gradio_client import Client, handle_file

from app import files
from app import control, inputs, level_rows, messages, panels, replays
from app import ui, uploads
from appserver import RUNNING, call, running_app
from core.trace import MAX_BYTES


@pytest.fixture(scope="module")
def url():
    with running_app() as u:
        yield u


@pytest.fixture(scope="module")
def client(url):
    return Client(url, verbose=False)


def knobs(**overrides):
    return [{**inputs.DEFAULTS, "scale": 4, "tau": 0.0, **overrides}[k] for k in inputs.KNOBS]


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
    monkeypatch.setattr(control, "STOPS_KEPT", 8)
    for _ in range(20):
        call(url, "stop", [])
    assert len(control._stop_requests) <= 8


@pytest.mark.parametrize("api_name, data, event_data", [
    ("pick_model", ["../../../etc/passwd"], None),
    ("pick_model", ["llamagen-t2i"], None),
    ("pick_model", [["embedded"]], None),
    ("regrid", [None, True, "3, 7"], None),
    ("preset_run", [False, *knobs(seed="x")], None),
    ("inspect_cell", [None], {"index": [10 ** 9, -5], "value": None}),
    ("build_prompt", [""] * 10, None),
    ("share_link", ["x" * 100] * (2 + len(inputs.KNOBS)), None),   # page address, preset, knobs
])
def test_private_events_do_no_more_than_the_page(url, api_name, data, event_data):
    msg = call(url, api_name, data, event_data=event_data)
    text = repr(msg)
    assert "Traceback" not in text and "pretrained_models" not in text and "/etc/passwd" not in text.replace(
        "../../../etc/passwd", "")
    if not msg["success"]:
        assert msg["output"].get("error"), msg   # a named gr.Error, not a generic failure


def _files_under(root) -> set:
    """Every file under root now; os.walk skips a folder another process removes while it walks (the
    cache sweeper of a server beside this test's), where Path.rglob raises FileNotFoundError."""
    return {os.path.join(d, f) for d, _, names in os.walk(root) for f in names}


def test_an_upload_over_the_trace_limit_is_refused_at_the_door(url):
    before = _files_under(files.cache_folder())
    big = b"{" + b" " * MAX_BYTES + b"}"
    r = httpx.post(url + "gradio_api/upload", files={"files": ("big.json", big, "application/json")}, timeout=60)
    assert r.status_code == 413
    assert not [p for p in _files_under(files.cache_folder()) - before if os.path.basename(p) == "big.json"]


def _upload(url: str, data: bytes, name: str = "mine.json") -> str:
    r = httpx.post(url + "gradio_api/upload", files={"files": (name, data, "application/json")}, timeout=60)
    r.raise_for_status()
    return r.json()[0]


def _file(path: str) -> dict:
    return dict(path=path, meta={"_type": "gradio.FileData"})


@pytest.fixture(scope="module")
def trace_bytes(client) -> bytes:
    _, trace_path, *_ = client.predict(False, *knobs(), api_name="/generate")
    with open(trace_path, "rb") as f:
        return f.read()


def test_an_upload_is_read_from_the_session_s_own_copy_which_goes_once_read(url, trace_bytes):
    uploaded = _upload(url, trace_bytes)
    session = uuid.uuid4().hex[:11]
    msg = call(url, "replay", [_file(uploaded), False], session_hash=session)
    assert msg["success"] and "no model ran" in msg["output"]["data"][1]
    assert os.path.exists(uploaded)                                   # kept for any other session that sent it
    assert not list((uploads.claimed_folder() / session).glob("*"))  # the session's copy went once read


def test_six_sessions_replaying_one_file_at_once_all_replay_it(url, trace_bytes):
    """Identical uploads share one stored path; before, each replay removed it, and 2-3 of 6 sessions
    replaying at once were told the file was gone."""
    paths = {_upload(url, trace_bytes) for _ in range(6)}
    assert len(paths) == 1
    with ThreadPoolExecutor(6) as pool:
        done = list(pool.map(lambda _: call(url, "replay", [_file(next(iter(paths))), False]), range(6)))
    assert [m["success"] for m in done] == [True] * 6, [m["output"].get("error") for m in done]


def test_no_session_removes_or_reads_a_file_it_does_not_own(url, trace_bytes):
    mine, other = uuid.uuid4().hex[:11], uuid.uuid4().hex[:11]
    copy = uploads.claim(_upload(url, trace_bytes), mine)           # a copy of its own, not yet read
    msg = call(url, "replay", [_file(str(copy)), False], session_hash=other)
    assert not msg["success"] and msg["output"]["error"] == (
        "cannot replay this upload: it is another session's upload; upload the file from this page")
    assert copy.exists()
    made = call(url, "generate", [False, *knobs(seed=11)], session_hash=mine)["output"]["data"][2]["path"]
    assert call(url, "replay", [_file(made), False], session_hash=other)["success"]   # a download: read, kept
    assert os.path.exists(made) and copy.exists()
    uploads.release(copy, other)
    assert copy.exists()
    uploads.forget(mine)                                              # the owner's session ended
    assert not copy.exists()


def test_upload_volume_is_capped_in_total_and_per_request(url, monkeypatch):
    monkeypatch.setattr(uploads, "UPLOADS_TOTAL", uploads.stored_bytes() + 3 * 2 ** 20)
    codes = [httpx.post(url + "gradio_api/upload", timeout=60, files={"files": (
        f"f{n}.json", os.urandom(2 ** 20), "application/json")}) for n in range(4)]
    assert [r.status_code for r in codes] == [200, 200, 429, 429]
    assert re.fullmatch(r"upload refused: the server's uploads would pass \d+ MiB \([\d.]+ MiB stored or arriving; "
                        rf"each goes {files.UPLOAD_AGE_S} s after it was sent or last replayed\): try again shortly",
                        codes[2].text), codes[2].text
    big = httpx.post(url + "gradio_api/upload", timeout=60, content=b"x" * (uploads.REQUEST_MOST + 1),
                     headers={"content-type": "multipart/form-data; boundary=x"})
    assert (big.status_code, big.text) == (413, f"upload refused: {(uploads.REQUEST_MOST + 1) / 2 ** 20:.1f} MiB in "
                                                f"one request; at most {MAX_BYTES // 2 ** 20} MiB")
    chunked = httpx.post(url + "gradio_api/upload", timeout=60, content=iter([b"x"]),
                         headers={"content-type": "multipart/form-data; boundary=x"})
    assert (chunked.status_code, chunked.text) == (411, "upload refused: the request must give its Content-Length")


def test_what_a_session_claims_is_capped_per_window(url, trace_bytes, monkeypatch):
    monkeypatch.setattr(uploads, "SESSION_BYTES", len(trace_bytes) + 1)
    session = uuid.uuid4().hex[:11]
    uploaded = _upload(url, trace_bytes)
    assert call(url, "replay", [_file(uploaded), False], session_hash=session)["success"]
    again = call(url, "replay", [_file(uploaded), False], session_hash=session)
    assert not again["success"] and again["output"]["error"] == (
        f"cannot replay this upload: this session replayed {len(trace_bytes) / 2 ** 20:.1f} MiB of uploads in the "
        f"last {uploads.SESSION_WINDOW_S // 60} minutes; at most 0 MiB: try again later")
    assert call(url, "replay", [_file(uploaded), False])["success"]   # another session may


def test_an_upload_no_event_claims_is_swept_after_its_age(tmp_path):
    (tmp_path / "mulo" / "abc").mkdir(parents=True)
    (tmp_path / "mulo" / "abc" / "image.png").write_bytes(b"png")
    (tmp_path / "f00d").mkdir()
    (tmp_path / "f00d" / "mine.json").write_bytes(b"{}")
    now = time.time()
    assert files.sweep_unclaimed(tmp_path, now + files.UPLOAD_AGE_S - 5) == 0
    assert files.sweep_unclaimed(tmp_path, now + files.UPLOAD_AGE_S + 5) == 1
    assert not (tmp_path / "f00d").exists() and (tmp_path / "mulo" / "abc" / "image.png").exists()


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
    assert not msg["success"] and error.startswith(messages.with_symbol(f"{knob} must be ")) and "got " in error, msg


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
            if choice[6] != inputs.NO_OBJECT and choice[3] == choice[7]:
                continue                                      # two objects in one place: refused by name
            msg = call(url, "build_prompt", choice)
            assert msg["success"], (menu["label"], value, msg)
            assert parse_prompt(msg["output"]["data"][0])     # the parser reads what the menus wrote
    assert call(url, "build_prompt", chosen)["output"]["data"][0] == inputs.DEFAULTS["prompt"]


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
    title = dict(zip(panels.VIEWS, views[-len(panels.VIEWS):]))["level1_title"]
    assert "Level 1 (16×16, verified by the drafter)" in title
    assert r"k = \[see\]\(https\:\/\/example\.com\/k\)" in title and LINK not in title


def test_names_of_swept_files_do_not_stay_in_gradio_s_lists(tmp_path):
    kept, swept = tmp_path / "kept.png", tmp_path / "swept.png"
    kept.write_bytes(b"png")

    class Blocks:
        temp_file_sets = [{str(kept), str(swept)}, {str(swept)}]
    assert files.forget_swept(Blocks) == 2 and Blocks.temp_file_sets == [{str(kept)}, set()]


def test_a_session_keeps_a_bounded_number_of_components_however_many_runs(url):
    """Gradio keeps one more copy of each view a Generate skips while streaming and then fills (24 a
    run, ~0.5 MB, the soak's creep); the app drops them at the session's next run."""
    demo, session = RUNNING[url], uuid.uuid4().hex[:11]
    kept = []
    for n in range(5):
        assert call(url, "generate", [False, *knobs(tau=0.01 * (n + 1))], session_hash=session)["success"]
        kept.append(len(demo.state_holder[session].blocks_config.blocks))
    most = len(demo.blocks) + len(panels.VIEWS) + len(level_rows.ROWS) + 8
    assert kept[1:] == [kept[1]] * 4 and kept[1] <= most, kept


def test_replays_are_read_a_few_at_once(url, trace_bytes, monkeypatch):
    reading, most, lock = [0], [0], threading.Lock()
    load = replays.load_trace

    def counted(*a, **kw):
        with lock:
            reading[0] += 1
            most[0] = max(most[0], reading[0])
        try:
            time.sleep(0.5)
            return load(*a, **kw)
        finally:
            with lock:
                reading[0] -= 1
    monkeypatch.setattr(replays, "load_trace", counted)
    uploaded = _upload(url, trace_bytes)
    with ThreadPoolExecutor(5) as pool:
        done = list(pool.map(lambda _: call(url, "replay", [_file(uploaded), False]), range(5)))
    assert all(m["success"] for m in done) and most[0] == ui.REPLAYS_AT_ONCE


def test_a_file_is_stored_when_the_sweeper_takes_its_empty_folder_or_the_file_itself_meanwhile(tmp_path, monkeypatch):
    """The races a loaded server met (24 burst clients): the sweeper removes the empty folder _store has
    just made before the temporary file is created in it, or removes the stored file after _store looked
    for it and before it touched it. Either way the file is stored whole and the run goes on."""
    import tempfile
    monkeypatch.setattr(files, "cache_folder", lambda: tmp_path)
    real_mkstemp = tempfile.mkstemp

    def swept_first(dir, prefix):
        os.rmdir(dir)                             # the sweeper's rmdir of an empty folder, between the two
        monkeypatch.setattr(files.tempfile, "mkstemp", real_mkstemp)
        return real_mkstemp(dir=dir, prefix=prefix)
    monkeypatch.setattr(files.tempfile, "mkstemp", swept_first)
    path = files._store(b"one", "a.json")
    assert open(path, "rb").read() == b"one" and os.listdir(os.path.dirname(path)) == ["a.json"]
    real_utime = os.utime

    def gone_before_touch(p, *a, **kw):
        os.remove(p)                              # swept after it was found, before it was touched
        monkeypatch.setattr(files.os, "utime", real_utime)
        return real_utime(p, *a, **kw)
    monkeypatch.setattr(files.os, "utime", gone_before_touch)
    assert files._store(b"one", "a.json") == path and open(path, "rb").read() == b"one"
