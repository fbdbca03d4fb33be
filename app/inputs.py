"""What a client sends, as the engine takes it: the knobs in the order the UI passes them, their
defaults and slider ranges, each value typed from whatever arrived (a slider's 16.0, a link's text),
the RunConfig they make, checked against the chosen model pair; the Model pair menu; the prompt
builder's menus.

Owns types and the pair a run may use; the ranges are the engine's (core.config.validate), asked,
never restated. Knows nothing of runs, sessions, presets or links (app.links reads knobs with
this module's parser).
"""
from __future__ import annotations

import math

import gradio as gr

from core import engine
from core.config import MethodParams, ParameterError, RunConfig, SamplingConfig, knobs_read, validate
from core.embedded.domain import BACKGROUNDS, COLOURS, PLACES, SHAPES, SIZES
from core.methods import registry
from core.models import hub

from . import quality as per_image
from .messages import short, user_error, user_errors

# the knobs, in the order the UI passes them; names match RunConfig / MethodParams / SamplingConfig fields
KNOBS = ("method", "prompt", "seed", "k", "tau", "scale", "radius", "window", "draft_window", "draft_rows",
         "upsampler", "resample", "rejection", "context", "gamma", "delta", "lantern_k", "sjd_window", "sjd_init",
         "cfg", "temperature", "top_k", "model", "cfg_interval", "gsd_group", "gsd_gap", "gsd_dist", "pjd_c",
         "cool_delta", "cool_nu", "cool_norm", "draft_method", "redraft", "tree_tokens", "tree_depth", "tree_top_k",
         "lantern_lambda", "vvs_interval", "vvs_schedule", "accept", "commit", "lantern_residual", "static_tree",
         "vvs_threshold")
_PARAM_FIELDS = ("k", "tau", "scale", "radius", "window", "draft_window", "draft_rows", "upsampler", "resample",
                 "rejection", "context", "gamma", "delta", "lantern_k", "sjd_window", "sjd_init", "gsd_group",
                 "gsd_gap", "gsd_dist", "pjd_c", "cool_delta", "cool_nu", "cool_norm", "draft_method", "redraft",
                 "tree_tokens", "tree_depth", "tree_top_k", "lantern_lambda", "vvs_interval", "vvs_schedule", "accept",
                 "commit", "lantern_residual", "static_tree", "vvs_threshold")
SAMPLING_FIELDS = ("cfg", "temperature", "top_k", "cfg_interval")
_INTS = {"seed", "k", "scale", "radius", "window", "draft_window", "draft_rows", "gamma", "lantern_k", "sjd_window",
         "top_k", "cfg_interval", "gsd_group", "pjd_c", "tree_tokens", "tree_depth", "tree_top_k", "vvs_interval"}
FLOATS = {"tau", "delta", "cfg", "temperature", "gsd_gap", "gsd_dist", "cool_delta", "cool_nu", "lantern_lambda",
          "vvs_threshold"}
DEFAULTS = dict(method=RunConfig.method, prompt=RunConfig.prompt, seed=RunConfig.seed,
                **{f: getattr(MethodParams(), f) for f in _PARAM_FIELDS},
                **{f: getattr(SamplingConfig(), f) for f in SAMPLING_FIELDS}, model=RunConfig.model)
# the slider ranges of the numeric knobs (ui.py builds the sliders from them); a value the engine
# accepts beyond a slider's end widens the slider instead of being clamped
SLIDERS = dict(tau=(0.0, 1.0, 0.01), k=(0, 128, 1), radius=(0, 4, 1), draft_rows=(0, 16, 1),
               draft_window=(0, 16, 1), gamma=(1, 16, 1), delta=(0.0, 1.0, 0.05), sjd_window=(1, 64, 1),
               window=(1, 32, 1), cfg=(1.0, 8.0, 0.5), temperature=(0.0, 2.0, 0.05),
               cfg_interval=(-1, 256, 1), gsd_group=(1, 64, 1), gsd_gap=(0.0, 1.0, 0.01), gsd_dist=(0.0, 1.0, 0.05),
               pjd_c=(1, 64, 1), cool_delta=(0.5, 4.0, 0.1), cool_nu=(0.0, 2.0, 0.05), tree_tokens=(2, 64, 1),
               tree_depth=(1, 8, 1), tree_top_k=(1, 16, 1), lantern_lambda=(1.0, 20.0, 0.5), vvs_interval=(0, 16, 1),
               vvs_threshold=(0.0, 1.0, 0.05))


def whole_number(v) -> int:
    """A whole number from what a client sent: an int exactly (seeds up to 2^63 - 1), an integral
    float (a slider's 16.0) or the text of either (ValueError otherwise)."""
    if isinstance(v, str):
        v = v.strip()
        return int(v) if v.lstrip("-").isdigit() else whole_number(float(v))
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise ValueError


def knob_value(name: str, v):
    """One knob's value as the engine takes it, from whatever a client sent (ValueError if it cannot be)."""
    if name in _INTS:
        return whole_number(v)
    if name in FLOATS:
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


PARAM_KNOBS = _PARAM_FIELDS   # the method knobs, each read by some methods only (core.config.knobs_read)


def unread_word(method: str) -> str:
    return f"{method} does not read this knob (Compare still gives it to the methods that do)"


def knob_states(infos: dict, method, draft_method, draft_window) -> tuple:
    """Each method knob (PARAM_KNOBS order) enabled when the chosen method reads it, otherwise disabled
    with a word under it saying so; infos: each knob's own words, kept under an enabled knob. mulo
    also reads its drafter method's knobs. Values are left as they are."""
    method = method if method in registry() else DEFAULTS["method"]
    try:
        p = MethodParams(draft_method=knob_value("draft_method", draft_method),
                         draft_window=knob_value("draft_window", draft_window))
    except (TypeError, ValueError, OverflowError):
        p = MethodParams()
    read = set(knobs_read(method, p))
    return tuple(gr.update(interactive=True, info=infos.get(k) or "") if k in read else
                 gr.update(interactive=False, info=unread_word(method)) for k in PARAM_KNOBS)


def kind_of(name: str) -> str:
    return "an integer" if name in _INTS else "a finite number" if name in FLOATS else "text"


def run_config(*knobs) -> RunConfig:
    """The RunConfig of knob values given in KNOBS order, as any client may send them (gr.Error
    naming the knob for a value of the wrong type; the ranges are checked by the engine)."""
    if len(knobs) != len(KNOBS):
        raise user_error(f"expected {len(KNOBS)} knob values ({', '.join(KNOBS)}); got {len(knobs)}")
    values = {}
    for name, v in zip(KNOBS, knobs):
        try:
            values[name] = knob_value(name, v)
        except (TypeError, ValueError, OverflowError):
            raise user_error(f"{name} must be {kind_of(name)}; got {short(v)}") from None
    return _assembled(values)


def _assembled(values: dict) -> RunConfig:
    """The RunConfig of every knob's value, typed as the engine takes it."""
    return RunConfig(method=values["method"], prompt=values["prompt"], seed=values["seed"],
                     sampling=SamplingConfig(**{f: values[f] for f in SAMPLING_FIELDS}),
                     params=MethodParams(**{f: values[f] for f in _PARAM_FIELDS}), model=values["model"])


def why_refused(name: str, value, pair) -> str | None:
    """Why `name` = `value` (already of the right type) is refused by the engine, or None (plain text)."""
    try:
        cfg = _assembled({**DEFAULTS, name: value})
        validate(cfg, pair.vocab_size, pair.grid, registry())
        if cfg.method == "mulo":   # a cascade's grids must be ones the pair's multi-resolution model serves
            engine._check_cascade(cfg.params, pair)   # what engine.context checks, without reading the prompt
    except ParameterError as e:
        return str(e)
    return None


def checked(cfg: RunConfig):
    """The model pair for cfg, after the engine's validation (gr.Error on bad input). Only the pairs
    the Model pair menu offers (engine.found_pairs) are loaded: a client cannot make the app look
    for other weights."""
    found = engine.found_pairs()
    if cfg.model not in found:
        family = engine.pair_family(cfg.model)   # LlamaGen, Tar
        if family is not None:   # named without the server's folders
            needs = ", ".join(family.CHECKPOINTS[k].file for k in family.pair_files(cfg.model))
            raise user_error(f"the {cfg.model} pair's weights are not on this machine: it needs {needs} in the "
                             f"folder named by {family.ENV_DIR} (see docs/models.md)")
        raise user_error(f"model must be one of {', '.join(found)}; got {short(cfg.model)}")
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
        raise user_error(f"model must be one of {', '.join(engine.found_pairs())}; got {short(name)}")
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
        lines.append("On this Space a LlamaGen or Tar pair's files download from the Hugging Face hub on its first "
                     "run, into the Space's cache (persistent storage when the Space has it).")
    else:
        from core.models import llamagen, tar
        lines.append(f"Found {len(found)} pair(s). Put official LlamaGen checkpoints in the folder named by "
                     f"`{llamagen.ENV_DIR}`, Tar's (AR-DTok, TA-Tok, its VQ) in the folder named by "
                     f"`{tar.ENV_DIR}` (see docs/models.md) and restart to list them here.")
    return "\n\n".join(lines)


PROMPT_LABEL = "Prompt: sizes, colours, shapes, places, backgrounds"   # the embedded pair's, shown first


def prompt_box(name: str):
    """The prompt box's label for the chosen pair: what a prompt of that pair is (its pair_facts), e.g.
    for a Tar pair the path of a file of TA-Tok ids, of an image, or text for the Tar LLM."""
    facts = model_facts(name)
    return gr.update(label=PROMPT_LABEL if name == "embedded" else f"Prompt ({name}): {facts['prompt']}")


def pick_model(name: str):
    """Knob ranges of the chosen pair (codebook size, scales), its sampling defaults (LlamaGen: the
    official settings) and its description."""
    facts = model_facts(name)
    V, scales, s = facts["vocab_size"], list(facts["scales"]) or [2], facts["sampling"]
    return (gr.update(maximum=V, value=s.top_k), gr.update(value=s.cfg), gr.update(value=s.temperature),
            gr.update(value=s.cfg_interval), gr.update(maximum=max(DEFAULTS["lantern_k"], V - 1)),
            gr.update(choices=scales, value=scales[0] if DEFAULTS["scale"] not in scales else DEFAULTS["scale"]),
            pair_markdown(name))


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
            raise user_error(f"{label} must be one of {', '.join(choices)}; got {short(v)}")
    objects = [f"a {size1} {colour1} {shape1} {place1}"]
    if shape2 != NO_OBJECT:
        if place2 == place1:
            raise user_error("the two objects share one position; give each object its own place")
        objects.append(f"a {size2} {colour2} {shape2} {place2}")
    article = "an" if background[0] in "aeiou" else "a"
    return f"{' and '.join(objects)} on {article} {background} {bg_colour} background"
