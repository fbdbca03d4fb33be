"""`python -m core report DIR` as a process: one self-contained HTML page from a bench run folder."""
import gzip
import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from core.bench import SummaryError

ROOT = Path(__file__).resolve().parent.parent


def report(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core", "report", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_the_report_is_one_self_contained_page_with_the_frontier_bars_phases_and_table(bench_folder, tmp_path):
    page = tmp_path / "report.html"
    done = report(bench_folder, "--html", page)
    assert done.returncode == 0 and done.stdout.strip() == f"wrote {page}"
    text = page.read_text(encoding="utf-8")
    assert not re.search(r"<script[^>]+src=", text)           # Plotly's script is inlined: opens offline
    assert text.count("Plotly.newPlot(") == 3
    for div in ("frontier", "bars", "phases"):
        assert f'id="{div}"' in text
    summary = json.loads((bench_folder / "summary.json").read_text())
    rows = re.findall(r"<tr><td>([^<]+)</td>", text)
    assert rows == summary["specs"] == ["ar", "mulo:scale=4:context=verify", "zipar:window=4"]
    passes = summary["summary"]["mulo:scale=4:context=verify"]["passes_speedup"]
    assert f"<td>{passes:.2f}</td>" in text                    # the table shows the merged figures


def test_the_report_lands_in_the_run_folder_by_default(bench_folder, tmp_path):
    import shutil
    folder = tmp_path / "copy"
    shutil.copytree(bench_folder, folder)
    assert report(folder).returncode == 0 and (folder / "report.html").stat().st_size > 1_000_000


def test_an_unfinished_or_foreign_folder_gets_one_line_and_exit_code_2(tmp_path):
    done = report(tmp_path)
    assert done.returncode == 2 and done.stderr == f"error: {tmp_path} has no summary.json: the run has not " \
        "finished (rerun its bench command to complete and merge it)\n"
    (tmp_path / "summary.json").write_text('{"schema": "mulo-trace/2"}')
    done = report(tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error: not a benchmark summary")
    assert not (tmp_path / "report.html").exists()


FLOORS = dict(spreads=3.0, reference_seed=1_000_003,
              adherence=dict(value=0.0, spread=0.005, low=0.885), frechet=dict(value=1.3, spread=0.1, high=1.6),
              fd_ar=dict(value=1.0, spread=0.3, high=1.9), sharpness=dict(value=1.0, spread=0.03, low=0.914, high=1.094),
              loglik_gap=dict(value=0.0, spread=0.01, low=-0.03, high=0.03))


def _summary(specs: dict) -> dict:
    """A merged result with the given specs: label -> (passes_speedup, adherence, fd_ar, sharpness, loglik_gap);
    the verdicts come from yardsticks.inside, as the bench's merge makes them."""
    from core import yardsticks
    rows = {}
    for label, (speed, adh, fd, sharp, gap) in specs.items():
        q = dict(adherence=adh, frechet=1.3, fd_ar=fd, sharpness=sharp, loglik_gap=gap)
        rows[label] = dict(method=label.split(":")[0], passes_speedup=speed, wall_speedup=speed * 0.8,
                           passes=1024 / speed, passed=1.0 if "tau=0:" in label + ":" else 0.9, kept=0.5, **q,
                           inside=yardsticks.inside(q, FLOORS))
    return dict(prompts=100, seed=0, summary=rows, floors=FLOORS)


def test_the_operating_point_rule_takes_the_fewest_passes_inside_every_bound():
    from core.report import choose
    result = _summary({"ar": (1.0, 0.900, 1.0, 1.0, 0.0),
                       "mulo": (2.0, 0.950, 1.2, 0.98, -0.01),
                       "mulo:tau=0.001": (3.9, 0.960, 9.0, 0.40, -3.5),  # fastest: a blur
                       "mulo:k=4": (3.5, 0.950, 1.5, 1.00, -0.05),      # log-lik just outside
                       "mulo:k=0": (3.0, 0.950, 1.5, 0.90, 0.00),       # sharpness just outside
                       "mulo:k=64": (2.5, 0.950, 1.8, 1.05, 0.02),      # just inside every bound
                       "zipar": (9.0, 0.950, 0.5, 1.0, 0.0)})           # another family: never chosen
    best, meets = choose(result)
    assert best == "mulo:k=64"
    assert meets == {"mulo": True, "mulo:tau=0.001": False, "mulo:k=4": False, "mulo:k=0": False, "mulo:k=64": True}
    result["summary"]["mulo:k=64"]["inside"]["all"] = False     # the verdict decides, nothing else
    assert choose(result)[0] == "mulo"
    del result["floors"]
    with pytest.raises(SummaryError, match="no noise floors"):
        choose(result)


def test_a_spec_whose_verifier_rejected_nothing_is_never_the_operating_point():
    from core.report import choose
    result = _summary({"ar": (1.0, 0.9, 1.0, 1.0, 0.0), "mulo": (2.0, 0.95, 1.0, 1.0, 0.0),
                       "mulo:tau=0": (3.97, 0.95, 1.0, 1.0, 0.0)})
    best, meets = choose(result)
    assert meets["mulo:tau=0"] and best == "mulo"       # inside the bounds, but the output is the drafter's
    result["summary"]["mulo:tau=0"]["passed"] = 0.999   # one rejection somewhere: it verifies
    assert choose(result)[0] == "mulo:tau=0"
    result["summary"]["mulo:tau=0"]["kept"] = 0.009     # ... but a spec that kept under 1 % redrew the image
    assert choose(result)[0] == "mulo"
    result["summary"]["mulo:tau=0"]["kept"] = 0.01
    assert choose(result)[0] == "mulo:tau=0"


def test_the_static_frontier_rings_the_chosen_spec_and_draws_the_pareto_front():
    from core.report import frontier_svg, _pareto
    result = _summary({"ar": (1.0, 0.9, 1.0, 1.0, 0.0), "mulo": (2.0, 0.95, 1.2, 0.98, -0.01),
                       "mulo:k=64": (2.5, 0.95, 1.8, 1.05, 0.02), "mulo:tau=0": (3.9, 0.96, 9.0, 0.4, -3.5),
                       "mulo:k=4": (3.5, 0.95, 1.5, 1.0, -0.05)})
    svg = frontier_svg(result)
    assert svg.startswith("<svg") and svg.endswith("</svg>") and "<script" not in svg
    assert svg.count("chosen: k=64") == 4                 # ringed on each of the four panels
    assert svg.count('fill="white" stroke=') == 2 * 4     # the two specs outside the bounds are hollow, per panel
    # the frontier: nothing else is both faster and better than its points
    assert [p[2] for p in _pareto([(3.0, 0.95, "a"), (3.4, 0.891, "b"), (3.9, 0.96, "c"), (3.5, 0.889, "d")])] \
        == ["c"]
    assert [p[2] for p in _pareto([(3.0, 0.97, "a"), (3.4, 0.95, "b"), (3.2, 0.90, "c")])] == ["a", "b"]


# the fields a panel's title names, written here from the words (not read from core.report's table)
TITLE_FIELDS = {"prompt adherence": "adherence", "Fréchet distance to the data": "frechet",
                "detail FD to ar's samples": "fd_ar", "sharpness ÷ ar": "sharpness",
                "log-lik gap to ar, nats/token": "loglik_gap", "sequential passes (target + drafter)": "passes_speedup",
                "wall-clock": "wall_speedup", "passes speedup (×)": "passes_speedup", "wall speedup (×)": "wall_speedup"}


def _panels(fig) -> dict:
    """{(xaxis, yaxis) of a subplot: its title} from a make_subplots figure."""
    out = {}
    for ann in fig.layout.annotations:
        for trace in fig.data:                                  # the axes whose domain holds the title
            xa = fig.layout["xaxis" + trace.xaxis[1:]]
            ya = fig.layout["yaxis" + trace.yaxis[1:]]
            if abs(ann.x - sum(xa.domain) / 2) < 1e-6 and abs(ann.y - ya.domain[1]) < 0.05:
                out[(trace.xaxis, trace.yaxis)] = ann.text
    return out


def test_every_frontier_panel_plots_the_fields_its_title_names(bench_folder):
    from core import report
    result = report.read_folder(bench_folder)
    fig = report.frontier(result)
    panels = _panels(fig)
    assert len(panels) == 10                                    # five yardsticks x (passes, wall)
    checked = 0
    for trace in fig.data:
        title = panels[(trace.xaxis, trace.yaxis)]
        ytitle, xtitle = title.split(" vs ")
        xkey, ykey = TITLE_FIELDS[xtitle], TITLE_FIELDS[ytitle]
        for label, x, y in zip(trace.text, trace.x, trace.y):
            s = result["summary"][label]
            assert x == pytest.approx(s[xkey]) and (y is None and s[ykey] is None or y == pytest.approx(s[ykey])), \
                (title, label)
            checked += 1
    assert checked == 10 * len(result["summary"])
    # the dashed bounds of each row are the run's floors
    for shape in fig.layout.shapes:
        row_title = next(t for (xa, ya), t in panels.items() if ya == shape.yref.replace(" domain", ""))
        key = TITLE_FIELDS[row_title.split(" vs ")[0]]
        assert any(shape.y0 == pytest.approx(result["floors"][key][side]) for side in ("low", "high")
                   if side in result["floors"][key])


def test_every_bar_panel_plots_the_field_its_title_names(bench_folder):
    from core import report
    result = report.read_folder(bench_folder)
    fig = report.bars(result)
    titles = [a.text for a in fig.layout.annotations]
    assert len(titles) == len(fig.data) == 7
    for title, trace in zip(titles, fig.data):
        key = TITLE_FIELDS[title]
        assert [result["summary"][lb][key] for lb in trace.x] == pytest.approx(list(trace.y), nan_ok=True), title


def test_every_svg_panel_marks_the_fields_its_title_names(bench_folder):
    import re as re_
    from core import report
    result = report.read_folder(bench_folder)
    svg = report.frontier_svg(result)
    panels = svg.split('data-field="')[1:]
    assert len(panels) == 4
    for part in panels:
        key, rest = part.split('"', 1)
        title = html.unescape(rest[1:rest.index("</text>")])
        assert TITLE_FIELDS[title.split(" (")[0]] == key
        marks = re_.findall(r'data-spec="([^"]+)" data-x="([^"]+)" data-y="([^"]+)"', rest)
        assert {m[0] for m in marks} == set(result["summary"])
        for spec, x, y in marks:
            s = result["summary"][spec.replace("&quot;", '"')]
            assert float(x) == pytest.approx(s["passes_speedup"], rel=1e-5)
            assert float(y) == pytest.approx(s[key], rel=1e-5, abs=1e-9), (key, spec)
        bounds = [float(v) for v in re_.findall(r'class="bound" data-value="([^"]+)"', rest)]
        assert bounds == pytest.approx([result["floors"][key][side] for side in ("low", "high")
                                        if side in result["floors"][key]], rel=1e-5)


def test_report_svg_names_the_chosen_spec(bench_folder, tmp_path):
    svg = tmp_path / "frontier.svg"
    done = report(bench_folder, "--html", tmp_path / "r.html", "--svg", svg)
    assert done.returncode == 0, done.stderr
    assert svg.read_text(encoding="utf-8").startswith("<svg")
    assert re.search(r"\d of 1 mulo specs are inside every bound \(each yardstick within 3 spreads of its noise "
                     r"floor\); the fewest sequential passes among them: ", done.stdout)


def test_runs_of_the_same_prompts_are_drawn_together_and_others_refused(bench_folder, tmp_path):
    import shutil
    other = tmp_path / "other"
    shutil.copytree(bench_folder, other)
    summary = json.loads((other / "summary.json").read_text())
    summary["specs"].append("mulo:tau=0.3")                     # a spec only the second run measured
    summary["summary"]["mulo:tau=0.3"] = {**summary["summary"]["mulo:scale=4:context=verify"], "passes_speedup": 9.0}
    (other / "summary.json").write_text(json.dumps(summary))
    done = report(bench_folder, other, "--html", tmp_path / "both.html", "--svg", tmp_path / "both.svg")
    assert done.returncode == 0, done.stderr
    rows = re.findall(r"<tr><td>([^<]+)</td>", (tmp_path / "both.html").read_text(encoding="utf-8"))
    assert rows == ["ar", "mulo:scale=4:context=verify", "zipar:window=4", "mulo:tau=0.3"]
    assert "tau=0.3" in (tmp_path / "both.svg").read_text(encoding="utf-8")

    summary["summary"]["ar"]["loglik"] += 0.01                  # another baseline: not comparable
    (other / "summary.json").write_text(json.dumps(summary))
    done = report(bench_folder, other, "--html", tmp_path / "no.html")
    assert done.returncode == 2 and "ar rows differ" in done.stderr and not (tmp_path / "no.html").exists()
    summary["prompts"] = 4
    (other / "summary.json").write_text(json.dumps(summary))
    done = report(bench_folder, other, "--html", tmp_path / "no.html")
    assert done.returncode == 2 and "differ in prompts (3 and 4)" in done.stderr


def test_the_default_rule_falls_back_to_the_image_bounds_only_when_nothing_is_inside_every_bound():
    from core.report import default_rule
    result = _summary({"ar": (1.0, 0.9, 1.0, 1.0, 0.0),
                       "mulo:k=4": (3.5, 0.95, 1.5, 1.0, -0.05),       # only the log-lik gap outside
                       "mulo:k=0": (3.0, 0.95, 1.5, 0.90, 0.0),        # sharpness outside
                       "mulo:tau=0.5": (2.0, 0.95, 1.2, 1.0, -0.2)})   # log-lik gap outside, slower
    assert default_rule(result) == ("mulo:k=4", "inside every image bound (adherence, FD to the data, detail FD, "
                                                "sharpness), not the log-lik one")
    result["summary"]["mulo:slow"] = {**result["summary"]["mulo:tau=0.5"], "passes_speedup": 1.5, "loglik_gap": 0.0,
                                      "inside": {**result["summary"]["mulo:tau=0.5"]["inside"], "loglik_gap": True,
                                                 "all": True}}
    assert default_rule(result) == ("mulo:slow", "inside every bound")     # the first tier wins when it can


def test_the_markdown_table_names_the_bounds_each_spec_misses(bench_folder, tmp_path):
    md = tmp_path / "t.md"
    done = report(bench_folder, "--html", tmp_path / "r.html", "--markdown", md)
    assert done.returncode == 0, done.stderr
    text = md.read_text(encoding="utf-8")
    summary = json.loads((bench_folder / "summary.json").read_text())["summary"]
    for label, s in summary.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{label}` |"))
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[10] == f"{s['fd_ar']:.2f}" and cells[11] == f"{s['sharpness']:.2f}"
        assert cells[12] == f"{s['loglik_gap']:+.3f}"
        missed = [k for k, v in s["inside"].items() if k != "all" and v is False]
        assert cells[13] == (", ".join(missed) or "none")
        upsampled = s["phase_ms"]["upsample"]
        assert cells[7] == (f"{upsampled:.1f}" if label.startswith("mulo") else "–") and (upsampled > 0) == (
            label.startswith("mulo"))
    assert "noise floors (reference = ar at seeds + 1000003" in text and "control: ar blurred" in text


def test_two_outputs_naming_one_file_are_refused_before_anything_is_written(bench_folder, tmp_path):
    same = tmp_path / "same.html"
    done = report(bench_folder, "--html", same, "--svg", same)
    assert done.returncode == 2 and "--html and --svg name the same file" in done.stderr
    assert not same.exists()


@pytest.mark.parametrize("damage, words", [
    (lambda d: d.pop("prompts"), "error: the summary lacks the field 'prompts'"),
    (lambda d: d.update(seed="[x](https://example.com)"), "error: the summary's seed must be an integer in [0, 2^63)"),
    (lambda d: d["summary"].update({"<a href=https://example.com>x</a>": d["summary"]["ar"]}),
     "error: the summary names a spec '<a href=https://example.com>x</a>'"),
    (lambda d: d.update(x=[[[[[[[[0]]]]]]]]), "error: the summary nests deeper than 6 levels"),
])
def test_a_damaged_summary_is_one_line_and_exit_2_naming_what_is_wrong(bench_folder, tmp_path, damage, words):
    d = json.loads((bench_folder / "summary.json").read_text())
    damage(d)
    (tmp_path / "summary.json").write_text(json.dumps(d))
    done = report(tmp_path)
    assert done.returncode == 2 and done.stderr.startswith(words) and done.stderr.count("\n") == 1, done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "report.html").exists()


@pytest.mark.parametrize("text, words", [
    (b'{"schema": "mulo-bench/2", "summary": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
     "error: the summary nests deeper than 6 levels"),
    (gzip.compress(b'{"schema": "mulo-bench/2"}', mtime=0), "error: the file is gzip-compressed"),
])
def test_a_summary_past_the_parsers_limits_is_refused_by_name(tmp_path, text, words):
    (tmp_path / "summary.json").write_bytes(text)
    done = report(tmp_path)
    assert done.returncode == 2 and done.stderr.startswith(words) and "Traceback" not in done.stderr, done.stderr
