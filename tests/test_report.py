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
