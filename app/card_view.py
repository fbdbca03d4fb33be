"""The target's view of a cell, as Markdown for the cell card (core.cell_view computes it).

Each code is drawn as its decoded patch, an inline PNG (data URI) beside its token id; mulo's B_k
members each get a bar of their share of the pooled mass, and one stacked bar sets the pooled mass
against τ. Knows the tokenizer only to decode patches; the numbers come from core.cell_view.
"""
from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image, ImageDraw

from core import cell_view, engine

from . import theme

PATCH = 32        # side of a code's patch on the card, in pixels
BAR = 6           # characters of a full share bar (the card is a narrow column: the table must fit it)


def patches(tokens, tokenizer, px: int = PATCH) -> dict[int, str]:
    """{token: data URI of its decoded patch}, every token decoded in one pass (a 1 x n row)."""
    toks = sorted({int(t) for t in tokens})
    if not toks:
        return {}
    img = engine.decode_image(np.asarray(toks, np.int64)[None], tokenizer)
    w = img.shape[1] // len(toks)
    out = {}
    for n, t in enumerate(toks):
        patch = Image.fromarray(np.ascontiguousarray(img[:, n * w:(n + 1) * w])).resize((px, px), Image.NEAREST)
        out[t] = _uri(patch)
    return out


def _uri(img: Image.Image) -> str:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _img(uri: str | None, alt: str) -> str:
    return "" if uri is None else f'<img src="{uri}" alt="{alt}" width="{PATCH}" height="{PATCH}" ' \
                                   'style="display:inline;vertical-align:middle;image-rendering:pixelated">'


def _bar(share: float) -> str:
    n = int(round(min(max(share, 0.0), 1.0) * BAR))
    return "█" * n + "·" * (BAR - n) if n else "▏" + "·" * (BAR - 1)


def stacked_bar(members: list, tau: float, width: int = 240, height: int = 14) -> str:
    """A PNG bar: each B_k member's share stacked left to right, a black tick at τ."""
    img = Image.new("RGB", (width, height), "#f1f2f6")
    d = ImageDraw.Draw(img)
    x = 0.0
    for n, (_, _, share) in enumerate(members):
        x1 = x + share * width
        d.rectangle([int(x), 0, max(int(x), int(round(x1)) - 1), height - 1],
                    fill=theme.ISLANDS[n % len(theme.ISLANDS)] if n else theme.ACCEPTED)
        x = x1
    t = int(round(min(max(tau, 0.0), 1.0) * (width - 1)))
    d.rectangle([t - 1, 0, t, height - 1], fill="black")
    return f'<img src="{_uri(img)}" alt="pooled mass against tau" width="{width}" height="{height}" ' \
           'style="display:inline;vertical-align:middle">'


def _table(rows: list, pics: dict, final: int | None, judged: int | None, judged_label: str) -> list[str]:
    out = ["| rank | code | token | p |", "|---:|---|---|---:|"]
    for tok, p, rank in rows:
        mark = []
        if tok == final:
            mark.append("final")
        if tok == judged:
            mark.append(judged_label)
        named = f"{tok} ({', '.join(mark)})" if mark else str(tok)
        out.append(f"| {rank} | {_img(pics.get(tok), str(tok))} | {named} | {p:.4f} |")
    return out


def card(trace, i: int, j: int, pair=None) -> str:
    """The Markdown of the target's view of cell (i, j) (empty for methods that judge nothing)."""
    if trace.method not in ("mulo",) + cell_view.SD_FAMILY:
        return ""
    try:
        pair = pair or engine.load_pair(trace.model)
    except (ValueError, RuntimeError, OSError) as e:
        return f"\n\n**The target's view**: the {trace.model} pair cannot be loaded here ({e})."
    v = cell_view.cell_view(trace, i, j, pair)
    if v.context is None:
        return "\n\n**The target's view**: " + " ".join(v.notes or ["no step of the target judged this cell."])
    shown = [t for t, _, _ in v.top] + [t for t, _, _ in v.members]
    for extra in (v.judged, v.final, v.resampled and v.resampled["token"]):
        if extra:
            shown.append(extra["token"])
    if v.resampled:
        shown += [t for t, _, _ in v.resampled["top"]]
    shown += [nd["token"] for nd in v.nodes]
    pics = patches(shown, pair.tokenizer)
    judged_tok = v.judged["token"] if v.judged else None
    label = v.judged["label"] if v.judged else ""
    lines = ["", "", f"**The target's view of this cell** ({v.method}), {v.context.words}; {v.forwards} "
             f"cache-free forward{'s' if v.forwards > 1 else ''} of the "
             f"{'target and drafter' if v.test and 'q_rank' in v.test else 'target'}, {v.forward_ms:.0f} ms.", ""]
    if v.role == "verify" or v.method == "mulo":
        lines.append("Top tokens of the processed distribution it was judged with:")
        lines.append("")
        lines += _table(v.top, pics, v.final["token"] if v.final else None, judged_tok, label)
        lines.append("")
    if v.judged:
        lines.append(f"- {label} {_img(pics.get(judged_tok), str(judged_tok))} {judged_tok}: p = {v.judged['p']:.4g}, "
                     f"rank {v.judged['rank']}")
    if v.final and v.role == "verify":
        lines.append(f"- final token {v.final['token']}: p = {v.final['p']:.4g}, rank {v.final['rank']}")
    if v.members:
        sign = "≥" if v.pooled is not None and v.pooled >= v.tau else "<"
        lines.append(f"- B_k, the proposal (prop.) and its {len(v.members) - 1} nearest codes (#, nearest first), each "
                     "one's share of the pooled "
                     f"mass: Σ = {v.pooled_forward:.4f} (trace: {v.pooled:.4f}) {sign} τ {v.tau:g} "
                     + stacked_bar(v.members, v.tau))
        lines.append("")
        lines.append("| # | code | token | share | |")
        lines.append("|---|---|---:|---:|---|")
        for n, (tok, _, share) in enumerate(v.members):
            who = "prop." if n == 0 else str(n)     # the proposal, then its neighbours nearest first
            lines.append(f"| {who} | {_img(pics.get(tok), str(tok))} | {tok} | {share:.3f} | `{_bar(share)}` |")
        lines.append("")
    if v.test:
        t = v.test
        parts = []
        if "p" in t:
            parts.append(f"p = {t['p']:.4g}")
        if "q" in t:
            parts.append(f"q = {t['q']:.4g}" + (f" (rank {t['q_rank']} under q)" if "q_rank" in t else ""))
        if "head_q" in t:
            parts.append(f"the head's q = {t['head_q']:.4g} (it drew the tree; the test counts a chosen draft as q = 1)")
        if "ratio" in t:
            parts.append(f"min(1, p/q) = {t['ratio']:.4f}")
        if "annealed" in t:
            parts.append(f"w = {t['weight']:.3f}, min(1, w·p/q) = {t['annealed']:.4f}")
        parts.append(f"trace's acceptance probability {t['trace']:.4f}: **{'passed' if t['passed'] else 'failed'}**")
        lines.append("- the test: " + ", ".join(parts))
    if v.nodes:
        lines.append("- the siblings tried at this cell, in order (p: the target's p at the parent, q: the head's):")
        lines.append("")
        lines.append("| code | token | p | q | verdict |")
        lines.append("|---|---:|---:|---:|---|")
        for nd in v.nodes:
            lines.append(f"| {_img(pics.get(nd['token']), str(nd['token']))} | {nd['token']} | {nd['p']:.4g} | "
                         f"{nd['q']:.4g} | {'accepted' if nd['verdict'] == 1 else 'rejected'} |")
        lines.append("")
    if v.resampled:
        r, tok = v.resampled, v.resampled["token"]
        lines.append(f"- **drawn from** {r['from']}: it got {_img(pics.get(tok['token']), str(tok['token']))} "
                     f"{tok['token']} (p = {tok['p']:.4g}, rank {tok['rank']}); its top tokens:")
        lines.append("")
        lines += _table(r["top"], pics, tok["token"], None, "")
        lines.append("")
    lines += [f"- *{n}*" for n in v.notes]
    return "\n".join(lines)
