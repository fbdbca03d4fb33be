"""An uploaded trace replayed with no model run: read as data only (size, JSON, every field's type
and range, its grids against a pair found on this machine) from the session's own copy of the
upload (app.uploads), then every view of it.

Knows the file and its limits, not the views (app.panels) nor where uploads are kept (app.uploads);
the download of a run's trace is app.files'.
"""
from __future__ import annotations

import gradio as gr

from core import engine
from core.trace import MAX_BYTES, Limits, Trace, TraceError

from . import files, uploads
from .control import session_of
from .inputs import FLOATS, KNOBS, SLIDERS, _INTS

NUMBERS = FLOATS | _INTS
from .level_rows import rows
from .messages import user_error, user_errors
from .panels import views


def trace_limits(name: str) -> Limits:
    """What a trace made with the pair `name` may hold: that pair's grids and codebook. Only pairs
    found on this machine qualify (ValueError otherwise), so a file never makes the app load weights
    it would not offer in its own menu."""
    found = engine.found_pairs()
    if name not in found:
        raise ValueError(f"it was made with the model pair {name!r}, which is not on this machine "
                         f"(available: {', '.join(found)})")
    pair = engine.load_pair(name)
    H, W = pair.grid
    return Limits((H, W), tuple((H // r, W // r) for r in pair.scales if H % r == 0 and W % r == 0),
                  pair.vocab_size)


def load_trace(path: str | None, session: str | None = None) -> Trace:
    """Read an uploaded trace as data only: size, JSON, every field's type and range, and its grids
    against the model pair's own, before anything is sized by them (gr.Error otherwise). The upload is
    read from the session's own copy (uploads.claim), which the session removes once read; the
    upload itself stays for any other session that sent the same file."""
    if not path:
        raise user_error("no file: choose a trace JSON file to replay")
    try:
        own = uploads.claim(path, session)
    except uploads.UploadError as e:
        raise user_error(f"cannot replay this upload: {e}") from None
    try:
        with user_errors("cannot replay this trace: "):
            size = own.stat().st_size
            if size > MAX_BYTES:
                raise TraceError(f"the file is {size / 2**20:.1f} MiB; at most {MAX_BYTES // 2**20} MiB are read")
            with open(own, "rb") as f:
                text = f.read()
            return Trace.from_json(text, trace_limits)
    finally:
        uploads.release(own, session)


def knobs_of(state) -> tuple:
    """The sidebar as the stored run was made: every knob (inputs.KNOBS order) from the trace, a slider
    widened where the trace's value lies past its end, then no preset (the trace's own knobs are shown)."""
    if not state:
        return tuple(gr.skip() for _ in (*KNOBS, "preset"))
    t = state["trace"]
    made = dict(t.params, method=t.method, prompt=t.prompt, seed=t.seed, model=t.model)
    out = []
    for k in KNOBS:
        if k not in made:
            out.append(gr.skip())
            continue
        lo, hi, _ = SLIDERS.get(k, (None, None, None))
        v = made[k]
        number = isinstance(v, (int, float)) and not isinstance(v, bool)
        if (k in NUMBERS) != number:   # a value a knob cannot hold (a hand-edited trace) leaves the knob alone
            out.append(gr.skip())
            continue
        out.append(gr.update(value=v, minimum=min(lo, v), maximum=max(hi, v))
                   if lo is not None and number and not lo <= v <= hi else v)
    return (*out, None)


def replay(path, show_grid=False, request: gr.Request | None = None):
    """Upload handler: (state, status, trace file, *ROWS, *VIEWS) of an uploaded trace, with no model run.
    The state keeps the trace as read (its steps compact, core.trace.Steps), not the file's text."""
    trace = load_trace(path, session_of(request))
    state = dict(trace=trace, baseline=None)
    try:
        shown = views(state, show_grid)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise user_error(f"cannot replay this trace: its steps are malformed ({type(e).__name__})") from None
    return (state, f"Replayed an uploaded **{trace.method}** trace (seed {trace.seed}); no model ran. It has "
                   "no ar baseline: press *Run or re-time the ar baseline* (Run tab) to time one.",
            files.trace_file(trace), *rows(state), *shown)
