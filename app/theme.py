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

# islands coloured by id (1..M), cycling; chosen to stay distinct from ACCEPTED and REJECTED
ISLANDS = ("#e7298a", "#17becf", "#ff7f0e", "#9467bd", "#bcbd22", "#8c564b", "#1f77b4", "#f781bf")


def swatch(colour: str, round_: bool = False) -> str:
    """A small coloured square (or dot) for HTML keys."""
    radius = "50%" if round_ else "2px"
    return (f"<span style='display:inline-block;width:0.9em;height:0.9em;background:{colour};"
            f"border-radius:{radius};vertical-align:-0.1em;border:1px solid #0003'></span>")


def key_html(items) -> str:
    return "<div class='key'>" + " · ".join(f"{swatch(c)} {text}" for c, text in items) + "</div>"


# what the colours of the step canvas mean (render._mark_step draws them)
CANVAS_KEY = ((HIGHLIGHT, "written by this step"), (ACCEPTED, "verify: passed τ, kept"),
              (REJECTED, "verify: below τ"), (RESAMPLED, "verify: passed τ, swept into an island"),
              (PENDING, "not written yet (or withdrawn for resampling)"))


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
.stale img, .stale .js-plotly-plot, .stale table { opacity: 0.35; filter: grayscale(0.6); transition: opacity 0.2s; }
"""
