import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from core.embedded import data, family
from core.embedded.train import TARGET
from core.models.gpt import GPT
from core.models.pair import ModelPair

torch.set_num_threads(1)  # small models are latency-bound; one thread never oversubscribes two cores


@pytest.fixture(autouse=True)
def fresh_generate_runs():
    """Each test's Generate runs the engine unless the test itself made the same run before: the app's
    remembered runs (app.generation.RUNS) start empty (the tests of that cache are in test_line.py)."""
    if "app.generation" in sys.modules:
        sys.modules["app.generation"].RUNS.clear()
    yield


@pytest.fixture(scope="session")
def tokenizer():
    return family.load_tokenizer()


def tiny_gpt(seed: int = 0, **overrides) -> GPT:
    torch.manual_seed(seed)
    cfg = dataclasses.replace(TARGET, **{**dict(dim=64, n_layer=2, n_head=2), **overrides})
    return GPT(cfg).eval()


@pytest.fixture(scope="session")
def tiny_pair(tokenizer):
    """A random tiny target on a 16x16 grid with the shipped tokenizer: fast, and sharp enough to reject."""
    target = tiny_gpt(0)
    small = tiny_gpt(1, n_layer=1)
    return ModelPair("tiny", target, target, small, tokenizer, (16, 16),
                            lambda prompt, grid: data.caption_ids(prompt, 32),
                            tokenizer.neighbours(tokenizer.vocab_size - 1), scales=(2, 4))


# mulo with the verify-time context: the cheapest mulo on a CPU, with drafter passes and acceptance
BENCH_ARGS = ["--prompts", "3", "--seed", "5", "--methods", "mulo:scale=4:context=verify,zipar:window=4", "--threads", "1"]


# The finished run folder of `python -m core bench BENCH_ARGS` ships (tests/fixtures/bench-one, ~70 s of
# compute per worker otherwise); test_bench_sweep re-runs its prompt 0 with today's engine and fails if the
# records differ. Remade by: python -m core bench <BENCH_ARGS> --out tests/fixtures/bench-one
#                                --json tests/fixtures/bench-one.json   (delete both first)
SHIPPED_BENCH = Path(__file__).resolve().parent / "fixtures" / "bench-one"


@pytest.fixture(scope="session")
def bench_folder(tmp_path_factory) -> Path:
    """A finished run folder of `python -m core bench BENCH_ARGS` (one process), a fresh copy of the shipped
    one per worker, shared by the tests that read one."""
    out = tmp_path_factory.mktemp("bench") / "one"
    shutil.copytree(SHIPPED_BENCH, out)
    shutil.copyfile(SHIPPED_BENCH.with_suffix(".json"), out.parent / "one.json")
    return out


def pytest_addoption(parser):
    parser.addoption("--slow", action="store_true", help="also run the tests marked slow (minutes each)")


# The suite's time guard (docs/testing.md, "Time"): a test whose call takes more than LONG_S must carry
# @pytest.mark.long("why it cannot be shorter"), and the whole run must finish inside BUDGET_S of
# wall-clock; either breach fails the run, whatever the tests said. Only the call counts: a shared
# fixture's setup lands on whichever test first needs it on a worker, which depends on the schedule.
LONG_S = float(os.environ.get("SUITE_LONG_S", 60))     # overridable only to test the guard itself
BUDGET_S = float(os.environ.get("SUITE_BUDGET_S", 30 * 60))   # the tests alone (501 s on two workers on 2026-12-05, 1 488 s on the slowest day measured; the goal is ~17 min)

# Files whose module fixtures take minutes, collected first so that --dist loadfile starts them at once
# and the short files fill the other worker around them (measured: docs/testing.md, "Time").
HEAVY_FIRST = ("test_quality_controls.py", "test_app_browser.py", "test_app_lesson.py", "test_app_e2e.py",
               "test_load.py", "test_app_browser_words.py", "test_speculative.py", "test_hosting.py",
               "test_bench_sweep.py", "test_newer_methods.py", "test_trees.py", "test_drafting.py",
               "test_trace_safety.py")


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: minutes long; skipped unless pytest is given --slow")
    config.addinivalue_line("markers", "long(reason): a test allowed past the suite's per-test limit, and why")
    if not hasattr(config, "workerinput"):   # not an xdist worker: the controller, or a run without workers
        config.pluginmanager.register(SuiteClock(config), "suite-clock")


def pytest_collection_modifyitems(config, items):
    for item in items:
        mark = item.get_closest_marker("long")
        if mark is not None and not (mark.args and isinstance(mark.args[0], str) and mark.args[0].strip()):
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.long needs its reason as a string")
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda it: rank.get(Path(str(it.fspath)).name, len(rank)))   # stable: file order kept
    if not config.getoption("--slow"):
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(pytest.mark.skip(reason="slow: run with --slow"))


class SuiteClock:
    """The guard's state on the controller (the process that sees every worker's reports)."""

    def __init__(self, config):
        self.config, self.started, self.calls, self.breaches = config, time.monotonic(), {}, []
        self.busy: dict[str, float] = {}     # worker -> seconds of setup, call and teardown it ran

    def pytest_runtest_logreport(self, report):
        if report.when == "call":
            self.calls[report.nodeid] = (report.duration, "long" in report.keywords)
        worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "main")
        self.busy[worker] = self.busy.get(worker, 0.0) + report.duration

    def pytest_sessionfinish(self, session):
        wall = time.monotonic() - self.started
        self.breaches = [f"{n} took {s:.0f} s (> {LONG_S:.0f} s) and is not marked long(reason)"
                         for s, n in sorted(((s, n) for n, (s, ok) in self.calls.items() if s > LONG_S and not ok),
                                            reverse=True)]
        if wall > BUDGET_S and not self.config.getoption("--slow"):
            self.breaches.append(f"the suite took {wall:.0f} s of wall-clock, past its budget of {BUDGET_S:.0f} s")
        if self.breaches and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        if not self.calls:
            return
        terminalreporter.write_line(f"suite time: {time.monotonic() - self.started:.0f} s wall-clock for "
                                    f"{len(self.calls)} tests (budget {BUDGET_S:.0f} s; a test past "
                                    f"{LONG_S:.0f} s must be marked long)")
        terminalreporter.write_line("busy: " + ", ".join(f"{w} {s:.0f} s" for w, s in sorted(self.busy.items()))
                                    + " (a worker's tests; the rest of its wall-clock it waited)")
        for line in self.breaches:
            terminalreporter.write_line(f"TIME BUDGET BREACHED: {line}", red=True, bold=True)


class PassCounter:
    """Wraps a model's forward entry points and counts the passes actually made."""

    def __init__(self, gpt, monkeypatch):
        self.n = 0
        for name in ("prefill", "forward_cells", "step_one"):
            original = getattr(gpt, name)

            def counted(*a, _f=original, **kw):
                self.n += 1
                return _f(*a, **kw)
            monkeypatch.setattr(gpt, name, counted)
