"""The suite's time guard (tests/conftest.py) fails a run loudly: a test past the per-test limit that
is not marked long, and a run past its wall-clock budget. Each case runs pytest as a process on the
one test below, with the limits lowered through their environment variables."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif("SUITE_GUARD_SLEEP" not in os.environ, reason="run only by the guard's own tests")
def test_sleeper():
    time.sleep(float(os.environ["SUITE_GUARD_SLEEP"]))


@pytest.mark.long("the guard's positive control: a marked test may pass the limit")
@pytest.mark.skipif("SUITE_GUARD_SLEEP" not in os.environ, reason="run only by the guard's own tests")
def test_marked_sleeper():
    time.sleep(float(os.environ["SUITE_GUARD_SLEEP"]))


def _run(workers: str, *tests: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", workers, "-p", "no:cacheprovider",
                           *(f"tests/test_suite_guard.py::{t}" for t in tests)], cwd=ROOT, capture_output=True,
                          text=True, env=dict(os.environ, SUITE_GUARD_SLEEP="0.6", **env), timeout=120)


def test_an_unmarked_test_past_the_limit_fails_the_run_and_a_marked_one_does_not():
    done = _run("1", "test_sleeper", "test_marked_sleeper", SUITE_LONG_S="0.3")   # through an xdist worker
    assert done.returncode == 1, done.stdout
    assert "2 passed" in done.stdout   # the tests themselves passed; the guard failed the run
    breaches = [ln for ln in done.stdout.splitlines() if ln.startswith("TIME BUDGET BREACHED")]
    assert len(breaches) == 1 and "tests/test_suite_guard.py::test_sleeper took 1 s (> 0 s)" in breaches[0], breaches


def test_a_run_past_its_wall_clock_budget_fails():
    # (a run inside its budget passes: every run of the suite prints its "suite time:" line and passes)
    done = _run("0", "test_sleeper", SUITE_BUDGET_S="0.2")
    assert done.returncode == 1 and "past its budget of 0 s" in done.stdout, done.stdout
