"""Crafted trace files: each one is a real trace of the embedded pair with one field made hostile.
Shared by the reader's tests and by scripts/reliability.py, which measures the largest of them."""
from __future__ import annotations

import copy
import json

from core import engine
from core.config import RunConfig
from core.trace import MAX_BYTES


def real_trace() -> dict:
    """A small real run (mulo, r = 4, tau = 0.5) of the embedded pair, as a dict."""
    run = RunConfig(method="mulo").with_params(scale=4, tau=0.5)
    return engine.run(run, engine.load_pair("embedded")).to_dict()


def _with(base: dict, **fields) -> dict:
    d = copy.deepcopy(base)
    d.update(fields)
    return d


def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _steps(base: dict, n: int) -> dict:
    step = dict(phase="decode", model="target", nfe=1, wall_ms=0.01, cells=[[0, 0]], tokens=[0])
    return _with(base, steps=[step] * n)


def _filled(base: dict, make, room: int = MAX_BYTES - 4096) -> str:
    """The trace of make(placeholder) with the placeholder replaced by as many numbers as fit the size limit."""
    text = json.dumps(make("@@"))
    n = (room - len(text)) // 4
    return text.replace('"@@"', "[" + ",".join(["0.1"] * n) + "]")


def millions_of_numbers(base: dict) -> str:
    """A real trace and one more step whose prob list fills the file to its size limit (6.3 M numbers):
    accepted before the reader bounded lists by the grid, and kept by every session that replayed it."""
    step = dict(phase="decode", model=None, nfe=0, wall_ms=0.0, cells=[])
    return _filled(base, lambda v: _with(base, steps=base["steps"] + [dict(step, prob=v)]))


def largest_accepted(base: dict) -> str:
    """A real trace padded with as many steps, and cells per step, as the reader accepts."""
    from core.trace import CELLS_PER_CELL, STEPS_PER_CELL
    H, W = base["grid"]["target"]
    cells = sum(h * w for h, w in base["grid"]["levels"])
    n = STEPS_PER_CELL * cells - len(base["steps"])                  # steps up to the bound
    per = min(10, (CELLS_PER_CELL * cells - 4 * H * W) // n)          # and about as many cells as allowed
    step = dict(phase="decode", model="target", nfe=1, wall_ms=0.01, cells=[[0, j] for j in range(per)],
                tokens=[0] * per)
    return json.dumps(_with(base, steps=base["steps"] + [step] * n))


def crafted(base: dict) -> dict[str, str]:
    """{name: file text}. Every one must be refused with "cannot replay this trace: ..."."""
    H, W = base["grid"]["target"]
    j = json.dumps
    texts = {
        "draft grid 1024x1024, no draft": j(_with(base, grid=dict(target=[H, W], draft=[1024, 1024]), draft=None)),
        "draft grid 2048x2048, no draft": j(_with(base, grid=dict(target=[H, W], draft=[2048, 2048]), draft=None)),
        "draft grid 0x0": j(_with(base, grid=dict(target=[H, W], draft=[0, 0]), draft=None)),
        "target grid 256x256": j(_with(base, grid=dict(target=[256, 256], draft=None), draft=None,
                                       tokens=[[0] * 256] * 256, proposal=None)),
        "524k short steps": j(_steps(base, 524_288)),
        "60k steps": j(_steps(base, 60_000)),
        "one step of 600k cells": j(_with(base, steps=[dict(phase="resample", model="target", nfe=1, wall_ms=1.0,
                                                            cells=[[0, 0]] * 600_000)])),
        "100k-deep nesting": '{"schema": "mulo-trace/2", "prompt": ' + _deep(100_000) + "}",
        "nesting 500 deep in a step": j(base)[:-1] + ', "extra": ' + _deep(500) + "}",
        "5000-digit seed": j(base).replace(f'"seed": {base["seed"]}', '"seed": ' + "9" * 5000),
        "seed 2^64": j(_with(base, seed=2 ** 64)),
        "seed -1": j(_with(base, seed=-1)),
        "seed a string": j(_with(base, seed="0")),
        "method with ../": j(_with(base, method="../../etc/passwd")),
        "method with NUL": j(_with(base, method="mulo\x00")),
        "method of 5000 characters": j(_with(base, method="m" * 5000)),
        "method with HTML": j(_with(base, method="<img src=x onerror=alert(1)>")),
        "model an absent pair": j(_with(base, model="llamagen-t2i")),
        "model not a string": j(_with(base, model=["embedded"])),
        "params not an object": j(_with(base, params=[1, 2, 3])),
        "params.tau a string": j(_with(base, params=dict(base["params"], tau="0.5"))),
        "NaN pooled mass": j(base).replace('"pooled": [[', '"pooled": [[NaN, ', 1),
        "Infinity wall_ms": j(base).replace('"wall_ms": ', '"wall_ms": Infinity, "x": ', 1),
        "-Infinity tau": j(base).replace('"tau": 0.5', '"tau": -Infinity', 1),
        "1e999 wall_ms": j(base).replace('"wall_ms": ', '"wall_ms": 1e999, "x": ', 1),
        "token outside the codebook": j(_with(base, tokens=[[10 ** 6] * W] * H)),
        "cell outside the grid": j(_with(base, steps=[dict(base["steps"][-1], cells=[[H, W]])])),
        "band outside the grid": j(_with(base, steps=[dict(s, band=[0, 10 ** 6]) if "band" in s else s
                                                      for s in base["steps"]])),
        "band of the wrong shape": j(_with(base, steps=[dict(s, pooled=[[0.5]]) if "band" in s else s
                                                       for s in base["steps"]])),
        "step not an object": j(_with(base, steps=[1, 2, 3])),
        "totals not numbers": j(_with(base, totals=dict(base["totals"], target_nfe="many"))),
        "not JSON": "{\"schema\": ",
        "not an object": "[1, 2, 3]",
        "unknown schema with HTML": j(_with(base, schema="<b>mulo-trace/9</b>")),
    }
    texts["over the size limit"] = " " * (MAX_BYTES + 1)
    texts["6.3 M numbers in one step's prob"] = millions_of_numbers(base)
    texts["6.3 M numbers in an unknown field"] = _filled(base, lambda v: _with(base, extra=v))
    texts["6.3 M numbers in totals"] = _filled(base, lambda v: _with(base, totals=dict(base["totals"], extra=v)))
    texts["a step judging its grid twice"] = j(_with(base, steps=[dict(base["steps"][-1], tokens=None,
                                                                         judged=[[i, k] for i in range(H)
                                                                                 for k in range(W)] * 2)]))
    return texts
