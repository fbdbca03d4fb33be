"""The tree methods' own views (eagle, lantern, lantern_pp, vvs), as pure functions of a stored Trace:
one verify step's draft tree as a Plotly figure (x = depth, siblings spread top to bottom in the order
they were tried, each node coloured by its verdict, the token drawn after the accepted path an extra
marker), and the accepted length of every cycle painted on the cells that cycle committed.

Reads the verify steps' `tree` records (core/methods/eagle.py tree_record): per node its parent (-1:
a child of the root), depth, token, the head's q, the target's p at its parent and the verdict (1
accepted, 0 rejected, -1 not tried); a node at depth d of a cycle whose root is cell t sits at cell
t + d. Knows nothing of Gradio.
"""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from . import theme
from .plots import message
from .render import RULES

NOT_TRIED = "#b0b4bd"     # a node the walk never reached
BONUS = theme.HIGHLIGHT   # the token drawn at the end of the path from its own distribution
# verdict -> (legend name, colour); the figure has one marker trace per verdict, in this order
VERDICTS = ((1, "accepted", theme.ACCEPTED), (0, "rejected", theme.REJECTED), (-1, "not tried", NOT_TRIED))
MARGIN = dict(l=10, r=10, t=70, b=10)


def cycles(trace) -> list[dict]:
    """The verify steps that carry a draft tree, in order (cycle n is cycles(trace)[n - 1])."""
    return [s for s in trace.steps if s["phase"] == "verify" and isinstance(s.get("tree"), dict)
            and not s.get("level", 0)]


def has_trees(trace) -> bool:
    """Whether the run verified any draft tree (read up to the first one)."""
    return any(s["phase"] == "verify" and isinstance(s.get("tree"), dict) and not s.get("level", 0)
               for s in trace.steps)


def accepted_length(step: dict) -> int:
    """The nodes the walk accepted in this cycle (its accepted path)."""
    return sum(1 for v in step["tree"]["verdict"] if v == 1)


def best_cycle(trace) -> int:
    """The cycle (1-based) with the longest accepted path, the first of ties; 1 when there is none."""
    lengths = [accepted_length(s) for s in cycles(trace)]
    return 1 + int(np.argmax(lengths)) if lengths else 1


def children(tree: dict) -> dict[int, list[int]]:
    """parent (-1 = the root) -> its children in the order the walk tries them (node order)."""
    out: dict[int, list[int]] = {-1: []}
    for n, par in enumerate(tree["parent"]):
        out.setdefault(int(par), []).append(n)
    return out


def tried_order(tree: dict) -> list[int]:
    """The nodes the walk tried, in the order it tried them: at each node of the accepted path its
    children in order, up to the first accepted one (the order of the step's judged / prob lists)."""
    kids, verdict = children(tree), tree["verdict"]
    order, node, seen = [], -1, set()
    while node not in seen:
        seen.add(node)
        nxt = None
        for c in kids.get(node, []):
            if verdict[c] == -1:
                continue
            order.append(c)
            if verdict[c] == 1:
                nxt = c
                break
        if nxt is None:
            break
        node = nxt
    return order


def _layout(tree: dict, extra_under: int | None) -> tuple[dict[int, float], float | None]:
    """y of every node (and of the drawn token, an extra last child of `extra_under`): the leaves take
    one row each in depth-first order, siblings in the order tried; a parent sits at its children's mean."""
    kids, y, rows = children(tree), {}, [0]
    extra = [None]

    def place(node: int) -> float:
        below = [place(c) for c in kids.get(node, [])]
        if node == extra_under and extra_under is not None:
            extra[0] = float(rows[0])
            rows[0] += 1
            below.append(extra[0])
        if below:
            y[node] = sum(below) / len(below)
        else:
            y[node] = float(rows[0])
            rows[0] += 1
        return y[node]
    place(-1)
    return y, extra[0]


def _cell(step: dict, W: int, offset: int) -> tuple[int, int] | None:
    """The cell `offset` cells after the cycle's root (root + 1 = the step's first committed cell)."""
    if not step["cells"]:
        return None
    i, j = step["cells"][0]
    c = i * W + j - 1 + offset
    return (c // W, c % W) if c >= 0 else None   # a first cell of 0: a malformed upload, no root


def tree_figure(trace, cycle: int | None = None) -> go.Figure:
    """One cycle's verified tree: x = depth (0 = the root, the last committed cell), the nodes of a level
    spread vertically by sibling order, edges parent -> child, nodes coloured accepted / rejected / not
    tried; the drawn token (resampled from the residual or a bonus from p) an extra star. Hover: token,
    the target's p, the head's q, depth, cell and, where tried, the acceptance probability."""
    steps = cycles(trace)
    if not steps:
        return message(f"{trace.method} verifies no draft tree: only eagle, lantern, lantern_pp and vvs do")
    n = min(max(int(cycle or best_cycle(trace)), 1), len(steps))
    s = steps[n - 1]
    t = s["tree"]
    W = trace.grid["target"][1]
    path = [m for m in tried_order(t) if t["verdict"][m] == 1]
    prob = dict(zip(tried_order(t), s.get("prob") or []))
    drawn = s.get("resampled") or s.get("bonus")
    y, y_drawn = _layout(t, (path[-1] if path else -1) if drawn else None)
    fig = go.Figure()
    ex, ey = [], []
    for m, par in enumerate(t["parent"]):
        ex += [t["depth"][par] if par >= 0 else 0, t["depth"][m], None]
        ey += [y[par], y[m], None]
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", line=dict(color="#9aa0aa", width=1), hoverinfo="skip",
                             name="parent → child", showlegend=False))
    size = 14 if len(t["token"]) <= 32 else 9
    for verdict, name, colour in VERDICTS:
        nodes = [m for m, v in enumerate(t["verdict"]) if v == verdict]
        custom = [[m, t["token"][m], t["p"][m], t["q"][m], t["depth"][m], _cell_text(s, W, t["depth"][m]),
                   f"{prob[m]:.4g}" if m in prob else "not tried"] for m in nodes]
        fig.add_trace(go.Scatter(
            x=[t["depth"][m] for m in nodes], y=[y[m] for m in nodes], mode="markers", name=f"{name} ({len(nodes)})",
            marker=dict(color=colour, size=size, line=dict(color="white", width=1)), customdata=custom,
            hovertemplate="node %{customdata[0]}: token %{customdata[1]}<br>target p %{customdata[2]}"
                          "<br>head q %{customdata[3]}<br>depth %{customdata[4]}, cell %{customdata[5]}"
                          "<br>acceptance probability %{customdata[6]}<extra>" + name + "</extra>"))
    root = _cell(s, W, 0)
    root_token = trace.tokens[root[0]][root[1]] if root is not None else "?"
    fig.add_trace(go.Scatter(x=[0], y=[y[-1]], mode="markers", name="root (committed)",
                             marker=dict(color=theme.PENDING, size=size, symbol="square"),
                             hovertemplate=f"root: cell {root}, token {root_token}<br>the last committed cell; "
                                           "the tree drafts the cells after it<extra></extra>"))
    if drawn:
        how = "resampled from the residual" if s.get("resampled") else "bonus, drawn from p at the path's end"
        x_drawn = len(path) + 1
        fig.add_trace(go.Scatter(x=[t["depth"][path[-1]] if path else 0, x_drawn],
                                 y=[y[path[-1]] if path else y[-1], y_drawn], mode="lines",
                                 line=dict(color="#9aa0aa", width=1, dash="dot"), hoverinfo="skip", showlegend=False))
        fig.add_trace(go.Scatter(
            x=[x_drawn], y=[y_drawn], mode="markers", name="drawn: " + ("resampled" if s.get("resampled") else "bonus"),
            marker=dict(color=theme.RESAMPLED if s.get("resampled") else BONUS, size=size + 4, symbol="star",
                        line=dict(color="black", width=1)),
            hovertemplate=f"token {s['tokens'][-1]} at cell {tuple(drawn)}<br>{how}<extra></extra>"))
    depth = max(t["depth"], default=0)
    fig.update_xaxes(title="depth (cells after the root)", dtick=1, range=[-0.5, max(depth, len(path) + 1) + 0.5])
    fig.update_yaxes(autorange="reversed", visible=False)
    rows = max(max(y.values(), default=0.0), y_drawn or 0.0) + 1
    fig.update_layout(height=int(max(380, min(1000, 190 + 20 * rows))), margin=dict(MARGIN, b=40),
                      legend=dict(orientation="v", x=1.01, y=1, yanchor="top"), title=dict(
                          text=f"Cycle {n} of {len(steps)}: {len(t['token'])} nodes, {len(path)} accepted from "
                               f"root cell {root}<br><sup>acceptance: {RULES.get(trace.method, 'the method’s test')}"
                               "</sup>"))
    return fig


def _cell_text(step: dict, W: int, depth: int) -> str:
    c = _cell(step, W, depth)
    return "?" if c is None else f"({c[0]}, {c[1]})"


def lengths(trace) -> np.ndarray:
    """(H, W) float: for every cell a verify step committed, that step's accepted length; NaN elsewhere
    (the first cell, and vvs's unverified cycles)."""
    H, W = trace.grid["target"]
    z = np.full((H, W), np.nan)
    for s in cycles(trace):
        for i, j in s["cells"]:
            z[i, j] = accepted_length(s)
    return z


def lengths_figure(trace) -> go.Figure:
    """The accepted length of each cycle painted on the cells it committed; cells committed unverified
    (vvs) crossed; hover gives the cycle and its length."""
    steps = cycles(trace)
    if not steps:
        return message(f"{trace.method} verifies no draft tree, so there is no accepted length to map")
    H, W = trace.grid["target"]
    z = lengths(trace)
    cycle = np.zeros((H, W), dtype=np.int64)
    for n, s in enumerate(steps, 1):
        for i, j in s["cells"]:
            cycle[i, j] = n
    word = np.where(np.isnan(z), "not committed by a verify step", "cycle " + cycle.astype(str))
    custom = np.stack([np.where(np.isnan(z), -1, z).astype(int).astype(object), word.astype(object)], axis=-1)
    top = max(1.0, float(max(accepted_length(s) for s in steps)))
    fig = go.Figure(go.Heatmap(z=z, zmin=0, zmax=top, colorscale="Viridis", customdata=custom, name="accepted",
                               hovertemplate="cell (%{y}, %{x})<br>%{customdata[1]}<br>accepted length "
                                             "%{customdata[0]}<extra></extra>",
                               colorbar=dict(title=dict(text="accepted", side="right"), dtick=1)))
    skipped = np.zeros((H, W), bool)
    for s in trace.steps:
        if s.get("verified") is False and not s.get("level", 0):
            for i, j in s["cells"]:
                skipped[i, j] = True
    if skipped.any():
        si, sj = np.nonzero(skipped)
        fig.add_trace(go.Scatter(x=sj, y=si, mode="markers", marker=dict(symbol="x", color="white", size=5),
                                 name="committed unverified (vvs)", hoverinfo="skip"))
    fig.update_yaxes(autorange="reversed", scaleanchor="x", constrain="domain", title="row i", range=[H - 0.5, -0.5])
    fig.update_xaxes(constrain="domain", title="column j", range=[-0.5, W - 0.5])
    accepted = [accepted_length(s) for s in steps]
    fig.update_layout(height=420, margin=dict(MARGIN, t=60), legend=dict(orientation="h", y=-0.18), title=dict(
        text=f"Accepted length per cycle<br><sup>{len(steps)} verified cycles · mean {np.mean(accepted):.2f} · "
             f"longest {max(accepted)}</sup>"))
    return fig

