"""Trace -> images, as pure functions (numpy in, uint8 RGB arrays out).

Token grids become pixels through the tokenizer passed in (the only model-like object used here,
and only its decoder); everything else is read from the Trace. Grids are upscaled with nearest
neighbour so that every token stays a crisp square. Knows nothing about Gradio.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from core import engine

from . import theme

SIZE = 320          # side of every displayed token grid, in pixels
UNKNOWN = -1


def crisp(img: np.ndarray, size: int = SIZE) -> np.ndarray:
    """(h, w, 3) uint8 -> (size, size, 3), nearest neighbour."""
    return np.asarray(Image.fromarray(img).resize((size, size), Image.NEAREST))


def with_grid(img: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Darken one pixel line at every cell boundary of a rows x cols grid drawn over img."""
    out = img.copy()
    h, w = out.shape[:2]
    ys = (np.arange(1, rows) * h) // rows
    xs = (np.arange(1, cols) * w) // cols
    out[ys, :] = (out[ys, :] * 0.45).astype(np.uint8)
    out[:, xs] = (out[:, xs] * 0.45).astype(np.uint8)
    return out


def _cell_mask(mask: np.ndarray, size: int) -> np.ndarray:
    """(rows, cols) bool -> (size, size) bool, nearest neighbour."""
    rows, cols = mask.shape
    return mask[(np.arange(size) * rows) // size][:, (np.arange(size) * cols) // size]


def tint(img: np.ndarray, mask: np.ndarray, colour: str, alpha: float) -> np.ndarray:
    """Blend colour over the cells of mask ((rows, cols) bool) on a (size, size, 3) image."""
    m = _cell_mask(mask, img.shape[0])
    out = img.astype(np.float32)
    out[m] = (1 - alpha) * out[m] + alpha * np.array(theme.rgb(colour), np.float32)
    return out.astype(np.uint8)


def grid_image(tokens, tokenizer, grid: bool = False, size: int = SIZE) -> np.ndarray | None:
    """An (H, W) token grid decoded and shown crisp; None for a missing grid. Unknown cells (-1) are
    decoded as token 0 and painted PENDING."""
    if tokens is None:
        return None
    t = np.asarray(tokens)
    unknown = t == UNKNOWN
    img = crisp(engine.decode_image(np.where(unknown, 0, t), tokenizer), size)
    if unknown.any():
        img = tint(img, unknown, theme.PENDING, 1.0)
    return with_grid(img, *t.shape) if grid else img


@dataclass
class Verdict:
    """The verification of every target cell, assembled from the verify steps' bands."""
    pooled: np.ndarray      # (H, W) float, NaN where never verified
    accepted: np.ndarray    # (H, W) bool
    rejected: np.ndarray    # (H, W) bool: verified and not accepted (R_T)
    resample: np.ndarray    # (H, W) bool: R_X
    islands: np.ndarray     # (H, W) int, 0 = none, ids unique across bands
    tau: float


def verdict(trace) -> Verdict | None:
    """None for methods without a verify step (ar, zipar)."""
    H, W = trace.grid["target"]
    v = Verdict(np.full((H, W), np.nan), np.zeros((H, W), bool), np.zeros((H, W), bool),
                np.zeros((H, W), bool), np.zeros((H, W), np.int64), float(trace.params.get("tau", 0.0)))
    seen, found = 0, False
    for s in trace.steps:
        if s["phase"] != "verify" or "band" not in s:
            continue
        found = True
        r0, r1 = s["band"]
        pooled = np.asarray(s["pooled"], dtype=np.float64)      # null (NaN): not judged by this pass
        judged = ~np.isnan(pooled)
        v.pooled[r0:r1][judged] = pooled[judged]
        v.accepted[r0:r1][judged] = np.asarray(s["accepted"], dtype=bool)[judged]
        v.rejected[r0:r1][judged] = ~v.accepted[r0:r1][judged]
        v.resample[r0:r1] = np.asarray(s["resample"], dtype=bool)
        ids = np.asarray(s["islands"], dtype=np.int64)
        v.islands[r0:r1] = np.where(ids > 0, ids + seen, 0)
        seen += int(ids.max(initial=0))
    return v if found else None


def islands_image(proposal_img: np.ndarray, v: Verdict, grid: bool = False) -> np.ndarray:
    """The proposal with R_X tinted by island id and a REJECTED dot in the middle of every rejected cell."""
    H, W = v.islands.shape
    img = proposal_img
    for n in np.unique(v.islands[v.islands > 0]):
        img = tint(img, v.islands == n, theme.ISLANDS[(int(n) - 1) % len(theme.ISLANDS)], 0.6)
    size = img.shape[0]
    dot = np.zeros((size, size), bool)
    ch, cw = size / H, size / W
    for i, j in zip(*np.nonzero(v.rejected)):
        y0, y1 = int((i + 0.3) * ch), int(np.ceil((i + 0.7) * ch))
        x0, x1 = int((j + 0.3) * cw), int(np.ceil((j + 0.7) * cw))
        dot[y0:y1, x0:x1] = True
    img = img.copy()
    img[dot] = theme.rgb(theme.REJECTED)
    return with_grid(img, H, W) if grid else img


class Replay:
    """The canvases as they stood after some steps: target grid and, for mulo, the drafter's grid.

    A mulo draft step writes the drafter canvas; a refresh step (grid "draft") writes the down-sampled
    commit into it; an upsample step writes the proposal onto the target canvas; a mulo verify step
    withdraws the cells it sends to resampling (R_X); a verify step of sd, lantern or sjd withdraws
    the drafts it judged and writes the tokens it kept; resample and decode steps write final tokens.
    """

    def __init__(self, target: tuple[int, int], draft: tuple[int, int] | None):
        self.target = np.full(tuple(target), UNKNOWN, dtype=np.int64)
        self.draft = None if draft is None else np.full(tuple(draft), UNKNOWN, dtype=np.int64)
        self.last: dict | None = None

    def on_draft(self, step: dict) -> bool:
        return self.draft is not None and (step["phase"] == "draft" or step.get("grid") == "draft")

    def apply(self, step: dict) -> None:
        self.last = step
        canvas = self.draft if self.on_draft(step) else self.target
        if step["phase"] == "verify" and "band" in step:
            r0, r1 = step["band"]
            band = canvas[r0:r1]
            band[np.asarray(step["resample"], dtype=bool)] = UNKNOWN
            return
        if step.get("judged"):          # sd / lantern / sjd: drafts judged, only `cells` kept
            judged = np.asarray(step["judged"], dtype=np.int64).reshape(-1, 2)
            canvas[judged[:, 0], judged[:, 1]] = UNKNOWN
        if step.get("tokens") is not None and step["cells"]:
            cells = np.asarray(step["cells"], dtype=np.int64)
            canvas[cells[:, 0], cells[:, 1]] = step["tokens"]


def replay(trace, n: int) -> Replay:
    """The canvases after the first n steps (0 = nothing written, len(steps) = the end)."""
    rp = Replay(trace.grid["target"], trace.grid.get("draft"))
    for s in trace.steps[:max(0, min(n, len(trace.steps)))]:
        rp.apply(s)
    return rp


def _mark_step(img: np.ndarray, step: dict, shape: tuple[int, int]) -> np.ndarray:
    if step["phase"] == "verify" and "band" in step:
        r0, r1 = step["band"]
        acc = np.zeros(shape, bool)
        rej = np.zeros(shape, bool)
        judged = ~np.isnan(np.asarray(step["pooled"], dtype=np.float64))
        acc[r0:r1] = np.asarray(step["accepted"], dtype=bool) & judged
        rej[r0:r1] = ~acc[r0:r1] & judged
        return tint(tint(img, acc, theme.ACCEPTED, 0.35), rej, theme.REJECTED, 0.55)
    mask = np.zeros(shape, bool)
    if step["cells"]:
        cells = np.asarray(step["cells"], dtype=np.int64)
        mask[cells[:, 0], cells[:, 1]] = True
    return tint(img, mask, theme.HIGHLIGHT, 0.55)


LABEL = 22   # height of the caption strip above each canvas panel, in pixels


def _labelled(img: np.ndarray, text: str) -> np.ndarray:
    strip = Image.new("RGB", (img.shape[1], LABEL), "white")
    ImageDraw.Draw(strip).text((4, 4), text, fill=theme.PENDING, font=ImageFont.load_default(14))
    return np.concatenate([np.asarray(strip), img], axis=0)


def canvas_image(rp: Replay, tokenizer, grid: bool = False, size: int = SIZE) -> np.ndarray:
    """[drafter canvas | target canvas] (or the target canvas alone) under a caption strip, the last
    step's cells marked. (size + LABEL, width, 3)."""
    step = rp.last
    on_draft = step is not None and rp.on_draft(step)
    panels = []
    for canvas, is_draft in ((rp.draft, True), (rp.target, False)):
        if canvas is None:
            continue
        img = grid_image(canvas, tokenizer, grid, size)
        if step is not None and on_draft == is_draft:
            img = _mark_step(img, step, canvas.shape)
        who = "drafter q" if is_draft else "target p"
        panels.append(_labelled(img, f"{who}, {canvas.shape[0]}x{canvas.shape[1]} tokens"))
    if len(panels) == 1:
        return panels[0]
    gap = np.full((size + LABEL, size // 20, 3), 255, np.uint8)
    return np.concatenate([panels[0], gap, panels[1]], axis=1)


def step_caption(trace, n: int) -> str:
    """One line saying what step n (1-based; 0 = before the first) did."""
    total = len(trace.steps)
    if n <= 0:
        return f"Before step 1 of {total}: nothing written yet."
    s = trace.steps[min(n, total) - 1]
    who = f"{s['model']}, {s['nfe']} NFE" if s["model"] else "no model pass"
    what = f"{len(s['cells'])} cell{'s' if len(s['cells']) != 1 else ''}"
    if s["phase"] == "verify" and "band" in s:
        what = (f"rows {s['band'][0]}-{s['band'][1] - 1}: {s.get('rejected', 0)} rejected, "
                f"{int(np.sum(s['resample']))} to resample in {s.get('n_islands', 0)} island(s)")
    elif "wave" in s:
        what += f", wave {s['wave'] + 1}"
    return f"Step {min(n, total)} of {total}: **{s['phase']}** ({who}, {s['wall_ms']:.1f} ms), {what}."


def cell_at(x: float, y: float, shape: tuple[int, int], size: int = SIZE) -> tuple[int, int]:
    """Pixel (x, y) on a size x size image of an (H, W) grid -> cell (i, j)."""
    H, W = shape
    return min(H - 1, max(0, int(y * H // size))), min(W - 1, max(0, int(x * W // size)))


def cell_details(trace, v: Verdict | None, i: int, j: int) -> str:
    """Markdown card for cell (i, j): proposal, pooled mass against tau, verdict, island, final token."""
    lines = [f"**Cell ({i}, {j})**, raster index {i * trace.grid['target'][1] + j}",
             f"- final token: {trace.tokens[i][j]}"]
    if trace.proposal is not None:
        lines.append(f"- proposal token: {trace.proposal[i][j]}")
    if trace.draft is not None:
        h, w = trace.grid["draft"]
        H, W = trace.grid["target"]
        lines.append(f"- drafted from low-res cell ({i * h // H}, {j * w // W}), token "
                     f"{trace.draft[i * h // H][j * w // W]}")
    if v is not None and not np.isnan(v.pooled[i, j]):
        verdict_word = "accepted" if v.accepted[i, j] else "rejected"
        cmp = ">=" if v.accepted[i, j] else "<"
        lines.append(f"- pooled mass {v.pooled[i, j]:.4f} {cmp} tau {v.tau:g}: **{verdict_word}**")
        if v.resample[i, j]:
            why = "rejected itself" if v.rejected[i, j] else "swept in by the expansion around a rejection"
            lines.append(f"- resampled by the target ({why}), island {v.islands[i, j]}")
        else:
            lines.append("- kept as proposed")
    return "\n".join(lines)

