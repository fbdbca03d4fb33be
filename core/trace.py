"""The Trace: what a run did, step by step, as data (schema "mulo-trace/3"; "/2" and "/1" files are still read).

/3 adds levels: `grid.levels` lists the grids a run works on (0 the target, 1 the drafter's, 2 the
drafter's drafter in a cascade), each step names its `level` (absent: 0), `totals.level_nfe` counts
the passes per level, and a run whose drafter was a run of its own (draft_method) keeps each deeper
level's tokens, proposal and draft in `levels`. A /2 trace reads as levels [target, draft], its draft
and refresh steps at level 1.

Every method yields Steps; the engine wraps them into a Trace that round-trips through JSON. A
reader rejects unknown schema versions and malformed files with a TraceError that says what is
wrong. It reads a file field by field and step by step, each piece parsed only once its count of
values is known to fit the run's grids, so a hostile file is refused before it is materialised; the
Trace it returns keeps its steps as compact text (Steps). Nothing here calls a model.

One file, although past 500 lines: the record, its writer and its streaming reader are one contract
(every field the writer emits is a bound the reader checks while parsing), and a change to one side
must be read beside the other.
"""
from __future__ import annotations

import bisect
import codecs
import json
import math
import re
import zlib
from collections.abc import Sequence
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

    def _fields(self) -> dict:
        d = dict(schema=self.schema, method=self.method, params=self.params, seed=self.seed,
                 prompt=self.prompt, model=self.model, grid=self.grid, tokens=self.tokens,
                 proposal=self.proposal, draft=self.draft, steps=self.steps, totals=self.totals)
        if self.levels is not None:
            d["levels"] = self.levels
        return d

    def to_dict(self) -> dict:
        d = self._fields()
        if isinstance(self.steps, Steps):
            d["steps"] = list(self.steps)
        return d

    def to_json(self) -> str:
        """The JSON of to_dict(); a read trace's steps go out as the text they are kept in."""
        d = self._fields()
        if not isinstance(self.steps, Steps):
            return json.dumps(d)
        return "{" + ", ".join(f"{json.dumps(k)}: {v.json() if k == 'steps' else json.dumps(v)}"
                               for k, v in d.items()) + "}"

    @staticmethod
    def from_json(text: str | bytes, limits_for: Callable[[str], "Limits"] | None = None) -> "Trace":
        """Parse and check a trace. limits_for(model name) gives what that pair's runs can hold (its
        grids, codebook, counts); without it the trace's own grid bounds the counts. The grids, the
        deeper levels and the steps are parsed only after the fields that size them, each piece once
        its count of values is known to fit."""
        try:
            raw = text.encode() if isinstance(text, str) else bytes(text)
        except UnicodeEncodeError as e:
            raise TraceError(f"it is not valid JSON: {e}") from None
        if len(raw) > MAX_BYTES:
            raise TraceError(f"the file is {len(raw)} bytes; at most {MAX_BYTES} are read")
        if raw[:2] == GZIP_MAGIC:
            raise TraceError("the file is gzip-compressed: unpack it and give the trace .json itself")
        return Trace._checked(_fields_of(raw[3:] if raw.startswith(codecs.BOM_UTF8) else raw), limits_for)

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
        d = dict(d)
        if d["schema"] != SCHEMA:
            d["grid"] = _levels_of_v2(d["grid"])
        d["steps"], d["tokens"], d["proposal"], d["draft"], d["levels"] = _validate(d, limits_for)
        return Trace(**{k: d[k] for k in FIELDS}, levels=d["levels"])


FIELDS = ("method", "params", "seed", "prompt", "model", "grid", "tokens", "proposal", "draft", "steps", "totals")
GZIP_MAGIC = b"\x1f\x8b"   # the first two bytes of every gzip file
MAX_DEPTH = 8             # a trace nests 5 levels (trace, steps, step, rows, values); more is not a trace
MAX_DIGITS = 19           # integers up to 2^63 - 1
MAX_SIDE = 256            # a token grid side
STEPS_PER_CELL = 48       # steps a run may take per cell of its grids (mulo raster rejection at tau 0.5: 36)
CELLS_PER_CELL = 512      # cells a run's steps may write or judge, per cell of its grids (raster, tau 0.5: 334)
MAX_LEVELS = 4            # target, drafter, and two levels of cascade
MAX_FIELDS = 32           # top-level fields of a file (a trace has 13; others are read and dropped)
HEAD_VALUES = 4096        # values a field other than the grids, levels and steps may hold (params: 64 knobs)
STEP_FIELDS = 32          # fields of one step (a real one has at most 14)
VALUES_PER_CELL = 16      # values one step may hold per cell of its run's largest grid: cells and judged 2 each,
                          # tokens, prob and accepted 1 each, a verify band's four grids 1 each, and their rows
STEP_KEYS = {"phase", "model", "nfe", "wall_ms", "cells", "tokens", "judged", "accepted", "prob", "resampled",
             "bonus", "band", "pooled", "resample", "islands", "rows", "tree"}   # the step fields that may hold lists
TREE_NODES = 128          # nodes of one verified draft tree (config.TREE_TOKENS_MAX)
GRIDS = ("tokens", "proposal", "draft", "levels", "steps")   # fields sized by the grid: parsed after it
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")   # method, model, parameter names: no markup, no paths


@dataclass(frozen=True)
class Limits:
    """What a trace may hold to be replayed with one model pair: its grids and its codebook."""
    target: tuple[int, int]                  # H, W
    drafts: tuple[tuple[int, int], ...]      # the drafter grids the pair serves (h, w)
    vocab_size: int


class Steps(Sequence):
    """A read trace's steps, kept as their compact JSON text compressed in blocks and decoded when read:
    a replayed trace holds a fraction of its file's size, not the ten times more that parsed lists of
    numbers take. Reads like the engine's list of step dicts (len, index, iteration); a slice is a view
    of the same blocks, and a step read is a fresh dict."""

    BLOCK = 1 << 16       # bytes of step text compressed together (a read decompresses one block)

    def __init__(self, texts=()):
        self._blocks: list[bytes] = []    # zlib of the step texts of a block, one per line
        self._starts: list[int] = []      # the index of each block's first step
        self._lo = self._hi = 0           # the steps this object shows: [lo, hi) of its blocks
        block, size = [], 0
        for t in texts:
            block.append(t)
            size += len(t) + 1
            if size >= self.BLOCK:
                self._seal(block)
                block, size = [], 0
        if block:
            self._seal(block)

    def _seal(self, block: list[bytes]) -> None:
        self._blocks.append(zlib.compress(b"\n".join(block), 1))
        self._starts.append(self._hi)
        self._hi += len(block)

    def _texts(self, lo: int, hi: int):
        """The texts of steps [lo, hi) of the blocks, each block decompressed once."""
        k = max(bisect.bisect_right(self._starts, lo) - 1, 0)
        while k < len(self._blocks) and self._starts[k] < hi:
            first = self._starts[k]
            yield from zlib.decompress(self._blocks[k]).split(b"\n")[max(lo - first, 0):hi - first]
            k += 1

    def __len__(self) -> int:
        return self._hi - self._lo

    def __getitem__(self, i):
        if isinstance(i, slice):
            lo, hi, step = i.indices(len(self))
            if step != 1:
                return list(self)[i]
            view = object.__new__(Steps)
            view._blocks, view._starts = self._blocks, self._starts
            view._lo, view._hi = self._lo + lo, self._lo + max(lo, hi)
            return view
        n = i + len(self) if i < 0 else i
        if not 0 <= n < len(self):
            raise IndexError("step index out of range")
        return json.loads(next(self._texts(self._lo + n, self._lo + n + 1)))

    def __iter__(self):
        return map(json.loads, self._texts(self._lo, self._hi))

    def __eq__(self, other) -> bool:
        return isinstance(other, (list, Steps)) and len(self) == len(other) and all(a == b for a, b in zip(self, other))

    __hash__ = None

    def nbytes(self) -> int:
        """The bytes of the blocks kept (compressed), shared with any slice of them."""
        return sum(map(len, self._blocks))

    def json(self) -> str:
        return "[" + b", ".join(self._texts(self._lo, self._hi)).decode() + "]"


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


# --- reading a file: its structure first, then each piece once its size is known ---

SCAN_CHUNK = 1 << 20      # bytes scanned at once: the scan's own arrays stay a few MB whatever the file
WHITE = b" \t\n\r"
LEADING_WHITE = re.compile(rb"[ \t\n\r]*")


def _trimmed(raw: bytes, lo: int, hi: int) -> tuple[int, int]:
    """raw[lo:hi] without the whitespace around it, as (start, end); nothing is copied but 1 MiB pieces."""
    lo = LEADING_WHITE.match(raw, lo, hi).end()
    while hi > lo:
        piece = raw[max(lo, hi - SCAN_CHUNK):hi]
        kept = len(piece.rstrip(WHITE))
        hi -= len(piece) - kept
        if kept:
            break
    return lo, hi


@dataclass
class _Shape:
    deepest: int          # the deepest nesting reached
    depth: int            # the nesting at the end
    back: int             # the first position where the nesting fell to the starting depth (-1: never)
    in_string: bool       # the text ends inside a string
    seps: list            # (position, ord(",") or ord(":")) at nesting `keep`; None when more than `most`


def _scan(raw: bytes, lo: int, hi: int, depth: int, keep: int, most: int) -> _Shape:
    """The structure of raw[lo:hi], which starts outside any string at nesting `depth`, without parsing it:
    brackets, commas and colons outside strings (a quote after an odd run of backslashes is escaped),
    vectorised over chunks of SCAN_CHUNK bytes."""
    shape = _Shape(depth, depth, -1, False, [])
    floor, run = depth, 0          # run: backslashes just before the chunk
    for start in range(lo, hi, SCAN_CHUNK):
        a = np.frombuffer(raw, np.uint8, min(SCAN_CHUNK, hi - start), start)
        slash = a == 92
        plain = np.maximum.accumulate(np.where(slash, np.int32(-1 - run), np.arange(len(a), dtype=np.int32)))
        q = np.flatnonzero(a == 34)
        before = np.where(q > 0, q - 1 - plain[np.maximum(q - 1, 0)], run)      # backslashes before each quote
        q = q[before % 2 == 0]
        s = np.flatnonzero((a == 44) | (a == 58) | (a == 91) | (a == 93) | (a == 123) | (a == 125))
        s = s[(np.searchsorted(q, s) + shape.in_string) % 2 == 0]
        k = a[s]
        d = shape.depth + np.cumsum((k == 91).astype(np.int32) + (k == 123) - (k == 93) - (k == 125))
        if len(d):
            shape.deepest = max(shape.deepest, int(d.max()))
            if shape.back < 0 and (fell := np.flatnonzero(d <= floor)).size:
                shape.back = start + int(s[fell[0]])
            if shape.seps is not None:
                at = (d == keep) & ((k == 44) | (k == 58))
                shape.seps += zip((start + s[at]).tolist(), k[at].tobytes())
                if len(shape.seps) > most:
                    shape.seps = None
            shape.depth = int(d[-1])
        shape.in_string ^= bool(len(q) % 2)
        run = len(a) - 1 - int(plain[-1]) if slash[-1] else 0
    return shape


def _invalid(raw: bytes, pos: int, what: str) -> TraceError:
    line = raw.count(b"\n", 0, pos) + 1
    column = pos - (raw.rfind(b"\n", 0, pos) + 1) + 1
    return TraceError(f"it is not valid JSON: {what}: line {line} column {column} (char {pos})")


def _loads(raw: bytes, start: int, end: int):
    """raw[start:end] parsed, a bad number or any JSON error named by its place in the whole file."""
    try:
        return json.loads(raw[start:end], parse_int=_parse_int, parse_float=_parse_float,
                          parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        raise _invalid(raw, start + e.pos, e.msg) from None
    except UnicodeDecodeError as e:
        raise TraceError(f"it is not valid JSON: {e}") from None


@dataclass(frozen=True)
class _Span:
    """A field of a file, raw[start:end], not parsed yet."""
    raw: bytes
    start: int
    end: int

    def values(self) -> int:
        """At least the values it holds (commas inside strings count too)."""
        return self.raw.count(b",", self.start, self.end) + 1

    def parse(self):
        return _loads(self.raw, self.start, self.end)


def _fields_of(raw: bytes) -> dict | list:
    """The top-level fields of a file: parsed where small, spans for the fields GRIDS names (and a
    list for a file that is not an object; the caller refuses it)."""
    head, tail = _trimmed(raw, 0, len(raw))
    shape = _scan(raw, head, tail, 0, 1, 2 * MAX_FIELDS)
    if shape.deepest > MAX_DEPTH:
        raise TraceError(f"it nests deeper than {MAX_DEPTH} levels")
    if head >= tail:
        raise _invalid(raw, len(raw), "Expecting value")
    if raw[head] != ord("{"):
        if raw[head] == ord("["):
            return []
        try:   # a scalar (or not JSON at all): parsed at once, nothing in it is sized
            json.loads(raw.decode(), parse_int=_parse_int, parse_float=_parse_float, parse_constant=_no_constant)
        except json.JSONDecodeError as e:
            raise _invalid(raw, e.pos, e.msg) from None
        except UnicodeDecodeError as e:
            raise TraceError(f"it is not valid JSON: {e}") from None
        return []
    if shape.in_string:
        raise _invalid(raw, tail, "Unterminated string")
    if shape.back != tail - 1 or shape.depth != 0 or raw[tail - 1] != ord("}"):
        raise _invalid(raw, tail if shape.back < 0 else shape.back + 1,
                       "Expecting ',' delimiter" if shape.back < 0 else "Extra data")
    if shape.seps is None:
        raise TraceError(f"the file has more than {MAX_FIELDS} top-level fields; a trace has {len(FIELDS) + 2}")
    out, start, colon = {}, head + 1, None
    for pos, kind in shape.seps + [(tail - 1, ord(","))]:
        if kind == ord(":"):
            if colon is not None:
                raise _invalid(raw, pos, "Expecting ',' delimiter")
            colon = pos
            continue
        if colon is None:
            if pos == tail - 1 and not out and _trimmed(raw, start, pos)[0] == pos:
                break   # {}
            raise _invalid(raw, start, "Expecting property name enclosed in double quotes")
        key = _take(_Span(raw, start, colon), HEAD_VALUES, "it is not valid JSON: a field's name must be a string")
        if not isinstance(key, str):
            raise _invalid(raw, start, "Expecting property name enclosed in double quotes")
        value = _Span(raw, colon + 1, pos)
        if key not in GRIDS:
            if value.values() > HEAD_VALUES:
                raise TraceError(f"the field {_show(key)} holds more than {HEAD_VALUES} values; only a trace's "
                                 "grids and steps hold that many")
            value = value.parse()
        out[key], start, colon = value, pos + 1, None
    return out


def _take(v, most: int, message: str):
    """A field's value; for a span of a file, parsed once it is known to hold at most `most` values."""
    if not isinstance(v, _Span):
        return v
    if v.values() > most:
        raise TraceError(message)
    return v.parse()


def _step_stream(steps, most: int, values: int, message: str):
    """(count, iterator) of the steps: a list as it is; a span of a file split at its own commas (at
    most `most` steps), each step parsed once it is known to hold at most `values` values."""
    if not isinstance(steps, _Span):
        return (len(steps), iter(steps)) if isinstance(steps, list) else (None, None)
    raw = steps.raw
    lo, hi = _trimmed(raw, steps.start, steps.end)
    if raw[lo:lo + 1] != b"[":
        steps = _take(steps, HEAD_VALUES, message)
        return (len(steps), iter(steps)) if isinstance(steps, list) else (None, None)
    shape = _scan(raw, lo, hi, 1, 2, max(most - 1, 0))
    if shape.back != hi - 1 or raw[hi - 1] != ord("]"):
        raise _invalid(raw, hi if shape.back < 0 else shape.back + 1, "Expecting ',' delimiter")
    if shape.seps is None:
        raise TraceError(message)
    if colon := next((p for p, kind in shape.seps if kind == ord(":")), None):
        raise _invalid(raw, colon, "Expecting ',' delimiter")
    cuts = [lo] + [p for p, _ in shape.seps] + [hi - 1]
    if len(cuts) == 2 and _trimmed(raw, lo + 1, hi - 1)[0] == hi - 1:
        return 0, iter(())

    def parsed():
        for n in range(len(cuts) - 1):
            span = _Span(raw, cuts[n] + 1, cuts[n + 1])
            if span.values() > values:
                raise TraceError(f"step {n} holds more than {values} values; a step of this run holds at most that "
                                 f"many ({VALUES_PER_CELL} per cell of its largest grid)")
            yield span.parse()
    return len(cuts) - 1, parsed()


# --- checking what was read ---

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


def _plain(v) -> bool:
    """A value a field this reader does not know may hold: a number, a short word or null, nothing that grows."""
    return v is None or isinstance(v, bool) or _is_num(v) or (isinstance(v, str) and len(v) <= 64)


def _pair(v, lo: int, hi: int) -> bool:
    return isinstance(v, list) and len(v) == 2 and all(_is_int(x, lo, hi) for x in v)


def _grid_ok(g, H, W, ok=lambda v: _is_int(v)) -> bool:
    return isinstance(g, list) and len(g) == H and all(
        isinstance(r, list) and len(r) == W and all(ok(v) for v in r) for r in g)


def _validate(d: dict, limits_for) -> tuple:
    """Every field's type and range, cheapest first; grids before anything sized by them. Returns the
    fields read after the grid: (Steps, tokens, proposal, draft, levels)."""
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
        if not NAME.fullmatch(k) or not _plain(v):
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
    read = {}
    for name, shape in (("tokens", (H, W)), ("proposal", (H, W)), ("draft", dg)):
        message = (f"{name} must be " + ("null or " if name != "tokens" else "")
                   + (f"a {shape[0]}x{shape[1]} grid of codebook tokens in [0, {limits.vocab_size})"
                      if shape else "null when grid.draft is null"))
        read[name] = _take(d[name], shape[0] * shape[1] if shape else 1, message)
        if name != "tokens" and read[name] is None:
            continue
        if shape is None or not _grid_ok(read[name], *shape, ok=token):
            raise TraceError(message)
    levels = grid.get("levels")
    if not (isinstance(levels, list) and 1 <= len(levels) <= MAX_LEVELS and all(_pair(g, 1, MAX_SIDE) for g in levels)
            and levels[0] == [H, W] and (dg is None) == (len(levels) == 1) and (dg is None or levels[1] == list(dg))
            and all(tuple(g) in limits.drafts for g in levels[1:])):
        raise TraceError(f"grid.levels must list the grids of the run ([H, W] of the target, then grid.draft, then "
                         f"any deeper drafter grid the pair serves), at most {MAX_LEVELS}")
    if any(k not in ("target", "draft", "levels") and not _plain(v) for k, v in grid.items()):
        raise TraceError("grid: a field other than target, draft and levels may hold a number, a short word or "
                         "null only")
    grids = [tuple(g) for g in levels]
    nested = _take(d.get("levels"), 3 * sum(h * w for h, w in grids[1:]) + 64,
                   f"levels must be null or a list of at most {len(grids) - 1} levels below the target")
    _validate_levels(nested, levels, token)
    steps, verdicts = _validate_steps(d["steps"], grids, limits, d["schema"])
    t = d["totals"]
    if d["schema"] == OLD_SCHEMAS[1]:
        t = _totals_of_v1(t, d["method"], verdicts, H * W)
    if not isinstance(t, dict) or not all(k in t for k in TOTALS):
        raise TraceError(f"totals must give {', '.join(TOTALS)}")
    if not (_is_int(t["target_nfe"]) and _is_int(t["drafter_nfe"]) and _is_num(t["wall_ms"], 0.0)
            and all(t[k] is None or _is_num(t[k], 0.0, 1.0) for k in ("passed_fraction", "kept_fraction"))):
        raise TraceError("totals: NFE counts must be integers >= 0, wall_ms a number >= 0 and the fractions "
                         "null or in [0, 1]")
    if "level_nfe" in t and not (isinstance(t["level_nfe"], list) and len(t["level_nfe"]) == len(levels)
                                 and all(_is_int(v) for v in t["level_nfe"])):
        raise TraceError("totals: level_nfe must hold one integer >= 0 per level of grid.levels")
    if len(t) > 16 or any(k not in (*TOTALS, "level_nfe") and not _plain(v) for k, v in t.items()):
        raise TraceError("totals: at most 16 fields, those other than the counts above a number, a short word "
                         "or null")
    d["totals"] = t
    return steps, read["tokens"], read["proposal"], read["draft"], nested


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
                and (lv.get("draft") is None or (below is not None and _grid_ok(lv["draft"], *below, ok=token)))
                and all(_plain(v) for k, v in lv.items() if k not in ("method", "grid", "tokens", "proposal", "draft"))):
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


def _validate_steps(steps, grids: list[tuple[int, int]], limits: Limits, schema: str) -> tuple[Steps, list]:
    """Each step's fields on the grid of its level, and the counts a real run on these grids stays under,
    checked as the steps are read. Returns the steps as compact text and, for a /1 file, [verdicts judged
    by its verify steps, of them passed]."""
    cells_total = sum(h * w for h, w in grids)
    most = STEPS_PER_CELL * cells_total
    message = f"steps must be a list of at most {most} steps ({STEPS_PER_CELL} per cell of the grids)"
    count, stream = _step_stream(steps, most, VALUES_PER_CELL * max(h * w for h, w in grids) + 4 * STEP_FIELDS,
                                 message)
    if count is None or count > most:
        raise TraceError(message)
    verdicts = [0, 0]

    def checked():
        budget = CELLS_PER_CELL * cells_total
        for n, s in enumerate(stream):
            if schema != SCHEMA and isinstance(s, dict) and len(grids) > 1 and (s.get("phase") == "draft"
                                                                                or s.get("grid") == "draft"):
                s = dict(s, level=1)    # /2: draft and refresh steps worked on the drafter's grid
            budget = _validate_step(n, s, grids, limits, budget, cells_total)
            if schema == OLD_SCHEMAS[1] and s["phase"] == "verify":
                flat = _flat(s.get("accepted", []))
                verdicts[0] += len(flat)
                verdicts[1] += sum(map(bool, flat))
            yield json.dumps(s).encode()
    return Steps(checked()), verdicts


def _validate_step(n: int, s, grids: list, limits: Limits, budget: int, cells_total: int) -> int:
    """Step n's fields on the grid of its level; returns the budget of cells left after it."""
    if not isinstance(s, dict) or s.get("phase") not in PHASES or s.get("model") not in MODELS:
        raise TraceError(f"step {n} needs a phase in {PHASES} and a model in {MODELS}")
    if len(s) > STEP_FIELDS:
        raise TraceError(f"step {n} has {len(s)} fields; a step has at most {STEP_FIELDS}")
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
    if len(cells) > h * w or len(judged or ()) > h * w:
        raise TraceError(f"step {n}: cells and judged may each list at most the {h * w} cells of its {h}x{w} grid")
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
    tested = len(cells if judged is None else judged)   # a verdict per judged cell (or per cell, naming none)
    if "prob" in s and not (isinstance(s["prob"], list) and len(s["prob"]) <= tested
                            and all(_is_num(p) for p in s["prob"])):
        raise TraceError(f"step {n}: prob must be a list of numbers, at most one per judged cell ({tested})")
    if "rows" in s and not (isinstance(s["rows"], list) and len(s["rows"]) <= h
                            and all(_is_int(r, 0, h - 1) for r in s["rows"])):   # pjd: the active rows
        raise TraceError(f"step {n}: rows must be a list of at most {h} row indices in [0, {h})")
    for key, v in s.items():   # keys this reader does not know: plain values only, nothing that grows
        if key not in STEP_KEYS and not _plain(v):
            raise TraceError(f"step {n}: {_show(key)} is not a step field this reader knows; such fields "
                             f"may hold a number, a short word or null only")
    if "tree" in s:
        _validate_tree(n, s["tree"], limits.vocab_size, verified=s.get("verified") is not False)
    if "band" in s:
        _validate_band(n, s, h, w)
    elif "accepted" in s and not (isinstance(s["accepted"], list) and len(s["accepted"]) <= tested
                                  and all(isinstance(a, bool) for a in s["accepted"])):
        raise TraceError(f"step {n}: accepted must be a list of true / false, at most one per judged cell ({tested})")
    return budget


def _validate_tree(n: int, t, vocab: int, verified: bool = True) -> None:
    """A tree method's verified draft tree: per node its parent (-1: the root, else an earlier node),
    depth, token, the drafter's q, the target's p and the verdict (1 accepted, 0 rejected, -1 not tried);
    a tree committed unverified (vvs) has no p and no verdict."""
    keys = ("parent", "depth", "token", "q", "p", "verdict") if verified else ("parent", "depth", "token", "q")
    if not (isinstance(t, dict) and set(t) == set(keys) and all(isinstance(t[k], list) for k in keys)):
        raise TraceError(f"step {n}: tree must hold the lists {', '.join(keys)}")
    m = len(t["token"])
    if m > TREE_NODES or any(len(t[k]) != m for k in keys):
        raise TraceError(f"step {n}: tree lists must have one entry per node, at most {TREE_NODES}")
    ok = (all(_is_int(par, -1, i - 1) for i, par in enumerate(t["parent"]))
          and all(_is_int(d, 1, TREE_NODES) for d in t["depth"])
          and all(_is_int(x, 0, vocab - 1) for x in t["token"])
          and all(_is_num(x, 0.0, 1.0 + 1e-3) for x in t["q"] + t.get("p", []))
          and all(_is_int(v, -1, 1) for v in t.get("verdict", [])))
    if not ok:
        raise TraceError(f"step {n}: tree holds a parent, depth, token, probability or verdict out of range")


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


def _totals_of_v1(t, method: str, verdicts: list, n_cells: int):
    """mulo-trace/1 totals in the /2 vocabulary. /1 had one `accepted_fraction`: for mulo the share of
    cells kept outside R_X, for sd / lantern / sjd the share of judged drafts that passed the test.
    The other quantity is recounted from the verify steps' verdicts ([judged, passed])."""
    if not isinstance(t, dict) or "accepted_fraction" not in t:
        return t  # _validate names what is missing
    old, (judged, passed) = t["accepted_fraction"], verdicts
    t = {k: v for k, v in t.items() if k != "accepted_fraction"}
    if old is None or not judged:
        t.update(passed_fraction=None, kept_fraction=old)
    elif method == "mulo":
        t.update(passed_fraction=passed / judged, kept_fraction=old)
    else:
        t.update(passed_fraction=old, kept_fraction=passed / max(n_cells, 1))
    return t


def _levels_of_v2(grid):
    """A /1 or /2 grid in the /3 vocabulary: levels [target, draft] (its steps move with it, in
    _validate_steps)."""
    if not isinstance(grid, dict):
        return grid  # _validate names what is wrong
    return dict(grid, levels=[grid.get("target")] + ([grid["draft"]] if grid.get("draft") is not None else []))


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
