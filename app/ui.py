"""The layout and the wiring: `build_demo()` returns the Blocks. No computation lives here; every
event calls a function of app.handlers. Model-running events share one queue slot ("model")."""
from __future__ import annotations

import gradio as gr
import numpy as np

from core import engine
from core.config import CONTEXT_MODES, REJECTION_MODES, RESAMPLE_MODES, SJD_INITS, UPSAMPLERS
from core.embedded.domain import BACKGROUNDS, COLOURS, SHAPES, SIZES
from core.methods import registry
from core.trace import MAX_BYTES

from . import files
from . import handlers as h
from .theme import CSS, THEME

# what keeps one host safe for many users (README, "Hosting safely"): a bounded queue, uploads no
# larger than a trace may be, a bounded number of sessions kept, and the cache swept on a schedule
QUEUE = dict(default_concurrency_limit=4, max_size=32)
STATE_TTL_S = 3600          # a session's run is dropped this long after it was made
LAUNCH = dict(max_file_size=MAX_BYTES, state_session_capacity=256, app_kwargs=dict(lifespan=files.sweeping),
              theme=THEME, css=CSS)


def _as_files(cls):
    """cls (an image-showing component) that writes arrays as cached PNG files itself (app.files),
    so that a file being served is never rewritten; the browser sees the same component."""
    class Component(cls):
        is_template = True   # the front end draws it as cls

        def postprocess(self, value):
            if isinstance(value, np.ndarray):
                value = files.png(value)
            elif isinstance(value, list):   # a gallery: images or (image, caption) pairs
                value = [(files.png(v[0]), *v[1:]) if isinstance(v, tuple) and isinstance(v[0], np.ndarray)
                         else files.png(v) if isinstance(v, np.ndarray) else v for v in value]
            return super().postprocess(value)
    Component.__name__ = Component.__qualname__ = cls.__name__
    return Component


Image, Gallery = _as_files(gr.Image), _as_files(gr.Gallery)

EXAMPLES = [
    "a large red circle center on a striped blue background",
    "a small red circle top left and a medium blue square center on a striped green background",
    "a large yellow triangle bottom right on a checkered purple background",
    "a medium green diamond top center and a small pink cross bottom left on a gradient cyan background",
    "a large orange square center on a noisy blue background",
]

INTRO = """# MuLo-SD Explorer
Speculative decoding for autoregressive image models, one token grid at a time. A small **drafter**
paints a low-resolution image quickly; it is **up-sampled** into a proposal for the full grid; the big
**target** model checks every proposed token in *one* pass and keeps the ones it finds likely enough
(pooled probability ≥ τ). Only the rejected spots, grown by a radius into **islands**, are redrawn by the
target. Pick a preset, press **Generate**, then explore the views."""

EXPLAIN = {
    "images": "**Left to right:** what the drafter drew at low resolution; that draft up-sampled to the full "
              "grid (the *proposal*); the final image after verification and resampling; and plain "
              "autoregressive decoding (ar) with the same prompt and seed, for reference. Each square is one "
              "token. Click a cell of the proposal to inspect it.",
    "heatmap": "For every proposed token the target adds up its probability and that of its k nearest "
               "codebook neighbours (*pooled mass*, log scale). Cells at or above τ (green, black contour) "
               "are accepted without any further work; red cells are rejected. Hover for the numbers.",
    "islands": "Rejected cells (red dots) and the neighbours within radius l that are redrawn with them. "
               "Each colour is one *island*: islands are independent, so the target redraws them in "
               "parallel, a few passes instead of one per token.",
    "timing": "Each bar is a phase of the run on a wall-clock axis; the ar baseline runs below for scale. "
              "NFE counts sequential model passes, the number that decides speed on a GPU; wall clock on "
              "this CPU also pays for the drafter and the up-sampler.",
    "scrubber": "Replay the run: the canvas as it stood after each step (left, the drafter's low-resolution "
                "grid; right, the target grid). Yellow marks the cells the step wrote; at a verify step green "
                "is accepted and red rejected. Dark cells are not written yet.",
    "compare": "Every decoding method on the same prompt, seed and knobs: final images, target passes, wall "
               "clock, acceptance and quality side by side (speedups are over ar; quality as in the Sweep tab).",
    "sweep": "Trade-off curve: each point is one run. Right means fewer target passes than ar; up means a "
             "better image: the share of the prompt's attributes (objects, places, shapes, colours, sizes, "
             "background) that the domain's classifier reads back from it. mulo sweeps τ, ZipAR "
             "sweeps its window. One seed per point: read trends, not decimals. A summary.json from "
             "`python -m core bench --out DIR` shows a large precomputed sweep's frontier instead (speedups "
             "in sequential passes and wall-clock against adherence and Fréchet distance, means over its prompts).",
    "files": "Download the trace of the last run (JSON, schema mulo-trace/2) to share or attach to a bug "
             "report; upload a trace to replay all views without running any model.",
}


def _explain(key: str) -> gr.Markdown:
    return gr.Markdown(EXPLAIN[key], elem_classes=["explain"])


def _grid(label: str, elem_id: str) -> gr.Image:
    return Image(label=label, type="numpy", format="png", interactive=False, height=240, elem_id=elem_id,
                    elem_classes=["token-grid"], buttons=["download", "fullscreen"])


def _knob_inputs(vocab_size: int) -> dict:
    d = h.DEFAULTS
    k = {}
    k["model"] = gr.Dropdown(list(engine.found_pairs()), value=d["model"], label="Model pair", elem_id="model",
                             info="the pairs whose weights are on this machine (on a Space: every pair)")
    k["pair_info"] = gr.Markdown(h.pair_markdown(d["model"]), elem_id="pair-info", elem_classes=["explain"])
    k["method"] = gr.Dropdown(list(registry()), value=d["method"], label="Method", elem_id="method")
    k["seed"] = gr.Number(d["seed"], precision=0, minimum=0, label="Seed", elem_id="seed")
    with gr.Accordion("MuLo-SD knobs", open=True):
        k["tau"] = gr.Slider(0.0, 1.0, d["tau"], step=0.01, label="τ: acceptance threshold", elem_id="tau",
                             info="accept a token when its pooled probability reaches τ")
        k["k"] = gr.Slider(0, 64, d["k"], step=1, label="k: neighbours pooled",
                           info="codebook neighbours whose probability counts for the proposal")
        k["scale"] = gr.Radio([2, 4], value=d["scale"], label="r: up-scale factor",
                              info="drafter grid = target grid / r")
        k["radius"] = gr.Slider(0, 4, d["radius"], step=1, label="l: expansion radius",
                                info="neighbours redrawn with each rejected token")
        k["rejection"] = gr.Radio(list(REJECTION_MODES), value=d["rejection"], label="Rejection",
                                  info="local: only around rejections; raster: resample the first, draft again")
        k["context"] = gr.Radio(list(CONTEXT_MODES), value=d["context"], label="Context while resampling",
                                info="exact: rewrite K/V whose context changed; verify: passed tokens keep "
                                     "the verify pass's K/V (cheaper)")
        k["resample"] = gr.Radio(list(RESAMPLE_MODES), value=d["resample"], label="Resampling",
                                 info="serial: one token per pass; islands: islands in parallel")
        k["upsampler"] = gr.Radio(list(UPSAMPLERS), value=d["upsampler"], label="Up-sampler")
        k["draft_rows"] = gr.Slider(0, 16, d["draft_rows"], step=1, label="Draft rows per cycle (0 = all)")
        k["draft_window"] = gr.Slider(0, 16, d["draft_window"], step=1,
                                      label="Drafter ZipAR window (0 = serial drafting)")
    with gr.Accordion("SD, LANTERN and SJD knobs", open=False):
        k["gamma"] = gr.Slider(1, 16, d["gamma"], step=1, label="γ: tokens drafted per cycle (sd, lantern)")
        k["delta"] = gr.Slider(0.0, 1.0, d["delta"], step=0.05, label="δ: probability mass moved (lantern)")
        k["lantern_k"] = gr.Slider(0, max(d["lantern_k"], vocab_size - 1), d["lantern_k"], step=1,
                                   label="Neighbours considered (lantern)", info="capped at the codebook size")
        k["sjd_window"] = gr.Slider(1, 64, d["sjd_window"], step=1, label="Jacobi window L (sjd)")
        k["sjd_init"] = gr.Radio(list(SJD_INITS), value=d["sjd_init"], label="Jacobi initialisation (sjd)")
    with gr.Accordion("ZipAR and sampling", open=False):
        k["window"] = gr.Slider(1, 32, d["window"], step=1, label="ZipAR window w",
                                info="a row starts once the row above has w tokens; also used inside islands")
        k["cfg"] = gr.Slider(1.0, 8.0, d["cfg"], step=0.5, label="CFG scale (1 = no guidance)")
        k["temperature"] = gr.Slider(0.0, 2.0, d["temperature"], step=0.05, label="Temperature (0 = greedy)")
        k["top_k"] = gr.Slider(0, vocab_size, d["top_k"], step=1, label="Top-k (0 = off)")
        k["cfg_interval"] = gr.Slider(-1, 256, d["cfg_interval"], step=1, label="CFG interval (-1 = every token)",
                                      info="guidance for tokens 0 to N + 1 only, as LlamaGen's --cfg-interval N")
    return k


def _prompt_builder(prompt: gr.Textbox) -> None:
    with gr.Accordion("Prompt builder", open=False):
        parts = []
        for n, (size, colour, shape, place) in enumerate((("large", "red", "circle", "center"),
                                                          ("small", "blue", h.NO_OBJECT, "top left")), start=1):
            with gr.Row():
                parts += [gr.Dropdown(list(SIZES), value=size, label=f"Size {n}", min_width=80),
                          gr.Dropdown(list(COLOURS), value=colour, label=f"Colour {n}", min_width=80),
                          gr.Dropdown(list(SHAPES) + ([h.NO_OBJECT] if n == 2 else []), value=shape,
                                      label=f"Shape {n}", min_width=80),
                          gr.Dropdown(list(h.PLACES), value=place, label=f"Place {n}", min_width=100)]
        with gr.Row():
            parts += [gr.Dropdown(list(BACKGROUNDS), value="striped", label="Background", min_width=80),
                      gr.Dropdown(list(COLOURS), value="blue", label="Background colour", min_width=80)]
        gr.Button("Use this prompt", size="sm").click(h.build_prompt, parts, prompt, api_visibility="private")


def build_demo() -> gr.Blocks:
    pair = engine.load_pair("embedded")
    with gr.Blocks(title="MuLo-SD Explorer", delete_cache=(min(60, files.CACHE_AGE_S), files.CACHE_AGE_S)) as demo:
        state = gr.State(time_to_live=STATE_TTL_S)
        gr.Markdown(INTRO)
        with gr.Row():
            with gr.Column(scale=1, min_width=340):
                preset = gr.Dropdown(list(h.PRESETS), value=None, label="Teaching preset", elem_id="preset",
                                     info="one click, one phenomenon")
                preset_info = gr.Markdown(elem_classes=["explain"])
                prompt = gr.Textbox(h.DEFAULTS["prompt"], label="Prompt", lines=2, elem_id="prompt",
                                    info="the domain's words only: sizes, colours, shapes, places, backgrounds")
                with gr.Row():
                    run_btn = gr.Button("Generate", variant="primary", elem_id="generate")
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="stop")
                status = gr.Markdown(elem_id="status")
                show_grid = gr.Checkbox(False, label="Show token grid lines")
                gr.Examples(EXAMPLES, inputs=[prompt], cache_examples=False, label="Example prompts")
                _prompt_builder(prompt)
                knobs = _knob_inputs(pair.vocab_size)
                pair_info = knobs.pop("pair_info")
                knobs["prompt"] = prompt
                knob_list = [knobs[k] for k in h.KNOBS]
                with gr.Accordion("Share these settings", open=False):
                    link_btn = gr.Button("Make a link", size="sm")
                    link = gr.Textbox(label="Link", buttons=["copy"], interactive=False)
            with gr.Column(scale=3):
                with gr.Tabs():
                    with gr.Tab("Run", id="run"):
                        _explain("images")
                        with gr.Row():
                            draft = _grid("Low-res draft", "draft")
                            proposal = _grid("Proposal (click a cell)", "proposal")
                            final = _grid("Final image", "final")
                            baseline = _grid("ar, same seed", "baseline")
                        stats = gr.Markdown(elem_id="speedup")
                        with gr.Row():
                            with gr.Column(scale=3):
                                _explain("heatmap")
                                heatmap = gr.Plot(label="Acceptance heatmap", elem_id="heatmap")
                            with gr.Column(scale=2):
                                _explain("islands")
                                islands = _grid("Rejection islands", "islands")
                                cell = gr.Markdown("Click a cell of the proposal to see its numbers.",
                                                   elem_id="cell")
                        _explain("timing")
                        timeline = gr.Plot(label="Timeline", elem_id="timeline")
                        _explain("scrubber")
                        scrubber = gr.Slider(0, 1, 0, step=1, label="Step", elem_id="scrubber")
                        step = gr.Markdown(elem_id="step")
                        canvas = Image(label="Canvas after the step", type="numpy", format="png",
                                          interactive=False, height=360, elem_id="canvas",
                                          elem_classes=["token-grid"], buttons=["download", "fullscreen"])
                    with gr.Tab("Compare", id="compare"):
                        _explain("compare")
                        cmp_btn = gr.Button("Compare all methods", variant="primary", elem_id="compare-run")
                        cmp_status = gr.Markdown()
                        cmp_gallery = Gallery(label="Final images", columns=6, height=240, format="png",
                                                 interactive=False, elem_classes=["token-grid"])
                        cmp_table = gr.Dataframe(headers=["method", "target NFE", "drafter NFE", "wall ms",
                                                          "kept", "NFE speedup", "wall speedup", "quality",
                                                          "note"],
                                                 interactive=False, label="Figures")
                        cmp_plot = gr.Plot(label="Side by side")
                    with gr.Tab("Sweep", id="sweep"):
                        _explain("sweep")
                        with gr.Row():
                            taus = gr.Textbox("0, 0.05, 0.1, 0.3", label="mulo τ values")
                            windows = gr.Textbox("4, 16", label="ZipAR windows")
                        sweep_btn = gr.Button("Run the sweep", variant="primary")
                        sweep_status = gr.Markdown()
                        sweep_plot = gr.Plot(label="Speed vs quality", elem_id="sweep-plot")
                        summary_file = gr.File(label="Or open a precomputed sweep: the summary.json of a "
                                                     "`python -m core bench --out DIR` run", file_types=[".json"],
                                               type="filepath", elem_id="summary-file")
                    with gr.Tab("Trace files", id="files"):
                        _explain("files")
                        trace_file = gr.File(label="Trace of the last run", interactive=False)
                        upload = gr.File(label=f"Replay a trace (JSON, at most {MAX_BYTES // 2**20} MiB)", file_types=[".json"],
                                         type="filepath")
                        replay_btn = gr.Button("Replay the uploaded trace")

        view_outputs = dict(draft=draft, proposal=proposal, final=final, baseline=baseline, heatmap=heatmap,
                            islands=islands, timeline=timeline, stats=stats, scrubber=scrubber, canvas=canvas,
                            step=step)
        views = [view_outputs[v] for v in h.VIEWS]
        run_outputs = [state, status, trace_file, *views]

        # the model-running events and the scrubber take their inputs as sent (preprocess=False): the
        # handlers check every value's type and name the knob, instead of a generic component error
        gen = run_btn.click(h.generate, [show_grid] + knob_list, run_outputs, api_name="generate",
                            concurrency_id="model", concurrency_limit=1, show_progress="minimal", preprocess=False)
        stop_btn.click(h.stop, None, status, cancels=[gen], api_visibility="private")
        replay_btn.click(h.replay, [upload, show_grid], run_outputs, api_name="replay")
        show_grid.change(h.regrid, [state, show_grid], views, api_visibility="private", show_progress="hidden")
        scrubber.input(h.scrub, [state, scrubber, show_grid], [canvas, step], api_name="scrub",
                       show_progress="hidden", trigger_mode="always_last", preprocess=False)
        proposal.select(h.inspect_cell, state, cell, api_visibility="private")
        cmp_btn.click(h.compare, knob_list, [cmp_gallery, cmp_table, cmp_plot, cmp_status], api_name="compare",
                      concurrency_id="model", concurrency_limit=1, preprocess=False)
        sweep_btn.click(h.sweep, [taus, windows] + knob_list, [sweep_plot, sweep_status], api_name="sweep",
                        concurrency_id="model", concurrency_limit=1, preprocess=False)
        summary_file.upload(h.open_summary, summary_file, [sweep_plot, sweep_status], api_name="open_summary")
        preset.input(h.preset, preset, knob_list + [preset_info], api_name="preset", show_progress="hidden")
        knobs["model"].change(h.pick_model, knobs["model"], [knobs["top_k"], knobs["cfg"], knobs["temperature"],
                                                              knobs["cfg_interval"], knobs["lantern_k"],
                                                              knobs["scale"], pair_info], api_visibility="private",
                              preprocess=False)
        link_btn.click(h.share_link, knob_list, link, api_visibility="private")
        demo.load(h.from_query, None, knob_list, api_visibility="private")
        demo.unload(h.forget)
    return demo
