"""Uploaded traces are data from strangers: every crafted file is refused with one clear message,
quickly and before anything is sized by it; real traces still replay."""
import gzip
import json
import os
import re
import time
import tracemalloc

import gradio as gr
import pytest

from app import replays
from app import plots
from core.trace import MAX_BYTES, Steps, Trace
from crafted import crafted, largest_accepted, millions_of_numbers, real_trace


@pytest.fixture(scope="module")
def base():
    return real_trace()


@pytest.fixture(scope="module")
def files(base, tmp_path_factory):
    folder = tmp_path_factory.mktemp("crafted")
    out = {}
    for n, (name, text) in enumerate(crafted(base).items()):
        out[name] = folder / f"crafted-{n}.json"
        out[name].write_text(text)
    return out


def test_a_real_trace_replays_within_its_pair_s_limits(base, tmp_path):
    path = tmp_path / "real.json"
    path.write_text(json.dumps(base))
    state, status, *_ = replays.replay(str(path))
    assert "no model ran" in status and state["trace"].to_dict() == base


@pytest.mark.parametrize("name", list(crafted(real_trace()).keys()))
def test_a_crafted_trace_is_refused_with_one_clear_message(files, name):
    t0 = time.perf_counter()
    with pytest.raises(gr.Error) as refused:
        replays.replay(str(files[name]))
    assert time.perf_counter() - t0 < 10.0   # (a loaded 2-core machine: about 3 s at most)
    message = refused.value.message
    assert message.startswith("cannot replay this trace: ")
    assert not re.search(r"<[A-Za-z/!]", message) and "\x00" not in message and len(message) < 400  # no markup


def test_a_gzip_upload_is_named_as_gzip(base, tmp_path):
    """Before: random bytes behind gzip's header were refused as nesting deeper than 8 levels; a
    compressed real trace is as much a gzip file as random bytes are."""
    for n, data in enumerate((gzip.compress(os.urandom(300_000)), gzip.compress(json.dumps(base).encode()))):
        path = tmp_path / f"trace{n}.json"
        path.write_bytes(data)
        with pytest.raises(gr.Error) as refused:
            replays.replay(str(path))
        assert refused.value.message == ("cannot replay this trace: the file is gzip-compressed: unpack it and "
                                         "give the trace .json itself"), refused.value.message
    path.write_bytes(json.dumps(base).encode())   # the control: the same trace unpacked replays
    assert replays.replay(str(path))[0]["trace"].to_dict() == base


def _replay_traced(path) -> tuple[object, int, int]:
    """(the session state replays.replay returned, or what it raised; peak and still-held traced bytes)."""
    tracemalloc.start()
    try:
        out = replays.replay(str(path))[0]   # the state a session keeps; the views go to the page
    except gr.Error as e:
        out = e
    now, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return out, peak, now


def test_millions_of_numbers_in_one_step_are_refused_before_they_are_parsed(base, tmp_path):
    """The file of the issue: 6.3 M numbers in one step's prob, 24 MiB. Parsed whole it took ~240 MB and
    was accepted; now the step is refused by its count of values, unread."""
    path = tmp_path / "numbers.json"
    path.write_text(millions_of_numbers(base))
    out, peak, _ = _replay_traced(path)
    assert isinstance(out, gr.Error) and re.fullmatch(
        rf"cannot replay this trace: step {len(base['steps'])} holds more than \d+ values; a step of this run "
        r"holds at most that many \(16 per cell of its largest grid\)", out.message), out
    assert peak < 2 * MAX_BYTES, peak / 2 ** 20     # the file's bytes and the scan's pieces, nothing parsed


@pytest.mark.long("the largest trace the reader accepts, replayed under tracemalloc")
def test_a_replayed_trace_keeps_its_steps_as_text_about_the_size_of_the_file(base, tmp_path):
    """The largest trace the reader accepts (every step and cell its budgets allow): what the session keeps
    is its steps' text, not the parsed lists (about ten times more)."""
    text = largest_accepted(base)
    path = tmp_path / "largest.json"
    path.write_text(text)
    state, peak, held = _replay_traced(path)
    assert isinstance(state["trace"].steps, Steps) and state["trace"].to_json() == text
    assert held < len(text) / 4, (held / 2 ** 20, len(text) / 2 ** 20)
    assert peak < 6 * len(text), peak / 2 ** 20


def test_an_html_method_is_not_echoed_as_markup(files):
    with pytest.raises(gr.Error) as refused:
        replays.replay(str(files["method with HTML"]))
    assert "&lt;img" in refused.value.message and "<img" not in refused.value.message


def test_grids_are_checked_against_the_pair_before_the_tokens(base):
    """A draft grid the pair never drafts on, and no draft: refused for the grid, never sized."""
    d = dict(base, grid=dict(target=[32, 32], draft=[64, 64]), draft=None)
    with pytest.raises(ValueError, match=r"grid.draft is \[64, 64\]; the embedded pair drafts on 16x16 or 8x8"):
        Trace.from_json(json.dumps(d), replays.trace_limits)


def test_a_trace_without_a_pair_is_bounded_by_its_own_grid(base):
    assert Trace.from_json(json.dumps(base)).to_dict() == base
    with pytest.raises(ValueError, match="at most"):
        Trace.from_json(json.dumps(dict(base, steps=[base["steps"][-1]] * 60_000)))


def _steps(n: int) -> list[dict]:
    phases = ("draft", "upsample", "verify", "resample", "refresh")
    return [dict(phase=phases[i % 5], model=None, nfe=i % 3, wall_ms=0.5 + (i % 7) / 10, cells=[])
            for i in range(n)]


class _Run:
    def __init__(self, steps, method="mulo"):
        self.steps, self.method = steps, method


def test_the_timeline_costs_the_phases_not_the_steps():
    steps = _steps(500_000)
    t0 = time.perf_counter()
    fig = plots.timeline(_Run(steps))
    assert time.perf_counter() - t0 < 10.0
    assert len(fig.data) <= 6 and sum(len(bar.x) for bar in fig.data) <= plots.MAX_BARS
    # the slices still add up to the run: every millisecond, step and pass is drawn once
    assert sum(sum(bar.x) for bar in fig.data) == pytest.approx(sum(s["wall_ms"] for s in steps))
    assert sum(sum(int(c[0]) for c in bar.customdata) for bar in fig.data) == len(steps)
    assert sum(sum(int(c[1]) for c in bar.customdata) for bar in fig.data) == sum(s["nfe"] for s in steps)


def test_a_short_run_keeps_one_bar_per_phase_change():
    steps = _steps(40)
    fig = plots.timeline(_Run(steps))
    assert sum(len(bar.x) for bar in fig.data) == 40
    starts = sorted(b for bar in fig.data for b in bar.base)
    assert starts[1] == pytest.approx(steps[0]["wall_ms"])
