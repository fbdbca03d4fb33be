"""The Trace: what a run did, step by step, as data (schema "mulo-trace/3"; "/2" and "/1" files are still read).

/3 adds levels: `grid.levels` lists the grids a run works on (0 the target, 1 the drafter's, 2 the
drafter's drafter in a cascade), each step names its `level` (absent: 0), `totals.level_nfe` counts
the passes per level, and a run whose drafter was a run of its own (draft_method) keeps each deeper
level's tokens, proposal and draft in `levels`. A /2 trace reads as levels [target, draft], its draft
and refresh steps at level 1.

Every method yields Steps; the engine wraps them into a Trace that round-trips through JSON. A
reader rejects unknown schema versions and malformed files with a TraceError that says what is
wrong. Nothing here calls a model.
"""
from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

SCHEMA = "mulo-trace/3"
V2 = "mulo-trace/2"
OLD_SCHEMAS = (V2, "mulo-trace/1")  # read and converted: /1 totals.accepted_fraction -> passed / kept; /2 levels
PHASES = ("draft", "upsample", "verify", "resample", "decode", "refresh")
MODELS = ("target", "drafter", None)
MAX_BYTES = 24 * 1024 * 1024     # a real 32x32 trace: ~1.3 MB (sd, gamma 16), 17.5 MB (mulo raster rejection, tau 0.5)


class TraceError(ValueError):
    """A trace that cannot be read: wrong version, missing field, bad value."""


@dataclass
class Step:
    phase: str                       # one of PHASES
    model: str | None                # target, drafter or None (no model pass)
    nfe: int                         # sequential forward passes of that model in this step
    wall_ms: float
    cells: list                      # [[i, j], ...] written or judged (target grid, or draft grid for draft)
    tokens: list | None = None       # token written at each cell (None for judging steps)
    extra: dict = field(default_factory=dict)  # verify: band, pooled, accepted, resample, islands; ...
    level: int = 0                   # the grid it works on: 0 target, 1 the drafter's, 2 the drafter's drafter

    def to_dict(self) -> dict:
        d = dict(phase=self.phase, model=self.model, nfe=self.nfe, wall_ms=round(self.wall_ms, 3),
                 cells=self.cells)
        if self.level:
            d["level"] = self.level
        if self.tokens is not None:
            d["tokens"] = self.tokens
        d.update(self.extra)
        return d


@dataclass
class Trace:
    method: str
    params: dict
    seed: int
    prompt: str
    model: str
    grid: dict                        # {"target": [H, W], "draft": [h, w] or None}
    tokens: list                      # H x W final tokens
    proposal: list | None
    draft: list | None
    steps: list                       # list of step dicts (Step.to_dict())
    totals: dict
    levels: list | None = None        # levels 1.. when the drafter ran a method of its own: {grid, method,
                                      # tokens, proposal, draft} each (level 1's tokens are `draft`)
    schema: str = SCHEMA

    def to_dict(self) -> dict:
        d = dict(schema=self.schema, method=self.method, params=self.params, seed=self.seed,
                 prompt=self.prompt, model=self.model, grid=self.grid, tokens=self.tokens,
                 proposal=self.proposal, draft=self.draft, steps=self.steps, totals=self.totals)
        if self.levels is not None:
            d["levels"] = self.levels
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @staticmethod
    def from_json(text: str | bytes, limits_for: Callable[[str], "Limits"] | None = None) -> "Trace":
        """Parse and check a trace. limits_for(model name) gives what that pair's runs can hold (its
        grids, codebook, counts); without it the trace's own grid bounds the counts."""
        if len(text) > MAX_BYTES:
            raise TraceError(f"the file is {len(text)} bytes; at most {MAX_BYTES} are read")
        if _nesting(text.encode() if isinstance(text, str) else text) > MAX_DEPTH:
            raise TraceError(f"it nests deeper than {MAX_DEPTH} levels")
        try:
            d = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_no_constant)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise TraceError(f"it is not valid JSON: {e}") from None
        except RecursionError:
            raise TraceError(f"it nests deeper than {MAX_DEPTH} levels") from None
        return Trace._checked(d, limits_for)

    @staticmethod
    def from_dict(d, limits_for: Callable[[str], "Limits"] | None = None) -> "Trace":
        _check_depth(d)
        return Trace._checked(d, limits_for)

    @staticmethod
    def _checked(d, limits_for) -> "Trace":
        if not isinstance(d, dict):
            raise TraceError("the trace must be a JSON object")
        if d.get("schema") not in (SCHEMA, *OLD_SCHEMAS):
            raise TraceError(f"unsupported trace schema {_show(d.get('schema'))}; this reader knows "
                             f"{', '.join(repr(s) for s in (SCHEMA, *OLD_SCHEMAS))}")
        missing = [k for k in FIELDS if k not in d]
        if missing:
            raise TraceError(f"the trace lacks the field(s) {', '.join(missing)}")
        if d["schema"] != SCHEMA:
            d = _from_v2(d if d["schema"] == V2 else _from_v1(d))
        _validate(d, limits_for)
        return Trace(**{k: d[k] for k in FIELDS}, levels=d.get("levels"))


FIELDS = ("method", "params", "seed", "prompt", "model", "grid", "tokens", "proposal", "draft", "steps", "totals")
MAX_DEPTH = 8             # a trace nests 5 levels (trace, steps, step, rows, values); more is not a trace
MAX_DIGITS = 19           # integers up to 2^63 - 1
MAX_SIDE = 256            # a token grid side
STEPS_PER_CELL = 48       # steps a run may take per cell of its grids (mulo raster rejection at tau 0.5: 36)
CELLS_PER_CELL = 512      # cells a run's steps may write or judge, per cell of its grids (raster, tau 0.5: 334)
MAX_LEVELS = 4            # target, drafter, and two levels of cascade
STEP_KEYS = {"phase", "model", "nfe", "wall_ms", "cells", "tokens", "judged", "accepted", "prob", "resampled",
             "bonus", "band", "pooled", "resample", "islands", "rows"}   # the step fields that may hold lists
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")   # method, model, parameter names: no markup, no paths


@dataclass(frozen=True)
class Limits:
    """What a trace may hold to be replayed with one model pair: its grids and its codebook."""
    target: tuple[int, int]                  # H, W
    drafts: tuple[tuple[int, int], ...]      # the drafter grids the pair serves (h, w)
    vocab_size: int


def _show(v) -> str:
    """A value from a file, quoted for a message: at most 40 characters (a page shows it escaped)."""
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def _parse_int(s: str) -> int:
    if len(s.lstrip("-")) > MAX_DIGITS:
        raise TraceError(f"it holds an integer of {len(s.lstrip('-'))} digits; at most {MAX_DIGITS} are read")
    return int(s)


def _parse_float(s: str) -> float:
    v = float(s)
    if not math.isfinite(v):
        raise TraceError(f"it holds the number {s[:40]}, too large to be finite")
    return v


def _no_constant(name: str):
    raise TraceError(f"it holds {name}; every number in a trace is finite")


def _nesting(raw: bytes) -> int:
    """How deep the brackets of a JSON text nest, strings aside; read before parsing, in one
    vectorised pass, so that no nesting reaches the parser's recursion."""
    a = np.frombuffer(re.sub(rb'"(?:[^"\\]|\\.)*"', b'""', raw), dtype=np.uint8)
    brackets = a[(a == ord("[")) | (a == ord("{")) | (a == ord("]")) | (a == ord("}"))]
    step = np.where((brackets == ord("[")) | (brackets == ord("{")), 1, -1).astype(np.int32)
    return int(np.cumsum(step, dtype=np.int32).max(initial=0))


def _check_depth(d) -> None:
    """Iteratively, so that no nesting can exhaust the interpreter's stack."""
    stack = [(d, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, (list, dict)):
            if depth > MAX_DEPTH:
                raise TraceError(f"it nests deeper than {MAX_DEPTH} levels")
            stack.extend((x, depth + 1) for x in (v.values() if isinstance(v, dict) else v)
                         if isinstance(x, (list, dict)))


def _is_int(v, lo: int = 0, hi: int = 2 ** 63 - 1) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _is_num(v, lo: float = -math.inf, hi: float = math.inf) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi


def _pair(v, lo: int, hi: int) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(_is_int(x, lo, hi) for x in v)


def _grid_ok(g, H, W, ok=lambda v: _is_int(v)) -> bool:
    return isinstance(g, list) and len(g) == H and all(
        isinstance(r, list) and len(r) == W and all(ok(v) for v in r) for r in g)


def _validate(d: dict, limits_for) -> None:
    """Every field's type and range, cheapest first; grids before anything sized by them."""
    if not isinstance(d["method"], str) or not NAME.fullmatch(d["method"]):
        raise TraceError(f"method must be a method name (letters, digits, '.', '_', '-'); got {_show(d['method'])}")
    if not isinstance(d["model"], str) or not NAME.fullmatch(d["model"]):
        raise TraceError(f"model must be a model pair name; got {_show(d['model'])}")
    if not isinstance(d["prompt"], str) or len(d["prompt"]) > 2000:
        raise TraceError("prompt must be a string of at most 2000 characters")
    if not _is_int(d["seed"]):
        raise TraceError(f"seed must be an integer in [0, 2^63); got {_show(d['seed'])}")
    params = d["params"]
    if not isinstance(params, dict) or len(params) > 64:
        raise TraceError("params must be an object of at most 64 knobs")
    for k, v in params.items():
        if not NAME.fullmatch(k) or not (v is None or isinstance(v, bool) or _is_num(v)
                                         or (isinstance(v, str) and len(v) <= 64)):
            raise TraceError(f"params: {_show(k)} must name a knob whose value is a number, a word or null")
    if "tau" in params and not _is_num(params["tau"], 0.0, 1.0):
        raise TraceError(f"params.tau must be a number in [0, 1]; got {_show(params['tau'])}")
    limits = _limits(d, limits_for)
    H, W = limits.target
    grid = d["grid"]
    if list(grid["target"]) != [H, W]:
        raise TraceError(f"grid.target is {_show(grid['target'])}; the {d['model']} pair draws {H}x{W}")
    dg = grid.get("draft")
    if dg is not None and tuple(dg) not in limits.drafts:
        raise TraceError(f"grid.draft is {_show(dg)}; the {d['model']} pair drafts on "
                         f"{' or '.join(f'{h}x{w}' for h, w in limits.drafts) or 'no smaller grid'}")
    token = lambda v: _is_int(v, 0, limits.vocab_size - 1)  # noqa: E731
    for name, shape in (("tokens", (H, W)), ("proposal", (H, W)), ("draft", dg)):
        if name != "tokens" and d[name] is None:
            continue
        if shape is None or not _grid_ok(d[name], *shape, ok=token):
            raise TraceError(f"{name} must be " + ("null or " if name != "tokens" else "")
                             + (f"a {shape[0]}x{shape[1]} grid of codebook tokens in [0, {limits.vocab_size})"
                                if shape else "null when grid.draft is null"))
    levels = grid.get("levels")
    if not (isinstance(levels, list) and 1 <= len(levels) <= MAX_LEVELS and all(_pair(g, 1, MAX_SIDE) for g in levels)
            and levels[0] == [H, W] and (dg is None) == (len(levels) == 1) and (dg is None or levels[1] == list(dg))
            and all(tuple(g) in limits.drafts for g in levels[1:])):
        raise TraceError(f"grid.levels must list the grids of the run ([H, W] of the target, then grid.draft, then "
                         f"any deeper drafter grid the pair serves), at most {MAX_LEVELS}")
    _validate_levels(d.get("levels"), levels, token)
    _validate_steps(d["steps"], [tuple(g) for g in levels], limits)
    t = d["totals"]
    if not isinstance(t, dict) or not all(k in t for k in TOTALS):
        raise TraceError(f"totals must give {', '.join(TOTALS)}")
    if not (_is_int(t["target_nfe"]) and _is_int(t["drafter_nfe"]) and _is_num(t["wall_ms"], 0.0)
            and all(t[k] is None or _is_num(t[k], 0.0, 1.0) for k in ("passed_fraction", "kept_fraction"))):
        raise TraceError("totals: NFE counts must be integers >= 0, wall_ms a number >= 0 and the fractions "
                         "null or in [0, 1]")
    if "level_nfe" in t and not (isinstance(t["level_nfe"], list) and len(t["level_nfe"]) == len(levels)
                                 and all(_is_int(v) for v in t["level_nfe"])):
        raise TraceError("totals: level_nfe must hold one integer >= 0 per level of grid.levels")


def _validate_levels(nested, grids: list, token) -> None:
    """The deeper levels' grids: level l (1..) has grids[l]'s tokens, a proposal of that shape or null,
    and a draft on grids[l + 1] or null."""
    if nested is None:
        return
    if not (isinstance(nested, list) and 1 <= len(nested) <= len(grids) - 1):
        raise TraceError(f"levels must be null or a list of at most {len(grids) - 1} levels below the target")
    for n, lv in enumerate(nested, start=1):
        shape, below = grids[n], grids[n + 1] if n + 1 < len(grids) else None
        if not (isinstance(lv, dict) and isinstance(lv.get("method"), str) and NAME.fullmatch(lv["method"])
                and lv.get("grid") == shape and _grid_ok(lv.get("tokens"), *shape, ok=token)
                and (lv.get("proposal") is None or _grid_ok(lv["proposal"], *shape, ok=token))
                and (lv.get("draft") is None or (below is not None and _grid_ok(lv["draft"], *below, ok=token)))):
            raise TraceError(f"levels[{n - 1}] must give method, grid {shape}, tokens on it, and proposal "
                             f"(same grid) and draft (the next level's grid) or null")


def _limits(d: dict, limits_for) -> Limits:
    """The pair's limits, or without a pair the trace's own grid within MAX_SIDE."""
    grid = d["grid"]
    if not (isinstance(grid, dict) and _pair(grid.get("target"), 1, MAX_SIDE)
            and (grid.get("draft") is None or _pair(grid["draft"], 1, MAX_SIDE))):
        raise TraceError(f"grid must be {{\"target\": [H, W], \"draft\": [h, w] or null}} with sides in "
                         f"[1, {MAX_SIDE}]")
    if limits_for is not None:
        try:
            return limits_for(d["model"])
        except ValueError as e:
            raise TraceError(str(e)) from None
    H, W = grid["target"]
    levels = grid.get("levels")
    deeper = [tuple(g) for g in levels[1:] if _pair(g, 1, MAX_SIDE)] if isinstance(levels, list) else []
    return Limits((H, W), tuple(deeper), 2 ** 31)


def _validate_steps(steps, grids: list[tuple[int, int]], limits: Limits) -> None:
    """Each step's fields on the grid of its level, and the counts a real run on these grids stays under."""
    cells_total = sum(h * w for h, w in grids)
    if not isinstance(steps, list) or len(steps) > STEPS_PER_CELL * cells_total:
        raise TraceError(f"steps must be a list of at most {STEPS_PER_CELL * cells_total} steps "
                         f"({STEPS_PER_CELL} per cell of the grids)")
    budget = CELLS_PER_CELL * cells_total
    for n, s in enumerate(steps):
        if not isinstance(s, dict) or s.get("phase") not in PHASES or s.get("model") not in MODELS:
            raise TraceError(f"step {n} needs a phase in {PHASES} and a model in {MODELS}")
        if not _is_int(s.get("nfe"), 0, cells_total) or not _is_num(s.get("wall_ms"), 0.0):
            raise TraceError(f"step {n} needs an integer nfe in [0, {cells_total}] and a number wall_ms >= 0")
        if s.get("grid", "target") not in ("target", "draft"):
            raise TraceError(f"step {n}: grid must be 'target' or 'draft'")
        if not _is_int(s.get("level", 0), 0, len(grids) - 1):
            raise TraceError(f"step {n}: level must be an integer in [0, {len(grids) - 1}] (one per grid.levels)")
        h, w = grids[s.get("level", 0)]
        cell = lambda c: _pair(c, 0, max(h, w) - 1) and c[0] < h and c[1] < w  # noqa: E731
        cells, judged = s.get("cells"), s.get("judged")
        if not isinstance(cells, list) or not (judged is None or isinstance(judged, list)):
            raise TraceError(f"step {n}: cells (and judged) must be lists of [i, j]")
        budget -= len(cells) + len(judged or ())   # counted before any cell is looked at
        if budget < 0:
            raise TraceError(f"the steps write or judge more than {CELLS_PER_CELL * cells_total} cells "
                             f"({CELLS_PER_CELL} per cell of the grids)")
        if not all(cell(c) for c in cells) or not all(cell(c) for c in judged or ()):
            raise TraceError(f"step {n}: cells and judged must be [i, j] inside the {h}x{w} grid")
        tokens = s.get("tokens")
        if tokens is not None and not (isinstance(tokens, list) and len(tokens) == len(cells)
                                       and all(_is_int(v, 0, limits.vocab_size - 1) for v in tokens)):
            raise TraceError(f"step {n}: tokens must be null or one codebook token in [0, {limits.vocab_size}) per cell")
        for key in ("resampled", "bonus"):
            if s.get(key) is not None and not cell(s[key]):
                raise TraceError(f"step {n}: {key} must be null or a cell [i, j] inside the {h}x{w} grid")
        for key, most in (("wave", cells_total), ("rejected", cells_total), ("n_islands", cells_total),
                          ("refreshed", cells_total), ("fed", 4 * cells_total)):
            if key in s and not _is_int(s[key], 0, most):
                raise TraceError(f"step {n}: {key} must be an integer in [0, {most}]")
        if "prob" in s and not (isinstance(s["prob"], list) and all(_is_num(p) for p in s["prob"])):
            raise TraceError(f"step {n}: prob must be a list of numbers")
        if "rows" in s and not (isinstance(s["rows"], list) and len(s["rows"]) <= h
                                and all(_is_int(r, 0, h - 1) for r in s["rows"])):   # pjd: the active rows
            raise TraceError(f"step {n}: rows must be a list of at most {h} row indices in [0, {h})")
        for key, v in s.items():   # keys this reader does not know: plain values only, nothing that grows
            if key not in STEP_KEYS and not (v is None or isinstance(v, bool) or _is_num(v)
                                             or (isinstance(v, str) and len(v) <= 64)):
                raise TraceError(f"step {n}: {_show(key)} is not a step field this reader knows; such fields "
                                 f"may hold a number, a short word or null only")
        if "band" in s:
            _validate_band(n, s, h, w)
        elif "accepted" in s and not (isinstance(s["accepted"], list) and len(s["accepted"]) <= h * w
                                      and all(isinstance(a, bool) for a in s["accepted"])):
            raise TraceError(f"step {n}: accepted must be a list of true / false")


def _validate_band(n: int, s: dict, H: int, W: int) -> None:
    """A MuLo-SD verify step: a band of rows [r0, r1) and, over it, pooled / accepted / resample / islands."""
    band = s["band"]
    if s["phase"] != "verify" or not (_pair(band, 0, H) and band[0] < band[1]):
        raise TraceError(f"step {n}: band must be rows [r0, r1) of a verify step, 0 <= r0 < r1 <= {H}")
    rows = band[1] - band[0]
    checks = (("pooled", lambda v: v is None or _is_num(v, 0.0, 1.0 + 1e-3), "numbers in [0, 1] (null: not judged)"),
              ("accepted", lambda v: v is None or isinstance(v, bool), "true / false (null: not judged)"),
              ("resample", lambda v: isinstance(v, bool), "true / false"),
              ("islands", lambda v: _is_int(v, 0, H * W), f"island ids in [0, {H * W}]"))
    for key, ok, what in checks:
        if not _grid_ok(s.get(key), rows, W, ok=ok):
            raise TraceError(f"step {n}: {key} must be a {rows}x{W} grid of {what} over its band")


TOTALS = ("target_nfe", "drafter_nfe", "wall_ms", "passed_fraction", "kept_fraction")


def _from_v1(d: dict) -> dict:
    """A mulo-trace/1 dict in the /2 vocabulary. /1 had one `accepted_fraction`: for mulo the share of
    cells kept outside R_X, for sd / lantern / sjd the share of judged drafts that passed the test.
    The other quantity is recounted from the verify steps."""
    t = d.get("totals")
    if not isinstance(t, dict) or "accepted_fraction" not in t or not isinstance(d.get("steps"), list):
        return d  # _validate names what is missing
    t = {k: v for k, v in t.items() if k != "accepted_fraction"}
    old = d["totals"]["accepted_fraction"]
    verdicts = [v for s in d["steps"] if isinstance(s, dict) and s.get("phase") == "verify"
                for v in _flat(s.get("accepted", []))]
    n_cells = len(d["tokens"]) * len(d["tokens"][0]) if isinstance(d.get("tokens"), list) and d["tokens"]         and isinstance(d["tokens"][0], list) else 0
    if old is None or not verdicts:
        t.update(passed_fraction=None, kept_fraction=old)
    elif d.get("method") == "mulo":
        t.update(passed_fraction=sum(map(bool, verdicts)) / len(verdicts), kept_fraction=old)
    else:
        t.update(passed_fraction=old, kept_fraction=sum(map(bool, verdicts)) / max(n_cells, 1))
    return dict(d, schema=V2, totals=t)


def _from_v2(d: dict) -> dict:
    """A mulo-trace/2 dict in the /3 vocabulary: levels [target, draft]; draft and refresh steps
    (grid "draft") at level 1."""
    grid, steps = d.get("grid"), d.get("steps")
    if not isinstance(grid, dict) or not isinstance(steps, list):
        return d  # _validate names what is wrong
    levels = [grid.get("target")] + ([grid["draft"]] if grid.get("draft") is not None else [])
    steps = [dict(s, level=1) if isinstance(s, dict) and levels[1:] and (s.get("phase") == "draft"
                                                                        or s.get("grid") == "draft") else s
             for s in steps]
    return dict(d, schema=SCHEMA, grid=dict(grid, levels=levels), steps=steps)


def _flat(x) -> list:
    return [v for r in x for v in (_flat(r) if isinstance(r, list) else [r])] if isinstance(x, list) else []


def totals(steps: list[dict], wall_ms: float, passed_fraction: float | None, kept_fraction: float | None,
           n_levels: int = 1) -> dict:
    """level_nfe: passes per level (0 target, 1 drafter, 2 the drafter's drafter); passed_fraction: share of judged cells that passed the acceptance test (mulo: pooled >= tau);
    kept_fraction: share of the H x W cells whose drafted or proposed token was kept without
    resampling (mulo: outside R_X). wall_ms: all work of the run, not only the timed steps."""
    return dict(target_nfe=sum(s["nfe"] for s in steps if s["model"] == "target"),
                drafter_nfe=sum(s["nfe"] for s in steps if s["model"] == "drafter"),
                wall_ms=round(wall_ms, 3), passed_fraction=passed_fraction, kept_fraction=kept_fraction,
                level_nfe=[sum(s["nfe"] for s in steps if s.get("level", 0) == lv) for lv in range(n_levels)])
