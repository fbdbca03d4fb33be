"""What the UI's events call: plain functions and generators of plain values.

Only `generate`, `compare` and `sweep` run the engine (wrapped for ZeroGPU, kept synchronous);
every other handler derives its views from a stored Trace. Bad input becomes a gr.Error that names
the problem, raised here at the boundary so the app stays up.
"""
from __future__ import annotations

import math
import os
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import replace
from functools import lru_cache
from urllib.parse import urlencode

import gradio as gr
import torch

from core import bench, engine, report
from core.config import MethodParams, ParameterError, RunConfig, SamplingConfig
from core.embedded import family
from core.embedded.domain import COLS, ROWS, PromptError, parse_prompt
from core.embedded.evaluate import quality as measured_quality
from core.methods import registry
from core.models import hub
from core.trace import MAX_BYTES, Limits, Trace, TraceError

from . import files, plots, render

try:
    import spaces
    GPU = spaces.GPU
except ImportError:
    def GPU(f):
        return f

# the knobs, in the order the UI passes them; names match RunConfig / MethodParams / SamplingConfig fields
KNOBS = ("method", "prompt", "seed", "k", "tau", "scale", "radius", "window", "draft_window", "draft_rows",
         "upsampler", "resample", "rejection", "context", "gamma", "delta", "lantern_k", "sjd_window", "sjd_init",
         "cfg", "temperature", "top_k", "model", "cfg_interval")
_PARAM_FIELDS = ("k", "tau", "scale", "radius", "window", "draft_window", "draft_rows", "upsampler", "resample",
                 "rejection", "context", "gamma", "delta", "lantern_k", "sjd_window", "sjd_init")
_SAMPLING_FIELDS = ("cfg", "temperature", "top_k", "cfg_interval")
_INTS = {"seed", "k", "scale", "radius", "window", "draft_window", "draft_rows", "gamma", "lantern_k", "sjd_window",
         "top_k", "cfg_interval"}
_FLOATS = {"tau", "delta", "cfg", "temperature"}
DEFAULTS = dict(method=RunConfig.method, prompt=RunConfig.prompt, seed=RunConfig.seed,
                **{f: getattr(MethodParams(), f) for f in _PARAM_FIELDS},
                **{f: getattr(SamplingConfig(), f) for f in _SAMPLING_FIELDS}, model=RunConfig.model)

PRESETS: dict[str, tuple[str, dict]] = {
    "Default operating point": (f"MuLo-SD at this project's tuned default (the paper publishes no numeric τ or k): "
                      f"r = {DEFAULTS['scale']}, k = {DEFAULTS['k']} neighbours pooled, "
                      f"τ = {DEFAULTS['tau']:g}, {DEFAULTS['rejection']} rejection with radius {DEFAULTS['radius']}, "
                      f"resampling: {DEFAULTS['resample']}.", {}),
    "Everything accepted (τ = 0)": ("With τ = 0 every pooled mass passes: the image is the up-sampled draft, "
                                    "and the target runs one verification pass (after reading the prompt).",
                                    dict(tau=0.0)),
    "A few rejection islands": ("A low τ with wide pooling: most proposals pass, and each rejection grows by "
                                "the radius into a small island that the target resamples.",
                                dict(tau=0.01, k=16, radius=1)),
    "Raster rejection": ("The classic rule: the proposal is kept up to the first rejection, the target "
                         "resamples that one token, then the drafter drafts the rest again and the target "
                         "verifies again, cycle after cycle. Compare its passes with local rejection.",
                         dict(rejection="raster")),
    "Local rejection, no expansion (l = 0)": ("Only the rejected cells themselves are resampled; their "
                                               "neighbours keep the proposal.", dict(radius=0)),
    "No pooling (k = 0)": ("Only the proposal token's own probability counts; many more rejections.",
                           dict(k=0)),
    "Serial resampling": ("Rejected cells resampled one per target pass in raster order: more NFE than "
                          "island-parallel resampling, same rule.", dict(resample="serial")),
    "4× up-scaling": ("The drafter works on an 8×8 grid (r = 4): 16× fewer draft tokens, a rougher proposal.",
                      dict(scale=4)),
    "ZipAR baseline": ("No drafter: the target decodes several rows at once, each row starting once the "
                       "row above has `window` tokens.", dict(method="zipar", window=8)),
    "AR baseline": ("One token per target pass, in raster order: the reference for speed and quality.",
                    dict(method="ar")),
}


@contextmanager
def user_errors(what: str = ""):
    """Turn the core's errors about bad input into a gr.Error with the same message."""
    try:
        yield
    except (ParameterError, PromptError, TraceError) as e:
        raise gr.Error(_plain(f"{what}{e}")) from None


def _plain(text: str) -> str:
    """A message shown by the page, with any markup a client slipped into it made inert."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _whole(v) -> int:
    """A whole number from what a client sent: an int exactly (seeds up to 2^63 - 1), an integral
    float (a slider's 16.0) or the text of either (ValueError otherwise)."""
    if isinstance(v, str):
        v = v.strip()
        return int(v) if v.lstrip("-").isdigit() else _whole(float(v))
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise ValueError


def _knob(name: str, v):
    """One knob's value as the engine takes it, from whatever a client sent (ValueError if it cannot be)."""
    if name in _INTS:
        return _whole(v)
    if name in _FLOATS:
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise ValueError
        v = float(v)
        if not math.isfinite(v):
            raise ValueError
        return v
    if name == "model" and v is None:
        return RunConfig.model
    if name == "prompt" and v is None:
        return ""
    if not isinstance(v, str):
        raise ValueError
    return v


def run_config(*knobs) -> RunConfig:
    """The RunConfig of knob values given in KNOBS order, as any client may send them (gr.Error
    naming the knob for a value of the wrong type; the ranges are checked by the engine)."""
    if len(knobs) != len(KNOBS):
        raise gr.Error(f"expected {len(KNOBS)} knob values ({', '.join(KNOBS)}); got {len(knobs)}")
    values = {}
    for name, v in zip(KNOBS, knobs):
        try:
            values[name] = _knob(name, v)
        except (TypeError, ValueError, OverflowError):
            kind = "an integer" if name in _INTS else "a finite number" if name in _FLOATS else "text"
            raise gr.Error(f"{name} must be {kind}; got {_short(v)}") from None
    return RunConfig(method=values["method"], prompt=values["prompt"], seed=values["seed"],
                     sampling=SamplingConfig(**{f: values[f] for f in _SAMPLING_FIELDS}),
                     params=MethodParams(**{f: values[f] for f in _PARAM_FIELDS}), model=values["model"])


def _short(v) -> str:
    """A value a client sent, quoted for a message: at most 40 characters, no markup."""
    s = repr(v)
    s = s if len(s) <= 40 else s[:37] + "..."
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def checked(cfg: RunConfig):
    """The model pair for cfg, after the engine's validation (gr.Error on bad input). Only the pairs
    the Model pair menu offers (engine.found_pairs) are loaded: a client cannot make the app look
    for other weights."""
    found = engine.found_pairs()
    if cfg.model not in found:
        from core.models import llamagen
        if cfg.model in llamagen.PAIRS:   # named without the server's folders
            needs = ", ".join(llamagen.CHECKPOINTS[k].file for k in llamagen.pair_files(cfg.model))
            raise gr.Error(f"the {cfg.model} pair's weights are not on this machine: it needs {needs} in the "
                           f"folder named by {llamagen.ENV_DIR} (see the README)")
        raise gr.Error(f"model must be one of {', '.join(found)}; got {_short(cfg.model)}")
    try:
        pair = engine.load_pair(cfg.model)
        with user_errors():
            engine.context(cfg, pair)
    except gr.Error:
        raise
    except (ValueError, OSError) as e:  # bad prompt for the pair, weights unreadable
        raise gr.Error(_plain(str(e))) from None
    return pair


def model_facts(name: str) -> dict:
    if not isinstance(name, str) or name not in engine.found_pairs():
        raise gr.Error(f"model must be one of {', '.join(engine.found_pairs())}; got {_short(name)}")
    try:
        return engine.pair_facts(name)
    except ValueError as e:
        raise gr.Error(str(e)) from None


def pair_markdown(name: str) -> str:
    """What the chosen pair is and how to add others."""
    found = engine.found_pairs()
    facts = model_facts(name)
    lines = [f"**{name}**: {found.get(name, 'weights not found on this machine')}. Prompt: {facts['prompt']}."]
    if name != "embedded":
        lines.append("Quality is measured for the embedded family only (its classifier knows its scenes).")
    if hub.on_space():
        lines.append("On this Space a LlamaGen pair's files download from the Hugging Face hub on its first run, "
                     "into the Space's cache (persistent storage when the Space has it).")
    else:
        lines.append(f"Found {len(found)} pair(s). Put official LlamaGen checkpoints in the folder named by "
                     f"`MULO_LLAMAGEN_DIR` (see the README) and restart to list them here.")
    return "\n\n".join(lines)


def pick_model(name: str):
    """Knob ranges of the chosen pair (codebook size, scales), its sampling defaults (LlamaGen: the
    official settings) and its description."""
    facts = model_facts(name)
    V, scales, s = facts["vocab_size"], list(facts["scales"]) or [2], facts["sampling"]
    return (gr.update(maximum=V, value=s.top_k), gr.update(value=s.cfg), gr.update(value=s.temperature),
            gr.update(value=s.cfg_interval), gr.update(maximum=max(DEFAULTS["lantern_k"], V - 1)),
            gr.update(choices=scales, value=scales[0] if DEFAULTS["scale"] not in scales else DEFAULTS["scale"]),
            pair_markdown(name))


_baselines: OrderedDict = OrderedDict()


def ar_baseline(cfg: RunConfig, pair) -> Trace:
    """The ar run with cfg's prompt, seed and sampling; remembered, since a workshop reruns one
    prompt with many knob settings."""
    key = (pair.name, cfg.prompt, cfg.seed, cfg.sampling)
    if key not in _baselines:
        _baselines[key] = engine.run(replace(cfg, method="ar", params=MethodParams()), pair)
        while len(_baselines) > 16:
            _baselines.popitem(last=False)
    return _baselines[key]


def speedup(trace: Trace, baseline: Trace | None) -> tuple[float, float | None]:
    """(target NFE ratio, wall-clock ratio) of ar over this run. ar spends one target pass per cell,
    so the NFE ratio needs no baseline run; the wall ratio does."""
    H, W = trace.grid["target"]
    ar_nfe = baseline.totals["target_nfe"] if baseline is not None else H * W
    nfe = ar_nfe / max(trace.totals["target_nfe"], 1)
    wall = None if baseline is None else baseline.totals["wall_ms"] / max(trace.totals["wall_ms"], 1e-9)
    return nfe, wall


def _fraction(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def stats_markdown(trace: Trace, baseline: Trace | None) -> str:
    nfe, wall = speedup(trace, baseline)
    head = f"### {nfe:.2f}× fewer target passes than ar"
    head += f" · {wall:.2f}× wall-clock speedup" if wall is not None else " · wall-clock: no ar run to compare"
    cols = [(trace.method, trace)] + ([("ar", baseline)] if baseline is not None else [])
    rows = ["| | " + " | ".join(c for c, _ in cols) + " |", "|---|" + "---|" * len(cols)]
    for label, key, fmt in (("target NFE", "target_nfe", str), ("drafter NFE", "drafter_nfe", str),
                            ("wall clock (ms)", "wall_ms", lambda x: f"{x:.0f}"),
                            ("passed τ", "passed_fraction", _fraction),
                            ("kept without resampling", "kept_fraction", _fraction)):
        rows.append(f"| {label} | " + " | ".join(fmt(t.totals[key]) for _, t in cols) + " |")
    return head + "\n\n" + "\n".join(rows)


# the outputs every view refresh returns, in this order (ui.py maps them onto components)
VIEWS = ("draft", "proposal", "final", "baseline", "heatmap", "islands", "timeline", "stats", "scrubber",
         "canvas", "step")


def views(state: dict | None, show_grid: bool = False) -> tuple:
    """Every view of the stored run, in VIEWS order. No model runs here."""
    if not state:
        raise gr.Error("nothing to show yet: generate an image or upload a trace first")
    trace, baseline = state["trace"], state.get("baseline")
    tok = engine.load_pair(trace.model).tokenizer
    proposal = render.grid_image(trace.proposal, tok, False)
    v = render.verdict(trace)
    n = len(trace.steps)
    return (render.grid_image(trace.draft, tok, show_grid),
            None if proposal is None else (render.with_grid(proposal, *trace.grid["target"]) if show_grid
                                           else proposal),
            render.grid_image(trace.tokens, tok, show_grid),
            None if baseline is None else render.grid_image(baseline.tokens, tok, show_grid),
            plots.heatmap(trace, v),
            None if v is None or proposal is None else render.islands_image(proposal, v, show_grid),
            plots.timeline(trace, baseline),
            stats_markdown(trace, baseline),
            gr.Slider(minimum=0, maximum=n, value=n, step=1),
            render.canvas_image(render.replay(trace, n), tok, show_grid),
            render.step_caption(trace, n))


def regrid(state: dict | None, show_grid: bool) -> tuple:
    """The grid-lines toggle: every view redrawn, or nothing when there is no run yet."""
    return views(state, show_grid) if state else tuple(gr.skip() for _ in VIEWS)


def _live(status: str, **shown) -> tuple:
    """A streaming update: status and the given VIEWS (e.g. the canvases so far), the rest left as is."""
    out = [gr.skip()] * (3 + len(VIEWS))
    out[1] = status
    for name, value in shown.items():
        out[3 + VIEWS.index(name)] = value
    return tuple(out)


STOPS_KEPT = 1024                            # Stop requests remembered at most (the oldest go first)
_stop_lock = threading.Lock()
_stop_requests: OrderedDict = OrderedDict()  # sessions whose running generation should end at its next step


def stop(request: gr.Request) -> str:
    """The Stop button: Gradio cancels the event, but a step already running on a worker thread
    still delivers its update; the flag makes the generation end at its next step whatever wins.
    Only the caller's own session is flagged."""
    with _stop_lock:
        _stop_requests[request.session_hash] = None
        _stop_requests.move_to_end(request.session_hash)
        while len(_stop_requests) > STOPS_KEPT:
            _stop_requests.popitem(last=False)
    return "Stopped. The views still show the previous run; press Generate to start again."


def forget(request: gr.Request) -> None:
    """A session ended (its page closed): drop what the app keeps for it outside gr.State."""
    if request is not None:
        with _stop_lock:
            _stop_requests.pop(request.session_hash, None)


def fetching(name: str):
    """On a Hugging Face Space, a chosen LlamaGen pair's files come from the hub first: download them
    into the hub cache on a worker thread, yielding status lines with the progress (gr.Error with
    the core's message when the hub cannot be reached). Nothing to do elsewhere or once cached."""
    from core.models import llamagen
    if not hub.on_space() or name not in llamagen.PAIRS or not llamagen.to_fetch(name):
        return
    seen, failed = {}, []

    def work():
        try:
            llamagen.fetch_pair(name, progress=lambda f, done, total: seen.update(f=f, done=done, total=total))
        except Exception as e:  # reported below, on the handler's thread
            failed.append(e)
    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    while worker.is_alive():
        worker.join(0.5)
        if not seen:
            yield _live(f"Downloading the **{name}** files from the Hugging Face hub (first use only)…")
        elif "/" in seen["f"]:  # a whole repository (FLAN-T5-XL): counted in files
            yield _live(f"Downloading {seen['f']}: {seen['done']} of {seen['total']} files…")
        else:
            yield _live(f"Downloading {seen['f']}: {seen['done'] / 2**20:.0f} of {seen['total'] / 2**20:.0f} MiB…")
    if failed:
        raise gr.Error(str(failed[0]))


@GPU
def generate(request: gr.Request | None, show_grid, *knobs):
    """Run the method given by the knobs (KNOBS order), streaming its canvas as it fills, then the ar
    baseline; yields (state, status, trace file, *VIEWS). Ends early after `stop` for its session."""
    session = request.session_hash if request is not None else None
    with _stop_lock:
        _stop_requests.pop(session, None)
    show_grid = show_grid is True
    run = run_config(*knobs)
    yield from fetching(run.model)
    pair = checked(run)
    H, W = pair.grid
    draft = (H // run.params.scale, W // run.params.scale) if run.method == "mulo" else None
    live = render.Replay((H, W), draft)
    t0 = last = time.perf_counter()
    trace, n = None, 0
    events = engine.stream(run, pair)  # each step runs in its own inference mode: any worker thread may resume it
    try:
        while trace is None:
            out = next(events)
            if isinstance(out, Trace):
                trace = out
                continue
            n += 1
            if session in _stop_requests:
                yield _live(f"Stopped after step {n - 1}. The views still show the previous run.")
                return
            live.apply(out.to_dict())
            if time.perf_counter() - last > 0.3:
                last = time.perf_counter()
                # the canvases fill the draft and final slots, where the eye already is
                yield _live(f"Running **{run.method}**: step {n} ({out.phase}), {last - t0:.1f} s",
                            draft=render.grid_image(live.draft, pair.tokenizer, show_grid),
                            final=render.grid_image(live.target, pair.tokenizer, show_grid))
    finally:
        events.close()
    baseline = None
    if run.method != "ar":
        yield _live(f"**{run.method}** done in {trace.totals['wall_ms'] / 1000:.1f} s; running the ar baseline "
                    "for the same prompt and seed…")
        baseline = ar_baseline(run, pair)
    state = dict(trace=trace, baseline=baseline)
    yield (state, f"Done: **{run.method}**, seed {run.seed}.", files.trace_file(trace), *views(state, show_grid))


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


def load_trace(path: str | None) -> Trace:
    """Read an uploaded trace as data only: size, JSON, every field's type and range, and its grids
    against the model pair's own, before anything is sized by them (gr.Error otherwise)."""
    if not path:
        raise gr.Error("no file: choose a trace JSON file to replay")
    if not os.path.isfile(path):
        raise gr.Error("the uploaded file is gone (each upload is read once): upload it again")
    try:
        with user_errors("cannot replay this trace: "):
            size = os.path.getsize(path)
            if size > MAX_BYTES:
                raise TraceError(f"the file is {size / 2**20:.1f} MiB; at most {MAX_BYTES // 2**20} MiB are read")
            with open(path, "rb") as f:
                text = f.read()
            return Trace.from_json(text, trace_limits)
    finally:
        _forget_upload(path)


def _forget_upload(path: str) -> None:
    """An upload is read once: remove it from the cache folder (the replayed trace is offered for
    download again), whether or not it could be replayed."""
    if os.path.realpath(path).startswith(os.path.realpath(files.cache_folder()) + os.sep):
        try:
            os.remove(path)
        except OSError:
            pass


def replay(path, show_grid=False):
    """Upload handler: (state, status, trace file, *VIEWS) of an uploaded trace, with no model run."""
    trace = load_trace(path)
    state = dict(trace=trace, baseline=None)
    try:
        shown = views(state, show_grid)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise gr.Error(f"cannot replay this trace: its steps are malformed ({type(e).__name__})") from None
    return (state, f"Replayed an uploaded **{trace.method}** trace (seed {trace.seed}); no model ran.",
            files.trace_file(trace), *shown)


def scrub(state, n, show_grid=False):
    """(canvas, caption) after the first n steps."""
    if not state:
        return None, "Generate an image first; then drag the slider to replay the run."
    trace = state["trace"]
    total = len(trace.steps)
    try:
        n = _whole(0 if n is None else n)
    except (TypeError, ValueError, OverflowError):
        raise gr.Error(f"step must be a whole number from 0 to {total}; got {_short(n)}") from None
    n = min(max(n, 0), total)
    tok = engine.load_pair(trace.model).tokenizer
    return render.canvas_image(render.replay(trace, n), tok, show_grid is True), render.step_caption(trace, n)


def inspect_cell(state, evt: gr.SelectData):
    """Details of the proposal cell under a click (evt.index = pixel (x, y))."""
    if not state:
        return "Generate an image first, then click a cell of the proposal."
    trace = state["trace"]
    try:
        x, y = (float(v) for v in evt.index[:2])
    except (TypeError, ValueError):
        raise gr.Error(f"a cell is picked by its pixel (x, y); got {_short(evt.index)}") from None
    if not (math.isfinite(x) and math.isfinite(y)):
        raise gr.Error(f"a cell is picked by its pixel (x, y); got {_short(evt.index)}")
    i, j = render.cell_at(x, y, tuple(trace.grid["target"]))
    return render.cell_details(trace, render.verdict(trace), i, j)


@lru_cache(maxsize=1)
def _classifier():
    """The domain's attribute classifier (shipped in assets/, like the models it judges)."""
    return family.load_classifier()


def quality(img, prompt: str, model: str = "embedded") -> tuple[float | None, str]:
    """(score, what it is): prompt adherence read back by the domain's classifier (the GenEval analogue);
    None for an outside pair, whose images the classifier cannot judge."""
    if model != "embedded":
        return None, "no quality measure for this pair"
    clf = _classifier()
    return measured_quality([img], [parse_prompt(prompt)], clf)["adherence"], "prompt adherence (classifier)"


@GPU
def compare(*knobs):
    """Every registered method on the same prompt, seed and knobs (KNOBS order), speed beside
    quality; yields (gallery, table, figure, status) before each method and at the end."""
    run = run_config(*knobs)
    pair = checked(run)
    base = None
    gallery, rows, table = [], [], []
    methods = list(registry())
    measure = "quality"
    for n, m in enumerate(methods):
        yield gallery, table, plots.compare_bars(rows, measure), f"Running {m} ({n + 1} of {len(methods)})…"
        cfg_m = replace(run, method=m)
        try:
            engine.context(cfg_m, pair)
        except ValueError as e:
            table.append([m, None, None, None, None, None, None, None, f"skipped: {e}"])
            continue
        trace = ar_baseline(run, pair) if m == "ar" else engine.run(cfg_m, pair)
        base = base or ar_baseline(run, pair)
        nfe, wall = speedup(trace, base)
        img = engine.decode_image(trace.tokens, pair.tokenizer)
        score, measure = quality(img, run.prompt, run.model)
        rows.append(dict(method=m, quality=float("nan") if score is None else score, **trace.totals))
        table.append([m, trace.totals["target_nfe"], trace.totals["drafter_nfe"], round(trace.totals["wall_ms"]),
                      _fraction(trace.totals["kept_fraction"]), round(nfe, 2), round(wall, 2),
                      None if score is None else round(score, 3), ""])
        gallery.append((render.crisp(img), f"{m}: {trace.totals['target_nfe']} NFE"))
    yield (gallery, table, plots.compare_bars(rows, measure),
           f"Compared {len(rows)} methods on seed {run.seed}; quality = {measure}.")


def _numbers(text: str, name: str, cast, most: int = 6) -> list:
    try:
        vals = [cast(x) for x in str(text).replace(";", ",").split(",") if x.strip()]
    except ValueError:
        raise gr.Error(f"{name} must be a comma-separated list of numbers; got {text!r}") from None
    if not 1 <= len(vals) <= most:
        raise gr.Error(f"{name}: give 1 to {most} values (each costs a full run); got {len(vals)}")
    return vals


@GPU
def sweep(taus, windows, *knobs):
    """mulo over the given taus and zipar over the given windows, other knobs as given (KNOBS order):
    NFE speedup over ar against the quality proxy. Yields (figure, status) before each run."""
    tau_list = _numbers(taus, "taus", float)
    window_list = _numbers(windows, "windows", int)
    run = replace(run_config(*knobs), method="mulo")
    jobs = [("mulo", f"τ={t:g}", run.with_params(tau=t)) for t in tau_list] + \
           [("zipar", f"w={w}", replace(run, method="zipar").with_params(window=w)) for w in window_list]
    for _, _, c in jobs:
        checked(c)
    pair = engine.load_pair(run.model)
    points = []
    yield plots.message("running the ar baseline…"), "Running the ar baseline…"
    base = ar_baseline(run, pair)
    ar_quality, measure = quality(engine.decode_image(base.tokens, pair.tokenizer), run.prompt, run.model)
    if ar_quality is None:
        raise gr.Error(f"the sweep plots speed against quality, which is measured for the embedded pair only; "
                       f"{run.model} has no quality measure")
    points.append(dict(method="ar", label="ar", speedup=1.0, quality=ar_quality))
    for n, (m, label, c) in enumerate(jobs, start=1):
        yield plots.sweep_figure(points, measure), f"Running {m} {label} ({n} of {len(jobs)})…"
        trace = engine.run(c, pair)
        img = engine.decode_image(trace.tokens, pair.tokenizer)
        acc = trace.totals["kept_fraction"]
        points.append(dict(method=m, label=label if acc is None else f"{label}, {_fraction(acc)} kept",
                           speedup=speedup(trace, base)[0],
                           quality=quality(img, run.prompt, run.model)[0]))
    yield plots.sweep_figure(points, measure), f"Swept {len(jobs)} settings against ar on seed {run.seed}."


def open_summary(path):
    """Upload handler: (frontier figure, status) of a precomputed sweep, a bench run folder's summary.json;
    no model runs, so a workshop can show a sweep too large to run live."""
    if not path:
        raise gr.Error("no file: choose the summary.json of a `python -m core bench --out DIR` run")
    size = os.path.getsize(path)
    if size > MAX_BYTES:
        raise gr.Error(f"the summary is {size / 2**20:.1f} MiB; at most {MAX_BYTES // 2**20} MiB are accepted")
    with open(path, "rb") as f:
        text = f.read()
    try:
        result = bench.read_summary(text)
    except bench.SummaryError as e:
        raise gr.Error(f"cannot open this summary: {e}") from None
    return report.frontier(result), (f"Opened a precomputed sweep: {len(result['summary'])} settings on "
                                     f"{result['prompts']} prompts from seed {result['seed']} "
                                     f"({result.get('records', '?')} runs); no model ran.")


def preset(name: str) -> tuple:
    """Knob values of a preset (defaults for every knob it leaves alone), then its explanation."""
    if name not in PRESETS:
        raise gr.Error(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    text, overrides = PRESETS[name]
    values = {**DEFAULTS, **overrides}
    # a preset changes how we decode, not what we draw, with what, nor the pair's sampling
    keep = ("prompt", "seed", "model", *_SAMPLING_FIELDS)
    return (*(gr.skip() if k in keep else values[k] for k in KNOBS), f"**{name}.** {text}")


def from_query(request: gr.Request) -> tuple:
    """Knob values from the page's query string (?tau=0.2&method=mulo…, or ?preset=<name> with
    knobs on top); unknown or bad keys warn and are ignored."""
    params = dict(request.query_params) if request is not None else {}
    base = {}
    if "preset" in params:
        if params["preset"] in PRESETS:
            chosen = {**DEFAULTS, **PRESETS[params["preset"]][1]}
            base = {k: v for k, v in chosen.items() if k not in ("prompt", "seed", "model")}
        else:
            gr.Warning(f"ignored unknown preset {params['preset']!r} from the link")
    out = []
    for k in KNOBS:
        if k not in params:
            out.append(base.get(k, gr.skip()))
            continue
        v = params[k]
        if k == "model" and v not in engine.found_pairs():
            gr.Warning(f"ignored model={v!r} from the link: not found on this machine")
            out.append(base.get(k, gr.skip()))
            continue
        try:
            out.append(int(v) if k in _INTS else float(v) if k in _FLOATS else v)
        except ValueError:
            gr.Warning(f"ignored {k}={v!r} from the link: not a number")
            out.append(base.get(k, gr.skip()))
    for k in set(params) - set(KNOBS) - {"preset"}:
        gr.Warning(f"ignored unknown link parameter {k!r}")
    return tuple(out)


def share_link(request: gr.Request, *knobs) -> str:
    """A link that reopens the app with these knob values (KNOBS order)."""
    base = str(request.url).split("?")[0] if request is not None else ""
    return f"{base}?{urlencode(dict(zip(KNOBS, knobs)))}"


NO_OBJECT = "(none)"
PLACES = tuple("center" if (r, c) == ("middle", "center") else f"{r} {c}" for r in ROWS for c in COLS)


def build_prompt(size1, colour1, shape1, place1, size2, colour2, shape2, place2, background, bg_colour) -> str:
    """A caption in the domain's grammar from the prompt builder's choices (second object optional)."""
    objects = [f"a {size1} {colour1} {shape1} {place1}"]
    if shape2 and shape2 != NO_OBJECT:
        if place2 == place1:
            raise gr.Error("the two objects share one position; give each object its own place")
        objects.append(f"a {size2} {colour2} {shape2} {place2}")
    article = "an" if background[0] in "aeiou" else "a"
    return f"{' and '.join(objects)} on {article} {background} {bg_colour} background"
