"""A bench of any size the CLI accepts reports: `python -m core bench --prompts 1` (and 2) then
`python -m core report`, both as processes. Such a run is too small for noise floors (they need 3
prompts), so its report must say that floors and bounds are unavailable, not invent them, and must
still draw the figures it measured (the bench once wrote a blurred control the report refused:
"the summary's controls must be the blurred control: sigma_px, its yardsticks as numbers ...")."""
import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _core(*args, timeout: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "core", *map(str, args)], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=timeout)


# the cheapest bench the CLI runs: ar alone (it is always measured) without guidance (one row per pass)
@pytest.mark.parametrize("prompts", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_a_bench_too_small_for_noise_floors_still_reports_and_says_it_has_no_bounds(tmp_path, prompts):
    out = tmp_path / "run"
    done = _core("bench", "--prompts", prompts, "--threads", "1", "--methods", "ar", "--cfg", "1", "--out", out,
                 timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    md = tmp_path / "table.md"
    done = _core("report", out, "--markdown", md, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == f"wrote {out / 'report.html'}"

    summary = json.loads((out / "summary.json").read_text())
    assert summary["prompts"] == prompts
    # no yardstick has a floor or a bound, and no verdict is made up
    assert not {"fd_ar", "sharpness", "loglik_gap", "adherence", "frechet"} & set(summary["floors"])
    assert all(s["inside"] == {"all": None} for s in summary["summary"].values())
    blur = summary["controls"]["blur"]
    assert blur["fd_ar"] is None and blur["inside"] == {"all": None}   # an FD needs 3 images

    page = (out / "report.html").read_text(encoding="utf-8")
    floors = html.unescape(re.search(r"<pre id=floors>(.*?)</pre>", page, re.S).group(1))
    first = floors.splitlines()[0]
    assert first.startswith("bounds: none") and f"{prompts} prompt" in first and "at least 3" in first, floors
    assert not re.search(r"floor [-+]?\d|bound [<>]=|\.\. ", floors), floors      # no floor or bound printed
    # the blurred control's measured figures are shown as measured, the FD it could not have as a dash
    assert f"sharpness {blur['sharpness']:.3f}, log-lik gap {blur['loglik_gap']:+.3f}" in floors
    assert "FD ar –" in floors and "no bounds" in floors.splitlines()[-1]
    ar_row = re.search(r"<tr><td>ar</td>(.*?)</tr>", page).group(1)
    assert ar_row.endswith("<td>–</td>")                                      # inside every bound: unknown
    row = next(line for line in md.read_text(encoding="utf-8").splitlines() if line.startswith("| `ar` |"))
    assert row.split("|")[-2].strip() == "–"                                 # no bound is missed: none is known
