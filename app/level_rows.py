"""A cascade's deeper levels (draft_method = mulo/…), one row each under the heatmap: which rows a
stored run shows, and each row's views (title, draft, proposal, heatmap, islands, key) from the
level's own trace (app.render.level_trace).

Knows only a stored Trace: no model runs here, and the target level's views are app.panels'.
"""
from __future__ import annotations

import gradio as gr

from . import plots, render
from .messages import markdown_text

CASCADE_ROWS = (1, 2)   # the levels a cascade verifies below the target (grid.levels holds at most 4 grids)
LEVEL_VIEWS = ("_title", "_draft", "_proposal", "_heatmap", "_islands", "_key")   # the views of each level's row
# the level rows' columns, shown or hidden by the handlers that change the run (generate, replay); their
# outputs come before VIEWS, so that an API client (which receives no layout) still finds VIEWS last
ROWS = tuple(f"level{n}" for n in CASCADE_ROWS)


def rows(state: dict | None) -> tuple:
    """The level rows' columns in ROWS order: visible for the levels of the stored run's cascade."""
    levels = render.cascade_levels(state["trace"]) if state else []
    return tuple(gr.Column(visible=n in levels) for n in CASCADE_ROWS)


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
                               k=k if isinstance(k, int) else markdown_text(k),
                               T="×".join(map(str, trace.grid["target"])), up=up)
    return (title, render.grid_image(lv.draft, tok, show_grid),
            render.with_grid(proposal, h, w) if show_grid else proposal,
            plots.heatmap(lv, v),
            render.islands_image(proposal, v, show_grid) if v is not None else
            render.message_image(f"Level {n} has no verify step in this trace."),
            render.islands_key(v))
