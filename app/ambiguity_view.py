"""Ambiguity made visible: how sure the target was at each cell of a run (core.ambiguity), as pure
functions of a stored run. Two heatmaps, the entropy of the target's processed distribution per cell
(nats) and the share of its mass on the top-1 token; a scatter of what the run's tests measured at
each cell (mulo: the pooled mass of the proposal token and its k neighbours; sd, cool, sjd, the tree
methods: the acceptance probability of the last test at the cell) against that entropy; and one
sentence made from this run's numbers.

The per-cell distributions come from one cache-free forward of the target over the run's final
tokens, measured once when the run is made (app.generation stores it on the state as "ambiguity";
a replayed trace has none until a model event, the ar baseline, measures it). Nothing here runs a model.
"""
from __future__ import annotations

import math

import gradio as gr
import numpy as np
import plotly.graph_objects as go

from core.ambiguity import UNSURE, Ambiguity, summary

from . import render, theme
from .plots import message

VIEWS = ("ambiguity", "ambiguity_scatter", "ambiguity_note")
MARGIN = dict(l=10, r=10, t=70, b=10)

EXPLAIN = ("**How ambiguous was each cell?** Left: the *entropy* of the target's distribution at every cell "
           "(nats; 0 = the target was sure of one token, log V = every code equally likely) and the share of "
           "its mass on its single most probable token (*top-1 share*). The context of each cell is the run's "
           "**final tokens** before it in raster order, under the run's own sampling (CFG, temperature, top-k / "
           "top-p): one teacher-forced pass of the target over the final image, not the proposal a verify pass "
           "saw. Right: what the run's test measured at each tested cell against that entropy.")
NOT_MEASURED = ("Not measured for a replayed trace: no model runs on a replay. Press *Run or re-time the ar "
                "baseline*, which also scores this run's final tokens with the target.")


def tested(trace) -> tuple[np.ndarray, str, np.ndarray] | None:
    """What the run's tests measured per cell, as the acceptance heatmap shows it: (values (H, W), NaN
    where untested; their name; passed (H, W) bool). mulo: the pooled mass of its last verify pass at
    the cell; sd, cool, sjd and the tree methods: the acceptance probability of the last test at the
    cell (the verify steps' judged / prob). None for a method that tests nothing (ar, zipar)."""
    v = render.verdict(trace)
    if v is not None:
        return v.pooled, "pooled mass", v.accepted
    t = render.tests(trace)
    if t is not None:
        return t.prob, "acceptance probability", t.passed
    return None


def _cells(H: int, W: int) -> tuple[np.ndarray, np.ndarray]:
    return np.meshgrid(np.arange(H), np.arange(W), indexing="ij")


def heatmaps(trace, amb: Ambiguity) -> go.Figure:
    """Entropy (nats, 0 to log V) and top-1 share (0 to 1) per cell, side by side; hover gives the cell,
    both numbers, the top-1 token and the final token with its probability."""
    H, W = amb.entropy.shape
    final = np.asarray(trace.tokens)
    custom = np.stack([np.round(amb.entropy, 4).astype(object), np.round(amb.top1, 4).astype(object),
                       amb.top1_token.astype(object), final.astype(object), np.round(amb.p_final, 4).astype(object)],
                      axis=-1)
    hover = ("cell (%{y}, %{x})<br>entropy %{customdata[0]} nats<br>top-1 share %{customdata[1]} (token "
             "%{customdata[2]})<br>final token %{customdata[3]}, p %{customdata[4]}<extra></extra>")
    # two panels on hand-made axes (make_subplots costs more than the rest of the figure)
    fig = go.Figure([
        go.Heatmap(z=amb.entropy, zmin=0.0, zmax=math.log(amb.vocab_size), colorscale="Magma", reversescale=True,
                   customdata=custom, hovertemplate=hover, name="entropy",
                   colorbar=dict(orientation="h", x=0.21, xanchor="center", y=-0.22, len=0.4, thickness=12)),
        go.Heatmap(z=amb.top1, zmin=0.0, zmax=1.0, colorscale="Viridis", customdata=custom, hovertemplate=hover,
                   name="top-1 share", xaxis="x2", yaxis="y2",
                   colorbar=dict(orientation="h", x=0.79, xanchor="center", y=-0.22, len=0.4, thickness=12))])
    x_axis = dict(constrain="domain", range=[-0.5, W - 0.5], title="column j")
    y_axis = dict(autorange="reversed", constrain="domain", range=[H - 0.5, -0.5])
    unsure = int((amb.top1 < UNSURE).sum())
    fig.update_layout(
        xaxis=dict(x_axis, domain=[0.0, 0.44]), yaxis=dict(y_axis, scaleanchor="x", title="row i"),
        xaxis2=dict(x_axis, domain=[0.56, 1.0]), yaxis2=dict(y_axis, scaleanchor="x2", anchor="x2"),
        annotations=[dict(text=text, x=x, y=1.0, xref="paper", yref="paper", xanchor="center", yanchor="bottom",
                          showarrow=False) for text, x in (("entropy (nats)", 0.21), ("top-1 share", 0.79))])
    fig.update_layout(height=460, margin=dict(MARGIN, b=30), title=dict(
        text=f"The target's uncertainty, given the final tokens<br><sup>{unsure} of {H * W} cells: top-1 "
             f"share below {UNSURE:g}</sup>"))
    return fig


def scatter(trace, amb: Ambiguity) -> go.Figure:
    """Each tested cell's tested value (pooled mass or acceptance probability, y) against its entropy
    (x); passed and failed cells as two marker traces (in that order), cell coordinates in customdata."""
    got = tested(trace)
    if got is None:
        return message(f"{trace.method} tests nothing: every token is sampled from the target, so there is no "
                       "test to set against the entropy", height=460)
    values, name, passed = got
    ok = np.isfinite(values)
    H, W = values.shape
    ii, jj = _cells(H, W)
    fig = go.Figure()
    for label, mask, colour in (("passed", ok & passed, theme.ACCEPTED), ("failed", ok & ~passed, theme.REJECTED)):
        custom = np.stack([ii[mask], jj[mask], np.round(amb.top1[mask], 4)], axis=-1)
        fig.add_trace(go.Scatter(
            x=amb.entropy[mask], y=values[mask], mode="markers", name=f"{label} ({int(mask.sum())})",
            marker=dict(color=colour, size=5, opacity=0.7), customdata=custom,
            hovertemplate="cell (%{customdata[0]}, %{customdata[1]})<br>entropy %{x:.4f} nats<br>" + name +
                          " %{y:.4g}<br>top-1 share %{customdata[2]}<extra></extra>"))
    tau = trace.params.get("tau") if name == "pooled mass" else None
    if tau:   # τ as a line across (layout shapes: add_hline costs more than the figure)
        fig.update_layout(shapes=[dict(type="line", xref="paper", x0=0, x1=1, y0=float(tau), y1=float(tau),
                                       line=dict(color="black", width=1, dash="dash"))],
                          annotations=[dict(text=f"τ = {tau:g}", xref="paper", x=1, y=float(tau), xanchor="right",
                                            yanchor="bottom", showarrow=False)])
    fig.update_xaxes(title="entropy of the target at the cell (nats)", range=[0, math.log(amb.vocab_size) * 1.02])
    fig.update_yaxes(title=name, range=[-0.03, 1.03])
    fig.update_layout(height=460, margin=dict(MARGIN, t=60), legend=dict(orientation="h", y=-0.2), title=dict(
        text=f"{name[0].upper() + name[1:]} against entropy<br><sup>{int(ok.sum())} tested cells (the test "
             "saw its own context)</sup>"))
    return fig


def _strength(r: float) -> str:
    a = abs(r)
    return "strongly" if a >= 0.5 else "moderately" if a >= 0.3 else "weakly" if a >= 0.1 else "hardly"


def sentence(trace, amb: Ambiguity) -> str:
    """One sentence of this run's own numbers (core.ambiguity.summary), then what the context was and
    what the measurement cost."""
    got = tested(trace)
    s = summary(amb.entropy, amb.top1, None if got is None else got[0])
    text = (f"Median entropy **{s['median_entropy']:.3f} nats** (at most log V = {math.log(amb.vocab_size):.3f}); "
            f"**{100 * s['unsure_share']:.1f}%** of the {s['cells']} cells put less than {UNSURE:g} of the "
            "target's mass on its top-1 token")
    if got is not None and not math.isnan(s["correlation"]):
        r = s["correlation"]
        text += (f"; over the {s['tested']} tested cells the {got[1]} and the entropy correlate "
                 f"{_strength(r)} (Pearson r = **{r:+.3f}**)")
    elif got is not None:
        text += (f"; over the {s['tested']} tested cells the {got[1]} and the entropy have no correlation to "
                 "speak of (one of them is constant, or too few cells were tested)")
    k = amb.sampling
    how = (f"CFG {k['cfg']:g}" + (f" (first {k['cfg_interval'] + 2} cells)" if k["cfg_interval"] >= 0 else "")
           + f", temperature {k['temperature']:g}, top-k {k['top_k'] or 'off'}, top-p {k['top_p']:g}")
    return (text + ".\n\n*Context: each cell's distribution given the run's final tokens before it (one cache-free, "
            f"teacher-forced pass of the target, {how}, as the run sampled); measured once for this run in "
            f"{amb.seconds:.2f} s.*")


def views(state: dict | None) -> tuple:
    """(heatmaps, scatter, sentence) of the stored run, in VIEWS order; the figures say why when the run
    was not measured (a replayed trace)."""
    amb = (state or {}).get("ambiguity")
    if amb is None:
        text = NOT_MEASURED if state else "Generate an image first."
        return message(text, height=460), message(text, height=460), text
    trace = state["trace"]
    return heatmaps(trace, amb), scatter(trace, amb), sentence(trace, amb)


def column(state) -> gr.Column:
    """The ambiguity view's column (with the codebook view): shown once a run is stored."""
    return gr.Column(visible=bool(state))
