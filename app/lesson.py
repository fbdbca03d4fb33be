"""The Lesson tab: nine steps through speculative decoding of images, from ar to the speed–quality
frontier and what a kept cell commits. Each step is one button: it runs its settings on the prompt and seed chosen above, shows
the images and a table of the runs, says what to look at with this run's numbers (never text written
in advance) and asks one question whose answer is in the table; the answer, computed from the same
numbers, waits under a fold.

Knows the steps and their words; the runs go through app.control (Stop, one model run at a time),
the per-image yardsticks through app.quality, the target's entropy through core.ambiguity's
teacher-forced forward (core.ambiguity).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Callable

import gradio as gr

from core import ambiguity, engine
from core.config import RunConfig

from . import quality as per_image
from . import render, shipped
from .control import GPU, Stopped, ar_baseline, run_stoppable, running, session_of, turn
from .inputs import checked
from .line import DURATIONS
from .messages import short, user_error
from .remembered import Remembered, images_bytes

COLUMNS = ["run", "passes (target + drafter)", "target passes", "drafter passes", "passed test", "kept",
           "islands", "cells resampled", "sharpness ÷ ar", "log-lik gap (nats/token)", "wall ms"]


@dataclass(frozen=True)
class Step:
    title: str
    runs: tuple                       # (label, knob overrides) run on the chosen prompt and seed
    look: Callable[[dict], str]       # the numbers (label -> row dict) -> what to look at
    question: str
    answer: Callable[[dict], str]
    images: tuple = ("final",)        # per run: which of draft, proposal, final the gallery shows
    entropy: bool = False             # also measure the target's entropy over the first run's tokens


def _pc(x) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


STEPS = (
    Step("1. ar: one token per pass", (("ar", {}),),
         lambda r: (f"ar drew the {r['ar']['cells']} tokens one at a time in raster order: "
                    f"**{r['ar']['target']} target passes**, {r['ar']['wall']:.0f} ms on this machine. Every "
                    "speed-up in this explorer is ar's passes over a method's passes on the same prompt and seed."),
         "How many tokens did each of ar's target passes produce?",
         lambda r: f"{r['ar']['cells']} tokens in {r['ar']['target']} passes: "
                   f"{r['ar']['cells'] / r['ar']['target']:g} token per pass."),
    Step("2. sd: why plain speculative decoding struggles on images", (("sd", {}),),
         lambda r: (f"sd's small drafter proposed γ = 4 tokens per cycle and the target kept each with "
                    f"probability min(1, p/q): **{_pc(r['sd']['passed'])} of the drafts passed**. The reason is "
                    f"the target itself: over this image its median entropy is **{r['sd']['entropy']:.2f} nats** "
                    f"(as uncertain as a fair choice among {math.exp(r['sd']['entropy']):.0f} codes), and at "
                    f"{_pc(r['sd']['flat'])} of the cells its most likely code holds less than half the mass, so "
                    "any one drafted code is unlikely under p. The headline counts every pass alike: "
                    f"{r['sd']['target']} target + {r['sd']['drafter']} drafter passes = {r['sd']['passes']}, "
                    f"against ar's {r['sd']['cells']}, one per cell (a drafter pass costs less than a target pass; "
                    "the bench prices each)."),
         "What share of sd's drafted tokens passed the target's test?",
         lambda r: f"{_pc(r['sd']['passed'])} (the table's 'passed test'); median entropy "
                   f"{r['sd']['entropy']:.2f} nats.", entropy=True),
    Step("3. Relaxation: LANTERN on EAGLE's draft tree", (("eagle", {}), ("lantern, δ = 0.4", dict(method="lantern",
                                                                                                delta=0.4))),
         lambda r: (f"Both draft a tree with the same head. eagle tests each child exactly (accept with p): "
                    f"{_pc(r['eagle']['passed'])} of its tries passed. lantern lets a draft token take the mass of "
                    f"its nearest codes (up to δ = 0.4): **{_pc(r['lantern, δ = 0.4']['passed'])} passed**, "
                    f"{r['eagle']['target'] - r['lantern, δ = 0.4']['target']} fewer target passes. The price is "
                    f"in the log-lik gap against ar's image: eagle {_gap(r['eagle'])}, lantern "
                    f"{_gap(r['lantern, δ = 0.4'])} nats/token."),
         "By how many percentage points did relaxation raise the passed share?",
         lambda r: f"{100 * (r['lantern, δ = 0.4']['passed'] - r['eagle']['passed']):.1f} points "
                   f"({_pc(r['eagle']['passed'])} → {_pc(r['lantern, δ = 0.4']['passed'])})."),
    Step("4. MuLo-SD: a low-resolution draft, up-sampled", (("mulo", {}),),
         lambda r: (f"The drafter drew a {r['mulo']['draft_grid']} draft in **{r['mulo']['drafter']} passes** "
                    f"(one per low-resolution cell: {r['mulo']['drafter'] / r['mulo']['cells']:.0%} of the target's "
                    f"cells); the up-sampler turned it into a {r['mulo']['grid']} "
                    "proposal (second image), which the target verified in one pass per band of rows. Compare "
                    "the proposal with the final image: what the target kept and what it drew again."),
         "How many drafter passes did the low-resolution draft take?",
         lambda r: f"{r['mulo']['drafter']} (one per low-resolution cell, drafted token by token).",
         images=("draft", "proposal", "final")),
    Step("5. Verification by pooled mass: k and τ", (("k 16, τ 0.5", dict(method="mulo", k=16, tau=0.5)),
                                                     ("k 0, τ 0.5", dict(method="mulo", k=0, tau=0.5)),
                                                     ("k 16, τ 0.9", dict(method="mulo", k=16, tau=0.9))),
         lambda r: (f"A cell passes when the target's mass on the proposal and its k nearest codes reaches τ. "
                    f"At k 16, τ 0.5: **{_pc(r['k 16, τ 0.5']['passed'])}** passed; without pooling (k 0): "
                    f"{_pc(r['k 0, τ 0.5']['passed'])}; at a strict τ 0.9: {_pc(r['k 16, τ 0.9']['passed'])}. "
                    "Pooling is what lets a flat distribution say yes; τ is how much it must agree."),
         "Which setting passed the most cells?",
         lambda r: max(("k 16, τ 0.5", "k 0, τ 0.5", "k 16, τ 0.9"), key=lambda k: r[k]["passed"] or 0)
         + f" ({_pc(max(r[k]['passed'] or 0 for k in ('k 16, τ 0.5', 'k 0, τ 0.5', 'k 16, τ 0.9')))})."),
    Step("6. Local rejection and islands: l", (("l 0", dict(method="mulo", radius=0)),
                                               ("l 2", dict(method="mulo", radius=2))),
         lambda r: (f"A rejected cell is resampled together with the cells within l of it that come after the "
                    f"first rejection; the rest keep their proposal even after a rejection. l 0: "
                    f"{_count(r['l 0']['resampled'], 'cell')} resampled in {_count(r['l 0']['islands'], 'island')}; "
                    f"**l 2: {_count(r['l 2']['resampled'], 'cell')} in {_count(r['l 2']['islands'], 'island')}** "
                    "(islands merge as they "
                    "grow). Resampling more costs passes and buys coherence around each rejection."),
         "How many more cells did l = 2 resample than l = 0?",
         lambda r: f"{r['l 2']['resampled'] - r['l 0']['resampled']} "
                   f"({r['l 0']['resampled']} → {r['l 2']['resampled']})."),
    Step("7. Resampling modes", (("serial", dict(method="mulo", resample="serial")),
                                 ("islands", dict(method="mulo", resample="islands")),
                                 ("jacobi", dict(method="mulo", resample="jacobi"))),
         lambda r: (f"The same rejected cells, drawn again three ways: one cell per target pass (serial, "
                    f"{r['serial']['target']} target passes), islands in parallel with ZipAR inside each "
                    f"({r['islands']['target']}), or a Jacobi iteration started from the proposal "
                    f"({r['jacobi']['target']})."),
         "Which mode needed the fewest target passes?",
         lambda r: min(("serial", "islands", "jacobi"), key=lambda k: r[k]["target"])
         + f" ({min(r[k]['target'] for k in ('serial', 'islands', 'jacobi'))} target passes)."),
    Step("8. The speed–quality frontier: τ", (("τ 0 (no verification)", dict(method="mulo", tau=0.0)),
                                              ("τ 0.5", dict(method="mulo", tau=0.5)),
                                              ("τ 0.9", dict(method="mulo", tau=0.9))),
         lambda r: (f"τ 0 accepts every proposal: {_x(r['τ 0 (no verification)'])} the passes of ar, sharpness "
                    f"÷ ar {r['τ 0 (no verification)']['sharpness']:.2f}, log-lik gap "
                    f"{_gap(r['τ 0 (no verification)'])}: fast and blurred. τ 0.5: {_x(r['τ 0.5'])}, "
                    f"{r['τ 0.5']['sharpness']:.2f}, {_gap(r['τ 0.5'])}; τ 0.9: {_x(r['τ 0.9'])}, "
                    f"{r['τ 0.9']['sharpness']:.2f}, {_gap(r['τ 0.9'])}. Verification buys back what the target "
                    "would have drawn, and costs speed: the Sweep tab traces the whole curve."),
         "Which τ keeps the log-lik gap closest to 0, and at what speed-up in passes?",
         lambda r: (lambda k: f"{k}: gap {_gap(r[k])} nats/token at {_x(r[k])} the passes of ar.")(
             min(("τ 0 (no verification)", "τ 0.5", "τ 0.9"), key=lambda k: abs(r[k]["gap"])))),
)


_KEEP, _B_K, _EXACT, _DISTILLED, _JACOBI = ("proposal kept", "target's token in B_k", "exact test, residual",
                                             "exact test, distilled q", "Jacobi repair from the proposal")


def _closer(a: dict, b: dict) -> str:
    """Whether b's log-lik gap is closer to 0 than a's, in words."""
    return "closer to" if abs(b["gap"]) < abs(a["gap"]) else "no closer to"


STEPS = STEPS + (
    Step("9. What a kept cell commits, at r = 4", ((_KEEP, dict(method="mulo", scale=4, tau=0.5, k=16, radius=0)),
                                                   (_B_K, dict(method="mulo", scale=4, tau=0.5, k=16, radius=0,
                                                               commit="target")),
                                                   (_EXACT, dict(method="mulo", scale=4, accept="exact", radius=0)),
                                                   (_DISTILLED, dict(method="mulo", scale=4, accept="exact", radius=0,
                                                                     upsampler="distilled")),
                                                   (_JACOBI, dict(method="mulo", scale=4, tau=1.0, k=0, radius=0,
                                                                  resample="jacobi", draft_window=4, window=1))),
         lambda r: (f"One 8×8 draft, five endings. Keeping the proposal wherever its pooled mass passes τ 0.5: "
                    f"{_x(r[_KEEP])} the passes of ar, {_pc(r[_KEEP]['kept'])} kept, log-lik gap {_gap(r[_KEEP])}. "
                    f"Committing the target's own token inside B_k instead (drawn from the same verify pass, no pass "
                    f"more): gap {_gap(r[_B_K])}, {_closer(r[_KEEP], r[_B_K])} ar's. The exact test min(1, p/q): "
                    f"{_pc(r[_EXACT]['passed'])} of the proposals pass, the rest are drawn from the residual in the "
                    f"same pass ({r[_EXACT]['target']} target passes): {_x(r[_EXACT])}, gap {_gap(r[_EXACT])}, since "
                    "each cell is the target's choice given the proposal before it, not the cells it ends beside. "
                    f"The same test on a proposal drawn from an up-sampler distilled against the target (its q fitted "
                    f"to the target's p on the target's own samples): {_pc(r[_DISTILLED]['passed'])} pass, "
                    f"{_x(r[_DISTILLED])}, gap {_gap(r[_DISTILLED])}, {_closer(r[_EXACT], r[_DISTILLED])} ar's. "
                    f"The proposal as the first guess of a Jacobi repair of the whole grid (pjd's row-causal "
                    f"iteration; every cell tested or drawn by the target): {r[_JACOBI]['target']} target + "
                    f"{r[_JACOBI]['drafter']} drafter passes, {_x(r[_JACOBI])}, gap {_gap(r[_JACOBI])}: here the "
                    "draft buys target passes, not kept cells."),
         "Which ending kept the image as probable as ar's (gap closest to 0), and at what speed-up in passes?",
         lambda r: (lambda k: f"{k}: gap {_gap(r[k])} nats/token at {_x(r[k])} the passes of ar.")(
             min((_KEEP, _B_K, _EXACT, _DISTILLED, _JACOBI), key=lambda k: abs(r[k]["gap"])))),
)


def _gap(row: dict) -> str:
    return per_image.signed(row["gap"], 2)


def _x(row: dict) -> str:
    """ar's passes (one per cell) over the run's, as the headline counts them."""
    return f"{row['cells'] / max(row['passes'], 1):.2f}×"


def entropy_of(pair, trace) -> tuple[float, float]:
    """(median entropy in nats, share of cells whose top-1 mass is below one half) of the target over
    the run's own tokens (core.ambiguity: one teacher-forced forward under the run's processed
    distribution)."""
    amb = ambiguity.measure(pair, trace)
    s = ambiguity.summary(amb.entropy, amb.top1)
    return s["median_entropy"], s["unsure_share"]


def _row(pair, label: str, trace, ar, images: tuple) -> tuple[dict, list]:
    t, H, W = trace.totals, *trace.grid["target"]
    q = per_image.against_ar(pair, trace, ar) if ar is not None else None
    q = q or per_image.REFERENCE
    verify = [s for s in trace.steps if s["phase"] == "verify" and "islands" in s]
    islands = sum(s.get("n_islands", 0) for s in verify)
    kept = t["kept_fraction"]
    row = dict(cells=H * W, target=t["target_nfe"], drafter=t["drafter_nfe"], passes=t["target_nfe"] + t["drafter_nfe"],
               passed=t["passed_fraction"], kept=kept, islands=islands,
               resampled=None if kept is None else int(round(H * W * (1 - kept))) if trace.method == "mulo" else None,
               sharpness=q["sharpness"], gap=q["loglik_gap"], wall=t["wall_ms"], grid=f"{H}×{W}",
               draft_grid=None if trace.draft is None else f"{len(trace.draft)}×{len(trace.draft[0])}")
    pics = []
    for what in images:
        grid = {"final": trace.tokens, "proposal": trace.proposal, "draft": trace.draft}[what]
        if grid is not None:
            pics.append((render.crisp(engine.decode_image(grid, pair.tokenizer)), f"{label}: {what}"))
    return row, pics


def _table_row(label: str, r: dict) -> list:
    return [label, r["passes"], r["target"], r["drafter"], _pc(r["passed"]), _pc(r["kept"]), r["islands"] or None,
            r["resampled"], round(r["sharpness"], 2), round(r["gap"], 3), round(r["wall"])]


def _shipped_step(step: Step, base: RunConfig) -> tuple | None:
    """(ar, [(label, trace)]) of the step on base's settings from the shipped runs (app.shipped), or None
    when any of its runs is not shipped."""
    ar = shipped.trace_for(replace(base, method="ar"))
    ran = [(label, ar if cfg is None else shipped.trace_for(cfg)) for label, cfg in step_runs(step, base)]
    return None if ar is None or any(trace is None for _, trace in ran) else (ar, ran)


def step_runs(step: Step, base: RunConfig) -> list[tuple[str, RunConfig | None]]:
    """(label, RunConfig) of each run of the step on base's prompt, seed and pair; None for ar at its
    defaults, which is the step's reference run itself."""
    out = []
    for label, over in step.runs:
        over = dict(over)
        cfg = replace(base, method=over.pop("method", label.split(",")[0]))
        out.append((label, None if cfg.method == "ar" and not over else cfg.with_params(**over) if over else cfg))
    return out


def _add(step: Step, pair, label: str, trace, ar, rows: dict, gallery: list, table: list) -> None:
    """One run's row, images and table line (the ar run itself: judged against nothing)."""
    row, pics = _row(pair, label, trace, None if trace is ar else ar, step.images)
    if step.entropy and not rows:
        row["entropy"], row["flat"] = entropy_of(pair, trace)
    rows[label] = row
    gallery += pics
    table.append(_table_row(label, row))


def _empty(status: str):
    return [], [], "", "", "", status


# Finished steps by (step, prompt, seed, model pair): a repeated press is answered from here (app.remembered)
REMEMBERED = Remembered(64 * 2 ** 20, lambda out: images_bytes(out[0]))


@GPU
def run_step(request: gr.Request | None, n, prompt, seed, model="embedded", live=False):
    """Run lesson step n (1-based) on the prompt and seed; yields (gallery, table, look, question,
    answer, status). The ar image of the same seed is the reference of every quality number. A step
    remembered or shipped for these settings is answered from there, unless `live` (the tab's "Run the
    steps live" box): then it runs here."""
    live = live is True
    try:
        n = int(n)
        if not 1 <= n <= len(STEPS):
            raise IndexError
        step = STEPS[n - 1]
    except (TypeError, ValueError, IndexError):
        raise user_error(f"lesson step must be 1 to {len(STEPS)}; got {short(n)}") from None
    base = RunConfig(prompt=prompt, seed=int(seed), model=model)
    pair = checked(base)
    key = (n, base.prompt, base.seed, base.model)
    hit = None if live else REMEMBERED.recall(key)
    if hit is not None:
        yield _recalled(step, base, hit)
        return
    rows, gallery, table = {}, [], []
    from_file = None if live else _shipped_step(step, base)
    if from_file is not None:
        ar, ran = from_file
        for label, trace in ran:   # the shipped runs of the default prompt and seed: no model run
            _add(step, pair, label, trace, ar, rows, gallery, table)
        out = (list(gallery), [list(r) for r in table], step.look(rows), f"**Question.** {step.question}",
               step.answer(rows), f"Done: {step.title} on seed {base.seed}, from the runs shipped with the app for "
               "the default prompt and seed (shown at once; the table's wall ms were measured when they were "
               "written). Tick \"Run the steps live\" to run it here.")
        REMEMBERED.keep(key, out)
        yield out
        return
    session = session_of(request)
    with running(session, "Lesson"), turn() as hold:
        try:
            got = yield from hold.wait(session, "Lesson", DURATIONS.get(("Lesson", key)) or DURATIONS.get(("Lesson", n)),
                                       _empty, (lambda: None) if live else (lambda: REMEMBERED.recall(key)))
            if hold.ticket is None:   # the same step finished while this press waited
                yield _recalled(step, base, got)
                return
            t0 = time.perf_counter()
            yield _empty(f"Running {step.title}: ar first, the reference…")
            ar = ar_baseline(replace(base, method="ar"), pair, session)
            for label, cfg in step_runs(step, base):
                # copies: Gradio sends a generator's outputs as differences from the last ones it kept
                yield list(gallery), [list(r) for r in table], "", "", "", f"Running {step.title}: {label}…"
                _add(step, pair, label, ar if cfg is None else run_stoppable(cfg, pair, session), ar, rows, gallery,
                     table)
        except Stopped:
            yield list(gallery), [list(r) for r in table], "", "", "", f"Stopped during {step.title}."
            return
        DURATIONS.note(("Lesson", key), time.perf_counter() - t0)
        DURATIONS.note(("Lesson", n), time.perf_counter() - t0)
        out = (list(gallery), [list(r) for r in table], step.look(rows), f"**Question.** {step.question}",
               step.answer(rows), f"Done: {step.title} on seed {base.seed} (the images and the table are this run's).")
        REMEMBERED.keep(key, out)   # before the line moves on: a press of the same step waiting takes it
    yield out


def _recalled(step: Step, base: RunConfig, hit) -> tuple:
    """A step's outputs from its remembered run (REMEMBERED.recall's (seconds ago, outputs))."""
    ago, (gallery, table, look, question, answer, _) = hit
    return (list(gallery), [list(r) for r in table], look, question, answer,
            f"Done: {step.title} on seed {base.seed}, from the remembered run of this step on this prompt, seed "
            f"and model pair ({ago:.0f} s ago; the images, the table and its wall ms are that run's).")


def warm_shipped() -> int:
    """Every step on the default prompt and seed built from the shipped runs into REMEMBERED before anyone
    presses it (no generation: the yardsticks over the shipped tokens); how many steps."""
    from .inputs import DEFAULTS
    base = RunConfig(prompt=DEFAULTS["prompt"], seed=DEFAULTS["seed"], model=DEFAULTS["model"])
    warmed = 0
    for n, step in enumerate(STEPS, start=1):
        if _shipped_step(step, base) is not None:
            for _ in run_step(None, n, base.prompt, base.seed, base.model):   # never a live run: all shipped
                pass
            warmed += 1
    return warmed


def build(gallery_class) -> dict:
    """The tab's components under its explanation: a button per step, the status, the words, the
    question and its folded answer, the table and the images (gallery_class: ui's file-served Gallery)."""
    c: dict = {}
    with gr.Row(elem_id="lesson-steps"):
        c["buttons"] = [gr.Button(st.title, elem_id=f"lesson-{n + 1}", size="sm") for n, st in enumerate(STEPS)]
    c["live"] = gr.Checkbox(False, label="Run the steps live (not from the runs shipped with the app or "
                                         "remembered by this server)", elem_id="lesson-live")
    c["status"] = gr.Markdown(elem_id="lesson-status")
    c["look"] = gr.Markdown(elem_id="lesson-look")
    c["question"] = gr.Markdown(elem_id="lesson-question")
    with gr.Accordion("Answer (from the table)", open=False, elem_id="lesson-answer-fold"):
        c["answer"] = gr.Markdown(elem_id="lesson-answer")
    c["table"] = gr.Dataframe(headers=COLUMNS, interactive=False, label="The runs", elem_id="lesson-table")
    c["gallery"] = gallery_class(label="Images", columns=6, height=240, format="png", interactive=False,
                                 elem_classes=["token-grid"], elem_id="lesson-gallery")
    c["steps"] = [gr.Number(n + 1, visible=False) for n in range(len(STEPS))]
    return c


def wire(c: dict, knobs: dict, model_events: dict) -> None:
    """Each button runs its step on the Run tab's prompt, seed and model pair (api lesson_1 … lesson_9)."""
    outputs = [c["gallery"], c["table"], c["look"], c["question"], c["answer"], c["status"]]
    for n, (button, number) in enumerate(zip(c["buttons"], c["steps"])):
        button.click(run_step, [number, knobs["prompt"], knobs["seed"], knobs["model"], c["live"]], outputs,
                     api_name=f"lesson_{n + 1}", show_progress_on=[c["status"]], **model_events)
