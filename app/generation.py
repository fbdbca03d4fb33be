"""The Run tab's model-running events: Generate (the run streamed into the live panel while the
previous views stay, marked stale; then its ar baseline; then every view) and the button that runs
or re-times the ar baseline of the stored run; a LlamaGen or Tar pair's files fetched first on a
Space; the "step n of about N" estimate.

A run is a function of (pair, knobs, prompt, seed): a finished one is remembered (RUNS, bounded by its
bytes), so a repeated request -- a class pressing the same Generate -- is answered at once, without
waiting behind the model's line, and says so; identical requests that arrive while it runs wait in the
line and take it from there when it finishes, so it is computed once.

Owns the order of a run's updates; stopping and the remembered baseline are app.control's, the model's
line app.line's, the views app.panels', the knobs app.inputs'.
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

from . import files, render, shipped
from . import quality as per_image
from .control import GPU, Stopped, ar_baseline_timed, drop_stale_copies, running, session_of, stop_requested, turn
from .inputs import checked, run_config
from .level_rows import ROWS, rows
from .line import DURATIONS, Ticket
from .messages import plain, user_error
from .panels import VIEWS, views
from .remembered import Remembered

RUNS_BYTES = 96 * 2 ** 20   # finished runs remembered, by their compact bytes (RUNS)

_steps_seen: dict[tuple, int] = {}   # (method, params, grid) -> steps of the last such run, for "about N"


def _run_key(run: RunConfig, grid) -> tuple:
    return run.method, run.params, tuple(grid)


def expected_steps(run: RunConfig, grid) -> int:
    """About how many steps the run will take: the last run with these knobs, else the method's own
    estimate (core.methods.expected_steps)."""
    if _run_key(run, grid) in _steps_seen:
        return _steps_seen[_run_key(run, grid)]
    return methods.expected_steps(run.method, run.params, grid)


def _compact(trace: Trace | None) -> Trace | None:
    """The trace as a session keeps a replayed one: its steps as compressed blocks of their text."""
    return None if trace is None else Trace.from_json(trace.to_json())


def _state_bytes(state: dict) -> int:
    """About the bytes a remembered run holds: its traces' compressed steps, their token grids (a
    Python int list costs about 40 bytes a cell) and the per-cell arrays of its ambiguity."""
    total = 0
    for t in (state["trace"], state["baseline"]):
        if t is not None:
            total += t.steps.nbytes() + 40 * 3 * t.grid["target"][0] * t.grid["target"][1]
    amb = state.get("ambiguity")
    return total + (sum(getattr(amb, f).nbytes for f in ("entropy", "top1", "top1_token", "p_final")) if amb else 0)


# finished runs by their resolved RunConfig: (monotonic time it finished, (state, its bytes))
RUNS = Remembered(RUNS_BYTES, lambda kept: kept[1])


def _remembered(key) -> tuple[float, dict] | None:
    hit = RUNS.recall(key)
    return None if hit is None else (hit[0], hit[1][0])


def _shipped_state(key: RunConfig, pair) -> dict | None:
    """The state of a shipped run of these settings (app.shipped) with its shipped ar baseline, its
    ambiguity and quality measured here (the target's forwards over its tokens; no generation), or None."""
    trace = shipped.trace_for(key)
    baseline = None if key.method == "ar" else shipped.trace_for(shipped.ar_of(key))
    if trace is None or (key.method != "ar" and baseline is None):
        return None
    amb = ambiguity.measure(pair, trace)
    return dict(trace=trace, baseline=baseline, timed=dict(shipped=True), ambiguity=amb,
                quality=per_image.against_ar(pair, trace, baseline, probs=amb.p_final))


def warm_shipped() -> int:
    """Measure the shipped Generate runs (app.shipped) into RUNS before anyone asks: their ambiguity and
    quality, the target's forwards over their tokens; the first click of a preset then only draws. How
    many were warmed."""
    n = 0
    for cfg in shipped.configs():
        key = engine.resolved(cfg)
        if _remembered(key) is None:
            state = _shipped_state(key, engine.load_pair(cfg.model))
            if state is not None:
                RUNS.keep(key, (state, _state_bytes(state)))
                n += 1
    return n


def _answer(state: dict, ago: float, show_grid: bool) -> tuple:
    """The last update of a Generate answered from a remembered run: its views, the headline marked."""
    trace = state["trace"]
    if (state["timed"] or {}).get("shipped"):
        said = ("a run shipped with the app for these knobs on the default prompt and seed, shown at once "
                "(press Run it live to run it here)")
    else:
        state = dict(state, timed=dict(state["timed"] or {}, cached=ago))
        said = (f"from the cache: this pair, knobs, prompt and seed finished {ago:.0f} s ago, and every figure "
                "on the page is that run's")
    return (state, f"Done: **{trace.method}**, seed {trace.seed}, {said}.",
            files.trace_file(trace), gr.update(value=None, visible=False), gr.Column(elem_classes=["results"]),
            *rows(state), *views(state, show_grid))


def _seconds_expected(run: RunConfig, pair, key) -> float | None:
    """What a Generate of these settings is expected to take: the last one's own time, else the method's
    expected steps at this pair's measured seconds per step (None: nothing of this pair measured yet)."""
    same = DURATIONS.get(("Generate", key))
    if same is not None:
        return same
    per_step = DURATIONS.get(("step s", pair.name))
    return None if per_step is None else per_step * (expected_steps(run, pair.grid) + (0 if run.method == "ar" else 1024))


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
    shows the previous run's complete views, and says so. Settings that ran before (RUNS) or ship with
    the app (app.shipped) are answered at once, without the model, and the page says which."""
    yield from _generate(request, show_grid, knobs, fresh=False)


@GPU
def generate_live(request: gr.Request | None, show_grid, *knobs):
    """Run it live: Generate that runs the model whatever is remembered or shipped (and remembers it)."""
    yield from _generate(request, show_grid, knobs, fresh=True)


def shipped_answer(request: gr.Request | None, show_grid, *knobs):
    """After a preset is picked: its shipped run (or the same settings' remembered one) shown at once, as
    Generate would show it; nothing changes where the knobs have neither (press Generate)."""
    run = run_config(*knobs)
    pair = checked(run)
    key = engine.resolved(run, pair)
    if _remembered(key) is None and not shipped.has(key):
        return tuple(gr.skip() for _ in range(5 + len(ROWS) + len(VIEWS)))
    return list(_generate(request, show_grid, knobs, fresh=False))[-1]


def _generate(request, show_grid, knobs, fresh: bool):
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
    key = engine.resolved(run, pair)
    hit = None if fresh else _remembered(key)
    if hit is None and not fresh and shipped.has(key):
        state = _shipped_state(key, pair)
        RUNS.keep(key, (state, _state_bytes(state)))
        hit = (0.0, state)
    if hit is not None:
        yield _answer(hit[1], hit[0], show_grid)
        return
    n = 0
    with running(session, "Generate"), turn() as hold:
        try:
            got = yield from hold.wait(session, "Generate", _seconds_expected(run, pair, key),
                                       lambda words: _live(words, stale=False),
                                       (lambda: None) if fresh else (lambda: _remembered(key)))
        except Stopped:
            yield _stopped(run.method, "while it waited in the model's line")
            return
        if not isinstance(got, Ticket):   # an identical run finished while this one waited
            yield _answer(got[1], got[0], show_grid)
            return
        t0 = last = time.perf_counter()
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
        took = time.perf_counter() - t0       # the model's time this request held the line
        DURATIONS.note(("Generate", key), took)
        DURATIONS.note(("step s", pair.name), took / (len(trace.steps) + (
            0 if baseline is None or remembered else len(baseline.steps))))
        kept = dict(state, trace=_compact(trace), baseline=_compact(baseline))
        RUNS.keep(key, (kept, _state_bytes(kept)))   # before the line moves on: the next identical request takes it
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
    with running(session, "the ar baseline"), turn() as hold:
        try:
            yield from hold.wait(session, "the ar baseline", DURATIONS.get(("the ar baseline", pair.name)),
                                 lambda words: (gr.skip(), words, *(gr.skip() for _ in VIEWS)))
            t0 = time.perf_counter()
            yield (gr.skip(), "Running the ar baseline for this trace's prompt and seed…",
                   *(gr.skip() for _ in VIEWS))
            baseline, at, _ = ar_baseline_timed(cfg, pair, session, fresh=True)
        except Stopped:
            yield (gr.skip(), "Stopped the ar baseline; the views are unchanged.", *(gr.skip() for _ in VIEWS))
            return
        amb = state.get("ambiguity") or ambiguity.measure(pair, trace)   # a replay's, measured here
        new = dict(state, baseline=baseline, timed=dict(run=(state.get("timed") or {}).get("run"), baseline=at,
                                                        baseline_remembered=False),
                   quality=per_image.against_ar(pair, trace, baseline, probs=amb.p_final), ambiguity=amb)
        DURATIONS.note(("the ar baseline", pair.name), time.perf_counter() - t0)
    yield (new, f"ar baseline timed for seed {trace.seed}.", *views(new, show_grid))
