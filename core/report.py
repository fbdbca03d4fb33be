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


def summary_file(folder: str | Path) -> Path:
    """FOLDER/summary.json of a finished run (or the summary file itself); SummaryError otherwise."""
    folder = Path(folder)
    f = folder / SUMMARY if folder.is_dir() else folder
    if not f.is_file():
        raise SummaryError(f"{folder} has no {SUMMARY}: the run has not finished (rerun its bench command to "
                           f"complete and merge it)" if folder.is_dir() else f"{folder} does not exist")
    return f


def read_folder(folder: str | Path) -> dict:
    """The merged result of a finished run folder (or of its summary.json)."""
    return read_summary(summary_file(folder).read_bytes())


def combine(results: list[dict]) -> dict:
    """Several runs of the same prompts, seed and model pair as one result, so that a sweep made in
    parts is drawn and judged together. Their ar rows must agree (ar is deterministic given the seed:
    the same passes, adherence and FD), else the ratios would not share a baseline; a spec measured in
    more than one run keeps its first run's figures."""
    first = results[0]
    for r in results[1:]:
        for key in ("prompts", "seed", "model"):
            if r.get(key) != first.get(key):
                raise SummaryError(f"the runs differ in {key} ({first.get(key)} and {r.get(key)}): only runs of "
                                   f"the same prompts, seed and model pair are drawn together")
        a, b = first["summary"].get("ar"), r["summary"].get("ar")
        if a is None or b is None or any(_num(a[k]) != _num(b[k]) for k in ("passes", "adherence", "frechet")):
            raise SummaryError("the runs' ar rows differ (passes, adherence or FD): they do not share a baseline")
    summary, specs = {}, []
    for r in results:
        for label in r["specs"]:
            if label not in summary:
                summary[label] = r["summary"][label]
                specs.append(label)
    return {**first, "specs": specs, "summary": summary, "records": sum(r.get("records", 0) for r in results),
            "workers": sorted({w for r in results for w in r.get("workers", [])})}


def write(result: dict, target: str | Path, title: str) -> Path:
    """Write the report page of a (combined) result to `target`."""
    write_atomic(Path(target), page(result, title))
    return Path(target)


def choose(result: dict, family: str = "mulo", adherence_margin: float = 0.01,
           frechet_margin: float = 0.3) -> tuple[str | None, dict[str, bool]]:
    """The operating-point rule: among the specs of `family`, the one with the most sequential-pass
    speedup whose adherence is at least ar's − `adherence_margin` and whose Fréchet distance is at most
    ar's + `frechet_margin`. Returns (that label or None, {label: meets both bounds}) over the family.
    A spec without a quality figure (fewer than 3 prompts gives no FD) never qualifies, and neither does
    one whose verifier rejected nothing in any run (every cell passed τ, as τ = 0 does): its output is
    the drafter's alone, whatever its quality, and it shows no speculative decoding."""
    summary = result["summary"]
    if "ar" not in summary:
        raise SummaryError("the rule compares with ar: the run has no ar spec")
    ar = summary["ar"]
    if _num(ar["adherence"]) is None or _num(ar["frechet"]) is None:
        raise SummaryError("ar has no adherence or Fréchet distance in this run (FD needs at least 3 prompts)")
    meets = {}
    for label, s in summary.items():
        if s["method"] != family:
            continue
        adh, fd = _num(s["adherence"]), _num(s["frechet"])
        meets[label] = (adh is not None and fd is not None and adh >= ar["adherence"] - adherence_margin
                        and fd <= ar["frechet"] + frechet_margin)
    rejects = {lb for lb in meets if summary[lb].get("passed") is None or summary[lb]["passed"] < 1.0}
    best = max((lb for lb, ok in meets.items() if ok and lb in rejects), key=lambda lb: summary[lb]["passes_speedup"],
               default=None)
    return best, meets


def _pareto(points: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """The points no other point beats on both x and y (higher is better on both), sorted by x."""
    out = [p for p in points if not any(q[0] >= p[0] and q[1] >= p[1] and (q[0], q[1]) != (p[0], p[1])
                                         for q in points)]
    return sorted(out)


def frontier_svg(result: dict, family: str = "mulo", adherence_margin: float = 0.01,
                 frechet_margin: float = 0.3, width: int = 760, height: int = 460) -> str:
    """A static figure for papers and READMEs (no script, no network): sequential-pass speedup over ar
    (x) against adherence (y) for every spec of `family`, ar's adherence − margin as a dashed line,
    filled markers for specs inside both quality bounds (adherence and Fréchet distance), hollow ones
    outside, the Pareto frontier as a line, the spec `choose` picks ringed and named, and every other
    method of the run as a labelled square beside them."""
    summary = result["summary"]
    best, meets = choose(result, family, adherence_margin, frechet_margin)
    pts = [(summary[lb]["passes_speedup"], summary[lb]["adherence"], lb) for lb in meets
           if _num(summary[lb]["adherence"]) is not None]
    others = [(s["passes_speedup"], s["adherence"], lb) for lb, s in summary.items()
              if s["method"] not in (family, "ar") and _num(s["adherence"]) is not None]
    ar = summary["ar"]
    floor = ar["adherence"] - adherence_margin
    if not pts:
        raise SummaryError(f"the run has no {family} spec with an adherence figure")
    xs = [p[0] for p in pts + others] + [1.0]
    ys = [p[1] for p in pts + others] + [floor, ar["adherence"]]
    x0, x1 = math.log10(min(xs)), math.log10(max(xs))              # x on a log axis: speedups multiply
    y0, y1 = min(ys), max(ys)
    padx, pady = (x1 - x0) * 0.08 or 0.1, (y1 - y0) * 0.1 or 0.01
    x0, x1, y0, y1 = x0 - padx, x1 + padx * 2.5, y0 - pady, y1 + pady
    L, R, T, B = 70, 20, 50, 60
    sx = lambda x: L + (math.log10(x) - x0) / (x1 - x0) * (width - L - R)      # noqa: E731
    sy = lambda y: T + (y1 - y) / (y1 - y0) * (height - T - B)     # noqa: E731
    e = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="15">{e(family)}: sequential-pass '
           f'speedup vs prompt adherence ({result["prompts"]} prompts, seed {result["seed"]})</text>']
    ticks = [m * 10 ** d for d in range(-2, 4) for m in (1, 2, 5) if x0 <= math.log10(m * 10 ** d) <= x1]
    for x in ticks:                                                # axes, ticks and grid
        out.append(f'<line x1="{sx(x):.1f}" y1="{T}" x2="{sx(x):.1f}" y2="{height - B}" stroke="#eee"/>'
                   f'<text x="{sx(x):.1f}" y="{height - B + 16}" text-anchor="middle">{x:g}×</text>')
    for i in range(6):
        y = y0 + (y1 - y0) * i / 5
        out.append(f'<line x1="{L}" y1="{sy(y):.1f}" x2="{width - R}" y2="{sy(y):.1f}" stroke="#eee"/>'
                   f'<text x="{L - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.3f}</text>')
    out.append(f'<rect x="{L}" y="{T}" width="{width - L - R}" height="{height - T - B}" fill="none" stroke="#999"/>')
    out.append(f'<text x="{(L + width - R) / 2}" y="{height - 24}" text-anchor="middle">fewer sequential passes '
               f'than ar (target + drafter), ×, log scale</text>')
    out.append(f'<text transform="translate(16 {(T + height - B) / 2}) rotate(-90)" text-anchor="middle">'
               f'prompt adherence (higher is better)</text>')
    out.append(f'<line x1="{L}" y1="{sy(floor):.1f}" x2="{width - R}" y2="{sy(floor):.1f}" stroke="#666" '
               f'stroke-dasharray="5 4"/><text x="{width - R - 4}" y="{sy(floor) - 5:.1f}" text-anchor="end" '
               f'fill="#666">ar − {adherence_margin:g} = {floor:.3f}</text>')
    out.append(f'<circle cx="{sx(1.0):.1f}" cy="{sy(ar["adherence"]):.1f}" r="5" fill="{FAMILIES["ar"]}"/>'
               f'<text x="{sx(1.0) + 8:.1f}" y="{sy(ar["adherence"]) + 4:.1f}" fill="{FAMILIES["ar"]}">ar</text>')
    for x, y, lb in others:                                        # other methods of the run, for comparison
        c = FAMILIES.get(summary[lb]["method"], OTHER)
        out.append(f'<rect x="{sx(x) - 4:.1f}" y="{sy(y) - 4:.1f}" width="8" height="8" fill="{c}">'
                   f'<title>{e(lb)}: {x:.2f}×, adherence {y:.3f}</title></rect>'
                   f'<text x="{sx(x) + 7:.1f}" y="{sy(y) + 14:.1f}" font-size="10" fill="{c}">{e(lb)}</text>')
    front = _pareto(pts)
    out.append('<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>'.format(
        FAMILIES.get(family, OTHER), " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y, _ in front)))
    colour = FAMILIES.get(family, OTHER)
    for x, y, lb in pts:
        fill = colour if meets[lb] else "white"
        out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4.5" fill="{fill}" stroke="{colour}" '
                   f'stroke-width="1.5"><title>{e(lb)}: {x:.2f}×, adherence {y:.3f}, FD '
                   f'{summary[lb]["frechet"]:.2f}</title></circle>')
    for x, y, lb in front:                                          # labels right of a point, or left near the edge
        right = sx(x) < L + 0.6 * (width - L - R)
        out.append(f'<text x="{sx(x) + (7 if right else -7):.1f}" y="{sy(y) - 6:.1f}" font-size="10" fill="#333" '
                   f'text-anchor="{"start" if right else "end"}">{e(_knobs(lb))}</text>')
    if best is not None:
        x, y = summary[best]["passes_speedup"], summary[best]["adherence"]
        out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="10" fill="none" stroke="#d62728" '
                   f'stroke-width="2"/><text x="{sx(x) - 12:.1f}" y="{sy(y) + 24:.1f}" text-anchor="end" '
                   f'fill="#d62728">chosen: {e(_knobs(best))}</text>')
    out.append(f'<text x="{L}" y="{height - 4}" font-size="11" fill="#333">filled: adherence ≥ ar − {adherence_margin:g} and '
               f'FD ≤ ar + {frechet_margin:g} (ar FD {ar["frechet"]:.2f}); hollow: outside; line: Pareto frontier'
               f'{"; squares: other methods" if others else ""}</text></svg>')
    return "\n".join(out)
