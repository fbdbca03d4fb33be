"""A benchmark's result as something a person reads at a glance: Plotly figures and one self-contained
HTML page (`python -m core report DIR` writes DIR/report.html, Plotly's script inlined, no network).

Figures, as pure functions of a merged summary (core.bench.merge / summary.json): the speed–quality
frontier (sequential passes and wall-clock, each as a speedup over ar, against adherence and Fréchet
distance; one trace per method family), per-method bars, per-phase time, and the table. The app's
Sweep tab draws the same frontier from an uploaded summary. Nothing here runs a model.
"""
from __future__ import annotations

import html
import math
from pathlib import Path

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .bench import SummaryError, read_summary
from .runfolder import SUMMARY, write_atomic
from .trace import PHASES

# the explorer's palette (app.theme): a colour per method family and per phase
FAMILIES = {"ar": "#666666", "mulo": "#1b9e77", "zipar": "#7570b3", "sd": "#1f78b4", "lantern": "#e7298a",
            "sjd": "#ff7f0e"}
PHASE_COLOURS = {"draft": "#7570b3", "upsample": "#66a61e", "verify": "#1f78b4", "resample": "#ff9f1c",
                 "refresh": "#a6761d", "decode": "#666666"}
OTHER = "#17becf"
MARGIN = dict(l=10, r=10, t=60, b=10)
SPEEDS = (("passes_speedup", "sequential passes (target + drafter)"), ("wall_speedup", "wall-clock"))
QUALITIES = (("adherence", "prompt adherence (higher is better)"), ("frechet", "Fréchet distance (lower is better)"))


def _num(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _families(result: dict) -> dict[str, list[str]]:
    fams: dict[str, list[str]] = {}
    for label, s in result["summary"].items():
        fams.setdefault(s["method"], []).append(label)
    return fams


def _knobs(label: str) -> str:
    """A point's label on the frontier: the spec's overrides ('tau=0.1'), or the method's name alone."""
    name, _, knobs = label.partition(":")
    return knobs.replace(":", " ") or name


def frontier(result: dict) -> go.Figure:
    """Speedup over ar (x, log: right is faster) against quality (y: up is better, Fréchet axis reversed):
    passes and wall-clock side by side, adherence above Fréchet distance; one trace per method family."""
    fig = make_subplots(rows=2, cols=2, horizontal_spacing=0.08, vertical_spacing=0.14,
                        subplot_titles=[f"{q[1].split(' (')[0]} vs {s[1]}" for q in QUALITIES for s in SPEEDS])
    summary = result["summary"]
    for method, labels in _families(result).items():
        colour = FAMILIES.get(method, OTHER)
        for row, (qkey, qname) in enumerate(QUALITIES, start=1):
            for col, (skey, sname) in enumerate(SPEEDS, start=1):
                pts = sorted(labels, key=lambda lb: summary[lb][skey] if _num(summary[lb][skey]) else 0)
                fig.add_trace(go.Scatter(
                    x=[_num(summary[lb][skey]) for lb in pts], y=[_num(summary[lb][qkey]) for lb in pts],
                    mode="lines+markers+text", name=method, legendgroup=method, showlegend=(row, col) == (1, 1),
                    text=pts, texttemplate=[_knobs(lb) for lb in pts], textposition="top center",
                    textfont=dict(size=10), marker=dict(size=10, color=colour), line=dict(color=colour),
                    hovertemplate=f"%{{text}}<br>{sname}: %{{x:.2f}}× ar<br>{qname.split(' (')[0]}: "
                                  "%{y:.3f}<extra></extra>"), row=row, col=col)
                fig.update_xaxes(type="log", title_text=f"{sname}: speedup over ar (log)", row=row, col=col)
                fig.update_yaxes(title_text=qname, row=row, col=col,
                                 autorange="reversed" if qkey == "frechet" else True)
    fig.update_layout(height=720, margin=MARGIN, legend_title_text="method",
                      title=f"Speed–quality frontier: {result['prompts']} prompts, seed {result['seed']} "
                            f"(right is faster, up is better)")
    return fig


def bars(result: dict) -> go.Figure:
    """Per spec: passes and wall speedups over ar, adherence, Fréchet distance."""
    keys = (("passes_speedup", "passes speedup (×)"), ("wall_speedup", "wall speedup (×)"),
            ("adherence", "adherence"), ("frechet", "Fréchet distance"))
    fig = make_subplots(rows=1, cols=4, subplot_titles=[name for _, name in keys])
    labels = list(result["summary"])
    colours = [FAMILIES.get(result["summary"][lb]["method"], OTHER) for lb in labels]
    for col, (key, name) in enumerate(keys, start=1):
        fig.add_trace(go.Bar(x=labels, y=[_num(result["summary"][lb][key]) for lb in labels], marker_color=colours,
                             showlegend=False, hovertemplate=f"%{{x}}<br>{name}: %{{y:.3f}}<extra></extra>"),
                      row=1, col=col)
    fig.update_layout(height=380, margin=MARGIN, title="Per method")
    return fig


def phases(result: dict) -> go.Figure:
    """Mean time per run in each phase, stacked per spec."""
    fig = go.Figure()
    labels = list(result["summary"])
    for p in PHASES:
        ys = [result["summary"][lb]["phase_ms"].get(p, 0.0) for lb in labels]
        if any(ys):
            fig.add_trace(go.Bar(name=p, x=labels, y=ys, marker_color=PHASE_COLOURS[p],
                                 hovertemplate=f"%{{x}}<br>{p}: %{{y:.0f}} ms<extra></extra>"))
    fig.update_layout(barmode="stack", height=380, margin=MARGIN, yaxis_title="ms per run (mean)",
                      title="Where the time goes, per phase")
    return fig


COLUMNS = (("passes", "passes", "{:.0f}"), ("passes_speedup", "passes ×", "{:.2f}"), ("wall_ms", "wall s", None),
           ("wall_speedup", "wall ×", "{:.2f}"), ("target_nfe", "target NFE", "{:.0f}"),
           ("drafter_nfe", "drafter NFE", "{:.0f}"), ("target_nfe_speedup", "target NFE ×", "{:.2f}"),
           ("fed_per_pass", "tokens / target pass", "{:.1f}"),
           ("passed", "passed", "{:.2f}"), ("kept", "kept", "{:.2f}"), ("adherence", "adherence", "{:.3f}"),
           ("frechet", "Fréchet", "{:.2f}"))


def table_html(result: dict) -> str:
    def cell(s, key, fmt):
        v = _num(s.get(key))
        if v is None:
            return "–"
        return f"{v / 1000:.2f}" if key == "wall_ms" else fmt.format(v)
    head = "".join(f"<th>{html.escape(name)}</th>" for _, name, _ in COLUMNS)
    rows = "".join(f"<tr><td>{html.escape(label)}</td>" + "".join(f"<td>{cell(s, k, f)}</td>" for k, _, f in COLUMNS)
                   + "</tr>" for label, s in result["summary"].items())
    return f'<table id="figures"><thead><tr><th>spec</th>{head}</tr></thead><tbody>{rows}</tbody></table>'


STYLE = """body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1400px; color: #222; }
table { border-collapse: collapse; font-size: 0.92em; } td, th { padding: 4px 10px; text-align: right; }
td:first-child, th:first-child { text-align: left; font-family: monospace; }
tbody tr:nth-child(odd) { background: #f4f4f8; } .note { color: #555; }"""


def page(result: dict, title: str) -> str:
    """One self-contained HTML page: Plotly's script once, inlined; then every figure and the table."""
    figs = [("frontier", frontier(result)), ("bars", bars(result)), ("phases", phases(result))]
    parts = [fig.to_html(full_html=False, include_plotlyjs=(n == 0), div_id=name, config=dict(displaylogo=False))
             for n, (name, fig) in enumerate(figs)]
    workers = result.get("workers", [])
    facts = (f"{result['prompts']} held-out prompts from seed {result['seed']}, model pair "
             f"{html.escape(str(result.get('model', '?')))}, {result.get('records', '?')} records measured by "
             f"{len(workers)} worker(s). Speedups are ratios against ar on the same prompts and seeds; the headline "
             f"counts sequential passes of target and drafter; wall ratios pair runs measured on one worker.")
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
            f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1><p class=note>{facts}</p>"
            f"{parts[0]}{parts[1]}{parts[2]}<h2>Figures</h2>{table_html(result)}"
            f"<p class=note>Workers: {html.escape(', '.join(workers))}</p></body></html>")


def write(folder: str | Path, out: str | Path | None = None) -> Path:
    """Read FOLDER/summary.json and write the report (default FOLDER/report.html)."""
    folder = Path(folder)
    f = folder / SUMMARY if folder.is_dir() else folder
    if not f.is_file():
        raise SummaryError(f"{folder} has no {SUMMARY}: the run has not finished (rerun its bench command to "
                           f"complete and merge it)" if folder.is_dir() else f"{folder} does not exist")
    result = read_summary(f.read_bytes())
    target = Path(out) if out else f.parent / "report.html"
    write_atomic(target, page(result, f"Benchmark report: {f.parent.name}"))
    return target
