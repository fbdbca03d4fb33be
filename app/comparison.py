"""The Compare and Sweep tabs: every method on one prompt, seed and knobs (speed beside quality, ar
timed first in the same comparison), mulo with every up-sampler (each proposal beside its final image), mulo over τ and zipar over w against ar, and a precomputed sweep
(a bench run's summary.json) opened as its frontier with no model run. Prompt adherence is read
back by the embedded domain's classifier.

Knows the tables and figures of these tabs; the knobs are app.inputs', stopping and the ar baseline
app.control's, the headline ratios app.panels'.
"""
from __future__ import annotations

import os
import time
from dataclasses import replace
from functools import lru_cache

import gradio as gr

from core import bench, engine, report
from core.config import UPSAMPLERS, spec_label
from core.embedded import family
from core.embedded.domain import parse_prompt
from core.embedded.evaluate import quality as measured_quality
from core.methods import registry
from core.trace import MAX_BYTES

from . import plots, render
from . import quality as per_image
from .control import GPU, Stopped, ar_baseline, run_stoppable, running, session_of, turn
from .inputs import checked, run_config
from .line import DURATIONS
from .messages import short, user_error
from .panels import percent, speedup
from .remembered import Remembered, images_bytes


@lru_cache(maxsize=1)
def _classifier():
    """The domain's attribute classifier (shipped in assets/, like the models it judges)."""
    return family.load_classifier()


def adherence(img, prompt: str, model: str = "embedded") -> tuple[float | None, str]:
    """(score, what it is): prompt adherence read back by the domain's classifier (the GenEval analogue);
    None for an outside pair, whose images the classifier cannot judge."""
    if model != "embedded":
        return None, "no prompt adherence for this pair"
    clf = _classifier()
    return measured_quality([img], [parse_prompt(prompt)], clf)["adherence"], "prompt adherence (classifier)"


COMPARE_COLUMNS = ["method", "passes (target + drafter)", "target NFE", "drafter NFE", "wall ms",
                   "passed test", "kept", "passes speedup", "wall speedup", "target NFE speedup (detail)",
                   "prompt adherence (embedded pair)", per_image.SHARPNESS, f"{per_image.GAP} (nats/token)", "note"]


# Finished comparisons by (kind, the run config of their knobs): a repeated press is answered from here
REMEMBERED = Remembered(64 * 2 ** 20, lambda out: images_bytes(out[0]))


def _side_by_side(session, run, pair, jobs: list[tuple[str, object]], what: str, proposals: bool = False):
    """ar (timed first, the reference), then each (label, RunConfig) of `jobs` on the same prompt and
    seed: speed beside quality (prompt adherence; sharpness ÷ ar and log-lik gap against ar's image).
    A job the pair cannot run is a table row saying why. proposals: each run's up-sampled proposal goes
    into the gallery before its final image. Yields (gallery, table, figure, status)."""
    key = (what, proposals, run)
    hit = REMEMBERED.recall(key)
    if hit is not None:
        yield _recalled(hit)
        return
    gallery, rows, table = [], [], []
    jobs = [("ar", replace(run, method="ar"), "ar")] + jobs
    measure = "prompt adherence"
    with running(session, "Compare"), turn() as hold:
        try:
            got = yield from hold.wait(session, "Compare", DURATIONS.get(key) or DURATIONS.get((what, proposals)),
                                       lambda words: (gallery, table, plots.compare_bars(rows, measure), words),
                                       lambda: REMEMBERED.recall(key))
            if hold.ticket is None:   # the same comparison finished while this one waited
                yield _recalled(got)
                return
            t0 = time.perf_counter()
            base = base_img = None
            for n, (label, cfg_m, caption) in enumerate(jobs):
                yield gallery, table, plots.compare_bars(rows, measure), f"Running {label} ({n + 1} of {len(jobs)})…"
                try:
                    engine.context(cfg_m, pair)
                except ValueError as e:
                    table.append([label] + [None] * (len(COMPARE_COLUMNS) - 2) + [f"skipped: {e}"])
                    continue
                trace = ar_baseline(run, pair, session, fresh=True) if label == "ar" else \
                    run_stoppable(cfg_m, pair, session)
                img = engine.decode_image(trace.tokens, pair.tokenizer)
                base, base_img = (trace, img) if label == "ar" else (base, base_img)
                passes, wall, target = speedup(trace, base)
                score, measure = adherence(img, run.prompt, run.model)
                q = per_image.against_ar(pair, trace, base, img, base_img) or per_image.REFERENCE
                t = trace.totals
                rows.append(dict(method=caption, quality=float("nan") if score is None else score, passes=passes,
                                 sharpness=q["sharpness"], loglik_gap=q["loglik_gap"], **t))
                upsampled = sum(s["wall_ms"] for s in trace.steps if s["phase"] == "upsample")
                note = "timed first, as the reference" if label == "ar" else \
                    (f"up-sampling {upsampled:.1f} ms" if proposals else "")
                table.append([label, t["target_nfe"] + t["drafter_nfe"], t["target_nfe"], t["drafter_nfe"],
                              round(t["wall_ms"]), percent(t["passed_fraction"]), percent(t["kept_fraction"]),
                              round(passes, 2), round(wall, 2), round(target, 2),
                              None if score is None else round(score, 3), round(q["sharpness"], 2),
                              round(q["loglik_gap"], 3), note])
                if proposals and label != "ar":
                    gallery.append((render.crisp(engine.decode_image(trace.proposal, pair.tokenizer)),
                                    f"{caption}: proposal"))
                gallery.append((render.crisp(img), f"{caption}: final" if proposals else caption))
        except Stopped:
            yield (gallery, table, plots.compare_bars(rows, measure),
                   f"Stopped after {len(rows)} of {len(jobs)} runs; the table shows those finished.")
            return
        DURATIONS.note(key, time.perf_counter() - t0)
        DURATIONS.note((what, proposals), time.perf_counter() - t0)
        out = (gallery, table, plots.compare_bars(rows, measure),
               f"Compared {what} on seed {run.seed}, each timed in this comparison, one after another. Quality: "
               f"{measure}; {per_image.SHARPNESS} and {per_image.GAP} of each image against ar's image of this seed. "
               f"{per_image.SETS}")
        REMEMBERED.keep(key, (list(gallery), [list(r) for r in table], out[2], out[3]))   # before the line moves on
    yield out


def _recalled(hit) -> tuple:
    """A comparison's outputs from its remembered run (REMEMBERED.recall's (seconds ago, outputs))."""
    ago, (gallery, table, figure, status) = hit
    return (list(gallery), [list(r) for r in table], figure,
            f"{status} Remembered: this comparison of these knobs finished {ago:.0f} s ago; its images, table "
            "and wall-clock columns are that comparison's.")


@GPU
def compare(request: gr.Request | None, *knobs):
    """Every registered method on the same prompt, seed and knobs (KNOBS order), speed beside
    quality; ar is timed first in this same comparison, so every ratio has comparable conditions.
    Yields (gallery, table, figure, status) before each method and at the end."""
    run = run_config(*knobs)
    pair = checked(run)
    # each row named as the bench names it, with the knobs it reads that differ from the defaults
    # (zipar:window=16); the images and bars by the method's name
    jobs = [(spec_label(m, run.params), replace(run, method=m), m) for m in registry() if m != "ar"]
    yield from _side_by_side(session_of(request), run, pair, jobs, f"{len(jobs) + 1} methods")


@GPU
def compare_upsamplers(request: gr.Request | None, *knobs):
    """mulo with every up-sampler (nearest, pixel, sr, learned, distilled) at the given knobs (KNOBS order), ar
    first: each proposal beside its final image, speed beside quality. An up-sampler the pair ships no
    network for is a row saying so. Yields (gallery, table, figure, status)."""
    run = replace(run_config(*knobs), method="mulo")
    pair = checked(run)
    named = spec_label("mulo", replace(run.params, upsampler="pixel"))   # the other knobs; each row adds its up-sampler
    jobs = [(f"{named}:upsampler={u}", run.with_params(upsampler=u), u) for u in UPSAMPLERS]
    yield from _side_by_side(session_of(request), run, pair, jobs,
                             f"the {len(UPSAMPLERS)} up-samplers at r = {run.params.scale}", proposals=True)


def _numbers(text: str, name: str, cast, most: int = 6) -> list:
    try:
        vals = [cast(x) for x in str(text).replace(";", ",").split(",") if x.strip()]
    except ValueError:
        raise user_error(f"{name} must be a comma-separated list of numbers; got {short(text)}") from None
    if not 1 <= len(vals) <= most:
        raise user_error(f"{name}: give 1 to {most} values (each costs a full run); got {len(vals)}")
    return vals


@GPU
def sweep(request: gr.Request | None, taus, windows, *knobs):
    """mulo over the given taus and zipar over the given windows, other knobs as given (KNOBS order):
    speedup in sequential passes (target + drafter) over ar against prompt adherence and against the
    log-lik gap to ar's image (each point also carries its sharpness ÷ ar). Yields (figure, status)
    before each run."""
    session = session_of(request)
    tau_list = _numbers(taus, "taus", float)
    window_list = _numbers(windows, "windows", int)
    run = replace(run_config(*knobs), method="mulo")
    jobs = [("mulo", f"τ={t:g}", run.with_params(tau=t)) for t in tau_list] + \
           [("zipar", f"w={w}", replace(run, method="zipar").with_params(window=w)) for w in window_list]
    for _, _, c in jobs:
        checked(c)
    pair = engine.load_pair(run.model)
    points = []
    with running(session, "Sweep"), turn() as hold:
        try:
            yield from hold.wait(session, "Sweep", DURATIONS.get(("Sweep", len(jobs))),
                                 lambda words: (plots.message("waiting for the model…"), words))
            t0 = time.perf_counter()
            yield plots.message("running the ar baseline…"), "Running the ar baseline…"
            base = ar_baseline(run, pair, session)
            base_img = engine.decode_image(base.tokens, pair.tokenizer)
            ar_quality, measure = adherence(base_img, run.prompt, run.model)
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
                points.append(dict(method=m, label=label if kept is None else f"{label}, {percent(kept)} kept",
                                   speedup=speedup(trace, base)[0], quality=adherence(img, run.prompt, run.model)[0],
                                   sharpness=q["sharpness"], loglik_gap=q["loglik_gap"]))
        except Stopped:
            yield (plots.sweep_figure(points, "prompt adherence (classifier)"),
                   f"Stopped after {len(points) - 1} of {len(jobs)} settings; the figure shows those finished.")
            return
        DURATIONS.note(("Sweep", len(jobs)), time.perf_counter() - t0)
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
