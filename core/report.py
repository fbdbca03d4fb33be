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

from .bench import SummaryError, floors_text, read_summary
from .runfolder import SUMMARY, write_atomic
from .trace import MAX_BYTES, PHASES

# the explorer's palette (app.theme): a colour per method family and per phase
FAMILIES = {"ar": "#666666", "mulo": "#1b9e77", "zipar": "#7570b3", "sd": "#1f78b4", "lantern": "#e7298a",
            "sjd": "#ff7f0e"}
PHASE_COLOURS = {"draft": "#7570b3", "upsample": "#66a61e", "verify": "#1f78b4", "resample": "#ff9f1c",
                 "refresh": "#a6761d", "decode": "#666666"}
OTHER = "#17becf"
MARGIN = dict(l=10, r=10, t=60, b=10)
SPEEDS = (("passes_speedup", "sequential passes (target + drafter)"), ("wall_speedup", "wall-clock"))
# every quality yardstick of a summary row: (field, name, which way is better: 1 up, -1 down, 0 toward its floor)
QUALITIES = (("adherence", "prompt adherence (higher is better)", 1),
             ("frechet", "Fréchet distance to the data (lower is better)", -1),
             ("fd_ar", "detail FD to ar's samples (lower is better)", -1),
             ("sharpness", "sharpness ÷ ar (1 is ar's)", 0),
             ("loglik_gap", "log-lik gap to ar, nats/token (0 is ar's)", 0))


def _short(name: str) -> str:
    return name.split(" (")[0]


def _bound_lines(result: dict, key: str) -> list[float]:
    """The bound(s) of a yardstick in this run (floors), as the values a dashed line marks."""
    b = (result.get("floors") or {}).get(key) or {}
    return [b[side] for side in ("low", "high") if side in b]


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
    """Speedup over ar (x, log: right is faster) against each quality yardstick (one row each; a dashed
    line at each bound of the run): sequential passes and wall-clock side by side; one trace per method
    family. Each panel's title names the summary fields it plots."""
    rows = [q for q in QUALITIES if any(_num(s.get(q[0])) is not None for s in result["summary"].values())]
    fig = make_subplots(rows=len(rows), cols=2, horizontal_spacing=0.08, vertical_spacing=0.3 / len(rows),
                        subplot_titles=[f"{_short(q[1])} vs {s[1]}" for q in rows for s in SPEEDS])
    summary = result["summary"]
    for method, labels in _families(result).items():
        colour = FAMILIES.get(method, OTHER)
        for row, (qkey, qname, way) in enumerate(rows, start=1):
            for col, (skey, sname) in enumerate(SPEEDS, start=1):
                pts = sorted(labels, key=lambda lb: summary[lb][skey] if _num(summary[lb][skey]) else 0)
                fig.add_trace(go.Scatter(
                    x=[_num(summary[lb][skey]) for lb in pts], y=[_num(summary[lb].get(qkey)) for lb in pts],
                    mode="lines+markers+text", name=method, legendgroup=method, showlegend=(row, col) == (1, 1),
                    text=pts, texttemplate=[_knobs(lb) for lb in pts], textposition="top center",
                    textfont=dict(size=10), marker=dict(size=10, color=colour), line=dict(color=colour),
                    meta=[skey, qkey],
                    hovertemplate=f"%{{text}}<br>{sname}: %{{x:.2f}}× ar<br>{_short(qname)}: "
                                  "%{y:.3f}<extra></extra>"), row=row, col=col)
                fig.update_xaxes(type="log", title_text=f"{sname}: speedup over ar (log)", row=row, col=col)
                fig.update_yaxes(title_text=_short(qname), row=row, col=col,
                                 autorange="reversed" if way < 0 else True)
    for row, (qkey, _, _) in enumerate(rows, start=1):
        for y in _bound_lines(result, qkey):
            for col in (1, 2):
                fig.add_hline(y=y, line_dash="dash", line_color="#666", row=row, col=col)
    fig.update_layout(height=300 * len(rows) + 120, margin=MARGIN, legend_title_text="method",
                      title=f"Speed–quality frontier: {result['prompts']} prompts, seed {result['seed']} "
                            f"(right is faster; dashed: the bounds of this run)")
    return fig


def bars(result: dict) -> go.Figure:
    """Per spec: passes and wall speedups over ar, adherence, Fréchet distance."""
    keys = (("passes_speedup", "passes speedup (×)"), ("wall_speedup", "wall speedup (×)"),
            *((q, _short(name)) for q, name, _ in QUALITIES))
    fig = make_subplots(rows=1, cols=len(keys), subplot_titles=[name for _, name in keys])
    labels = list(result["summary"])
    colours = [FAMILIES.get(result["summary"][lb]["method"], OTHER) for lb in labels]
    for col, (key, name) in enumerate(keys, start=1):
        fig.add_trace(go.Bar(x=labels, y=[_num(result["summary"][lb].get(key)) for lb in labels], marker_color=colours,
                             showlegend=False, hovertemplate=f"%{{x}}<br>{name}: %{{y:.3f}}<extra></extra>"),
                      row=1, col=col)
    fig.update_layout(height=420, margin=MARGIN, title="Per method")
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
           ("frechet", "FD to the data", "{:.2f}"), ("fd_ar", "detail FD to ar", "{:.2f}"),
           ("sharpness", "sharpness ÷ ar", "{:.2f}"), ("loglik_gap", "log-lik gap", "{:+.3f}"),
           ("inside", "inside every bound", None))


def table_html(result: dict) -> str:
    def cell(s, key, fmt):
        if key == "inside":
            return {True: "yes", False: "no"}.get((s.get("inside") or {}).get("all"), "–")
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
            f"<h2>Noise floors, bounds and the blurred control</h2><pre id=floors>{html.escape(floors_text(result))}</pre>"
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
    """The merged result of a finished run folder (or of its summary.json); a file too large to be a
    summary is refused before it is read."""
    f = summary_file(folder)
    with open(f, "rb") as fh:
        return read_summary(fh.read(MAX_BYTES + 1))


def combine(results: list[dict]) -> dict:
    """Several runs of the same prompts, seed and model pair as one result, so that a sweep made in
    parts is drawn and judged together. Their ar rows must agree (ar and its reference are deterministic
    given the seed: the same passes, adherence, FDs and log-likelihood, so the same floors), else the
    ratios and bounds would not share a baseline; a spec measured in more than one run keeps its first
    run's figures, and the floors and controls are the first run's."""
    first = results[0]
    for r in results[1:]:
        for key in ("prompts", "seed", "model"):
            if r.get(key) != first.get(key):
                raise SummaryError(f"the runs differ in {key} ({first.get(key)} and {r.get(key)}): only runs of "
                                   f"the same prompts, seed and model pair are drawn together")
        a, b = first["summary"].get("ar"), r["summary"].get("ar")
        if a is None or b is None or any(_num(a.get(k)) != _num(b.get(k)) for k in ("passes", "adherence", "frechet", "fd_ar",
                                                                                 "loglik")):
            raise SummaryError("the runs' ar rows differ (passes, adherence, FD or log-likelihood): they do not share "
                               "a baseline")
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


IMAGE_BOUNDS = ("adherence", "frechet", "fd_ar", "sharpness")   # what a person or a classifier sees in the images
KEPT_FLOOR = 0.01   # a spec that keeps less of its draft than this redrew the image: no speculative decoding


def choose(result: dict, family: str = "mulo", bounds: tuple | None = None) -> tuple[str | None, dict[str, bool]]:
    """The operating-point rule: among the specs of `family`, the one with the fewest sequential passes
    (target + drafter; the most passes speedup) inside every bound of the run (core.yardsticks: each
    yardstick within FLOOR_SPREADS spreads of its noise floor, ar against ar at other seeds), or inside
    the bounds named in `bounds` only (IMAGE_BOUNDS: every yardstick but the log-lik gap). Returns
    (that label or None, {label: inside those bounds} over the family). Two kinds of spec never
    qualify, since neither shows speculative decoding: one whose verifier rejected nothing in any run
    (every cell passed τ, as τ = 0 does: its output is the drafter's alone), and one that kept less
    than KEPT_FLOOR of the cells (the target redrew the image; the draft bought nothing)."""
    summary = result["summary"]
    if "ar" not in summary:
        raise SummaryError("the rule compares with ar: the run has no ar spec")
    if "fd_ar" not in (result.get("floors") or {}):
        raise SummaryError("the run has no noise floors, so no bounds (a run needs at least 3 prompts)")

    def ok(s) -> bool:
        inside = s.get("inside") or {}
        if bounds is None:
            return bool(inside.get("all"))
        return all(inside.get(b) is not False for b in bounds) and any(inside.get(b) for b in bounds)
    meets = {label: ok(s) for label, s in summary.items() if s["method"] == family}
    speculates = {lb for lb in meets if (summary[lb].get("passed") is None or summary[lb]["passed"] < 1.0)
                  and (summary[lb].get("kept") is None or summary[lb]["kept"] >= KEPT_FLOOR)}
    best = max((lb for lb, good in meets.items() if good and lb in speculates),
               key=lambda lb: summary[lb]["passes_speedup"], default=None)
    return best, meets


def default_rule(result: dict, family: str = "mulo") -> tuple[str | None, str]:
    """(the spec the default rule names, which tier named it): the fewest passes inside every bound;
    when no spec of the family is, the fewest passes inside every image bound (its log-lik gap is then
    outside and is said beside it)."""
    best, _ = choose(result, family)
    if best is not None:
        return best, "inside every bound"
    best, _ = choose(result, family, IMAGE_BOUNDS)
    return best, "inside every image bound (adherence, FD to the data, detail FD, sharpness), not the log-lik one"


def markdown(result: dict) -> str:
    """The summary as a Markdown table (speed, the mean up-sampling time per image where a spec
    up-samples, then every yardstick and which bounds a spec misses),
    then the noise floors and the blurred control: what the tables of docs/results.md are made of."""
    cols = ("passes", "passes ×", "wall ×", "target passes", "passed", "kept", "up-sample ms", "adherence", "FD data",
            "FD ar", "sharpness", "log-lik gap", "outside")
    out = ["| spec | " + " | ".join(cols) + " |", "|---|" + "---:|" * (len(cols) - 1) + "---|"]
    f2 = lambda x, d: "–" if _num(x) is None else f"{x:.{d}f}"  # noqa: E731
    for label, s in result["summary"].items():
        inside = s.get("inside") or {}
        missed = [k for k, v in inside.items() if k != "all" and v is False]
        outside = ", ".join(missed) or ("–" if inside.get("all") is None else "none")   # –: no bound is known
        out.append(f"| `{label}` | {s['passes']:.0f} | {s['passes_speedup']:.2f} | {f2(s['wall_speedup'], 2)} | "
                   f"{s['target_nfe']:.0f} | {f2(s.get('passed'), 3)} | {f2(s.get('kept'), 3)} | "
                   f"{f2(s['phase_ms'].get('upsample') or None, 1)} | "
                   f"{f2(s['adherence'], 3)} | {f2(s['frechet'], 2)} | {f2(s['fd_ar'], 2)} | {f2(s['sharpness'], 2)} | "
                   f"{'–' if _num(s['loglik_gap']) is None else format(s['loglik_gap'], '+.3f')} | "
                   f"{outside} |")
    return "\n".join(out) + "\n\n```\n" + floors_text(result) + "\n```\n"


def _pareto(points: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """The points no other point beats on both x and y (higher is better on both), sorted by x."""
    out = [p for p in points if not any(q[0] >= p[0] and q[1] >= p[1] and (q[0], q[1]) != (p[0], p[1])
                                         for q in points)]
    return sorted(out)


SVG_PANELS = ("adherence", "fd_ar", "sharpness", "loglik_gap")


def frontier_svg(result: dict, family: str = "mulo", width: int = 980, height: int = 760) -> str:
    """A static figure for papers and READMEs (no script, no network): sequential-pass speedup over ar
    (x, log) against each of four yardsticks (adherence, detail FD to ar's samples, sharpness ÷ ar,
    log-lik gap; one panel each, its title naming the field), the run's bounds as dashed lines, filled
    markers for specs of `family` inside every bound, hollow ones outside, the Pareto frontier (faster
    and better) as a line, the spec `default_rule` picks ringed and named (with its tier), ar as a dot
    and every other method of the run as a labelled square."""
    summary = result["summary"]
    _, meets = choose(result, family)
    if not meets:
        raise SummaryError(f"the run has no {family} spec")
    best, tier = default_rule(result, family)
    names = {q: (name, way) for q, name, way in QUALITIES}
    panels = [q for q in SVG_PANELS if _num(summary["ar"].get(q)) is not None]
    e = html.escape
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="22" text-anchor="middle" font-size="15">{e(family)}: fewer sequential passes '
           f'than ar against each yardstick ({result["prompts"]} prompts, seed {result["seed"]})</text>']
    cols = 2
    pw, ph = width / cols, (height - 60) / math.ceil(len(panels) / cols)
    for n, key in enumerate(panels):
        ox, oy = (n % cols) * pw, 34 + (n // cols) * ph
        out += _svg_panel(result, family, key, names[key], meets, best, ox, oy, pw, ph)
    ar = summary["ar"]
    out.append(f'<text x="10" y="{height - 8}" font-size="11" fill="#333">filled: inside every bound (each yardstick '
               f'within {result["floors"]["spreads"]:g} spreads of ar against ar at other seeds); hollow: outside; '
               f'dashed: the bounds; line: Pareto frontier; squares: other methods; ar passes {ar["passes"]:.0f}</text>'
               f'<text x="10" y="{height - 22}" font-size="11" fill="#d62728">ringed: the default rule\'s pick, '
               f'{e(tier) if best else "none"}</text>'
               f'</svg>')
    return "\n".join(out)


def _svg_panel(result, family, key, name_way, meets, best, ox, oy, pw, ph) -> list[str]:
    """One panel of frontier_svg: x = passes speedup (log), y = summary[spec][key]."""
    name, way = name_way
    summary = result["summary"]
    e = html.escape
    better = (lambda v: v) if way > 0 else (lambda v: -v) if way < 0 else (lambda v: -abs(v - (1.0 if key == "sharpness" else 0.0)))
    pts = [(summary[lb]["passes_speedup"], summary[lb][key], lb) for lb in meets if _num(summary[lb].get(key)) is not None]
    others = [(s["passes_speedup"], s[key], lb) for lb, s in summary.items()
              if s["method"] not in (family, "ar") and _num(s.get(key)) is not None]
    ar_y = summary["ar"][key]
    lines = _bound_lines(result, key)
    xs = [p[0] for p in pts + others] + [1.0]
    ys = [p[1] for p in pts + others] + [ar_y] + lines
    x0, x1 = math.log10(min(xs)), math.log10(max(xs))
    y0, y1 = min(ys), max(ys)
    padx, pady = (x1 - x0) * 0.08 or 0.1, (y1 - y0) * 0.1 or 0.01
    x0, x1, y0, y1 = x0 - padx, x1 + padx * 2, y0 - pady, y1 + pady
    if way < 0:
        y0, y1 = y1, y0                                            # lower is better: up is better on every panel
    L, R, T, B = ox + 64, ox + pw - 14, oy + 26, oy + ph - 44
    sx = lambda x: L + (math.log10(x) - x0) / (x1 - x0) * (R - L)   # noqa: E731
    sy = lambda y: T + (y1 - y) / (y1 - y0) * (B - T)               # noqa: E731
    out = [f'<text x="{(L + R) / 2:.1f}" y="{oy + 16:.1f}" text-anchor="middle" font-size="13" '
           f'data-field="{key}">{e(name)}</text>']
    ticks = [m * 10 ** d for d in range(-2, 4) for m in (1, 2, 5) if x0 <= math.log10(m * 10 ** d) <= x1]
    for x in ticks:
        out.append(f'<line x1="{sx(x):.1f}" y1="{T}" x2="{sx(x):.1f}" y2="{B}" stroke="#eee"/>'
                   f'<text x="{sx(x):.1f}" y="{B + 14}" text-anchor="middle" font-size="10">{x:g}×</text>')
    for i in range(5):
        y = y0 + (y1 - y0) * i / 4
        out.append(f'<line x1="{L}" y1="{sy(y):.1f}" x2="{R}" y2="{sy(y):.1f}" stroke="#eee"/>'
                   f'<text x="{L - 5}" y="{sy(y) + 4:.1f}" text-anchor="end" font-size="10">{y:.3g}</text>')
    out.append(f'<rect x="{L}" y="{T}" width="{R - L}" height="{B - T}" fill="none" stroke="#999"/>')
    out.append(f'<text x="{(L + R) / 2:.1f}" y="{B + 30}" text-anchor="middle" font-size="10">sequential passes: '
               f'speedup over ar (log)</text>')
    for y in lines:
        out.append(f'<line x1="{L}" y1="{sy(y):.1f}" x2="{R}" y2="{sy(y):.1f}" stroke="#666" stroke-dasharray="5 4" '
                   f'class="bound" data-value="{y:.6g}"/>')
    out.append(f'<circle cx="{sx(1.0):.1f}" cy="{sy(ar_y):.1f}" r="4.5" fill="{FAMILIES["ar"]}" data-spec="ar" '
               f'data-x="1" data-y="{ar_y:.6g}"/><text x="{sx(1.0) + 7:.1f}" y="{sy(ar_y) + 4:.1f}" '
               f'fill="{FAMILIES["ar"]}">ar</text>')
    for x, y, lb in others:
        c = FAMILIES.get(summary[lb]["method"], OTHER)
        out.append(f'<rect x="{sx(x) - 4:.1f}" y="{sy(y) - 4:.1f}" width="8" height="8" fill="{c}" data-spec="{e(lb)}" '
                   f'data-x="{x:.6g}" data-y="{y:.6g}"><title>{e(lb)}: {x:.2f}×, {e(_short(name))} {y:.3f}</title></rect>'
                   f'<text x="{sx(x) + 6:.1f}" y="{sy(y) + 12:.1f}" font-size="9" fill="{c}">{e(lb)}</text>')
    front = _pareto([(x, better(y), lb) for x, y, lb in pts])
    colour = FAMILIES.get(family, OTHER)
    out.append('<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>'.format(
        colour, " ".join(f"{sx(x):.1f},{sy(summary[lb][key]):.1f}" for x, _, lb in front)))
    for x, y, lb in pts:
        out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="4" fill="{colour if meets[lb] else "white"}" '
                   f'stroke="{colour}" stroke-width="1.5" data-spec="{e(lb)}" data-x="{x:.6g}" data-y="{y:.6g}">'
                   f'<title>{e(lb)}: {x:.2f}×, {e(_short(name))} {y:.3f}</title></circle>')
    if best is not None and _num(summary[best].get(key)) is not None:
        x, y = summary[best]["passes_speedup"], summary[best][key]
        out.append(f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="9" fill="none" stroke="#d62728" stroke-width="2"/>'
                   f'<text x="{sx(x) - 10:.1f}" y="{sy(y) + 20:.1f}" text-anchor="end" font-size="10" '
                   f'fill="#d62728">chosen: {e(_knobs(best))}</text>')
    return out
