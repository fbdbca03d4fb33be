"""One palette for every view: accepted, rejected, resampled, pending, the phases and the islands."""
from __future__ import annotations

import gradio as gr

ACCEPTED = "#1b9e77"     # proposal kept
REJECTED = "#d62728"     # pooled mass below tau
RESAMPLED = "#ff9f1c"    # in R_X: rejected or swept in by the expansion, resampled by the target
HIGHLIGHT = "#ffd400"    # cells touched by the step under the scrubber
PENDING = "#2f3542"      # cells not written yet
GRID_LINE = "#000000"

PHASES = {"draft": "#7570b3", "upsample": "#66a61e", "verify": "#1f78b4", "resample": RESAMPLED,
          "refresh": "#a6761d", "decode": "#666666"}

WRITTEN = "#ffffff"      # the step canvas: cells written by the step under the scrubber, whitened
WRITTEN_ALPHA = 0.6      # (no hue: a yellow tint over red read as RESAMPLED's orange)

# islands coloured by id (1..M), cycling past the eighth; each tint (at 0.6) moves every colour of the
# embedded domain by at least 60 RGB units, so no island vanishes on a background of its own hue
ISLANDS = ("#ff00ff", "#7fff00", "#000080", "#ffffff", "#800000", "#b2dfdb", "#808000", "#000000")


def swatch(colour: str, round_: bool = False) -> str:
    """A small coloured square (or dot) for HTML keys."""
    radius = "50%" if round_ else "2px"
    return (f"<span style='display:inline-block;width:0.9em;height:0.9em;background:{colour};"
            f"border-radius:{radius};vertical-align:-0.1em;border:1px solid #0003'></span>")


def key_html(items) -> str:
    return "<div class='key'>" + " · ".join(f"{swatch(c)} {text}" for c, text in items) + "</div>"


# what the colours of the step canvas mean (render._mark_step draws them)
CANVAS_KEY = ((WRITTEN, "whitened: written by this step"), (ACCEPTED, "mulo verify: passed τ, kept"),
              (REJECTED, "mulo verify: below τ"), (RESAMPLED, "mulo verify: passed τ, swept into an island"),
              (PENDING, "not written yet (or withdrawn for resampling)"))
# the same for a method without mulo's verify step: its verify steps write the drafts they kept and the
# token resampled after a rejection, withdrawing the drafts they judged and refused
CANVAS_KEY_WRITES = ((WRITTEN, "whitened: written by this step (a verify step: the drafts it kept and any "
                               "token it resampled)"),
                     (PENDING, "not written yet (or a draft withdrawn after failing its test)"))


def canvas_key(method: str | None) -> tuple:
    """The step canvas's key for a run of `method`: mulo's verify colours only where mulo verifies."""
    return CANVAS_KEY if method in (None, "mulo") else CANVAS_KEY_WRITES


def rgb(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


THEME = gr.themes.Soft(primary_hue="indigo", secondary_hue="pink")

# token grids are upscaled with nearest neighbour on the server; keep the browser from smoothing them
CSS = """
.token-grid img { image-rendering: pixelated; image-rendering: crisp-edges; }
.explain { font-size: 0.92em; opacity: 0.9; }
#speedup { font-size: 1.05em; }
.key { font-size: 0.9em; line-height: 1.7; }
#results.outdated::before { content: "The knobs have changed since these results were made: press Generate to see their effect."; display: block; padding: 0.4em 0.8em; border-radius: 6px; background: #fff3cd; color: #5c4400; font-weight: 600; }
#compare-table table { table-layout: auto; width: 100% !important; min-width: 0 !important; }
#compare-table th, #compare-table td, #compare-table .body-cell { font-size: 0.8em; }
#compare-table th, #compare-table td { white-space: normal !important; min-width: 0 !important; width: auto !important; padding-left: 0; padding-right: 0; }
#compare-table .cell-wrap { padding-left: 3px !important; padding-right: 3px !important; }
#compare-table td, #compare-table td *, #compare-table .body-cell, #compare-table .body-cell * { white-space: nowrap !important; }
#compare-table td:first-child, #compare-table td:first-child *, #compare-table .body-cell:first-child, #compare-table .body-cell:first-child * { white-space: normal !important; overflow-wrap: anywhere !important; }
#compare-table td:last-child, #compare-table td:last-child *, #compare-table .body-cell:last-child, #compare-table .body-cell:last-child * { white-space: normal !important; overflow-wrap: normal !important; word-break: normal !important; }
#compare-table td:last-child { min-width: 7em !important; }
#compare-table td:first-child { min-width: 7.5em !important; }
#compare-table th, #compare-table th * { overflow-wrap: normal !important; word-break: normal !important; hyphens: manual; }
#cell th, #cell td { word-break: normal !important; overflow-wrap: normal !important; }
#cell th { white-space: nowrap; }
.stale img, .stale .js-plotly-plot, .stale table { opacity: 0.35; filter: grayscale(0.6); transition: opacity 0.2s; }
"""
