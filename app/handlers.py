"""What the UI's events call: plain functions and generators of plain values.

Only `generate`, `compare` and `sweep` run the engine (wrapped for ZeroGPU, kept synchronous);
every other handler derives its views from a stored Trace. Bad input becomes a gr.Error that names
the problem, raised here at the boundary so the app stays up.
"""
from __future__ import annotations

import logging
import math
import os
import re
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import replace
from functools import lru_cache
from urllib.parse import urlencode

import gradio as gr
import torch
from gradio.context import LocalContext

from core import bench, engine, report
from core.config import MethodParams, ParameterError, RunConfig, SamplingConfig, draft_spec, validate
from core.embedded import family
from core.embedded.domain import BACKGROUNDS, COLOURS, PLACES, SHAPES, SIZES, PromptError, parse_prompt
from core.embedded.evaluate import quality as measured_quality
from core.methods import registry
from core.models import hub
from core.trace import MAX_BYTES, Limits, Trace, TraceError

from . import files, plots, render, uploads
from . import quality as per_image

try:
    import spaces
    GPU = spaces.GPU
except ImportError:
    def GPU(f):
        return f

# the knobs, in the order the UI passes them; names match RunConfig / MethodParams / SamplingConfig fields
KNOBS = ("method", "prompt", "seed", "k", "tau", "scale", "radius", "window", "draft_window", "draft_rows",
         "upsampler", "resample", "rejection", "context", "gamma", "delta", "lantern_k", "sjd_window", "sjd_init",
         "cfg", "temperature", "top_k", "model", "cfg_interval", "gsd_group", "gsd_gap", "gsd_dist", "pjd_c",
         "cool_delta", "cool_nu", "cool_norm", "draft_method", "redraft")
_PARAM_FIELDS = ("k", "tau", "scale", "radius", "window", "draft_window", "draft_rows", "upsampler", "resample",
                 "rejection", "context", "gamma", "delta", "lantern_k", "sjd_window", "sjd_init", "gsd_group",
                 "gsd_gap", "gsd_dist", "pjd_c", "cool_delta", "cool_nu", "cool_norm", "draft_method", "redraft")
_SAMPLING_FIELDS = ("cfg", "temperature", "top_k", "cfg_interval")
_INTS = {"seed", "k", "scale", "radius", "window", "draft_window", "draft_rows", "gamma", "lantern_k", "sjd_window",
         "top_k", "cfg_interval", "gsd_group", "pjd_c"}
_FLOATS = {"tau", "delta", "cfg", "temperature", "gsd_gap", "gsd_dist", "cool_delta", "cool_nu"}
DEFAULTS = dict(method=RunConfig.method, prompt=RunConfig.prompt, seed=RunConfig.seed,
                **{f: getattr(MethodParams(), f) for f in _PARAM_FIELDS},
                **{f: getattr(SamplingConfig(), f) for f in _SAMPLING_FIELDS}, model=RunConfig.model)

PRESETS: dict[str, tuple[str, dict]] = {
    "Default operating point": (f"MuLo-SD at its default: r = {DEFAULTS['scale']}, τ = {DEFAULTS['tau']:g}, "
                                f"k = {DEFAULTS['k']} neighbours pooled, radius l = {DEFAULTS['radius']}, "
                                f"{DEFAULTS['resample']} resampling — the fewest sequential passes inside every "
                                "image bound (adherence, FD to the data, detail FD to ar's samples, sharpness) on "
                                "100 held-out prompts; no MuLo-SD setting of this family is inside the log-lik "
                                "bound too (the README's quality section). On this prompt about a quarter of the "
                                "up-sampled proposal falls below τ (the bicubic up-sampling blurs what the target "
                                "would draw) and the radius sweeps the rejections into one island over most of "
                                "the image, which the target redraws in parallel. The headline's sharpness and "
                                "log-lik gap say what the cells it kept cost.", {}),
    "Rubber stamp: the old default (τ = 0.01, k = 128)": (
        "Wide pooling and a low τ: 9 of the 1024 cells fall below τ, so the target accepts 99 % of a bicubic "
        "blur. Fast (about 4× fewer passes), and the headline shows the price: sharpness about 0.6× ar's and a "
        "log-lik gap near −4 nats per token. The benchmark's yardsticks put it outside their bounds; the old "
        "ones (adherence, FD to the data) could not see it.", dict(tau=0.01, k=128, radius=0)),
    "A few rejection islands": ("A low τ (0.01) with wide pooling (k = 128 neighbours): nearly every proposal "
                                "passes τ, and each cell below τ grows by the radius l = 1 into a small island. "
                                "A handful of islands, resampled in parallel; the rest is kept.",
                                dict(tau=0.01, k=128, radius=1)),
    "Raster rejection": ("The classic rule: keep the proposal up to the first rejection, resample that token, "
                         "draft the rest again and verify again, cycle after cycle (one low-res row per "
                         "cycle keeps it to seconds, with the lax τ = 0.01 and k = 128 so that few cycles are "
                         "needed). Compare its passes with local rejection.",
                         dict(rejection="raster", draft_rows=1, tau=0.01, k=128, radius=0)),
    "Strict verification: one big island": ("τ = 0.05 with k = 16 neighbours pooled and radius l = 1 (an "
                                             "earlier default): about 13 % of the cells fall below τ, and the "
                                             "expansion merges them into one island over most of the image, "
                                             "resampled row-parallel. Local rejection that looks like "
                                             "redrawing everything.", dict(tau=0.05, k=16, radius=1)),
    "No pooling (k = 0)": ("Only the proposal token's own probability counts; many more rejections.",
                           dict(k=0)),
    "Serial resampling": ("Rejected cells resampled one per target pass in raster order: more NFE than "
                          "island-parallel resampling, same rule.", dict(resample="serial")),
    "4× up-scaling": ("The drafter works on an 8×8 grid (r = 4): 16× fewer draft tokens, a rougher proposal.",
                      dict(scale=4)),
    "Any method drafts: ZipAR drafter": ("The drafter's 16×16 grid is decoded by ZipAR instead of token by "
                                         "token (draft_method = zipar/window=2): each low-res row starts once the "
                                         "row above has 2 tokens, so drafting takes about 46 passes instead of "
                                         "256. The target's verification and islands work as before (w = 2 "
                                         "inside islands too).",
                                         dict(draft_method="zipar/window=2", window=2)),
    "Cascade of scales (8×8 → 16×16 → 32×32)": (
        "draft_method = mulo/scale=2: the 8×8 grid drafts the 16×16 one, which the multi-resolution drafter "
        "verifies and resamples in islands itself, then that grid is up-sampled and verified at 32×32. "
        "A row per level under the heatmap shows each level's draft, proposal, heatmap and islands. No "
        "published method has a cascade: this is an experiment of this project.",
        dict(draft_method="mulo/scale=2")),
    "ZipAR baseline": ("No drafter: the target decodes several rows at once, each row starting once the "
                       "row above has `window` tokens.", dict(method="zipar", window=8)),
    "AR baseline": ("One token per target pass, in raster order: the reference for speed and quality.",
                    dict(method="ar")),
    "scd: drafts settle": ("Jacobi decoding whose unaccepted guesses are redrawn from a coupling with the old "
                           "ones: a guess the new context does not contradict stays, so later passes accept "
                           "longer runs. Lossless; compare its passes with sjd at the same window L = 32.",
                           dict(method="scd", sjd_window=32)),
    "pjd: rows in parallel": ("A Jacobi window in every active row; a row starts once the row above has c "
                              "committed tokens, and its guesses never read another row's guesses.",
                              dict(method="pjd", pjd_c=6)),
    "gsd: cluster acceptance": ("sjd whose test sums p and q over the draft token's cluster of near-equal, "
                                "nearby tokens: more passes accepted, no longer exact.", dict(method="gsd")),
    "cool: annealed sd": ("sd whose early draft positions are relaxed most (w_i = δ·exp(−ν i − μ)) and whose "
                          "residual matches the relaxation.", dict(method="cool", cool_delta=2.0)),
}


@contextmanager
def user_errors(what: str = ""):
    """Turn the core's errors about bad input into a gr.Error with the same message."""
    try:
        yield
    except (ParameterError, PromptError, TraceError) as e:
        raise user_error(f"{what}{with_symbol(str(e))}") from None


def _plain(text: str) -> str:
    """A message as a toast shows it (the page renders a toast's text as HTML): any markup a client
    slipped into it made inert. Applied once, where the message leaves for the page."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _markdown_text(value) -> str:
    """A value from a client or a file as plain text inside Markdown: every ASCII punctuation mark
    backslash-escaped (no link, autolink, emphasis, HTML or LaTeX), on one line."""
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", " ".join(str(value).split()))


def _clip(text: str, most: int = 40) -> str:
    """Text from a client as a message quotes it, unquoted: at most `most` characters."""
    return text if len(text) <= most else text[:most - 3] + "..."


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
        raise user_error(f"expected {len(KNOBS)} knob values ({', '.join(KNOBS)}); got {len(knobs)}")
    values = {}
    for name, v in zip(KNOBS, knobs):
        try:
            values[name] = _knob(name, v)
        except (TypeError, ValueError, OverflowError):
            raise user_error(f"{name} must be {_kind(name)}; got {_short(v)}") from None
    return _assembled(values)


def _kind(name: str) -> str:
    return "an integer" if name in _INTS else "a finite number" if name in _FLOATS else "text"


def _assembled(values: dict) -> RunConfig:
    """The RunConfig of every knob's value, typed as the engine takes it."""
    return RunConfig(method=values["method"], prompt=values["prompt"], seed=values["seed"],
                     sampling=SamplingConfig(**{f: values[f] for f in _SAMPLING_FIELDS}),
                     params=MethodParams(**{f: values[f] for f in _PARAM_FIELDS}), model=values["model"])


def _short(v) -> str:
    """A value a client sent, quoted for a message: at most 40 characters (user_error escapes it)."""
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def checked(cfg: RunConfig):
    """The model pair for cfg, after the engine's validation (gr.Error on bad input). Only the pairs
    the Model pair menu offers (engine.found_pairs) are loaded: a client cannot make the app look
    for other weights."""
    found = engine.found_pairs()
    if cfg.model not in found:
        from core.models import llamagen
        if cfg.model in llamagen.PAIRS:   # named without the server's folders
            needs = ", ".join(llamagen.CHECKPOINTS[k].file for k in llamagen.pair_files(cfg.model))
            raise user_error(f"the {cfg.model} pair's weights are not on this machine: it needs {needs} in the "
                             f"folder named by {llamagen.ENV_DIR} (see the README)")
        raise user_error(f"model must be one of {', '.join(found)}; got {_short(cfg.model)}")
    try:
        pair = engine.load_pair(cfg.model)
        with user_errors():
            engine.context(cfg, pair)
    except gr.Error:
        raise
    except (ValueError, OSError) as e:  # bad prompt for the pair, weights unreadable
        raise user_error(str(e)) from None
    return pair


def model_facts(name: str) -> dict:
    if not isinstance(name, str) or name not in engine.found_pairs():
        raise user_error(f"model must be one of {', '.join(engine.found_pairs())}; got {_short(name)}")
    try:
        return engine.pair_facts(name)
    except ValueError as e:
        raise user_error(str(e)) from None


def pair_markdown(name: str) -> str:
    """What the chosen pair is and how to add others."""
    found = engine.found_pairs()
    facts = model_facts(name)
    lines = [f"**{name}**: {found.get(name, 'weights not found on this machine')}. Prompt: {facts['prompt']}."]
    if name != "embedded":
        lines.append("Prompt adherence is measured for the embedded family only (its classifier knows its scenes); "
                     f"{per_image.SHARPNESS} and the {per_image.GAP} for every pair.")
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


_baselines: OrderedDict = OrderedDict()   # key -> (ar Trace, epoch seconds it was timed)


def ar_baseline(cfg: RunConfig, pair, session: str | None = None, fresh: bool = False) -> Trace:
    """The ar run with cfg's prompt, seed and sampling; remembered, since a workshop reruns one
    prompt with many knob settings (`fresh` times it again). Stoppable like any run of the session."""
    return ar_baseline_timed(cfg, pair, session, fresh)[0]


def ar_baseline_timed(cfg: RunConfig, pair, session: str | None = None,
                      fresh: bool = False) -> tuple[Trace, float, bool]:
    """(ar Trace, when it was timed, whether it was remembered rather than run now)."""
    key = (pair.name, cfg.prompt, cfg.seed, cfg.sampling)
    remembered = key in _baselines and not fresh
    if not remembered:
        _baselines[key] = (run_stoppable(replace(cfg, method="ar", params=MethodParams()), pair, session),
                           time.time())
        while len(_baselines) > 16:
            _baselines.popitem(last=False)
    trace, at = _baselines[key]
    return trace, at, remembered


def speedup(trace: Trace, baseline: Trace | None) -> tuple[float, float | None, float]:
    """(sequential passes ratio, wall-clock ratio, target NFE ratio) of ar over this run. The headline
    counts every sequential pass, the drafter's too (a drafter of the target's capacity costs as much
    per pass); target NFE alone is the detail. ar spends one target pass per cell, so the pass ratios
    need no baseline run; the wall ratio does."""
    H, W = trace.grid["target"]
    ar_passes = baseline.totals["target_nfe"] + baseline.totals["drafter_nfe"] if baseline is not None else H * W
    t = trace.totals
    passes = ar_passes / max(t["target_nfe"] + t["drafter_nfe"], 1)
    target = ar_passes / max(t["target_nfe"], 1)
    wall = None if baseline is None else baseline.totals["wall_ms"] / max(t["wall_ms"], 1e-9)
    return passes, wall, target


def _fraction(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _clock(t: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "an earlier session"


def stats_markdown(trace: Trace, baseline: Trace | None, timed: dict | None = None,
                   quality: dict | None = None) -> str:
    """The headline (sequential passes, target + drafter, and wall clock, each over ar), the image's
    quality against ar's (`quality`, per_image.against_ar's dict, measured when the run and its
    baseline completed; None: nothing said), what the speed was bought with (nothing kept: all
    resampled), when each wall figure was measured, and the totals side by side.
    `timed` = {"run": epoch s, "baseline": epoch s, "baseline_remembered": bool}."""
    passes, wall, target = speedup(trace, baseline)
    t = trace.totals
    if trace.method == "ar":
        head = f"### ar is the reference: {t['target_nfe']} sequential passes, {t['wall_ms'] / 1000:.2f} s"
        notes = []
    else:
        head = (f"### {passes:.2f}× fewer sequential passes than ar (target + drafter)" if passes >= 1 else
                f"### {1 / passes:.2f}× more sequential passes than ar (target + drafter)")
        head += f" · {wall:.2f}× wall clock" if wall is not None else " · wall clock: no ar run to compare"
        notes = [f"Target passes alone: {target:.2f}× fewer than ar (detail: drafter passes not counted)."]
    kept = trace.totals.get("kept_fraction")
    if trace.method != "ar" and kept == 0:
        notes.insert(0, "**Nothing of the draft was kept: every cell was resampled by the target**, so this "
                        "speed comes from how the target resampled (islands in parallel), not from speculation.")
    if wall is not None and timed and timed.get("run") is None:
        notes.append(f"Wall clock: {trace.method} as recorded in the replayed trace (another time, perhaps another "
                     f"machine), ar timed here at {_clock(timed.get('baseline'))}: a rough ratio.")
    elif wall is not None and timed:
        how = "remembered from" if timed.get("baseline_remembered") else "timed right after it, at"
        notes.append(f"Wall clock: {trace.method} timed at {_clock(timed.get('run'))}, ar {how} "
                     f"{_clock(timed.get('baseline'))}, one run at a time in this process; other load on the "
                     f"machine moves both. *Run or re-time the ar baseline* times ar again now.")
    cols = [(trace.method, trace)] + ([("ar", baseline)] if baseline is not None else [])
    rows = ["| | " + " | ".join(c for c, _ in cols) + " |", "|---|" + "---|" * len(cols)]
    for label, fmt in (("sequential passes (target + drafter)",
                        lambda t: str(t["target_nfe"] + t["drafter_nfe"])),
                       ("target NFE", lambda t: str(t["target_nfe"])),
                       ("drafter NFE", lambda t: str(t["drafter_nfe"])),
                       ("wall clock (ms)", lambda t: f"{t['wall_ms']:.0f}"),
                       ("passed τ (of judged cells)" if trace.method == "mulo" else
                        "passed the test (of judged drafts)", lambda t: _fraction(t["passed_fraction"])),
                       ("kept (not resampled, of all cells)", lambda t: _fraction(t["kept_fraction"]))):
        rows.append(f"| {label} | " + " | ".join(fmt(t.totals) for _, t in cols) + " |")
    if quality:
        notes.insert(0, per_image.headline(quality))
        rows += [f"| {label} | {run} | {ar} |" for label, run, ar in per_image.table_rows(quality)]
    return head + "\n\n" + "\n\n".join(notes) + "\n\n" + "\n".join(rows)


# the outputs every view refresh returns, in this order (ui.py maps them onto components)
CASCADE_ROWS = (1, 2)   # the levels a cascade verifies below the target (grid.levels holds at most 4 grids)
LEVEL_VIEWS = ("_title", "_draft", "_proposal", "_heatmap", "_islands", "_key")   # the views of each level's row
VIEWS = ("draft", "proposal", "final", "baseline", "heatmap", "islands", "islands_key", "timeline", "stats",
         "scrubber", "canvas", "step") + tuple(f"level{n}{v}" for n in CASCADE_ROWS for v in LEVEL_VIEWS)
# the level rows' columns, shown or hidden by the handlers that change the run (generate, replay); their
# outputs come before VIEWS, so that an API client (which receives no layout) still finds VIEWS last
ROWS = tuple(f"level{n}" for n in CASCADE_ROWS)


def rows(state: dict | None) -> tuple:
    """The level rows' columns in ROWS order: visible for the levels of the stored run's cascade."""
    levels = render.cascade_levels(state["trace"]) if state else []
    return tuple(gr.Column(visible=n in levels) for n in CASCADE_ROWS)

# why a panel is empty, by method (mulo fills every panel)
NO_DRAFT = {
    "ar": "ar has no drafter: the target writes every token itself, one per pass.",
    "zipar": "zipar has no drafter: the target writes several rows at once, each row starting w tokens "
             "behind the row above.",
    "sd": "sd's drafter works at the target's own resolution, γ tokens per cycle, so there is no "
          "low-resolution draft; the heatmap shows each draft's test.",
    "lantern": "lantern's drafter works at the target's own resolution, γ tokens per cycle, so there is "
               "no low-resolution draft; the heatmap shows each draft's relaxed test.",
    "sjd": "sjd has no drafter: the target guesses a window of L tokens and refines them by Jacobi "
           "iteration; the heatmap shows each position's test.",
}
NO_PROPOSAL = "No up-sampled proposal: only mulo drafts at low resolution and up-samples the draft."
NO_ISLANDS = "{m} rejects nothing: every token it samples is final, so there are no islands."
NO_BASELINE = ("No ar baseline for this trace (a replayed file carries only its own run). Press "
               "\"Run or re-time the ar baseline\" to time one now.")


_IMAGES_TAIL = ("the final image; and plain autoregressive decoding (ar) with the same prompt and seed, for "
                "reference. Each square is one token.")
# the explanations above the image row, the heatmap and the islands panel, by method
METHOD_EXPLAIN = {
    "mulo": ("**Left to right:** what the drafter drew at low resolution; that draft up-sampled to the full "
             "grid (the *proposal*); " + _IMAGES_TAIL + " Click a cell of the proposal or the heatmap to inspect it.",
             "For every proposed token the target adds up its probability and that of its k nearest codebook "
             "neighbours (*pooled mass*, log scale). Cells at or above τ (green, black contour) **passed τ**; red "
             "cells fell below it. Hover for the numbers, click for the cell card.",
             "Red dots: cells below τ. Each tinted colour is one *island*: the cells below τ grown by the radius l, "
             "all **resampled** by the target; every other cell is **kept** as proposed. Islands are "
             "independent, so the target resamples them in parallel, a few passes instead of one per token."),
    "ar": ("**Left to right:** ar has no draft and no proposal (the panels say why); " + _IMAGES_TAIL,
           "ar tests nothing: every token is sampled from the target, one per pass.",
           "ar rejects nothing, so there are no islands."),
    "zipar": ("**Left to right:** zipar has no draft and no proposal (the panels say why); " + _IMAGES_TAIL,
              "zipar tests nothing: the target samples every token, several rows at once.",
              "zipar rejects nothing, so there are no islands."),
}
for _m, _rule in (("sd", "min(1, p/q)"), ("lantern", "min(1, p̃/q), with p̃ the target probability relaxed "
                                                      "over the draft token's neighbours"),
                  ("sjd", "min(1, p/p_prev), p_prev the previous Jacobi iterate")):
    METHOD_EXPLAIN[_m] = (
        f"**Left to right:** {_m} drafts at the full resolution, so there is no low-resolution draft or "
        "proposal (the panels say why); " + _IMAGES_TAIL + " Click a cell of the heatmap to inspect it.",
        f"Each tested position's probability of acceptance, {_rule}; a random draw decides. Green: the draft "
        "**passed** and was kept; red with a cross: it failed and the target **resampled** that token from the "
        "residual; blank: never tested (drawn from p directly).",
        "The final image with a red dot on every token whose draft failed its test and was resampled.")


def explain_method(method: str) -> tuple[str, str, str]:
    """The explanations of the image row, the heatmap and the islands panel for the chosen method."""
    return METHOD_EXPLAIN.get(method if isinstance(method, str) else "mulo", METHOD_EXPLAIN["mulo"])


def views(state: dict | None, show_grid: bool = False) -> tuple:
    """Every view of the stored run, in VIEWS order. No model runs here. A panel a method cannot
    fill says why in words."""
    if not state:
        raise user_error("nothing to show yet: generate an image or upload a trace first")
    trace, baseline = state["trace"], state.get("baseline")
    m = trace.method
    tok = engine.load_pair(trace.model).tokenizer
    proposal = render.grid_image(trace.proposal, tok, False)
    v = render.verdict(trace)
    t = render.tests(trace)
    final = render.grid_image(trace.tokens, tok, show_grid)
    if v is not None and proposal is not None:
        islands = render.islands_image(proposal, v, show_grid)
    elif t is not None:
        islands = render.failed_image(render.grid_image(trace.tokens, tok, False), t, show_grid)
    else:
        islands = render.message_image(NO_ISLANDS.format(m=m))
    n = len(trace.steps)
    return (render.grid_image(trace.draft, tok, show_grid) if trace.draft is not None
            else render.message_image(NO_DRAFT.get(m, f"{m} has no low-resolution draft.")),
            render.message_image(NO_PROPOSAL) if proposal is None else
            (render.with_grid(proposal, *trace.grid["target"]) if show_grid else proposal),
            final,
            render.message_image("This run is ar itself: it is the baseline." if m == "ar" else NO_BASELINE)
            if baseline is None else render.grid_image(baseline.tokens, tok, show_grid),
            plots.heatmap(trace, v, t),
            islands,
            render.islands_key(v, t),
            plots.timeline(trace, baseline),
            stats_markdown(trace, baseline, state.get("timed"), state.get("quality")),
            gr.Slider(minimum=0, maximum=n, value=n, step=1),
            render.canvas_image(render.replay(trace, n), tok, show_grid),
            render.step_caption(trace, n),
            *(v for level in CASCADE_ROWS for v in level_views(trace, level, tok, show_grid)))


LEVEL_TITLE = ("### Level {n} ({h}×{w}, verified by the drafter)\n\n"
               "A cascade of scales: the {dh}×{dw} grid (left) drafted this {h}×{w} grid; the pair's "
               "multi-resolution drafter checked the up-sampled proposal itself (pooled mass ≥ τ = {tau:g}, k = {k}) "
               "and resampled its islands, as the target does at {T}. What it kept and resampled is "
               "{up}. **No published method has a cascade:** this is an experiment of this project.")


def level_views(trace, n: int, tok, show_grid: bool = False) -> tuple:
    """The views of cascade level n's row (LEVEL_VIEWS order): its draft, proposal, heatmap, islands and
    their key when the run has that level, emptied otherwise (`rows` hides the row)."""
    lv = render.level_trace(trace, n)
    if lv is None:
        return "", None, None, None, None, ""
    (h, w), (dh, dw) = lv.grid["target"], lv.grid["draft"]
    v = render.verdict(lv)
    proposal = render.grid_image(lv.proposal, tok, False)
    up = "the low-res draft above" if n == 1 else f"level {n - 1}'s draft"
    k = lv.params.get("k", "?")   # an uploaded trace's knobs may hold any short word: shown as plain text
    title = LEVEL_TITLE.format(n=n, h=h, w=w, dh=dh, dw=dw, tau=float(lv.params.get("tau", 0.0)),
                               k=k if isinstance(k, int) else _markdown_text(k),
                               T="×".join(map(str, trace.grid["target"])), up=up)
    return (title, render.grid_image(lv.draft, tok, show_grid),
            render.with_grid(proposal, h, w) if show_grid else proposal,
            plots.heatmap(lv, v),
            render.islands_image(proposal, v, show_grid) if v is not None else
            render.message_image(f"Level {n} has no verify step in this trace."),
            render.islands_key(v))


def regrid(state: dict | None, show_grid: bool) -> tuple:
    """The grid-lines toggle: every view redrawn, or nothing when there is no run yet."""
    return views(state, show_grid) if state else tuple(gr.skip() for _ in VIEWS)


log = logging.getLogger("mulo.app")


def user_error(message: str) -> gr.Error:
    """A mistake in the input: shown once in the page (escaped there), one line in the server log, no traceback."""
    log.warning("user input refused: %s", message)
    return gr.Error(_plain(message), print_exception=False)


class Stopped(Exception):
    """The session pressed Stop; the run ends at its next step."""


STOPS_KEPT = 1024                            # Stop requests remembered at most (the oldest go first)
_stop_lock = threading.Lock()
_running: dict[str | None, str] = {}         # session -> what it is running now (Generate, Compare, Sweep)
_stop_requests: OrderedDict = OrderedDict()  # session -> when Stop was last pressed during its run


def _session(request: gr.Request | None) -> str | None:
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


def check_stop(session: str | None) -> None:
    if session in _stop_requests:
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
    session = _session(request)
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


_steps_seen: dict[tuple, int] = {}   # (method, params, grid) -> steps of the last such run, for "about N"


def _run_key(run: RunConfig, grid) -> tuple:
    return run.method, run.params, tuple(grid)


def expected_steps(run: RunConfig, grid) -> int:
    """About how many steps the run will take: the last run with these knobs, else from the schedule
    (ar, zipar exact; the speculative methods by a typical acceptance)."""
    if _run_key(run, grid) in _steps_seen:
        return _steps_seen[_run_key(run, grid)]
    H, W = grid
    p = run.params
    if run.method == "ar":
        return H * W
    if run.method == "zipar":
        return W + (H - 1) * min(p.window, W)
    if run.method == "mulo":
        h, w = H // p.scale, W // p.scale
        try:   # the drafter's grid is a run of its own: the same estimate, one level down
            name, sub = draft_spec(p)
            draft = expected_steps(replace(run, method=name, params=sub), (h, w))
        except ParameterError:
            draft = h * w
        # the verify pass, then the resampling waves: a few at l = 0 (cells resampled alone), about
        # 8 W / w + h per unit of radius when the expansion merges them into islands (100-prompt sweep)
        return draft + 1 + (6 if p.radius == 0 else (8 * W // max(p.window, 1) + h) * p.radius)
    if run.method in ("sd", "lantern"):
        return H * W * (p.gamma + 1) // 2
    return H * W // 2


def _live(status: str, live=None, stale: bool = True) -> tuple:
    """A streaming update: the status, the live canvas, the previous run's views marked stale (or
    not), every view itself left as is."""
    out = [gr.skip()] * (5 + len(ROWS) + len(VIEWS))
    out[1] = status
    out[3] = gr.update(value=live, visible=True) if live is not None else gr.skip()
    out[4] = gr.Column(elem_classes=["results", "stale"] if stale else ["results"])
    return tuple(out)


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
            yield _live(f"Downloading the **{name}** files from the Hugging Face hub (first use only)…", stale=False)
        elif "/" in seen["f"]:  # a whole repository (FLAN-T5-XL): counted in files
            yield _live(f"Downloading {seen['f']}: {seen['done']} of {seen['total']} files…", stale=False)
        else:
            yield _live(f"Downloading {seen['f']}: {seen['done'] / 2**20:.0f} of {seen['total'] / 2**20:.0f} MiB…",
                        stale=False)
    if failed:
        raise gr.Error(_plain(str(failed[0])))


@GPU
def generate(request: gr.Request | None, show_grid, *knobs):
    """Run the method given by the knobs (KNOBS order), streaming its canvases into the live panel
    while the previous run's views stay, marked stale; then the ar baseline; then every view.
    Yields (state, status, trace file, live canvas, results column, *ROWS, *VIEWS). After Stop the page
    shows the previous run's complete views, and says so."""
    session = _session(request)
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
                if session in _stop_requests:
                    yield _stopped(run.method, f"at step {n - 1} of about {max(about, n)}")
                    return
                live.apply(out.to_dict())
                if n == 1 or time.perf_counter() - last > 0.3:   # the first step always shows
                    last = time.perf_counter()
                    yield _live(f"Running **{run.method}**: step {n} of about {max(about, n)} ({out.phase}), "
                                f"{last - t0:.1f} s. The views below show the previous run until this one is "
                                "complete.", render.canvas_image(live, pair.tokenizer, show_grid))
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
    state = dict(trace=trace, baseline=baseline, timed=timed,
                 quality=per_image.against_ar(pair, trace, baseline))
    yield (state, f"Done: **{run.method}**, seed {run.seed}.", files.trace_file(trace),
           gr.update(value=None, visible=False), gr.Column(elem_classes=["results"]), *rows(state), *views(state, show_grid))


def _stopped(method: str, when: str) -> tuple:
    """The last update of a stopped Generate: live panel gone, previous views no longer stale."""
    out = list(_live(f"Stopped **{method}** {when}. The views show the previous run, complete (or nothing, "
                     "if there was none); press Generate to start again.", stale=False))
    out[3] = gr.update(value=None, visible=False)
    return tuple(out)


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


def replay(path, show_grid=False, request: gr.Request | None = None):
    """Upload handler: (state, status, trace file, *ROWS, *VIEWS) of an uploaded trace, with no model run.
    The state keeps the trace as read (its steps compact, core.trace.Steps), not the file's text."""
    trace = load_trace(path, _session(request))
    state = dict(trace=trace, baseline=None)
    try:
        shown = views(state, show_grid)
    except (KeyError, IndexError, TypeError, ValueError) as e:
        raise user_error(f"cannot replay this trace: its steps are malformed ({type(e).__name__})") from None
    return (state, f"Replayed an uploaded **{trace.method}** trace (seed {trace.seed}); no model ran. It has "
                   "no ar baseline: press *Run or re-time the ar baseline* (Run tab) to time one.",
            files.trace_file(trace), *rows(state), *shown)


def scrub(state, n, show_grid=False):
    """(canvas, caption) after the first n steps."""
    if not state:
        return None, "Generate an image first; then drag the slider to replay the run."
    trace = state["trace"]
    total = len(trace.steps)
    try:
        n = _whole(0 if n is None else n)
    except (TypeError, ValueError, OverflowError):
        raise user_error(f"step must be a whole number from 0 to {total}; got {_short(n)}") from None
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
        raise user_error(f"a cell is picked by its pixel (x, y); got {_short(evt.index)}") from None
    if not (math.isfinite(x) and math.isfinite(y)):
        raise user_error(f"a cell is picked by its pixel (x, y); got {_short(evt.index)}")
    i, j = render.cell_at(x, y, tuple(trace.grid["target"]))
    return render.cell_details(trace, render.verdict(trace), i, j)


def inspect_heatmap(state, clicked: str):
    """The same cell card for a heatmap click ("i,j,…" written by the page's click listener)."""
    if not state or not clicked:
        return gr.skip()
    trace = state["trace"]
    H, W = trace.grid["target"]
    try:
        i, j = (int(x) for x in clicked.split(",")[:2])
    except ValueError:
        return gr.skip()
    return render.cell_details(trace, render.verdict(trace), min(max(i, 0), H - 1), min(max(j, 0), W - 1))


@GPU
def add_baseline(request: gr.Request | None, state, show_grid=False):
    """Run (or time again) the ar baseline of the stored run, e.g. a replayed trace that has none;
    yields (state, status, *VIEWS)."""
    if not state:
        raise user_error("nothing to compare yet: generate an image or upload a trace first")
    trace = state["trace"]
    session = _session(request)
    drop_stale_copies(session)
    sampling = {f: trace.params[f] for f in ("cfg", "temperature", "top_k", "top_p") if f in trace.params}
    cfg = RunConfig(method="ar", prompt=trace.prompt, seed=trace.seed, sampling=SamplingConfig(**sampling),
                    model=trace.model)
    pair = checked(cfg)
    with running(session, "the ar baseline"):
        yield (gr.skip(), "Running the ar baseline for this trace's prompt and seed…",
               *(gr.skip() for _ in VIEWS))
        try:
            baseline, at, _ = ar_baseline_timed(cfg, pair, session, fresh=True)
        except Stopped:
            yield (gr.skip(), "Stopped the ar baseline; the views are unchanged.", *(gr.skip() for _ in VIEWS))
            return
    new = dict(state, baseline=baseline, timed=dict(run=(state.get("timed") or {}).get("run"), baseline=at,
                                                    baseline_remembered=False),
               quality=per_image.against_ar(pair, trace, baseline))
    yield (new, f"ar baseline timed for seed {trace.seed}.", *views(new, show_grid))


@lru_cache(maxsize=1)
def _classifier():
    """The domain's attribute classifier (shipped in assets/, like the models it judges)."""
    return family.load_classifier()


def quality(img, prompt: str, model: str = "embedded") -> tuple[float | None, str]:
    """(score, what it is): prompt adherence read back by the domain's classifier (the GenEval analogue);
    None for an outside pair, whose images the classifier cannot judge."""
    if model != "embedded":
        return None, "no prompt adherence for this pair"
    clf = _classifier()
    return measured_quality([img], [parse_prompt(prompt)], clf)["adherence"], "prompt adherence (classifier)"


COMPARE_COLUMNS = ["method", "passes (target + drafter)", "target NFE", "drafter NFE", "wall ms",
                   "passed test", "kept", "passes speedup", "wall speedup", "target NFE speedup (detail)",
                   "prompt adherence (embedded pair)", per_image.SHARPNESS, f"{per_image.GAP} (nats/token)", "note"]


@GPU
def compare(request: gr.Request | None, *knobs):
    """Every registered method on the same prompt, seed and knobs (KNOBS order), speed beside
    quality (prompt adherence; sharpness ÷ ar and log-lik gap against ar's image); ar is timed first
    in this same comparison, so every ratio has comparable conditions. Yields (gallery, table,
    figure, status) before each method and at the end."""
    session = _session(request)
    run = run_config(*knobs)
    pair = checked(run)
    gallery, rows, table = [], [], []
    methods = ["ar"] + [m for m in registry() if m != "ar"]
    measure = "prompt adherence"
    with running(session, "Compare"):
        try:
            base = base_img = None
            for n, m in enumerate(methods):
                yield gallery, table, plots.compare_bars(rows, measure), f"Running {m} ({n + 1} of {len(methods)})…"
                cfg_m = replace(run, method=m)
                try:
                    engine.context(cfg_m, pair)
                except ValueError as e:
                    table.append([m] + [None] * (len(COMPARE_COLUMNS) - 2) + [f"skipped: {e}"])
                    continue
                trace = ar_baseline(run, pair, session, fresh=True) if m == "ar" else \
                    run_stoppable(cfg_m, pair, session)
                img = engine.decode_image(trace.tokens, pair.tokenizer)
                base, base_img = (trace, img) if m == "ar" else (base, base_img)
                passes, wall, target = speedup(trace, base)
                score, measure = quality(img, run.prompt, run.model)
                q = per_image.against_ar(pair, trace, base, img, base_img) or per_image.REFERENCE
                t = trace.totals
                rows.append(dict(method=m, quality=float("nan") if score is None else score, passes=passes,
                                 sharpness=q["sharpness"], loglik_gap=q["loglik_gap"], **t))
                table.append([m, t["target_nfe"] + t["drafter_nfe"], t["target_nfe"], t["drafter_nfe"],
                              round(t["wall_ms"]), _fraction(t["passed_fraction"]), _fraction(t["kept_fraction"]),
                              round(passes, 2), round(wall, 2), round(target, 2),
                              None if score is None else round(score, 3), round(q["sharpness"], 2),
                              round(q["loglik_gap"], 3), "timed first, as the reference" if m == "ar" else ""])
                gallery.append((render.crisp(img), m))
        except Stopped:
            yield (gallery, table, plots.compare_bars(rows, measure),
                   f"Stopped after {len(rows)} of {len(methods)} methods; the table shows those finished.")
            return
    yield (gallery, table, plots.compare_bars(rows, measure),
           f"Compared {len(rows)} methods on seed {run.seed}, each timed in this comparison, one after "
           f"another. Quality: {measure}; {per_image.SHARPNESS} and {per_image.GAP} of each image against ar's "
           f"image of this seed. {per_image.SETS}")


def _numbers(text: str, name: str, cast, most: int = 6) -> list:
    try:
        vals = [cast(x) for x in str(text).replace(";", ",").split(",") if x.strip()]
    except ValueError:
        raise user_error(f"{name} must be a comma-separated list of numbers; got {_short(text)}") from None
    if not 1 <= len(vals) <= most:
        raise user_error(f"{name}: give 1 to {most} values (each costs a full run); got {len(vals)}")
    return vals


@GPU
def sweep(request: gr.Request | None, taus, windows, *knobs):
    """mulo over the given taus and zipar over the given windows, other knobs as given (KNOBS order):
    speedup in sequential passes (target + drafter) over ar against prompt adherence and against the
    log-lik gap to ar's image (each point also carries its sharpness ÷ ar). Yields (figure, status)
    before each run."""
    session = _session(request)
    tau_list = _numbers(taus, "taus", float)
    window_list = _numbers(windows, "windows", int)
    run = replace(run_config(*knobs), method="mulo")
    jobs = [("mulo", f"τ={t:g}", run.with_params(tau=t)) for t in tau_list] + \
           [("zipar", f"w={w}", replace(run, method="zipar").with_params(window=w)) for w in window_list]
    for _, _, c in jobs:
        checked(c)
    pair = engine.load_pair(run.model)
    points = []
    with running(session, "Sweep"):
        try:
            yield plots.message("running the ar baseline…"), "Running the ar baseline…"
            base = ar_baseline(run, pair, session)
            base_img = engine.decode_image(base.tokens, pair.tokenizer)
            ar_quality, measure = quality(base_img, run.prompt, run.model)
            if ar_quality is None:
                raise user_error(f"the sweep plots speed against prompt adherence, which is measured for the "
                                 f"embedded pair only; {run.model} has none")
            points.append(dict(method="ar", label="ar", speedup=1.0, quality=ar_quality, **per_image.REFERENCE))
            for n, (m, label, c) in enumerate(jobs, start=1):
                yield plots.sweep_figure(points, measure), f"Running {m} {label} ({n} of {len(jobs)})…"
                trace = run_stoppable(c, pair, session)
                img = engine.decode_image(trace.tokens, pair.tokenizer)
                kept = trace.totals["kept_fraction"]
                q = per_image.against_ar(pair, trace, base, img, base_img)
                points.append(dict(method=m, label=label if kept is None else f"{label}, {_fraction(kept)} kept",
                                   speedup=speedup(trace, base)[0], quality=quality(img, run.prompt, run.model)[0],
                                   sharpness=q["sharpness"], loglik_gap=q["loglik_gap"]))
        except Stopped:
            yield (plots.sweep_figure(points, "prompt adherence (classifier)"),
                   f"Stopped after {len(points) - 1} of {len(jobs)} settings; the figure shows those finished.")
            return
    yield plots.sweep_figure(points, measure), f"Swept {len(jobs)} settings against ar on seed {run.seed}."


def open_summary(path):
    """Upload handler: (frontier figure, status) of a precomputed sweep, a bench run folder's summary.json;
    no model runs, so a workshop can show a sweep too large to run live."""
    if not path:
        raise user_error("no file: choose the summary.json of a `python -m core bench --out DIR` run")
    size = os.path.getsize(path)
    if size > MAX_BYTES:
        raise user_error(f"the summary is {size / 2**20:.1f} MiB; at most {MAX_BYTES // 2**20} MiB are accepted")
    with open(path, "rb") as f:
        text = f.read()
    try:
        result = bench.read_summary(text)
    except bench.SummaryError as e:
        raise user_error(f"cannot open this summary: {e}") from None
    floors = result.get("floors") or {}
    bounds = (f"dashed lines: its bounds (ar's noise floor ± {floors['spreads']:g} spreads, ar against ar at "
              "other seeds)" if "fd_ar" in floors else "no bounds (a run needs at least 3 prompts)")
    return report.frontier(result), (f"Opened a precomputed sweep: {len(result['summary'])} settings on "
                                     f"{result['prompts']} prompts from seed {result['seed']} "
                                     f"({result.get('records', '?')} runs); no model ran; {bounds}.")


def preset(name: str) -> tuple:
    """Knob values of a preset (defaults for every knob it leaves alone), then its explanation."""
    if not isinstance(name, str) or name not in PRESETS:
        raise user_error(f"unknown preset {_short(name)}; choose one of: {', '.join(PRESETS)}")
    text, overrides = PRESETS[name]
    values = {**DEFAULTS, **overrides}
    # a preset changes how we decode, not what we draw, with what, nor the pair's sampling
    keep = ("prompt", "seed", "model", *_SAMPLING_FIELDS)
    return (*(gr.skip() if k in keep else values[k] for k in KNOBS), f"**{name}.** {text}")


# the slider ranges of the numeric knobs (ui.py builds the sliders from them); a value the engine
# accepts beyond a slider's end widens the slider instead of being clamped
SLIDERS = dict(tau=(0.0, 1.0, 0.01), k=(0, 128, 1), radius=(0, 4, 1), draft_rows=(0, 16, 1),
               draft_window=(0, 16, 1), gamma=(1, 16, 1), delta=(0.0, 1.0, 0.05), sjd_window=(1, 64, 1),
               window=(1, 32, 1), cfg=(1.0, 8.0, 0.5), temperature=(0.0, 2.0, 0.05),
               cfg_interval=(-1, 256, 1), gsd_group=(1, 64, 1), gsd_gap=(0.0, 1.0, 0.01), gsd_dist=(0.0, 1.0, 0.05),
               pjd_c=(1, 64, 1), cool_delta=(0.5, 4.0, 0.1), cool_nu=(0.0, 2.0, 0.05))
# the symbols the page shows beside the field names the engine's messages use
SYMBOLS = dict(tau="τ", scale="r", radius="l", window="w", gamma="γ", delta="δ", sjd_window="L", gsd_group="G",
               pjd_c="c", cool_delta="δ", cool_nu="ν")


def with_symbol(message: str) -> str:
    """'tau must be …' -> 'τ (tau) must be …': the engine's message with the symbol the page shows."""
    name = message.split(" ", 1)[0]
    return f"{SYMBOLS[name]} ({name}){message[len(name):]}" if name in SYMBOLS else message


def _check_one(name: str, value, pair) -> str | None:
    """Why `name` = `value` (already of the right type) is refused by the engine, or None (plain text)."""
    try:
        cfg = _assembled({**DEFAULTS, name: value})
        validate(cfg, pair.vocab_size, pair.grid, registry())
        if cfg.method == "mulo":   # a cascade's grids must be ones the pair's multi-resolution model serves
            engine._check_cascade(cfg.params, pair)   # what engine.context checks, without reading the prompt
    except ParameterError as e:
        return str(e)
    return None


def from_query(request: gr.Request) -> tuple:
    """Knob values from the page's query string (?tau=0.2&method=mulo…, or ?preset=<name> with
    knobs on top), then the preset menu and its text. A value the engine refuses is not loaded: a
    warning names the knob, its range and the value kept; one log line per refused value. Each knob
    is read on its own, with the parser the API uses, so one bad value never keeps the others out."""
    params = dict(request.query_params) if request is not None else {}
    base, chosen_preset, preset_text = {}, gr.skip(), gr.skip()
    if "preset" in params:
        if params["preset"] in PRESETS:
            name = params["preset"]
            chosen = {**DEFAULTS, **PRESETS[name][1]}
            base = {k: v for k, v in chosen.items() if k not in ("prompt", "seed", "model")}
            chosen_preset, preset_text = name, preset(name)[-1]
        else:
            _refuse(f"ignored preset={_clip(params['preset'])} from the link: not one of {', '.join(PRESETS)}")
    model = params.get("model", DEFAULTS["model"])
    if model not in engine.found_pairs():
        model = DEFAULTS["model"]
    pair = engine.load_pair(model)
    out = []
    for k in KNOBS:
        value = _link_value(k, params[k], base, pair) if k in params else None
        out.append(base.get(k, gr.skip()) if value is None else value)
    unknown = sorted(set(params) - set(KNOBS) - {"preset"})
    if unknown:   # one warning, however many: a link cannot flood the page or the log
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        _refuse(f"ignored unknown link parameter{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(_clip(k) for k in unknown[:3])}{more}")
    return (*out, chosen_preset, preset_text)


def _link_value(k: str, v: str, base: dict, pair):
    """What the page loads for knob k = v of a link (the value, or a slider widened to it), or None
    after a warning that names the knob and why it was refused."""
    shown = f"{k}={_clip(v)}"
    if k == "model" and v not in engine.found_pairs():
        _refuse(f"ignored {shown} from the link: not found on this machine")
        return None
    try:
        value = _knob(k, v)
    except (TypeError, ValueError, OverflowError):
        _refuse(f"ignored {shown} from the link: {k} must be {'a number' if k in _FLOATS else _kind(k)}")
        return None
    why = _check_one(k, value, pair)
    if why is not None:
        _refuse(f"ignored {shown} from the link: {with_symbol(why)}; {k} stays {base.get(k, DEFAULTS[k])}")
        return None
    lo, hi, _ = SLIDERS.get(k, (None, None, None))
    if lo is not None and not lo <= value <= hi:   # the engine accepts it: widen the slider, never clamp
        return gr.update(value=value, minimum=min(lo, value), maximum=max(hi, value))
    return value


def _refuse(message: str) -> None:
    log.warning("link refused: %s", message)
    gr.Warning(_plain(message))


def share_link(page_url: str, preset_name: str | None, *knobs) -> str:
    """A link that reopens the app at `page_url` (the address the browser shows, without its query)
    with these knob values (KNOBS order) and, when one is chosen, the preset's name."""
    query = ({"preset": preset_name} if preset_name else {}) | dict(zip(KNOBS, knobs))
    return f"{str(page_url or '').split('?')[0]}?{urlencode(query)}"


NO_OBJECT = "(none)"
# the prompt builder's menus in build_prompt's order, (label, choices), and what each shows first: the
# page builds its dropdowns from these, so it offers exactly the words the domain's parser reads
PROMPT_MENUS = (("Size 1", SIZES), ("Colour 1", COLOURS), ("Shape 1", SHAPES), ("Place 1", PLACES),
                ("Size 2", SIZES), ("Colour 2", COLOURS), ("Shape 2", (*SHAPES, NO_OBJECT)), ("Place 2", PLACES),
                ("Background", BACKGROUNDS), ("Background colour", COLOURS))
PROMPT_CHOSEN = ("large", "red", "circle", "center", "small", "blue", NO_OBJECT, "top left", "striped", "blue")


def build_prompt(size1, colour1, shape1, place1, size2, colour2, shape2, place2, background, bg_colour) -> str:
    """A caption in the domain's grammar from the prompt builder's choices (second object optional);
    a choice that is not on its menu is named."""
    for (label, choices), v in zip(PROMPT_MENUS, (size1, colour1, shape1, place1, size2, colour2, shape2, place2,
                                                   background, bg_colour)):
        if not isinstance(v, str) or v not in choices:
            raise user_error(f"{label} must be one of {', '.join(choices)}; got {_short(v)}")
    objects = [f"a {size1} {colour1} {shape1} {place1}"]
    if shape2 != NO_OBJECT:
        if place2 == place1:
            raise user_error("the two objects share one position; give each object its own place")
        objects.append(f"a {size2} {colour2} {shape2} {place2}")
    article = "an" if background[0] in "aeiou" else "a"
    return f"{' and '.join(objects)} on {article} {background} {bg_colour} background"
