"""Codebook neighbours: the set B_k that mulo pools over, for one chosen code. The code and its k nearest
codes (the pair's `neighbours` table, nearest first), each decoded by the tokenizer to a patch and
labelled with its id and its L2 distance to the chosen code (on the code vectors the table was built
from, VQModel.quantize.codes()).

A patch is the tokenizer's decode of a TILE x TILE grid holding only that code (engine.decode_image), so
the code is seen as it looks surrounded by itself, shown crisp. Patches are cached per model pair and
code, so a redraw when k moves decodes only codes not seen before.
"""
from __future__ import annotations

from functools import lru_cache

import gradio as gr
import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFont

from core import engine
from core.config import MethodParams

from . import render
from .inputs import whole_number
from .messages import short, user_error

VIEWS = ("codebook_code", "codebook")
TILE = 2        # a patch decodes a TILE x TILE grid of one code
PATCH = 80      # its side on screen, pixels
LABEL = 32      # the two label lines under a patch, pixels
GAP = 8         # between patches
PER_ROW = 9     # patches a row before the strip wraps

EXPLAIN = ("**Codebook neighbours B_k.** A code (first) and its k nearest codes in the tokenizer's codebook, "
           "nearest first: the tokens whose probability mulo adds to the proposed token's when it pools "
           "(k is the knob above). Each patch is the tokenizer's decode of a small grid holding only that code; "
           "d is the distance between code vectors. Click a cell of the proposal or the heatmap to choose its "
           "proposed token, or type a code.")


def neighbours(pair, code: int, k: int) -> tuple[list[int], list[float]]:
    """The chosen code followed by its k nearest codes (pair.neighbours[code, :k]), and each one's L2
    distance to the chosen code's vector."""
    near = pair.neighbours[code, :k].tolist()
    with torch.inference_mode():
        vec = pair.tokenizer.quantize.codes().float().cpu()
    ids = [int(code)] + [int(c) for c in near]
    d = torch.linalg.vector_norm(vec[ids] - vec[code], dim=-1)
    return ids, [float(x) for x in d]


@lru_cache(maxsize=2048)
def patch(model: str, code: int) -> np.ndarray:
    """(PATCH, PATCH, 3) uint8: the decode of a TILE x TILE grid of `code`, crisp."""
    tok = engine.load_pair(model).tokenizer
    return render.crisp(engine.decode_image(np.full((TILE, TILE), int(code)), tok), PATCH)


def shown(model: str, code: int, k: int) -> list[tuple[int, float, np.ndarray]]:
    """(code, distance to the chosen code, patch) for the chosen code and its k nearest, nearest first."""
    ids, dist = neighbours(engine.load_pair(model), code, k)
    return [(c, d, patch(model, c)) for c, d in zip(ids, dist)]


def slot(n: int) -> tuple[int, int]:
    """(top, left) pixel of the n-th patch in the strip (PER_ROW patches a row, nearest first)."""
    return (n // PER_ROW) * (PATCH + LABEL + GAP), (n % PER_ROW) * (PATCH + GAP)


def strip(items: list[tuple[int, float, np.ndarray]]) -> np.ndarray:
    """The patches side by side, nearest first (PER_ROW a row), each labelled under it: "code c" on the
    first line, "#n · d 0.123" (its rank and distance) or "chosen" on the second."""
    rows, cols = -(-len(items) // PER_ROW), min(len(items), PER_ROW)
    out = Image.new("RGB", (cols * (PATCH + GAP) - GAP, rows * (PATCH + LABEL + GAP) - GAP), "white")
    draw = ImageDraw.Draw(out)
    font = ImageFont.load_default(13)
    for n, (c, d, img) in enumerate(items):
        top, left = slot(n)
        out.paste(Image.fromarray(img), (left, top))
        draw.text((left + 2, top + PATCH + 2), f"code {c}", fill="black", font=font)
        draw.text((left + 2, top + PATCH + 17), "chosen" if n == 0 else label(n, d), fill="#555b66", font=font)
    return np.asarray(out)


def label(n: int, d: float) -> str:
    return f"#{n} · d {d:.3f}"


def figure(model: str, code: int, k: int) -> np.ndarray:
    """The view: the strip of the chosen code and its k nearest codes."""
    return strip(shown(model, code, k))


def _k(pair, k) -> int:
    try:
        k = whole_number(k)
    except (TypeError, ValueError, OverflowError):
        raise user_error(f"k must be a whole number from 0 to {pair.neighbours.shape[1]}; got {short(k)}") from None
    return min(max(k, 0), pair.neighbours.shape[1])


def _code(pair, code) -> int:
    V = pair.vocab_size
    try:
        c = whole_number(code)
    except (TypeError, ValueError, OverflowError):
        raise user_error(f"a code is a whole number from 0 to {V - 1}; got {short(code)}") from None
    if not 0 <= c < V:
        raise user_error(f"a code is a whole number from 0 to {V - 1} (the {pair.name} codebook); got {c}")
    return c


def views(state: dict | None) -> tuple:
    """(code box, strip) for a new stored run, in VIEWS order: code 0 with the run's own k."""
    if not state:
        return gr.Number(value=0), None
    trace = state["trace"]
    pair = engine.load_pair(trace.model)
    try:
        k = _k(pair, trace.params.get("k", 0))
    except gr.Error:          # an uploaded trace whose k is no number: the strip shows the default k
        k = _k(pair, MethodParams().k)
    return gr.Number(value=0, minimum=0, maximum=pair.vocab_size - 1), figure(trace.model, 0, k)


def redraw(state, code, k):
    """The strip for the code in the box and the k knob (nothing to draw before a run)."""
    if not state:
        return gr.skip()
    pair = engine.load_pair(state["trace"].model)
    return figure(pair.name, _code(pair, code), _k(pair, k))


def _at_cell(state, i: int, j: int, k) -> tuple:
    trace = state["trace"]
    if trace.proposal is None:
        return gr.skip(), gr.skip()
    code = int(np.asarray(trace.proposal)[i, j])
    if code < 0:
        return gr.skip(), gr.skip()
    pair = engine.load_pair(trace.model)
    return code, figure(pair.name, code, _k(pair, k))


def at_proposal_click(state, k, evt: gr.SelectData):
    """A click on the proposal: its cell's proposed token becomes the code (nothing for a run without
    a proposal)."""
    if not state:
        return gr.skip(), gr.skip()
    try:
        x, y = (float(v) for v in evt.index[:2])
        i, j = render.cell_at(x, y, tuple(state["trace"].grid["target"]))
    except (TypeError, ValueError, OverflowError):
        return gr.skip(), gr.skip()
    return _at_cell(state, i, j, k)


def at_heatmap_click(state, clicked: str, k):
    """A click on the heatmap ("i,j,…" from the page's listener): its cell's proposed token."""
    if not state or not clicked:
        return gr.skip(), gr.skip()
    H, W = state["trace"].grid["target"]
    try:
        i, j = (int(x) for x in clicked.split(",")[:2])
    except ValueError:
        return gr.skip(), gr.skip()
    return _at_cell(state, min(max(i, 0), H - 1), min(max(j, 0), W - 1), k)
