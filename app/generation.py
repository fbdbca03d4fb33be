"""The Run tab's model-running events: Generate (the run streamed into the live panel while the
previous views stay, marked stale; then its ar baseline; then every view) and the button that runs
or re-times the ar baseline of the stored run; a LlamaGen or Tar pair's files fetched first on a
Space; the "step n of about N" estimate.

Owns the order of a run's updates; stopping and the remembered baseline are app.control's, the views
app.panels', the knobs app.inputs'.
"""
from __future__ import annotations

import threading
import time
from dataclasses import replace

import gradio as gr

from core import ambiguity, engine, methods
from core.config import RunConfig, SamplingConfig
from core.models import hub
from core.trace import Trace

from . import files, render
from . import quality as per_image
from .control import GPU, Stopped, ar_baseline_timed, drop_stale_copies, running, session_of, stop_requested
from .inputs import checked, run_config
from .level_rows import ROWS, rows
from .messages import plain, user_error
from .panels import VIEWS, views

_steps_seen: dict[tuple, int] = {}   # (method, params, grid) -> steps of the last such run, for "about N"


def _run_key(run: RunConfig, grid) -> tuple:
    return run.method, run.params, tuple(grid)


def expected_steps(run: RunConfig, grid) -> int:
    """About how many steps the run will take: the last run with these knobs, else the method's own
    estimate (core.methods.expected_steps)."""
    if _run_key(run, grid) in _steps_seen:
        return _steps_seen[_run_key(run, grid)]
    return methods.expected_steps(run.method, run.params, grid)


def _live(status: str, live=None, stale: bool = True) -> tuple:
    """A streaming update: the status, the live canvas, the previous run's views marked stale (or
    not), every view itself left as is."""
    out = [gr.skip()] * (5 + len(ROWS) + len(VIEWS))
    out[1] = status
    out[3] = gr.update(value=live, visible=True) if live is not None else gr.skip()
    out[4] = gr.Column(elem_classes=["results", "stale"] if stale else ["results"])
    return tuple(out)


def fetching(name: str):
    """On a Hugging Face Space, a chosen LlamaGen or Tar pair's files come from the hub first: download
    them into the hub cache on a worker thread, yielding status lines with the progress (gr.Error with
    the core's message when the hub cannot be reached). Nothing to do elsewhere or once cached."""
    family = engine.pair_family(name)
    if not hub.on_space() or family is None or not family.to_fetch(name):
        return
    seen, failed = {}, []

    def work():
        try:
            family.fetch_pair(name, progress=lambda f, done, total: seen.update(f=f, done=done, total=total))
        except Exception as e:  # reported below, on the handler's thread
            failed.append(e)
    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.5)
        if not seen:
            yield _live(f"Downloading the **{name}** files from the Hugging Face hub (first use only)…", stale=False)
        elif "/" in seen["f"]:  # a whole repository (FLAN-T5-XL): counted in files
            yield _live(f"Downloading {seen['f']}: {seen['done']} of {seen['total']} files…", stale=False)
        else:
            yield _live(f"Downloading {seen['f']}: {seen['done'] / 2**20:.0f} of {seen['total'] / 2**20:.0f} MiB…",
                        stale=False)
    if failed:
        raise gr.Error(plain(str(failed[0])))


@GPU
def generate(request: gr.Request | None, show_grid, *knobs):
    """Run the method given by the knobs (KNOBS order), streaming its canvases into the live panel
    while the previous run's views stay, marked stale; then the ar baseline; then every view.
    Yields (state, status, trace file, live canvas, results column, *ROWS, *VIEWS). After Stop the page
    shows the previous run's complete views, and says so."""
    session = session_of(request)
    drop_stale_copies(session)
    show_grid = show_grid is True
    run = run_config(*knobs)
    yield from fetching(run.model)
    pair = checked(run)
    H, W = pair.grid
    draft = (H // run.params.scale, W // run.params.scale) if run.method == "mulo" else None
    live = render.Replay((H, W), draft)
    about = expected_steps(run, (H, W))
    t0 = last = time.perf_counter()
    n = 0
    with running(session, "Generate"):
        yield _live(f"Running **{run.method}**: starting… The views below show the previous run until "
                    "this one is complete.")
        events = engine.stream(run, pair)  # each step runs in its own inference mode: any worker thread may resume it
        try:
            while True:
                out = next(events)
                if isinstance(out, Trace):
                    trace = out
                    break
                n += 1
                if stop_requested(session):
                    yield _stopped(run.method, f"at step {n - 1} of about {max(about, n)}")
                    return
                live.apply(out.to_dict())
                if n == 1 or time.perf_counter() - last > 0.3:   # the first step always shows
                    yield _live(f"Running **{run.method}**: step {n} of about {max(about, n)} ({out.phase}), "
                                f"{time.perf_counter() - t0:.1f} s. The views below show the previous run until "
                                "this one is complete.", render.canvas_image(live, pair.tokenizer, show_grid))
                    # the 0.3 s between canvases start once this one is drawn and sent: a pair whose decoder
                    # is slow to draw (Tar's, LlamaGen's) would otherwise draw a canvas after every step
                    last = time.perf_counter()
        finally:
            events.close()
        _steps_seen[_run_key(run, (H, W))] = len(trace.steps)
        while len(_steps_seen) > 64:                      # a bounded memory of recent settings
            _steps_seen.pop(next(iter(_steps_seen)))
        run_at = time.time()
        baseline, timed = None, None
        if run.method != "ar":
            yield _live(f"**{run.method}** done in {trace.totals['wall_ms'] / 1000:.1f} s; running the ar "
                        "baseline for the same prompt and seed…")
            try:
                baseline, base_at, remembered = ar_baseline_timed(run, pair, session)
            except Stopped:
                yield _stopped(run.method, "while the ar baseline ran")
                return
            timed = dict(run=run_at, baseline=base_at, baseline_remembered=remembered)
    amb = ambiguity.measure(pair, trace)   # the target over the run's tokens, once: entropy and log-lik both
    state = dict(trace=trace, baseline=baseline, timed=timed, ambiguity=amb,
                 quality=per_image.against_ar(pair, trace, baseline, probs=amb.p_final))
    yield (state, f"Done: **{run.method}**, seed {run.seed}.", files.trace_file(trace),
           gr.update(value=None, visible=False), gr.Column(elem_classes=["results"]), *rows(state), *views(state, show_grid))


def _stopped(method: str, when: str) -> tuple:
    """The last update of a stopped Generate: live panel gone, previous views no longer stale."""
    out = list(_live(f"Stopped **{method}** {when}. The views show the previous run, complete (or nothing, "
                     "if there was none); press Generate to start again.", stale=False))
    out[3] = gr.update(value=None, visible=False)
    return tuple(out)


@GPU
def add_baseline(request: gr.Request | None, state, show_grid=False):
    """Run (or time again) the ar baseline of the stored run, e.g. a replayed trace that has none;
    yields (state, status, *VIEWS)."""
    if not state:
        raise user_error("nothing to compare yet: generate an image or upload a trace first")
    trace = state["trace"]
    session = session_of(request)
    drop_stale_copies(session)
    # every sampling knob the trace ran with; a knob it lacks (an older trace): the pair's default
    sampling = {f: trace.params[f] for f in SamplingConfig.__dataclass_fields__ if f in trace.params}
    cfg = engine.resolved(RunConfig(method="ar", prompt=trace.prompt, seed=trace.seed, model=trace.model))
    cfg = replace(cfg, sampling=replace(cfg.sampling, **sampling))
    pair = checked(cfg)
    with running(session, "the ar baseline"):
        yield (gr.skip(), "Running the ar baseline for this trace's prompt and seed…",
               *(gr.skip() for _ in VIEWS))
        try:
            baseline, at, _ = ar_baseline_timed(cfg, pair, session, fresh=True)
        except Stopped:
            yield (gr.skip(), "Stopped the ar baseline; the views are unchanged.", *(gr.skip() for _ in VIEWS))
            return
    amb = state.get("ambiguity") or ambiguity.measure(pair, trace)   # a replay's, measured here
    new = dict(state, baseline=baseline, timed=dict(run=(state.get("timed") or {}).get("run"), baseline=at,
                                                    baseline_remembered=False),
               quality=per_image.against_ar(pair, trace, baseline, probs=amb.p_final), ambiguity=amb)
    yield (new, f"ar baseline timed for seed {trace.seed}.", *views(new, show_grid))
