"""Trace -> Plotly figures, as pure functions. Every figure has an explicit height (Gradio renders
autosized Plotly figures unreliably) and uses the palette of app.theme."""
from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from core.trace import PHASES

from . import render, theme
from .quality import GAP, SHARPNESS
from .render import Tests, Verdict

LOG_FLOOR = -4.0      # pooled mass is shown on a log10 scale clipped here (1e-4)
MARGIN = dict(l=10, r=10, t=40, b=10)


def message(text: str, height: int = 320) -> go.Figure:
    """An empty figure that says why there is nothing to plot."""
    fig = go.Figure()
    fig.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper",
                       font=dict(size=14))
    fig.update_layout(height=height, margin=MARGIN, xaxis_visible=False, yaxis_visible=False)
    return fig


def _log(x):
    return np.clip(np.log10(np.maximum(x, 1e-12)), LOG_FLOOR, 0.0)


def heatmap(trace, v: Verdict | None, t: Tests | None = None) -> go.Figure:
    """mulo: pooled probability per target cell (log scale), red below τ and green at or above it,
    the τ contour drawn (none at τ = 0, where every cell passes); hover gives position, proposal
    token, pooled mass, passed τ or not, kept or resampled and the island. sd, cool, sjd and the tree
    methods: the probability of acceptance of each tested position and whether its draft passed."""
    if v is None and t is not None:
        return _test_heatmap(trace, t)
    if v is None:
        return message(f"{trace.method} drafts and verifies nothing: each token is sampled from the target "
                       f"once, so there is no acceptance to map")
    H, W = v.pooled.shape
    t = (max(_log(v.tau), LOG_FLOOR) - LOG_FLOOR) / -LOG_FLOOR   # tau on the [0, 1] colour axis
    below, above = theme.REJECTED, theme.ACCEPTED
    scale = [[0.0, below], [t - 1e-6, "#fde0dd"], [t, "#c7e9c0"], [1.0, above]] if 0 < t < 1 \
        else [[0.0, "#c7e9c0"], [1.0, above]] if t <= 0 else [[0.0, below], [1.0, "#fde0dd"]]
    proposal = np.asarray(trace.proposal) if trace.proposal is not None else np.full((H, W), -1)
    passed = np.where(v.accepted, "passed τ", np.where(np.isnan(v.pooled), "not verified", "below τ"))
    fate = np.where(~v.resample, "kept", np.where(v.rejected, "resampled, island ", "swept into island "))
    fate = np.where(v.resample, np.char.add(fate.astype(str), v.islands.astype(str)), fate)
    custom = np.stack([proposal.astype(object), np.round(v.pooled, 5).astype(object), passed.astype(object),
                       fate.astype(object)], axis=-1)
    fig = go.Figure(go.Heatmap(
        z=_log(v.pooled), zmin=LOG_FLOOR, zmax=0.0, colorscale=scale, customdata=custom, name="pooled",
        hovertemplate="cell (%{y}, %{x})<br>proposal token %{customdata[0]}<br>pooled mass %{customdata[1]}"
                      "<br>%{customdata[2]}<br>%{customdata[3]}<extra></extra>",
        colorbar=_pooled_colorbar(v.tau)))
    if v.tau > 0:
        fig.add_trace(go.Contour(z=_log(v.pooled), contours=dict(start=_log(v.tau), end=_log(v.tau), size=1,
                                                                 coloring="none"),
                                 line=dict(color="black", width=2), showscale=False, hoverinfo="skip",
                                 name=f"τ = {v.tau:g}", showlegend=True))
    fig.update_yaxes(autorange="reversed", scaleanchor="x", constrain="domain", title="row i")
    fig.update_xaxes(constrain="domain", title="column j")
    n_res = int(v.resample.sum())
    merged = merged_islands(v.islands)   # a third line, said only when one island covers most of the grid
    fig.update_layout(height=420 + 36 * bool(merged), margin=dict(MARGIN, t=60 + 36 * bool(merged), r=48), title=dict(
        text=f"Pooled mass vs τ = {v.tau:g}: {int(v.accepted.sum())} of {H * W} passed τ"
             f"<br><sup>{H * W - n_res} kept, {n_res} resampled in {len(np.unique(v.islands[v.islands > 0]))} "
             f"island(s)</sup>" + (f"<br><sup>{merged}</sup>" if merged else ""), x=0.01, xanchor="left"),
        legend=dict(orientation="h", y=-0.18),
        modebar=dict(orientation="v"))
    return fig


PIN = "pinned cell"   # the name of the pinned cell's frames on a heatmap


def pin(fig: go.Figure, i: int, j: int) -> go.Figure:
    """The heatmap with cell (i, j) framed (white under black), as the proposal marks it."""
    for colour, width in (("white", 5), ("black", 2)):
        fig.add_shape(type="rect", x0=j - 0.5, x1=j + 0.5, y0=i - 0.5, y1=i + 0.5, name=PIN,
                      line=dict(color=colour, width=width), fillcolor="rgba(0,0,0,0)", layer="above")
    return fig


def merged_islands(islands: np.ndarray) -> str:
    """What the heatmap's title adds when one island covers most of the grid: the islands grown around
    the rejected cells merged, so most of the grid was redrawn, not a few local spots."""
    ids, sizes = np.unique(islands[islands > 0], return_counts=True)
    share = sizes.max() / islands.size if len(ids) else 0.0
    return f"the islands merged: the largest covers {100 * share:.0f}% of the grid" if share > 0.5 else ""


def _pooled_colorbar(tau: float) -> dict:
    """Decade ticks and a τ tick; a decade tick too close to τ's is left out so the labels never meet."""
    t = float(_log(tau)) if tau > 0 else LOG_FLOOR
    ticks = [(v, txt) for v, txt in zip((-4, -3, -2, -1, 0), ("1e-4", "1e-3", "0.01", "0.1", "1")) if abs(v - t) > 0.3]
    ticks.append((t, f"τ={tau:g}"))
    return dict(title=dict(text="pooled mass", side="right"), tickvals=[v for v, _ in ticks],
                ticktext=[txt for _, txt in ticks])


def _test_heatmap(trace, t: Tests) -> go.Figure:
    H, W = t.prob.shape
    word = np.where(np.isnan(t.prob), "never tested (drawn from p)", np.where(t.passed, "passed: draft kept",
                                                                                 "failed: resampled"))
    skipped = render.unverified(trace) if trace.method == "vvs" else None
    if skipped is not None:   # cells committed by a cycle the target never checked
        word = np.where(skipped, "committed unverified (drawn from the head's q)", word)
    custom = np.stack([np.round(t.prob, 4).astype(object), word.astype(object)], axis=-1)
    fig = go.Figure(go.Heatmap(
        z=t.prob, zmin=0.0, zmax=1.0, customdata=custom, name="P(accept)",
        colorscale=[[0.0, theme.REJECTED], [0.5, "#fde0dd"], [0.5001, "#c7e9c0"], [1.0, theme.ACCEPTED]],
        hovertemplate="cell (%{y}, %{x})<br>probability of acceptance %{customdata[0]}<br>%{customdata[1]}"
                      "<extra></extra>", colorbar=dict(title=dict(text="P(accept)", side="right"))))
    fi, fj = np.nonzero(t.resampled)
    fig.add_trace(go.Scatter(x=fj, y=fi, mode="markers", marker=dict(symbol="x", color="black", size=6),
                             name="failed: resampled", hoverinfo="skip"))
    fig.update_yaxes(autorange="reversed", scaleanchor="x", constrain="domain", title="row i", range=[H - 0.5, -0.5])
    fig.update_xaxes(constrain="domain", title="column j", range=[-0.5, W - 0.5])
    tested = int((~np.isnan(t.prob)).sum())
    every = (trace.totals or {}).get("passed_fraction") if hasattr(trace, "totals") else None
    shares = (f"<br><sup>last test per position; the table's {100 * every:.1f}% counts every test</sup>"
              if every is not None else "")
    fig.update_layout(height=460, margin=dict(MARGIN, t=100, r=48), legend=dict(orientation="h", y=-0.18), title=dict(
        text=f"Probability of acceptance<br><sup>{t.label}</sup><br><sup>{int(t.passed.sum())} of {tested} tested drafts "
             f"passed; {int(t.resampled.sum())} resampled; {H * W - tested} never tested</sup>"
             + shares, x=0.01, xanchor="left", y=1, yanchor="top", pad=dict(t=8)),
        modebar=dict(orientation="v"))
    return fig


MAX_BARS = 240   # bars per lane: beyond this many phase changes the lane is drawn in equal slices of time


def _segments(steps: list[dict]) -> list[tuple]:
    """Merge consecutive steps of one phase: (phase, start_ms, length_ms, steps, nfe)."""
    out, t = [], 0.0
    for s in steps:
        if out and out[-1][0] == s["phase"]:
            ph, start, length, n, nfe = out[-1]
            out[-1] = (ph, start, length + s["wall_ms"], n + 1, nfe + s["nfe"])
        else:
            out.append((s["phase"], t, s["wall_ms"], 1, s["nfe"]))
        t += s["wall_ms"]
    return out


def _slices(steps: list[dict], most: int) -> list[tuple]:
    """The run cut into `most` equal slices of wall clock, each drawn in the phase that took most of
    it, consecutive slices of one phase merged: (phase, start_ms, length_ms, steps, nfe). Costs one
    pass over the steps, however many there are."""
    ms = np.array([s["wall_ms"] for s in steps], dtype=np.float64)
    ends = np.cumsum(ms)
    total = float(ends[-1]) if len(ends) else 0.0
    if total <= 0.0:
        return _segments(steps)[:most]
    edges = np.linspace(0.0, total, most + 1)
    bounds = np.concatenate([[0.0], ends])
    phase_of = np.array([PHASE_INDEX[s["phase"]] for s in steps])
    share = np.zeros((most, len(PHASE_INDEX)))            # ms of each phase inside each slice
    for p in np.unique(phase_of):
        spent = np.concatenate([[0.0], np.cumsum(np.where(phase_of == p, ms, 0.0))])
        share[:, p] = np.diff(np.interp(edges, bounds, spent))
    home = np.minimum(((ends - ms / 2) / total * most).astype(int), most - 1)   # the slice of each step's middle
    n_steps = np.bincount(home, minlength=most)
    nfe = np.bincount(home, weights=[s["nfe"] for s in steps], minlength=most)
    out = []
    for k, p in enumerate(share.argmax(axis=1)):
        if out and out[-1][0] == LANE_PHASES[p]:
            ph, start, length, n, f = out[-1]
            out[-1] = (ph, start, length + edges[k + 1] - edges[k], n + int(n_steps[k]), f + int(nfe[k]))
        else:
            out.append((LANE_PHASES[p], float(edges[k]), float(edges[k + 1] - edges[k]), int(n_steps[k]), int(nfe[k])))
    return out


LANE_PHASES = (*PHASES, "gap")   # "gap": time another level's lane spends (not drawn)
PHASE_INDEX = {p: i for i, p in enumerate(LANE_PHASES)}


def timeline(trace, baseline=None, most: int = MAX_BARS) -> go.Figure:
    """Phases of the run on one wall-clock axis, one lane per method (the ar baseline below it), and
    one lane per level when the drafter ran a method of its own (draft_method). One
    Plotly trace per phase and at most `most` bars per lane, so the figure's size follows the phases
    of the run, not its number of steps."""
    lanes = _level_lanes(trace) + ([("ar baseline", baseline.steps)] if baseline is not None else [])
    bars: dict[str, list] = {}
    for lane, steps in lanes:
        segments = _segments(steps)
        if len(segments) > most:
            segments = _slices(steps, most)
        for phase, start, length, n, nfe in segments:
            if phase != "gap":
                bars.setdefault(phase, []).append((lane, start, length, n, nfe))
    fig = go.Figure()
    for phase, rows in bars.items():
        lane, start, length, n, nfe = zip(*rows)
        fig.add_trace(go.Bar(
            x=length, base=start, y=lane, orientation="h", name=phase, marker_color=theme.PHASES[phase],
            customdata=np.stack([n, nfe], axis=-1),
            hovertemplate=f"{phase}: %{{customdata[0]}} step(s), %{{customdata[1]}} NFE, %{{x:.1f}} ms"
                          "<extra>%{y}</extra>"))
    fig.update_layout(barmode="overlay", height=150 + 60 * len(lanes), margin=dict(MARGIN, t=70),
                      xaxis_title="wall clock (ms)", title=dict(text="Where the time goes" + (
                          " (a cascade of scales: no published method has one)"
                          if getattr(trace, "levels", None) and len(trace.grid["levels"]) > 2 else ""), y=0.97),
                      yaxis=dict(autorange="reversed", categoryorder="array", categoryarray=[n for n, _ in lanes]),
                      legend=dict(orientation="h", x=0, y=1.02, yanchor="bottom", xanchor="left"))
    return fig


def _level_lanes(trace) -> list[tuple[str, list[dict]]]:
    """(lane, steps) for the run: one lane, or one per level of grid.levels when the drafter ran a
    method of its own; a level's lane keeps the run's clock (the other levels' steps are gaps)."""
    if not getattr(trace, "levels", None):
        return [(trace.method, trace.steps)]
    lanes = []
    for lv, (h, w) in enumerate(trace.grid["levels"]):
        gap = lambda ms: dict(phase="gap", model=None, nfe=0, wall_ms=ms, cells=[])  # noqa: E731
        steps = [s if s.get("level", 0) == lv else gap(s["wall_ms"]) for s in trace.steps]
        lanes.append((f"{trace.method} level {lv} ({h}x{w})", steps))
    return lanes


def compare_bars(rows: list[dict], measure: str) -> go.Figure:
    """Sequential passes (target + drafter), wall time, kept fraction, prompt adherence (named by
    `measure`), sharpness ÷ ar and log-lik gap per method, side by side."""
    panels = (("passes_total", "passes (target + drafter)"), ("wall_ms", "wall clock (ms)"),
              ("kept_fraction", "kept (not resampled)"), ("quality", measure),
              ("sharpness", SHARPNESS), ("loglik_gap", f"{GAP} (nats/token)"))
    fig = make_subplots(rows=3, cols=2, subplot_titles=[t for _, t in panels], vertical_spacing=0.14,
                        horizontal_spacing=0.12)
    methods = [r["method"] for r in rows]
    for n, (key, _) in enumerate(panels):
        vals = [(r["target_nfe"] + r["drafter_nfe"]) if key == "passes_total" else
                (r[key] if r[key] is not None else 0) for r in rows]
        fig.add_trace(go.Bar(x=methods, y=vals, marker_color=theme.PHASES["verify"], showlegend=False,
                             hovertemplate="%{x}: %{y}<extra></extra>"), row=n // 2 + 1, col=n % 2 + 1)
    fig.update_annotations(font_size=13)
    # thirteen method names under each panel: upright, so that neighbours never overlap
    fig.update_xaxes(tickangle=-90, tickfont_size=11, automargin=True)
    fig.update_layout(height=860, margin=dict(MARGIN, t=50))
    return fig


SYMBOLS = ("circle", "square", "diamond", "triangle-up", "cross", "x", "star", "hexagon")
SWEEP_COLOURS = {"ar": theme.PHASES["decode"], "mulo": theme.ACCEPTED, "zipar": theme.PHASES["draft"]}


def sweep_figure(points: list[dict], measure: str) -> go.Figure:
    """Speedup in sequential passes (target + drafter) over ar (x, shared) against prompt adherence
    (top, named by `measure`) and against the log-lik gap to ar's image (bottom, the detail axis: ar
    at 0, a dashed line there): a line per method, each point its own marker and legend entry
    (labels written on the plot would pile up where points are close); the hover adds sharpness ÷ ar."""
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.1)
    _sweep_panel(fig, points, 1, "quality", measure)
    _sweep_panel(fig, points, 2, "loglik_gap", f"{GAP} (nats/token)")
    fig.add_hline(y=0.0, line_dash="dash", line_color="#666", row=2, col=1)
    ys = [p["quality"] for p in points]
    pad = max(0.02, (max(ys) - min(ys)) * 0.3) if ys else 0.1
    fig.update_xaxes(type="log")
    fig.update_layout(height=620, margin=dict(MARGIN, l=60, r=20),
                      xaxis2_title="speedup over ar (sequential passes, target + drafter; log)",
                      yaxis_title=measure, yaxis_range=[min(ys) - pad, max(ys) + pad] if ys else None,
                      yaxis2_title=f"{GAP} to ar (nats/token)",
                      title="Faster is right, better is up", legend=dict(title="one run each"))
    return fig


def _sweep_panel(fig: go.Figure, points: list[dict], row: int, key: str, what: str) -> None:
    """One panel of the sweep: points[key] against speedup; the legend entries belong to the top panel."""
    for method in dict.fromkeys(p["method"] for p in points):
        pts = sorted((p for p in points if p["method"] == method), key=lambda p: p["speedup"])
        colour = SWEEP_COLOURS.get(method)
        fig.add_trace(go.Scatter(x=[p["speedup"] for p in pts], y=[p[key] for p in pts], mode="lines",
                                 line=dict(color=colour), showlegend=False, hoverinfo="skip",
                                 legendgroup=method), row=row, col=1)
        for n, p in enumerate(pts):
            name = p["label"] if method == "ar" else f"{method} {p['label']}"
            fig.add_trace(go.Scatter(
                x=[p["speedup"]], y=[p[key]], mode="markers", name=name, legendgroup=method, showlegend=row == 1,
                marker=dict(size=11, color=colour, symbol=SYMBOLS[n % len(SYMBOLS)], line=dict(width=1, color="white")),
                hovertemplate=f"{name}<br>passes speedup %{{x:.2f}}×<br>{what} %{{y:.3f}}<br>"
                              f"{SHARPNESS} {p['sharpness']:.2f}<extra></extra>"), row=row, col=1)
