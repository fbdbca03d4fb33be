"""The layout and the wiring: `build_demo()` returns the Blocks. No computation lives here; every
event calls a function of the module that owns its concern (app.generation, app.comparison,
app.replays, app.panels, app.links, app.inputs, app.control). Model-running events share one queue
slot ("model")."""
from __future__ import annotations

import functools
import json

import gradio as gr
import numpy as np
from starlette.middleware import Middleware

from core import engine
from core.config import (ACCEPT_RULES, COMMIT_RULES, CONTEXT_MODES, COOL_NORMS, DRAFT_METHODS, LANTERN_RESIDUALS,
                         REDRAFTS, REJECTION_MODES, RESAMPLE_MODES, SJD_INITS, STATIC_TREES, UPSAMPLERS,
                         VVS_SCHEDULES)
from core.methods import registry
from core.trace import MAX_BYTES

from . import comparison, control, files, generation, inputs, lesson, line, links, panels, replays, theme, uploads
from . import ambiguity_view, codebook_view
from .level_rows import CASCADE_ROWS

# what keeps one host safe for many users (docs/hosting.md): a bounded queue, uploads no
# larger than a trace may be and bounded in total (app.uploads), a bounded number of sessions kept,
# a bounded number of replays read at once, and the cache swept on a schedule
QUEUE = dict(default_concurrency_limit=4, max_size=64)
STATE_TTL_S = 3600          # a session's run is dropped this long after it was made
REPLAYS_AT_ONCE = 2         # uploaded traces read at once in this process (each may take ~100 MB while read)
# the model events start at once and wait in the model's line (app.line), which runs one at a time and
# tells each its place; under ZeroGPU a started event would hold a GPU while it waits, so there Gradio's
# queue keeps them (one at a time, its own words)
MODEL_AT_ONCE = 1 if control.ZERO_GPU else line.MOST
LAUNCH = dict(max_file_size=MAX_BYTES, state_session_capacity=256, max_threads=40 + MODEL_AT_ONCE,
              app_kwargs=dict(lifespan=files.sweeping, middleware=[Middleware(uploads.Gate)]),
              theme=theme.THEME, css=theme.CSS)


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
(pooled probability ≥ τ). The rejected spots, grown by a radius into **islands**, are redrawn by the
target; where rejections are dense the islands merge, and the heatmap's title says how much of the grid
each run redrew. Pick a preset, press **Generate**, then explore the views."""

EXPLAIN = {
    "images": panels.METHOD_EXPLAIN["mulo"][0],
    "heatmap": panels.METHOD_EXPLAIN["mulo"][1],
    "islands": panels.METHOD_EXPLAIN["mulo"][2],
    "trees": "**The draft tree of one cycle** (eagle, lantern, lantern_pp, vvs). From the root, the last "
             "committed cell (grey square, depth 0), the draft head proposed a tree of tokens for the next cells: "
             "a node at depth d is a candidate for the cell d after the root, siblings are alternatives for one "
             "cell, top to bottom in the order the target tried them. The target scored every node in one pass; "
             "down from the root each child was **accepted** (green) or **rejected** (red) in turn, and the nodes "
             "under a rejected or untried branch were **not tried** (grey). The star is the token drawn after "
             "the accepted path: resampled from the residual (orange) or a bonus from p at a leaf (yellow). The "
             "cycle shown first has the longest accepted path; choose another with the slider. **Right:** each "
             "cycle's accepted length painted on the cells it committed.",
    "timing": "Each bar is a phase of the run on a wall-clock axis; the ar baseline runs below for scale. "
              "NFE counts sequential model passes, the number that decides speed on a GPU; wall clock on "
              "this CPU also pays for the drafter and the up-sampler.",
    "scrubber": "Replay the run: the canvas as it stood after each step (left, the drafter's low-resolution "
                "grid; right, the target grid), coloured as the key under it says.",
    "lesson": "**A guided lesson in nine steps**, from ar to the speed–quality frontier and what a kept cell "
              "commits. Each button runs its "
              "settings on the prompt and seed of the Run tab (ar first, the reference of every quality number), "
              "then says what to look at with this run's numbers and asks one question whose answer is in the "
              "table; the answer waits under the fold. Stop ends a step at its next run.",
    "compare": "Every decoding method on the same prompt, seed and knobs: final images, sequential passes "
               "(target + drafter), wall clock, passed and kept shares and quality side by side: prompt "
               "adherence (the embedded pair's classifier), **sharpness ÷ ar** (this image's high-frequency "
               "energy over ar's; 1 = as sharp as ar's) and the **log-lik gap** (the target's mean "
               "log-probability of this image's tokens minus of ar's, nats/token; 0 = as probable as the "
               "target's own sample). ar runs first in the same comparison, so every figure is against an "
               "ar of the same conditions; target NFE alone is a detail column. **Compare up-samplers** runs "
               "mulo at these knobs with each up-sampler (nearest, pixel = bicubic, sr = a trained "
               "super-resolution network, learned = a token-space one trained on the data, distilled = the "
               "same network trained on the target's own samples) and shows each up-sampled "
               "proposal beside the final image the target made of it.",
    "sweep": "Trade-off curve: each point is one run. Right means fewer sequential passes (target + "
             "drafter) than ar; up means a better image. Top: prompt adherence, the share of the prompt's "
             "attributes (objects, places, shapes, colours, sizes, background) that the domain's classifier "
             "reads back from it. Bottom, the detail axis: the **log-lik gap** to ar's image (the target's "
             "mean log-probability of the run's tokens minus of ar's, nats/token; ar at 0, below 0 = tokens "
             "the target finds less probable), the price of each τ; the hover adds **sharpness ÷ ar**. "
             "mulo sweeps τ, ZipAR "
             "sweeps its window. One seed per point: read trends, not decimals. A summary.json from "
             "`python -m core bench --out DIR` shows a large precomputed sweep's frontier instead (speedups "
             "in sequential passes and wall-clock against every yardstick, means over its prompts, with the "
             "bounds of that run dashed).",
    "files": "Download the trace of the last run (JSON, schema mulo-trace/3) to share or attach to a bug "
             "report; upload a trace to replay all views without running any model.",
}


def _explain(key: str) -> gr.Markdown:
    return gr.Markdown(EXPLAIN[key], elem_classes=["explain"])


def _grid(label: str, elem_id: str) -> gr.Image:
    # min_width wraps the four panels two by two on narrow screens rather than putting their labels
    # under the download and fullscreen buttons
    return Image(label=label, type="numpy", format="png", interactive=False, height=240, elem_id=elem_id,
                 elem_classes=["token-grid"], buttons=["download", "fullscreen"], min_width=200)


def _slider(name: str, label: str, info: str | None = None, **kw) -> gr.Slider:
    lo, hi, step = inputs.SLIDERS[name]
    return gr.Slider(lo, hi, inputs.DEFAULTS[name], step=step, label=label, info=info, elem_id=name,
                     elem_classes=["knob"], **kw)


def _mission_knobs() -> dict:
    """k, τ, r, l: the four knobs of MuLo-SD, right under Generate."""
    d = inputs.DEFAULTS
    return dict(
        k=_slider("k", "k: codebook neighbours pooled"),
        tau=_slider("tau", "τ: threshold on pooled mass"),
        scale=gr.Radio([2, 4], value=d["scale"], label="r: up-scale factor (draft grid = grid / r)", elem_id="scale"),
        radius=_slider("radius", "l: radius grown around cells below τ"))


def _more_knobs(vocab_size: int) -> dict:
    d = inputs.DEFAULTS
    k = {}
    with gr.Row():
        k["method"] = gr.Dropdown(list(registry()), value=d["method"], label="Method", elem_id="method",
                                  min_width=120)
        k["seed"] = gr.Number(d["seed"], minimum=0, step=1, label="Seed", elem_id="seed", min_width=100)
    with gr.Accordion("More MuLo-SD knobs", open=False):
        k["rejection"] = gr.Radio(list(REJECTION_MODES), value=d["rejection"], elem_id="rejection", label="Rejection",
                                  info="local: only around rejections; raster: resample the first, draft again")
        k["context"] = gr.Radio(list(CONTEXT_MODES), value=d["context"], elem_id="context", label="Context while resampling",
                                info="exact: rewrite K/V whose context changed; verify: passed tokens keep "
                                     "the verify pass's K/V (cheaper)")
        k["resample"] = gr.Radio(list(RESAMPLE_MODES), value=d["resample"], elem_id="resample", label="Resampling",
                                 info="serial: one token per pass; islands: islands in parallel (ZipAR inside); "
                                      "jacobi: the proposal is the first guess of a Jacobi iteration inside "
                                      "each island")
        k["redraft"] = gr.Radio(list(REDRAFTS), value=d["redraft"], elem_id="redraft", label="Jacobi redraft (resample = jacobi)",
                                info="unaccepted guesses redrawn from p (independent) or coupled with the old "
                                     "guess (coupled, as scd)")
        k["upsampler"] = gr.Radio([("pixel (bicubic)" if u == "pixel" else u, u) for u in UPSAMPLERS], value=d["upsampler"], elem_id="upsampler", label="Up-sampler")
        k["accept"] = gr.Radio(list(ACCEPT_RULES), value=d["accept"], elem_id="accept", label="Acceptance test",
                               info="pooled: pooled mass on B_k ≥ τ; exact: min(1, p/q) per cell (a "
                                    "token-space up-sampler's proposal, learned or distilled, drawn from its q), a rejected cell drawn from the "
                                    "residual in the verify pass at l = 0")
        k["commit"] = gr.Radio(list(COMMIT_RULES), value=d["commit"], elem_id="commit", label="A kept cell commits (accept = pooled)",
                               info="proposal: the proposal's token; target: a token drawn from the target's p "
                                    "restricted to B_k, from the same verify pass")
        k["draft_rows"] = _slider("draft_rows", "Draft rows per cycle (0 = all)")
        k["draft_window"] = _slider("draft_window", "Drafter ZipAR window (0 = serial drafting)")
        k["draft_method"] = gr.Textbox(d["draft_method"], label="Drafter's method (draft_method)", max_lines=1,
                                       elem_id="draft_method",
                                       info=f"name[/knob=value/...], name one of {', '.join(DRAFT_METHODS)}: "
                                            "e.g. zipar/window=2, pjd/pjd_c=1, or mulo/scale=2 (a cascade: "
                                            "8×8 drafts 16×16, verified there, then 32×32)")
    with gr.Accordion("SD, tree (EAGLE-2, LANTERN, LANTERN++, VVS) and SJD knobs", open=False):
        k["gamma"] = _slider("gamma", "γ: tokens drafted per cycle (sd, cool)")
        k["tree_tokens"] = _slider("tree_tokens", "Tree nodes verified per cycle, the root included "
                                                  "(eagle, lantern, vvs)")
        k["tree_depth"] = _slider("tree_depth", "Tree depth: draft-head passes per cycle (eagle, lantern, vvs)",
                                  "vvs: also the tokens of each unverified cycle")
        k["tree_top_k"] = _slider("tree_top_k", "Children per expanded node, nodes expanded per level "
                                                "(eagle, lantern, vvs)")
        k["delta"] = _slider("delta", "δ: total-variation budget moved onto the draft token (lantern, vvs)")
        k["lantern_k"] = gr.Slider(0, max(d["lantern_k"], vocab_size - 1), d["lantern_k"], step=1,
                                   label="Neighbours considered (lantern, lantern_pp, vvs)",
                                   info="capped at the codebook size", elem_id="lantern_k", elem_classes=["knob"])
        k["lantern_lambda"] = _slider("lantern_lambda",
                                      "λ: the relaxed p̃ stays ≤ λ·p (lantern_pp; 1 = lossless)",
                                      "lantern_pp drafts a static tree: the three tree knobs above do not apply")
        k["lantern_residual"] = gr.Radio(list(LANTERN_RESIDUALS), value=d["lantern_residual"], elem_id="lantern_residual",
                                         label="After a relaxed rejection (lantern, lantern_pp, vvs)",
                                         info="moved: the papers' text (p̃ without the draft); official: the "
                                              "released code's (x's first k + 1 neighbours leave p, or q for lantern_pp)")
        k["static_tree"] = gr.Radio(list(STATIC_TREES), value=d["static_tree"], elem_id="static_tree",
                                    label="Static tree (lantern_pp)",
                                    info="cpu: 23 nodes over 4 levels; paper: the released 57 nodes over 5")
        k["vvs_interval"] = _slider("vvs_interval", "Skip interval (vvs uniform; 0 = eagle)",
                                    "cycle i (from 0) is committed unverified when i mod interval = 1")
        k["vvs_schedule"] = gr.Radio(list(VVS_SCHEDULES), value=d["vvs_schedule"], elem_id="vvs_schedule", label="Skip schedule (vvs)",
                                     info="uniform: every interval-th cycle; dynamic: when the drafted paths' "
                                          "codes agree (threshold below), never twice in a row")
        k["vvs_threshold"] = _slider("vvs_threshold", "Path agreement to skip (vvs dynamic)")
        k["sjd_window"] = _slider("sjd_window", "Jacobi window L (sjd, scd, gsd; pjd per row)")
        k["sjd_init"] = gr.Radio(list(SJD_INITS), value=d["sjd_init"], elem_id="sjd_init", label="Jacobi initialisation (sjd, scd, gsd, pjd)")
    with gr.Accordion("scd, gsd, pjd and cool knobs", open=False):
        k["gsd_group"] = _slider("gsd_group", "G: cluster rank window (gsd)")
        k["gsd_gap"] = _slider("gsd_gap", "Cluster probability gap (gsd)")
        k["gsd_dist"] = _slider("gsd_dist", "Cluster embedding distance, as a quantile (gsd)")
        k["pjd_c"] = _slider("pjd_c", "c: tokens of a row before the next starts (pjd)")
        k["cool_delta"] = _slider("cool_delta", "δ: relaxation scale (cool)")
        k["cool_nu"] = _slider("cool_nu", "ν: annealing rate (cool)")
        k["cool_norm"] = gr.Radio(list(COOL_NORMS), value=d["cool_norm"], elem_id="cool_norm", label="μ (cool)",
                                  info="mean: the weights average δ; first: the first weight is δ")
    with gr.Accordion("ZipAR and sampling", open=False):
        k["window"] = _slider("window", "ZipAR window w",
                              "a row starts once the row above has w tokens; also used inside islands")
        k["cfg"] = _slider("cfg", "CFG scale (1 = no guidance)")
        k["temperature"] = _slider("temperature", "Temperature (0 = greedy)")
        k["top_k"] = gr.Slider(0, vocab_size, d["top_k"], step=1, label="Top-k (0 = off)", elem_id="top_k",
                               elem_classes=["knob"])
        k["cfg_interval"] = _slider("cfg_interval", "CFG interval (-1 = every token)",
                                    "guidance for tokens 0 to N + 1 only, as LlamaGen's --cfg-interval N")
    with gr.Accordion("Model pair", open=False):
        k["model"] = gr.Dropdown(list(engine.found_pairs()), value=d["model"], label="Model pair", elem_id="model",
                                 info="the pairs whose weights are on this machine (on a Space: every pair)")
        k["pair_info"] = gr.Markdown(inputs.pair_markdown(d["model"]), elem_id="pair-info", elem_classes=["explain"])
    return k


def _level_row(n: int) -> dict:
    """The column of cascade level n, hidden until a run has the level, and its views (keys as
    panels.VIEWS names them)."""
    row = {}
    with gr.Column(visible=False, elem_id=f"level{n}", elem_classes=["level-row"]) as column:
        row[f"level{n}_title"] = gr.Markdown(elem_id=f"level{n}-title", elem_classes=["explain"])
        with gr.Row():
            row[f"level{n}_draft"] = _grid(f"Level {n}: its draft", f"level{n}-draft")
            row[f"level{n}_proposal"] = _grid(f"Level {n}: proposal", f"level{n}-proposal")
            row[f"level{n}_islands"] = _grid(f"Level {n}: islands", f"level{n}-islands")
        row[f"level{n}_key"] = gr.HTML(elem_id=f"level{n}-key")
        row[f"level{n}_heatmap"] = gr.Plot(label=f"Level {n} acceptance heatmap", show_label=False,
                                           elem_id=f"level{n}-heatmap")
    return column, row


def _prompt_builder(prompt: gr.Textbox) -> None:
    with gr.Accordion("Prompt builder", open=False):
        menus = []
        for first, last in ((0, 4), (4, 8), (8, 10)):   # object 1, object 2, the background
            with gr.Row():
                for (label, choices), value in zip(inputs.PROMPT_MENUS[first:last], inputs.PROMPT_CHOSEN[first:last]):
                    menus.append(gr.Dropdown(list(choices), value=value, label=label,
                                             min_width=100 if label.startswith("Place") else 80))
        # the choices reach build_prompt as sent (preprocess=False): one off its menu is named there, short
        gr.Button("Use this prompt", size="sm").click(inputs.build_prompt, menus, prompt, api_visibility="private",
                                                      preprocess=False)


# Runs once when the page loads. (1) Finds the heatmap's Plotly figure whenever it is redrawn and
# sends a clicked cell to the hidden #heatmap-click box, whose change event shows the cell card.
# (2) Keeps a slider's number box from clamping a typed value to the slider's ends when it loses
# focus: the value typed is the value sent, and the engine's check names the knob and its range.
PAGE_JS = """() => {
  setInterval(() => {
    const plot = document.querySelector('#heatmap .js-plotly-plot');
    if (!plot || plot.dataset.muloClick || !plot.on) return;
    plot.dataset.muloClick = '1';
    plot.on('plotly_click', (ev) => {
      const pt = ev.points && ev.points[0];
      const box = document.querySelector('#heatmap-click textarea, #heatmap-click input');
      if (!pt || !box) return;
      box.value = `${Math.round(pt.y)},${Math.round(pt.x)},${Date.now()}`;
      box.dispatchEvent(new Event('input', {bubbles: true}));
    });
  }, 500);
  const typed = (ev) => {
    const box = ev.target;
    if (!(box instanceof HTMLInputElement) || box.type !== 'number' || !box.closest('.knob')) return;
    if (ev.type === 'keydown' && ev.key !== 'Enter') return;
    ev.stopImmediatePropagation();
  };
  document.addEventListener('blur', typed, true);
  document.addEventListener('focusout', typed, true);
  document.addEventListener('keydown', typed, true);
}"""

PAGE_URL_JS = "(url, ...rest) => [window.location.origin + window.location.pathname, ...rest]"
# a knob moved after a run: the results say they were made with other knobs (theme.CSS draws the note); a
# new run's results column drops the class, and so does a replay (FRESH_JS), whose knobs are the trace's
OUTDATED_JS = """() => { const r = document.querySelector('#results');
  if (r && document.querySelector('#final img')) r.classList.add('outdated'); }"""
FRESH_JS = "() => { const r = document.querySelector('#results'); if (r) r.classList.remove('outdated'); }"


def build_demo() -> gr.Blocks:
    pair = engine.load_pair("embedded")
    with gr.Blocks(title="MuLo-SD Explorer", delete_cache=(min(60, files.CACHE_AGE_S), files.CACHE_AGE_S)) as demo:
        state = gr.State(time_to_live=STATE_TTL_S)
        gr.Markdown(INTRO)
        with gr.Row():
            with gr.Column(scale=1, min_width=340):
                preset = gr.Dropdown(list(links.PRESETS), value=links.FIRST_PRESET, elem_id="preset",
                                     label="Teaching preset: one click, one phenomenon")
                prompt = gr.Textbox(inputs.DEFAULTS["prompt"], lines=2, elem_id="prompt",
                                    label=inputs.PROMPT_LABEL)
                with gr.Row():
                    # one row at 340 px (Gradio's buttons keep 160 px each by default): the knobs stay on screen
                    run_btn = gr.Button("Generate", variant="primary", elem_id="generate", min_width=90, scale=3)
                    live_btn = gr.Button("Run it live", elem_id="generate-live", min_width=90, scale=3)
                    stop_btn = gr.Button("Stop", variant="stop", elem_id="stop", min_width=60, scale=2)
                knobs = _mission_knobs()
                # a preset's words under its four knobs, so that a long text never pushes them off the screen
                preset_info = gr.Markdown(elem_classes=["explain"], elem_id="preset-info")
                knobs |= _more_knobs(pair.vocab_size)
                pair_info = knobs.pop("pair_info")
                knobs["prompt"] = prompt
                knob_list = [knobs[k] for k in inputs.KNOBS]
                with gr.Accordion("Prompts: examples and builder", open=False):
                    # one button per example (gr.Examples cuts a text sample at 60 characters), writing it in the
                    # page itself
                    gr.Markdown("Example prompts", elem_classes=["explain"])
                    for text in EXAMPLES:
                        gr.Button(text, size="sm", elem_classes=["example-prompt"]).click(
                            None, None, prompt, js=f"() => {json.dumps(text)}", api_visibility="private")
                    _prompt_builder(prompt)
                show_grid = gr.Checkbox(False, label="Show token grid lines")
                with gr.Accordion("Share these settings", open=False):
                    link_btn = gr.Button("Make a link", size="sm", elem_id="make-link")
                    link = gr.Textbox(label="Link", buttons=["copy"], interactive=False, elem_id="link")
                    page_url = gr.Textbox(visible=False)
            with gr.Column(scale=3):
                with gr.Tabs():
                    with gr.Tab("Run", id="run"):
                        # the run's status sits over its live canvas, so long messages never push the
                        # knobs under Generate off the screen
                        status = gr.Markdown(elem_id="status")
                        live = Image(label="This run, as it streams (drafter q | target p)", type="numpy",
                                     show_label=False,   # its caption strip is under the canvas, not over the draft
                                     format="png", interactive=False, visible=False, elem_id="live",
                                     elem_classes=["token-grid"], buttons=[])
                        with gr.Column(elem_classes=["results"], elem_id="results") as results:
                            explain_images = _explain("images")
                            with gr.Row():
                                draft = _grid("Low-res draft", "draft")
                                proposal = _grid("Proposal", "proposal")
                                final = _grid("Final image", "final")
                                baseline = _grid("ar, same seed", "baseline")
                            stats = gr.Markdown(elem_id="speedup")
                            baseline_btn = gr.Button("Run or re-time the ar baseline for this run", size="sm",
                                                     elem_id="run-baseline")
                            with gr.Row():
                                with gr.Column(scale=3):
                                    explain_heatmap = _explain("heatmap")
                                    heatmap = gr.Plot(label="Acceptance heatmap", show_label=False, elem_id="heatmap")
                                    heatmap_click = gr.Textbox(visible="hidden", elem_id="heatmap-click")
                                with gr.Column(scale=2):
                                    explain_islands = _explain("islands")
                                    islands = _grid("Rejection islands", "islands")
                                    islands_key = gr.HTML(elem_id="islands-key")
                                    cell_pick = gr.Textbox(label="Cell (row, column): followed across runs",
                                                           placeholder="e.g. 3, 7, then Enter", max_lines=1,
                                                           elem_id="cell-pick")
                                    cell = gr.Markdown(panels.NO_CELL, elem_id="cell")
                            # the target's ambiguity per cell and the codebook's neighbours, shown once a run is
                            # stored (ambiguity_view.column, after each change of the stored run)
                            with gr.Column(visible=False, elem_id="ambiguity-view") as ambiguity_column:
                                gr.Markdown(ambiguity_view.EXPLAIN, elem_classes=["explain"])
                                with gr.Row():
                                    with gr.Column(scale=3):
                                        ambiguity = gr.Plot(label="Entropy and top-1 share per cell", show_label=False,
                                                            elem_id="ambiguity")
                                    with gr.Column(scale=2):
                                        ambiguity_scatter = gr.Plot(label="Tested value against entropy",
                                                                    show_label=False, elem_id="ambiguity-scatter")
                                        ambiguity_note = gr.Markdown(elem_id="ambiguity-note")
                                gr.Markdown(codebook_view.EXPLAIN, elem_classes=["explain"])
                                with gr.Row():
                                    codebook_code = gr.Number(0, minimum=0, step=1, precision=0, label="Code",
                                                              elem_id="codebook-code", min_width=120, scale=0)
                                    codebook = Image(label="The code and its k nearest codes, nearest first",
                                                     show_label=False, type="numpy", format="png", interactive=False,
                                                     elem_id="codebook", buttons=["download"], scale=1)
                            with gr.Column(visible=False, elem_id="tree-view") as tree_view:
                                _explain("trees")
                                with gr.Row():
                                    with gr.Column(scale=3):
                                        tree_cycle = gr.Slider(1, 2, 1, step=1, elem_id="tree-cycle",
                                                               label="Cycle (verify step) whose tree is shown")
                                        tree = gr.Plot(label="Draft tree", show_label=False, elem_id="tree")
                                    with gr.Column(scale=2):
                                        tree_lengths = gr.Plot(label="Accepted length per cycle", show_label=False,
                                                               elem_id="tree-lengths")
                            level_rows, level_columns = {}, []
                            for n in CASCADE_ROWS:   # a cascade's deeper levels, shown only when a run has them
                                column, row = _level_row(n)
                                level_columns.append(column)
                                level_rows |= row
                            _explain("timing")
                            timeline = gr.Plot(label="Timeline", show_label=False, elem_id="timeline")
                            _explain("scrubber")
                            scrubber = gr.Slider(0, 1, 0, step=1, label="Step", elem_id="scrubber")
                            step = gr.Markdown(elem_id="step")
                            canvas = Image(label="Canvas after the step", type="numpy", format="png",
                                           interactive=False, height=380, elem_id="canvas",
                                           elem_classes=["token-grid"], buttons=["download", "fullscreen"])
                            canvas_key = gr.HTML(panels.canvas_key(inputs.DEFAULTS["method"]), elem_id="canvas-key")
                    with gr.Tab("Compare", id="compare"):
                        _explain("compare")
                        with gr.Row():
                            cmp_btn = gr.Button("Compare all methods", variant="primary", elem_id="compare-run")
                            ups_btn = gr.Button("Compare up-samplers (mulo: proposal and final image of each)",
                                                elem_id="compare-upsamplers")
                        cmp_status = gr.Markdown(elem_id="compare-status")
                        cmp_gallery = Gallery(label="Final images", columns=7, height="auto", format="png",
                                              interactive=False, elem_classes=["token-grid"])
                        cmp_table = gr.Dataframe(headers=comparison.COMPARE_COLUMNS, interactive=False, label="Figures",
                                                 elem_id="compare-table", wrap=True, max_height=2000, pinned_columns=1)
                        cmp_plot = gr.Plot(label="Side by side", show_label=False, elem_id="compare-plot")
                    with gr.Tab("Sweep", id="sweep"):
                        _explain("sweep")
                        with gr.Row():
                            taus = gr.Textbox("0, 0.05, 0.1, 0.3", label="mulo τ values", elem_id="sweep-taus")
                            windows = gr.Textbox("4, 16", label="ZipAR windows", elem_id="sweep-windows")
                        sweep_btn = gr.Button("Run the sweep", variant="primary", elem_id="sweep-run")
                        sweep_status = gr.Markdown(elem_id="sweep-status")
                        sweep_plot = gr.Plot(label="Speed vs quality", show_label=False, elem_id="sweep-plot")
                        summary_file = gr.File(label="Or open a precomputed sweep: the summary.json of a "
                                                     "`python -m core bench --out DIR` run", file_types=[".json"],
                                               type="filepath", elem_id="summary-file")
                    with gr.Tab("Lesson", id="lesson"):
                        _explain("lesson")
                        lesson_tab = lesson.build(Gallery)
                    with gr.Tab("Trace files", id="files"):
                        _explain("files")
                        trace_file = gr.File(label="Trace of the last run", interactive=False)
                        upload = gr.File(label=f"Replay a trace (JSON, at most {MAX_BYTES // 2**20} MiB)",
                                         file_types=[".json"], type="filepath", elem_id="upload")
                        replay_btn = gr.Button("Replay the uploaded trace", elem_id="replay")

        view_outputs = dict(draft=draft, proposal=proposal, final=final, baseline=baseline, heatmap=heatmap,
                            islands=islands, islands_key=islands_key, timeline=timeline, stats=stats,
                            scrubber=scrubber, canvas=canvas, step=step, tree_cycle=tree_cycle, tree=tree,
                            tree_lengths=tree_lengths, **level_rows, ambiguity=ambiguity,
                            ambiguity_scatter=ambiguity_scatter, ambiguity_note=ambiguity_note,
                            codebook_code=codebook_code, codebook=codebook)
        views = [view_outputs[v] for v in panels.VIEWS]
        run_outputs = [state, status, trace_file, live, results, *level_columns, *views]
        model_events = dict(concurrency_id="model", concurrency_limit=MODEL_AT_ONCE)

        # the model-running events and the scrubber take their inputs as sent (preprocess=False): a value
        # beyond a slider's end reaches the engine's check, which names the knob and its range, instead of
        # being clamped, and a value of the wrong type is named by the handlers instead of refused namelessly
        gen = run_btn.click(generation.generate, [show_grid] + knob_list, run_outputs, api_name="generate",
                            show_progress="minimal", show_progress_on=[status], preprocess=False, **model_events)
        # Run it live: the same, whatever is remembered or shipped for these settings
        live_gen = live_btn.click(generation.generate_live, [show_grid] + knob_list, run_outputs,
                                  api_name="generate_live", show_progress="minimal", show_progress_on=[status],
                                  preprocess=False, **model_events)
        # a preset picked shows its shipped run at once (its own concurrency group: never behind the model's
        # line); with a prompt, seed or pair of the user's own it only sets the knobs (press Generate)
        picked = preset.input(links.preset, preset, knob_list + [preset_info], api_name="preset",
                              show_progress="hidden", preprocess=False
                              ).then(generation.shipped_answer, [show_grid] + knob_list, run_outputs,
                                     api_name="preset_run", show_progress="hidden", preprocess=False,
                                     concurrency_id="shipped", concurrency_limit=8)
        lesson.wire(lesson_tab, knobs, model_events)
        cmp = cmp_btn.click(comparison.compare, knob_list, [cmp_gallery, cmp_table, cmp_plot, cmp_status],
                            api_name="compare", show_progress_on=[cmp_status], preprocess=False, **model_events)
        ups = ups_btn.click(comparison.compare_upsamplers, knob_list, [cmp_gallery, cmp_table, cmp_plot, cmp_status],
                            api_name="compare_upsamplers", show_progress_on=[cmp_status], preprocess=False,
                            **model_events)
        swp = sweep_btn.click(comparison.sweep, [taus, windows] + knob_list, [sweep_plot, sweep_status],
                              api_name="sweep", show_progress_on=[sweep_status], preprocess=False, **model_events)
        stop_btn.click(control.stop, None, status, api_visibility="private", queue=False)
        baseline_btn.click(generation.add_baseline, [state, show_grid], [state, status, *views], api_name="baseline",
                           show_progress_on=[status], **model_events)
        rep = replay_btn.click(replays.replay, [upload, show_grid],
                               [state, status, trace_file, *level_columns, *views], api_name="replay",
                               show_progress_on=[status], concurrency_id="replay", concurrency_limit=REPLAYS_AT_ONCE)
        # a replayed trace puts its own knobs in the sidebar (and no preset): what is shown is what made it
        rep.then(replays.knobs_of, state, knob_list + [preset], api_visibility="private", show_progress="hidden",
                 ).then(None, None, None, js=FRESH_JS)
        # a knob moved by hand (or by a preset) after a run marks the results as made with other knobs
        gr.on([k.input for k in knob_list] + [preset.input], None, None, None, js=OUTDATED_JS)
        for changed in (gen, live_gen, picked, rep):   # the tree view shows for a run that verified draft trees only
            # the cell card follows its cell into the new run: never an earlier run's numbers
            changed.then(panels.inspect_typed, [state, cell_pick], [cell, cell_pick], api_visibility="private",
                         show_progress="hidden", preprocess=False
                         ).then(panels.pinned, [state, cell_pick, show_grid], [proposal, heatmap],
                                api_visibility="private", show_progress="hidden", preprocess=False)
            changed.then(panels.tree_column, state, tree_view, api_visibility="private", show_progress="hidden")
            changed.then(ambiguity_view.column, state, ambiguity_column, api_visibility="private",
                         show_progress="hidden")
        # the codebook view: the code typed, the k knob moved, or a clicked cell's proposed token
        codebook_code.input(codebook_view.redraw, [state, codebook_code, knobs["k"]], codebook, api_name="codebook",
                            show_progress="hidden", trigger_mode="always_last", preprocess=False)
        knobs["k"].change(codebook_view.redraw, [state, codebook_code, knobs["k"]], codebook,
                          api_visibility="private", show_progress="hidden", trigger_mode="always_last",
                          preprocess=False)
        proposal.select(codebook_view.at_proposal_click, [state, knobs["k"]], [codebook_code, codebook],
                        api_visibility="private", show_progress="hidden", preprocess=False)
        heatmap_click.change(codebook_view.at_heatmap_click, [state, heatmap_click, knobs["k"]],
                             [codebook_code, codebook], api_visibility="private", show_progress="hidden",
                             preprocess=False)
        # the grid toggle redraws every view, the Cell box's cell framed in the same drawing
        show_grid.change(panels.regrid, [state, show_grid, cell_pick], views, api_visibility="private",
                         show_progress="hidden")
        # the pinned cell framed on the proposal and the heatmap: a click, a typed cell (a new run: above)
        cell_pick.change(panels.pinned, [state, cell_pick, show_grid], [proposal, heatmap], api_visibility="private",
                         show_progress="hidden", preprocess=False, trigger_mode="always_last")
        scrubber.input(panels.scrub, [state, scrubber, show_grid], [canvas, step], api_name="scrub",
                       show_progress="hidden", trigger_mode="always_last", preprocess=False)
        tree_cycle.input(panels.tree_at, [state, tree_cycle], tree, api_name="tree_cycle", show_progress="hidden",
                         trigger_mode="always_last", preprocess=False)
        proposal.select(panels.inspect_cell, state, [cell, cell_pick], api_visibility="private")
        cell_pick.submit(panels.inspect_typed, [state, cell_pick], [cell, cell_pick], api_name="cell",
                         show_progress="hidden", preprocess=False)
        summary_file.upload(comparison.open_summary, summary_file, [sweep_plot, sweep_status], api_name="open_summary")
        heatmap_click.change(panels.inspect_heatmap, [state, heatmap_click], [cell, cell_pick],
                             api_visibility="private", show_progress="hidden")
        # the menus' values reach their handlers as sent (preprocess=False): one off a menu is named there,
        # short and escaped, instead of echoed whole by the menu's own check
        knobs["method"].change(panels.explain_method, knobs["method"], [explain_images, explain_heatmap,
                                                                        explain_islands],
                               api_visibility="private", show_progress="hidden", preprocess=False)
        knobs["method"].change(panels.canvas_key, knobs["method"], canvas_key, api_visibility="private",
                               show_progress="hidden", preprocess=False)
        # a knob the chosen method does not read is disabled, with a word saying so (its value stays: Compare
        # gives it to the methods that read it)
        infos = {k: knobs[k].info for k in inputs.PARAM_KNOBS}
        gr.on([demo.load, knobs["method"].change, knobs["draft_method"].change, knobs["draft_window"].change],
              functools.partial(inputs.knob_states, infos),
              [knobs["method"], knobs["draft_method"], knobs["draft_window"]],
              [knobs[k] for k in inputs.PARAM_KNOBS], api_visibility="private", show_progress="hidden",
              preprocess=False, trigger_mode="always_last")
        knobs["model"].change(inputs.pick_model, knobs["model"], [knobs["top_k"], knobs["cfg"], knobs["temperature"],
                                                                  knobs["cfg_interval"], knobs["lantern_k"],
                                                                  knobs["scale"], pair_info], api_visibility="private",
                              preprocess=False)
        # the prompt box says what a prompt of the chosen pair is (a Tar pair's: a file of TA-Tok ids, ...)
        knobs["model"].change(inputs.prompt_box, knobs["model"], prompt, api_visibility="private",
                              show_progress="hidden", preprocess=False)
        link_btn.click(links.share_link, [page_url, preset] + knob_list, link, js=PAGE_URL_JS, preprocess=False,
                       api_visibility="private")
        demo.load(links.from_query, None, knob_list + [preset, preset_info], api_visibility="private",
                  js=PAGE_JS)
        demo.unload(control.forget)
    return demo
