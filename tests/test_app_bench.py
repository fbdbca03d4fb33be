"""`python -m app.bench` as a process: every line it promises is measured (a number, not a crash)."""
import re
import subprocess
import sys
from pathlib import Path


def test_the_explorer_bench_measures_every_line():
    done = subprocess.run([sys.executable, "-m", "app.bench", "--repeat", "1"], cwd=Path(__file__).resolve().parent.parent,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    for label in ("first streamed canvas", "complete result, cold", "complete result, warm",
                  "re-render every view", "replay an uploaded Trace JSON", "one scrubber move",
                  "ambiguity + codebook views, warm"):
        line = next(x for x in done.stdout.splitlines() if label in x)
        assert re.search(r"\s\d+\.\d+ s", line), line
    first = float(re.search(r"first streamed canvas\s+(\d+\.\d+)", done.stdout).group(1))
    cold = float(re.search(r"complete result, cold\s+(\d+\.\d+)", done.stdout).group(1))
    assert 0 < first < cold           # the first canvas comes before the complete result
