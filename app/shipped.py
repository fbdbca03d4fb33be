"""Runs shipped with the app, so that what a class clicks answers at once: every teaching preset and every
Lesson run on the default prompt, seed and pair, with their ar baseline, as traces in
assets/shipped_runs.jsonl.gz (one JSON object a line: the run's resolved RunConfig and its trace).

`python scripts/ship_runs.py` writes the file from fresh runs of CONFIGS; tests/test_shipped.py runs each
shipped configuration again and fails if a trace's tokens or passes differ from a fresh run, so a change
of the engine that moves them cannot leave a stale file behind. A shipped trace is shown as what it is:
a run made when the file was written (its wall clock that machine's), not a run of this server.
"""
from __future__ import annotations

import gzip
import json
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

from core import engine
from core.config import MethodParams, RunConfig, SamplingConfig
from core.trace import Trace

PATH = Path(__file__).resolve().parent.parent / "assets" / "shipped_runs.jsonl.gz"


def config_key(run: RunConfig) -> RunConfig:
    """The configuration as it runs (the pair's sampling filled in): the key of a shipped or remembered run."""
    return engine.resolved(run)


def ar_of(run: RunConfig) -> RunConfig:
    """The ar baseline's configuration of a run: its prompt, seed, pair and sampling, ar's knobs."""
    return replace(config_key(run), method="ar", params=MethodParams())


def configs() -> list[RunConfig]:
    """What ships: every preset's run and every Lesson run on the default prompt, seed and pair, and ar."""
    from . import lesson, links
    from .inputs import DEFAULTS, KNOBS, run_config
    out = [ar_of(RunConfig())]
    for _, overrides in links.PRESETS.values():
        values = {**DEFAULTS, **overrides}
        out.append(config_key(run_config(*(values[k] for k in KNOBS))))
    base = RunConfig(prompt=DEFAULTS["prompt"], seed=DEFAULTS["seed"], model=DEFAULTS["model"])
    out += [config_key(cfg) for step in lesson.STEPS for _, cfg in lesson.step_runs(step, base) if cfg is not None]
    unique = []
    for cfg in out:
        if cfg not in unique:
            unique.append(cfg)
    return unique


def config_from_dict(d: dict) -> RunConfig:
    return RunConfig(method=d["method"], prompt=d["prompt"], seed=d["seed"], model=d["model"],
                     sampling=None if d["sampling"] is None else SamplingConfig(**d["sampling"]),
                     params=MethodParams(**d["params"]))


@lru_cache(maxsize=1)
def _table(path: Path = PATH) -> dict[RunConfig, str]:
    """Shipped configuration -> its trace's JSON text (parsed when asked for); empty without the file."""
    if not path.exists():
        return {}
    table = {}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for line in f:
            entry = json.loads(line)
            table[config_from_dict(entry["config"])] = json.dumps(entry["trace"])
    return table


def trace_for(run: RunConfig) -> Trace | None:
    """The shipped trace of this configuration, or None."""
    text = _table().get(config_key(run))
    return None if text is None else Trace.from_json(text)


def has(run: RunConfig) -> bool:
    return config_key(run) in _table()
