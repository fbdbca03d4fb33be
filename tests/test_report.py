"""`python -m core report DIR` as a process: one self-contained HTML page from a bench run folder."""
import json
import re
import subprocess
import sys
from pathlib import Path

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


def _summary(specs: dict) -> dict:
    """A merged result with the given specs: label -> (passes_speedup, adherence, frechet)."""
    rows = {label: dict(method=label.split(":")[0], passes_speedup=speed, wall_speedup=speed, adherence=adh,
                        frechet=fd, passed=1.0 if "tau=0:" in label + ":" else 0.9)
            for label, (speed, adh, fd) in specs.items()}
    return dict(prompts=100, seed=0, summary=rows)


def test_the_operating_point_rule_takes_the_fastest_spec_inside_both_quality_bounds():
    from core.report import choose
    result = _summary({"ar": (1.0, 0.900, 1.30),
                       "mulo": (3.0, 0.950, 0.60),
                       "mulo:tau=0.001": (3.9, 0.960, 1.70),  # fastest, but FD beyond ar + 0.3
                       "mulo:k=4": (3.5, 0.889, 0.90),      # adherence just under ar - 0.01
                       "mulo:k=64": (3.4, 0.891, 1.59),     # just inside both bounds
                       "zipar": (9.0, 0.950, 0.50)})        # another family: never chosen
    best, meets = choose(result)
    assert best == "mulo:k=64"
    assert meets == {"mulo": True, "mulo:tau=0.001": False, "mulo:k=4": False, "mulo:k=64": True}
    # the margins are the rule's: loosen one and the other spec wins
    assert choose(result, frechet_margin=0.5)[0] == "mulo:tau=0.001"
    assert choose(result, adherence_margin=0.02, frechet_margin=0.2)[0] == "mulo:k=4"


def test_a_spec_whose_verifier_rejected_nothing_is_never_the_operating_point():
    from core.report import choose
    result = _summary({"ar": (1.0, 0.900, 1.30), "mulo": (3.0, 0.950, 0.60), "mulo:tau=0": (3.97, 0.95, 0.7)})
    best, meets = choose(result)
    assert meets["mulo:tau=0"] and best == "mulo"       # inside the bounds, but the output is the drafter's
    result["summary"]["mulo:tau=0"]["passed"] = 0.999   # one rejection somewhere: it verifies
    assert choose(result)[0] == "mulo:tau=0"


def test_the_static_frontier_rings_the_chosen_spec_and_draws_the_pareto_front():
    from core.report import frontier_svg, _pareto
    result = _summary({"ar": (1.0, 0.900, 1.30), "mulo": (3.0, 0.950, 0.60), "mulo:k=64": (3.4, 0.891, 1.59),
                       "mulo:tau=0": (3.9, 0.960, 1.70), "mulo:k=4": (3.5, 0.889, 0.90)})
    svg = frontier_svg(result)
    assert svg.startswith("<svg") and svg.endswith("</svg>") and "<script" not in svg
    assert "chosen: k=64" in svg
    assert svg.count('fill="white" stroke=') == 2        # the two specs outside the bounds are hollow
    # the frontier: nothing else is both faster and more adherent than its points
    assert [p[2] for p in _pareto([(3.0, 0.95, "a"), (3.4, 0.891, "b"), (3.9, 0.96, "c"), (3.5, 0.889, "d")])] \
        == ["c"]
    assert [p[2] for p in _pareto([(3.0, 0.97, "a"), (3.4, 0.95, "b"), (3.2, 0.90, "c")])] == ["a", "b"]


def test_report_svg_names_the_chosen_spec(bench_folder, tmp_path):
    svg = tmp_path / "frontier.svg"
    done = report(bench_folder, "--html", tmp_path / "r.html", "--svg", svg)
    assert done.returncode == 0, done.stderr
    assert svg.read_text(encoding="utf-8").startswith("<svg")
    assert re.search(r"\d of 1 mulo specs meet adherence >= ar - 0.01 and FD <= ar \+ 0.3", done.stdout)


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

    summary["summary"]["ar"]["adherence"] += 0.01               # another baseline: not comparable
    (other / "summary.json").write_text(json.dumps(summary))
    done = report(bench_folder, other, "--html", tmp_path / "no.html")
    assert done.returncode == 2 and "ar rows differ" in done.stderr and not (tmp_path / "no.html").exists()
    summary["prompts"] = 4
    (other / "summary.json").write_text(json.dumps(summary))
    done = report(bench_folder, other, "--html", tmp_path / "no.html")
    assert done.returncode == 2 and "differ in prompts (3 and 4)" in done.stderr
