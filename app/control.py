"""Run control and sessions: which session runs what, its Stop button (the run ends at its next step),
the engine run to its Trace stoppably, the ar baseline remembered across runs of one prompt and seed,
and what a session leaves behind when its page closes (Stop flags, Gradio's stale copies, uploads).
GPU wraps the model-running handlers for ZeroGPU where `spaces` is installed.

Knows no view and no knob: the handlers that run (app.generation, app.comparison) call it.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import replace

import gradio as gr
from gradio.context import LocalContext

from core import engine
from core.config import MethodParams, RunConfig
from core.trace import Trace

from . import uploads

try:
    import spaces
    GPU = spaces.GPU
except ImportError:
    def GPU(f):
        return f


class Stopped(Exception):
    """The session pressed Stop; the run ends at its next step."""


STOPS_KEPT = 1024                            # Stop requests remembered at most (the oldest go first)
_stop_lock = threading.Lock()
_running: dict[str | None, str] = {}         # session -> what it is running now (Generate, Compare, Sweep)
_stop_requests: OrderedDict = OrderedDict()  # session -> when Stop was last pressed during its run


def session_of(request: gr.Request | None) -> str | None:
    return request.session_hash if request is not None else None


@contextmanager
def running(session: str | None, what: str):
    """Mark the session's run for `stop`; a Stop pressed before the run started does not end it."""
    _running[session] = what
    with _stop_lock:
        _stop_requests.pop(session, None)
    try:
        yield
    finally:
        _running.pop(session, None)


def stop_requested(session: str | None) -> bool:
    """Whether Stop was pressed during the session's run."""
    return session in _stop_requests


def check_stop(session: str | None) -> None:
    if stop_requested(session):
        raise Stopped


def run_stoppable(cfg: RunConfig, pair, session: str | None = None) -> Trace:
    """engine.stream to its Trace, ending with Stopped at the first step after a Stop of the session."""
    for out in engine.stream(cfg, pair):
        if isinstance(out, Trace):
            return out
        check_stop(session)
    raise AssertionError("engine.stream ended without a Trace")


def stop(request: gr.Request):
    """The Stop button: the session's Generate, Compare or Sweep ends at its next step and says so
    itself (its last update restores a consistent page). Says so when nothing is running. Only the
    caller's own session is flagged, and at most STOPS_KEPT sessions are remembered."""
    session = session_of(request)
    if session not in _running:
        return "Nothing is running: Stop ends a Generate, Compare or Sweep while it runs."
    with _stop_lock:
        _stop_requests[session] = time.time()
        _stop_requests.move_to_end(session)
        while len(_stop_requests) > STOPS_KEPT:
            _stop_requests.popitem(last=False)
    return gr.skip()


def drop_stale_copies(session: str | None) -> None:
    """Gradio (6.x) keeps in a session one more copy of an output component each time the output is
    skipped (gr.skip, a Generate's views while it streams) and later given a value: 24 components, about
    0.5 MB, a run, for as long as the session lives. Drop the session's copies that are not one of the
    page's own components (each output keeps the one it uses)."""
    blocks = LocalContext.blocks.get(None)
    if blocks is None or session is None or session not in blocks.state_holder:
        return
    kept = blocks.state_holder[session]
    for key in [k for k in kept.blocks_config.blocks if k not in blocks.blocks]:
        kept.blocks_config.blocks.pop(key, None)
        kept.config_values.pop(key, None)


def forget(request: gr.Request) -> None:
    """A session ended (its page closed): drop what the app keeps for it outside gr.State, its
    uploads' own copies included."""
    if request is not None:
        with _stop_lock:
            _stop_requests.pop(request.session_hash, None)
        uploads.forget(request.session_hash)


_baselines: OrderedDict = OrderedDict()   # key -> (ar Trace, epoch seconds it was timed)


def ar_baseline(cfg: RunConfig, pair, session: str | None = None, fresh: bool = False) -> Trace:
    """The ar run with cfg's prompt, seed and sampling; remembered, since a workshop reruns one
    prompt with many knob settings (`fresh` times it again). Stoppable like any run of the session."""
    return ar_baseline_timed(cfg, pair, session, fresh)[0]


def ar_baseline_timed(cfg: RunConfig, pair, session: str | None = None,
                      fresh: bool = False) -> tuple[Trace, float, bool]:
    """(ar Trace, when it was timed, whether it was remembered rather than run now)."""
    cfg = engine.resolved(cfg, pair)   # remembered under the sampling that runs (None: the pair's defaults)
    key = (pair.name, cfg.prompt, cfg.seed, cfg.sampling)
    remembered = key in _baselines and not fresh
    if not remembered:
        _baselines[key] = (run_stoppable(replace(cfg, method="ar", params=MethodParams()), pair, session),
                           time.time())
        while len(_baselines) > 16:
            _baselines.popitem(last=False)
    trace, at = _baselines[key]
    return trace, at, remembered
