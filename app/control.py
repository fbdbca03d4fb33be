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
from .line import LINE, SAY_AGAIN_S, TICK_S, Full, Ticket
from .messages import user_error

try:
    import spaces
    GPU, ZERO_GPU = spaces.GPU, True
except ImportError:
    ZERO_GPU = False

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


def waited(session: str | None, what: str, seconds: float | None, ready=lambda: None, say=lambda words: words):
    """Join the model's line (app.line) and wait for the turn, yielding say(words) with the place and the
    estimate every TICK_S. Returns the Ticket once it is first (the caller leaves it when its run is done),
    or, the ticket left, ready()'s value as soon as that is not None (the request answered without the
    model). gr.Error when the line is full; Stopped, the ticket left, when the session presses Stop (the
    caller marks the session `running` first, so that Stop sees it)."""
    try:
        ticket = LINE.join(session, what, seconds)
    except Full as e:
        raise user_error(str(e)) from None
    said, said_at = None, 0.0
    try:
        while True:
            turn_came = LINE.wait(ticket, TICK_S)
            got = ready()   # asked once more when the turn comes: the run ahead may have been this one's twin
            if got is not None:
                LINE.leave(ticket)
                return got
            if turn_came:
                return ticket
            check_stop(session)
            words = LINE.words(ticket)
            # a new place is said at once, the same place again every SAY_AGAIN_S: thirty waiting tabs told
            # twice a second would spend the machine's time on updates instead of the run they wait for
            if words is not None and (words.split(",")[0] != (said or "").split(",")[0]
                                      or time.monotonic() - said_at >= SAY_AGAIN_S):
                said, said_at = words, time.monotonic()
                yield say(words)
    except BaseException:   # Stopped, an error, or the page gone (the generator closed)
        LINE.leave(ticket)
        raise


class _Hold:
    """The line ticket a handler holds (turn())."""
    ticket: Ticket | None = None

    def wait(self, session: str | None, what: str, seconds: float | None, say=lambda words: words,
             ready=lambda: None):
        """waited(...), the ticket kept here for turn() to leave; returns it, or ready()'s value."""
        got = yield from waited(session, what, seconds, ready, say)
        if isinstance(got, Ticket):
            self.ticket = got
        return got


@contextmanager
def turn():
    """`with turn() as hold: yield from hold.wait(session, what, seconds, say)`: the handler's place in the
    model's line, left on the way out whatever happens (done, stopped, failed, the page gone)."""
    hold = _Hold()
    try:
        yield hold
    finally:
        if hold.ticket is not None:
            LINE.leave(hold.ticket)


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
