"""Teaching presets and links: the presets (knob overrides and the words that say what each shows),
a preset applied, a page opened from a link's query string (?tau=0.2&method=mulo, ?preset=<name>),
and the share link that reopens the page at the knobs it shows.

A link's values are read one by one with app.inputs' parser and refused in a warning that names the
knob; nothing here runs a model or knows a session.
"""
from __future__ import annotations

from urllib.parse import urlencode

import gradio as gr

from core import engine

from .inputs import DEFAULTS, FLOATS, KNOBS, SAMPLING_FIELDS, SLIDERS, kind_of, knob_value, why_refused
from .messages import clip, log, plain, short, user_error, with_symbol

PRESETS: dict[str, tuple[str, dict]] = {
    "Default operating point": (f"MuLo-SD at its default: r = {DEFAULTS['scale']}, τ = {DEFAULTS['tau']:g}, "
                                f"k = {DEFAULTS['k']} neighbours pooled, radius l = {DEFAULTS['radius']}, "
                                f"{DEFAULTS['resample']} resampling — the fewest sequential passes inside every "
                                "image bound (adherence, FD to the data, detail FD to ar's samples, sharpness) on "
                                "100 held-out prompts; no MuLo-SD setting of this family is inside the log-lik "
                                "bound too (docs/results.md, the quality section). On this prompt about a quarter of the "
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
    "Up-sampler ablation": ("r = 4, radius l = 1: the drafter's 8×8 grid up-sampled by a trained "
                            "super-resolution network (upsampler = sr) instead of bicubic. Its proposal keeps "
                            "edges bicubic blurs, so more of it passes τ (on 30 held-out prompts 78 % against "
                            "74 %, 6.2× against 5.9× fewer passes, both inside every image bound). Then press "
                            "**Compare up-samplers** on the Compare tab: nearest, pixel, sr, learned and distilled on this "
                            "prompt, each proposal beside its final image.", dict(scale=4, radius=1, upsampler="sr")),
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
    "EAGLE-2 tree": ("method = eagle at its defaults: each cycle a draft head reading the target's own features "
                     f"grows a tree of {DEFAULTS['tree_tokens'] - 1} drafted tokens over {DEFAULTS['tree_depth']} "
                     "levels, and "
                     "the target checks the whole tree in one pass, losslessly. Under the heatmap, the tree view "
                     "opens on the cycle with the longest accepted path: follow the green path down from the root "
                     "and see which siblings the target rejected before accepting one. Its right half shows how "
                     "many drafts each cycle kept, cell by cell.", dict(method="eagle")),
    "LANTERN relaxation": ("method = lantern with δ = 0.4 on EAGLE-2's tree: the target moves up to 0.4 of its "
                           "probability mass from a draft token's nearest codebook neighbours onto it before "
                           "testing, so latent-space look-alikes pass where eagle would reject them. Compare the "
                           "tree view's green paths and the accepted-length map with the EAGLE-2 tree preset, and "
                           "the headline's sharpness and log-lik gap: the relaxation is not lossless.",
                           dict(method="lantern", delta=0.4)),
    "Trees as published": ("method = vvs at the sizes the released EAGLE-2, LANTERN and VVS code uses for LlamaGen "
                           "(`--tree paper` on the command line): 58 drafted nodes over 5 levels, 10 children per "
                           "expanded node, LANTERN's relaxed test (δ 0.2 over up to 1000 neighbours, here all 511 "
                           "other codes), and every fifth cycle (cycle i with i mod 5 = 1) committed without a "
                           "target pass: a random root-to-leaf path of the tree just drafted, cut to the tree's mean "
                           "path length. The unverified cells are the decode steps of the trace; compare the passes "
                           "with the EAGLE-2 tree preset.",
                           dict(method="vvs", tree_tokens=59, tree_depth=5, tree_top_k=10, static_tree="paper",
                                lantern_k=1000)),
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


FIRST_PRESET = next(iter(PRESETS))   # what the menu shows on a fresh page: its knobs are the defaults


def preset(name: str) -> tuple:
    """Knob values of a preset (defaults for every knob it leaves alone), then its explanation."""
    if not isinstance(name, str) or name not in PRESETS:
        raise user_error(f"unknown preset {short(name)}; choose one of: {', '.join(PRESETS)}")
    text, overrides = PRESETS[name]
    values = {**DEFAULTS, **overrides}
    # a preset changes how we decode, not what we draw, with what, nor the pair's sampling
    keep = ("prompt", "seed", "model", *SAMPLING_FIELDS)
    return (*(gr.skip() if k in keep else values[k] for k in KNOBS), f"**{name}.** {text}")


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
            _refuse(f"ignored preset={clip(params['preset'])} from the link: not one of {', '.join(PRESETS)}")
    model = params.get("model", DEFAULTS["model"])
    if model not in engine.found_pairs():
        model = DEFAULTS["model"]
    pair = engine.load_pair(model)
    out = []
    for k in KNOBS:
        value = _link_value(k, params[k], base, pair) if k in params else None
        out.append(base.get(k, gr.skip()) if value is None else value)
    if "preset" not in params and any(k in params for k in KNOBS):
        chosen_preset = None   # a link's own knobs: the menu's first preset would misname them
    unknown = sorted(set(params) - set(KNOBS) - {"preset"})
    if unknown:   # one warning, however many: a link cannot flood the page or the log
        more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
        _refuse(f"ignored unknown link parameter{'s' if len(unknown) > 1 else ''} "
                f"{', '.join(clip(k) for k in unknown[:3])}{more}")
    return (*out, chosen_preset, preset_text)


def _link_value(k: str, v: str, base: dict, pair):
    """What the page loads for knob k = v of a link (the value, or a slider widened to it), or None
    after a warning that names the knob and why it was refused."""
    shown = f"{k}={clip(v)}"
    if k == "model" and v not in engine.found_pairs():
        _refuse(f"ignored {shown} from the link: not found on this machine")
        return None
    try:
        value = knob_value(k, v)
    except (TypeError, ValueError, OverflowError):
        _refuse(f"ignored {shown} from the link: {k} must be {'a number' if k in FLOATS else kind_of(k)}")
        return None
    why = why_refused(k, value, pair)
    if why is not None:
        _refuse(f"ignored {shown} from the link: {with_symbol(why)}; {k} stays {base.get(k, DEFAULTS[k])}")
        return None
    lo, hi, _ = SLIDERS.get(k, (None, None, None))
    if lo is not None and not lo <= value <= hi:   # the engine accepts it: widen the slider, never clamp
        return gr.update(value=value, minimum=min(lo, value), maximum=max(hi, value))
    return value


def _refuse(message: str) -> None:
    log.warning("link refused: %s", message)
    gr.Warning(plain(message))


def share_link(page_url: str, preset_name: str | None, *knobs) -> str:
    """A link that reopens the app at `page_url` (the address the browser shows, without its query)
    with these knob values (KNOBS order) and, when one is chosen, the preset's name."""
    query = ({"preset": preset_name} if preset_name else {}) | dict(zip(KNOBS, knobs))
    return f"{str(page_url or '').split('?')[0]}?{urlencode(query)}"
