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
from core.config import MethodParams, ParameterError, draft_spec

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


PIN_LINE = 2   # pixels of each of the pinned cell's two frames (white outside, black inside)


def pin_image(img: np.ndarray, i: int, j: int, rows: int, cols: int) -> np.ndarray:
    """img with the pinned cell (i, j) framed: a white frame just outside the cell and a black one just
    inside it, so the mark reads on any colour."""
    out = img.copy()
    h, w = out.shape[:2]
    y0, y1, x0, x1 = (i * h) // rows, ((i + 1) * h) // rows, (j * w) // cols, ((j + 1) * w) // cols
    for pad, colour in ((PIN_LINE, 255), (0, 0)):
        a, b = max(y0 - pad, 0), min(y1 + pad, h)
        c, d = max(x0 - pad, 0), min(x1 + pad, w)
        frame = np.zeros((h, w), bool)
        frame[a:b, c:d] = True
        frame[a + PIN_LINE:b - PIN_LINE, c + PIN_LINE:d - PIN_LINE] = False
        out[frame] = colour
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
    prob: np.ndarray | None = None   # (H, W) accept=exact: min(1, p/q) of each judged cell, NaN elsewhere


def verdict(trace) -> Verdict | None:
    """None for methods without a verify step (ar, zipar)."""
    H, W = trace.grid["target"]
    v = Verdict(np.full((H, W), np.nan), np.zeros((H, W), bool), np.zeros((H, W), bool),
                np.zeros((H, W), bool), np.zeros((H, W), np.int64), float(trace.params.get("tau", 0.0)))
    seen, found = 0, False
    for s in trace.steps:
        if s["phase"] != "verify" or "band" not in s or s.get("level", 0):   # the target grid's verdicts
            continue
        found = True
        r0, r1 = s["band"]
        pooled = np.asarray(s["pooled"], dtype=np.float64)      # null (NaN): not judged by this pass
        judged = ~np.isnan(pooled)
        v.pooled[r0:r1][judged] = pooled[judged]
        if "prob" in s:       # accept=exact: one min(1, p/q) per judged cell, in raster order
            if v.prob is None:
                v.prob = np.full((H, W), np.nan)
            v.prob[r0:r1][judged] = np.asarray(s["prob"], dtype=np.float64)
        v.accepted[r0:r1][judged] = np.asarray(s["accepted"], dtype=bool)[judged]
        v.rejected[r0:r1][judged] = ~v.accepted[r0:r1][judged]
        # R_X and islands too, only where this pass judged: a raster pass that follows a rejection does not
        # judge the cell the target resampled, which keeps the earlier pass's verdict (resampled, its island)
        v.resample[r0:r1][judged] = np.asarray(s["resample"], dtype=bool)[judged]
        ids = np.asarray(s["islands"], dtype=np.int64)
        v.islands[r0:r1][judged] = np.where(ids > 0, ids + seen, 0)[judged]
        seen += int(ids.max(initial=0))
    return v if found else None


@dataclass
class Level:
    """One deeper level of a cascade (draft_method=mulo/...), shaped like a Trace so that every view of
    the target level draws it: its grid as `target`, the grid that drafted it as `draft`, its own steps
    (relabelled level 0), its method and the knobs it ran with (the outer run's, with its spec's on top)."""
    level: int
    method: str
    grid: dict
    params: dict
    steps: list
    tokens: list
    proposal: list | None
    draft: list | None


def cascade_levels(trace) -> list[int]:
    """The levels 1.. of grid.levels that were verified and drafted by a level below them: the levels
    of a cascade (a drafter that ran ar, zipar, sjd… has no proposal and no verdict of its own)."""
    grids = trace.grid.get("levels") or []
    nested = getattr(trace, "levels", None) or []
    return [n for n in range(1, len(grids) - 1) if n <= len(nested) and nested[n - 1].get("proposal") is not None]


def _level_params(trace, n: int) -> dict:
    """The knobs level n ran with: draft_spec applied n times to the run's knobs (the run's own, where an
    uploaded trace's knobs do not parse)."""
    names = MethodParams.__dataclass_fields__
    try:
        p = MethodParams(**{k: v for k, v in trace.params.items() if k in names})
        for _ in range(n):
            _, p = draft_spec(p)
    except (ParameterError, TypeError, ValueError):
        return dict(trace.params)
    return dict(trace.params, **{k: getattr(p, k) for k in names})


def level_trace(trace, n: int) -> Level | None:
    """Level n (>= 1) of a cascade as a Trace-like view, or None when the run has no such level."""
    if n not in cascade_levels(trace):
        return None
    grids = trace.grid["levels"]
    lv = trace.levels[n - 1]
    steps = [{k: v for k, v in s.items() if k != "level"} for s in trace.steps if s.get("level", 0) == n]
    return Level(n, lv["method"], dict(target=list(grids[n]), draft=list(grids[n + 1]), levels=grids[n:]),
                 _level_params(trace, n), steps, lv["tokens"], lv.get("proposal"), lv.get("draft"))


@dataclass
class Tests:
    """The acceptance tests of sd, lantern and sjd per target cell: the last test of each position."""
    prob: np.ndarray        # (H, W) float: probability of acceptance, NaN where never tested
    passed: np.ndarray      # (H, W) bool: the draft passed its (random) test and was kept
    resampled: np.ndarray   # (H, W) bool: the draft failed; the token came from the residual
    label: str              # the rule, in words


_EAGLE_RULE = "p(x), q = 1 (chosen drafts); a rejected sibling leaves p"
RULES = {"sd": "min(1, p/q)", "eagle": _EAGLE_RULE,
         "lantern": "p̃(x) with q = 1, p̃ relaxed over neighbours within δ",
         "lantern_pp": "min(1, p̃/q), p̃ ≤ λ·p", "vvs": "p̃(x) with q = 1 as lantern; some cycles commit a drafted path unverified",
         "sjd": "min(1, p/p_prev) of the Jacobi iterate", "scd": "min(1, p/p_prev) of the coupled Jacobi iterate",
         "pjd": "min(1, p/p_prev) of the row's Jacobi iterate", "gsd": "min(1, Σ_C p / Σ_C q) over the guess's cluster C",
         "cool": "min(1, w_i·p/q), w_i = δ·exp(−ν i − μ)"}


def cells(n: int) -> str:
    """'1 cell', '2 cells'."""
    return f"{n} cell{'' if n == 1 else 's'}"


def unverified(trace) -> np.ndarray | None:
    """(H, W) bool: the cells committed by steps the target never checked (vvs: verified = False), or
    None when the run has none."""
    H, W = trace.grid["target"]
    out = np.zeros((H, W), bool)
    for s in trace.steps:
        if s.get("verified") is False and not s.get("level", 0) and s["cells"]:
            cells = np.asarray(s["cells"], dtype=np.int64).reshape(-1, 2)
            out[cells[:, 0], cells[:, 1]] = True
    return out if out.any() else None


def tests(trace) -> Tests | None:
    """None for methods without per-position tests (ar, zipar, mulo)."""
    H, W = trace.grid["target"]
    t = Tests(np.full((H, W), np.nan), np.zeros((H, W), bool), np.zeros((H, W), bool),
              RULES.get(trace.method, "probability of acceptance"))
    found = False
    for s in trace.steps:
        if s["phase"] != "verify" or "judged" not in s or "prob" not in s or s.get("level", 0):
            continue
        found = True
        for (i, j), prob, ok in zip(s["judged"], s["prob"], s["accepted"]):
            t.prob[i, j], t.passed[i, j], t.resampled[i, j] = prob, ok, not ok
    return t if found else None


def islands_image(proposal_img: np.ndarray, v: Verdict, grid: bool = False) -> np.ndarray:
    """The proposal with R_X tinted by island id and a REJECTED dot in the middle of every cell below τ."""
    H, W = v.islands.shape
    img = proposal_img
    for n in np.unique(v.islands[v.islands > 0]):
        img = tint(img, v.islands == n, theme.ISLANDS[(int(n) - 1) % len(theme.ISLANDS)], 0.6)
    img = _dots(img, v.rejected)
    return with_grid(img, H, W) if grid else img


def failed_image(final_img: np.ndarray, t: Tests, grid: bool = False) -> np.ndarray:
    """sd / lantern / sjd: the final image with a REJECTED dot on every cell whose draft failed its test."""
    H, W = t.prob.shape
    img = _dots(final_img, t.resampled)
    return with_grid(img, H, W) if grid else img


def _dots(img: np.ndarray, mask: np.ndarray) -> np.ndarray:
    H, W = mask.shape
    size = img.shape[0]
    dot = np.zeros((size, size), bool)
    ch, cw = size / H, size / W
    for i, j in zip(*np.nonzero(mask)):
        dot[int((i + 0.3) * ch):int(np.ceil((i + 0.7) * ch)), int((j + 0.3) * cw):int(np.ceil((j + 0.7) * cw))] = True
    img = img.copy()
    img[dot] = theme.rgb(theme.REJECTED)
    return img


def message_image(text: str, size: int = SIZE) -> np.ndarray:
    """A light panel that says in words why a view is empty, wrapped to the panel's width."""
    panel = Image.new("RGB", (size, size), "#f1f2f6")
    draw = ImageDraw.Draw(panel)
    font = ImageFont.load_default(17)
    lines, line = [], ""
    for word in text.split():
        trial = f"{line} {word}".strip()
        if draw.textlength(trial, font=font) > size - 28 and line:
            lines.append(line)
            line = word
        else:
            line = trial
    lines.append(line)
    y = max(10, (size - 24 * len(lines)) // 2)
    for ln in lines:
        draw.text((14, y), ln, fill=theme.PENDING, font=font)
        y += 24
    return np.asarray(panel)


def islands_key(v: Verdict | None, t: Tests | None = None) -> str:
    """HTML key of the islands panel: each island's colour, number and size in cells (mulo), or what
    the dots mean (sd / lantern / sjd)."""
    dot = theme.swatch(theme.REJECTED, round_=True)
    if v is None and t is not None:
        return (f"<div class='key'>{dot} draft failed its test, token resampled from the residual "
                f"({cells(int(t.resampled.sum()))}); every other written cell kept its draft or was drawn from p."
                "</div>")
    if v is None:
        return ""
    ids, sizes = np.unique(v.islands[v.islands > 0], return_counts=True)
    parts = [f"{dot} below τ ({cells(int(v.rejected.sum()))})"]
    parts += [f"{theme.swatch(theme.ISLANDS[(int(n) - 1) % len(theme.ISLANDS)])} island {n}: {cells(int(c))}"
              for n, c in zip(ids, sizes)]
    if not len(ids):
        parts.append("no islands: every cell kept")
    return "<div class='key'>" + " · ".join(parts) + "</div>"


class Replay:
    """The canvases as they stood after some steps: target grid and, for mulo, the drafter's grid.

    A step at level 1 (a mulo draft step, a refresh step, every step of a drafter that ran a method of
    its own) works on the drafter canvas, a step at level 0 on the target canvas; deeper levels of a
    cascade are not replayed here; an upsample step writes the proposal onto the target canvas; a mulo verify step
    withdraws the cells it sends to resampling (R_X); a verify step of sd, lantern or sjd withdraws
    the drafts it judged and writes the tokens it kept; resample and decode steps write final tokens.
    """

    def __init__(self, target: tuple[int, int], draft: tuple[int, int] | None):
        self.target = np.full(tuple(target), UNKNOWN, dtype=np.int64)
        self.draft = None if draft is None else np.full(tuple(draft), UNKNOWN, dtype=np.int64)
        self.last: dict | None = None

    def on_draft(self, step: dict) -> bool:
        return self.draft is not None and step.get("level", 0) == 1

    def apply(self, step: dict) -> None:
        self.last = step
        if step.get("level", 0) > (1 if self.draft is not None else 0):
            return
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
    """The colours of theme.CANVAS_KEY: a mulo verify step marks passed-and-kept, below τ, and passed
    but swept into an island; any other step marks the cells it wrote."""
    if step["phase"] == "verify" and "band" in step:
        r0, r1 = step["band"]
        passed, below, swept = (np.zeros(shape, bool) for _ in range(3))
        judged = ~np.isnan(np.asarray(step["pooled"], dtype=np.float64))   # null: not judged by this pass
        ok = np.asarray(step["accepted"], dtype=bool) & judged
        res = np.asarray(step["resample"], dtype=bool)
        passed[r0:r1], below[r0:r1], swept[r0:r1] = ok & ~res, ~ok & judged, ok & res
        return tint(tint(tint(img, passed, theme.ACCEPTED, 0.35), below, theme.REJECTED, 0.7),
                    swept, theme.RESAMPLED, 0.7)
    mask = np.zeros(shape, bool)
    if step["cells"]:
        cells = np.asarray(step["cells"], dtype=np.int64)
        mask[cells[:, 0], cells[:, 1]] = True
    return tint(img, mask, theme.WRITTEN, theme.WRITTEN_ALPHA)


LABEL = 22   # height of the caption strip under each canvas panel, in pixels


def _labelled(img: np.ndarray, text: str) -> np.ndarray:
    """The panel with its caption in a strip *below* it, where no badge or button of the page covers it."""
    strip = Image.new("RGB", (img.shape[1], LABEL), "white")
    ImageDraw.Draw(strip).text((4, 4), text, fill=theme.PENDING, font=ImageFont.load_default(14))
    return np.concatenate([img, np.asarray(strip)], axis=0)


def canvas_image(rp: Replay, tokenizer, grid: bool = False, size: int = SIZE) -> np.ndarray:
    """[drafter canvas | target canvas] (or the target canvas alone) above a caption strip, the last
    step's cells marked (theme.CANVAS_KEY says how). (size + LABEL, width, 3)."""
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
    passes = sum(x["nfe"] for x in trace.steps)
    so_far = sum(x["nfe"] for x in trace.steps[:min(n, total)])
    # a step may hold more than one pass (the target's prefill rides with the first verify): say both counts
    tally = f" Passes so far: {so_far} of {passes}." if passes != total else ""
    return f"Step {min(n, total)} of {total}: **{s['phase']}** ({who}, {s['wall_ms']:.1f} ms), {what}.{tally}"


def cell_at(x: float, y: float, shape: tuple[int, int], size: int = SIZE) -> tuple[int, int]:
    """Pixel (x, y) on a size x size image of an (H, W) grid -> cell (i, j)."""
    H, W = shape
    return min(H - 1, max(0, int(y * H // size))), min(W - 1, max(0, int(x * W // size)))


def cell_details(trace, v: Verdict | None, i: int, j: int) -> str:
    """Markdown card for cell (i, j): proposal, pooled mass against tau, passed or not, kept or
    resampled (and why, in which island), final token; for sd / lantern / sjd its acceptance test."""
    lines = [f"**Cell ({i}, {j})**, raster index {i * trace.grid['target'][1] + j}",
             f"- final token: {trace.tokens[i][j]}"]
    if trace.proposal is not None:
        lines.append(f"- proposal token: {trace.proposal[i][j]}")
    if trace.draft is not None:
        h, w = trace.grid["draft"]
        H, W = trace.grid["target"]
        lines.append(f"- drafted from low-res cell ({i * h // H}, {j * w // W}), token "
                     f"{trace.draft[i * h // H][j * w // W]}")
    exact = v is not None and v.prob is not None and not np.isnan(v.prob[i, j])
    if exact:
        passed = bool(v.accepted[i, j])
        lines.append(f"- exact test: accepted with probability min(1, p/q) = {v.prob[i, j]:.4f}: "
                     f"**{'accepted' if passed else 'rejected'}** (pooled mass {v.pooled[i, j]:.4f}, not used)")
        if v.resample[i, j] and int(trace.params.get("radius", 0)) == 0:
            lines.append("- **drawn from the residual** normalize(max(0, p − q)) of the verify pass (no pass more)")
        elif v.resample[i, j]:
            why = "rejected itself" if v.rejected[i, j] else "accepted, but swept in by the expansion around a " \
                                                              "rejected cell"
            lines.append(f"- **resampled** by the target ({why}), island {v.islands[i, j]}")
        else:
            lines.append("- **kept** as proposed")
    elif v is not None and not np.isnan(v.pooled[i, j]):
        passed = bool(v.accepted[i, j])
        lines.append(f"- pooled mass {v.pooled[i, j]:.4f} {'≥' if passed else '<'} τ {v.tau:g}: "
                     f"**{'passed τ' if passed else 'below τ'}**")
        if v.resample[i, j]:
            why = "below τ itself" if v.rejected[i, j] else "passed τ, but swept in by the expansion around a " \
                                                             "cell below τ"
            lines.append(f"- **resampled** by the target ({why}), island {v.islands[i, j]}")
        elif trace.params.get("commit") == "target":
            same = trace.tokens[i][j] == trace.proposal[i][j]
            lines.append("- **kept**, its token drawn from the target's p restricted to B_k (commit = target, from "
                         "the verify pass): " + ("the proposal's token again" if same else "another code of B_k"))
        else:
            lines.append("- **kept** as proposed")
    t = tests(trace)
    skipped = unverified(trace)
    if skipped is not None and skipped[i, j]:
        lines.append("- **committed unverified**: drafted by the head from its own q in a skipped cycle (vvs); "
                     "the target never tested it")
    elif t is not None:
        if np.isnan(t.prob[i, j]):
            lines.append("- never tested: drawn from p directly (a bonus token, or the cell after a rejection)")
        else:
            lines.append(f"- probability of acceptance {t.prob[i, j]:.4f} ({t.label}): "
                         + ("**passed**, draft kept" if t.passed[i, j] else "**failed**, resampled from the residual"))
    return "\n".join(lines)
