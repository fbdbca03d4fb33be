"""The Trace: what a run did, step by step, as data (schema "mulo-trace/2"; "/1" files are still read).

Every method yields Steps; the engine wraps them into a Trace that round-trips through JSON. A
reader rejects unknown schema versions and malformed files with a TraceError that says what is
wrong. Nothing here calls a model.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

SCHEMA = "mulo-trace/2"
OLD_SCHEMAS = ("mulo-trace/1",)  # read and converted: totals.accepted_fraction -> passed / kept
PHASES = ("draft", "upsample", "verify", "resample", "decode", "refresh")
MODELS = ("target", "drafter", None)
MAX_BYTES = 32 * 1024 * 1024


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

    def to_dict(self) -> dict:
        d = dict(phase=self.phase, model=self.model, nfe=self.nfe, wall_ms=round(self.wall_ms, 3),
                 cells=self.cells)
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
    schema: str = SCHEMA

    def to_dict(self) -> dict:
        return dict(schema=self.schema, method=self.method, params=self.params, seed=self.seed,
                    prompt=self.prompt, model=self.model, grid=self.grid, tokens=self.tokens,
                    proposal=self.proposal, draft=self.draft, steps=self.steps, totals=self.totals)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @staticmethod
    def from_json(text: str | bytes) -> "Trace":
        if len(text) > MAX_BYTES:
            raise TraceError(f"the trace is {len(text)} bytes; at most {MAX_BYTES} are read")
        try:
            d = json.loads(text)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise TraceError(f"the trace is not valid JSON: {e}") from None
        return Trace.from_dict(d)

    @staticmethod
    def from_dict(d) -> "Trace":
        if not isinstance(d, dict):
            raise TraceError("the trace must be a JSON object")
        if d.get("schema") not in (SCHEMA, *OLD_SCHEMAS):
            raise TraceError(f"unsupported trace schema {d.get('schema')!r}; this reader knows "
                             f"{', '.join(repr(s) for s in (SCHEMA, *OLD_SCHEMAS))}")
        missing = [k for k in ("method", "params", "seed", "prompt", "model", "grid", "tokens", "proposal",
                               "draft", "steps", "totals") if k not in d]
        if missing:
            raise TraceError(f"the trace lacks the field(s) {', '.join(missing)}")
        if d["schema"] != SCHEMA:
            d = _from_v1(d)
        _validate(d)
        return Trace(**{k: d[k] for k in ("method", "params", "seed", "prompt", "model", "grid", "tokens",
                                          "proposal", "draft", "steps", "totals")})


def _grid_ok(g, H, W) -> bool:
    return isinstance(g, list) and len(g) == H and all(
        isinstance(r, list) and len(r) == W and all(isinstance(v, int) and v >= 0 for v in r) for r in g)


def _validate(d: dict) -> None:
    grid = d["grid"]
    if not (isinstance(grid, dict) and isinstance(grid.get("target"), list) and len(grid["target"]) == 2
            and all(isinstance(v, int) and 0 < v <= 256 for v in grid["target"])):
        raise TraceError("grid.target must be [H, W] with 0 < H, W <= 256")
    H, W = grid["target"]
    if not _grid_ok(d["tokens"], H, W):
        raise TraceError(f"tokens must be a {H}x{W} grid of non-negative integers")
    if d["proposal"] is not None and not _grid_ok(d["proposal"], H, W):
        raise TraceError(f"proposal must be null or a {H}x{W} grid of non-negative integers")
    if d["draft"] is not None:
        dg = grid.get("draft")
        if not (isinstance(dg, list) and len(dg) == 2 and _grid_ok(d["draft"], dg[0], dg[1])):
            raise TraceError("draft must match grid.draft")
    if not isinstance(d["steps"], list):
        raise TraceError("steps must be a list")
    for n, s in enumerate(d["steps"]):
        if not isinstance(s, dict) or s.get("phase") not in PHASES or s.get("model") not in MODELS:
            raise TraceError(f"step {n} needs a phase in {PHASES} and a model in {MODELS}")
        if not isinstance(s.get("nfe"), int) or not isinstance(s.get("wall_ms"), (int, float)) \
                or not isinstance(s.get("cells"), list):
            raise TraceError(f"step {n} needs integer nfe, numeric wall_ms and a list of cells")
    t = d["totals"]
    if not isinstance(t, dict) or not all(k in t for k in TOTALS):
        raise TraceError(f"totals must give {', '.join(TOTALS)}")


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
    return dict(d, schema=SCHEMA, totals=t)


def _flat(x) -> list:
    return [v for r in x for v in (_flat(r) if isinstance(r, list) else [r])] if isinstance(x, list) else []


def totals(steps: list[dict], wall_ms: float, passed_fraction: float | None, kept_fraction: float | None) -> dict:
    """passed_fraction: share of judged cells that passed the acceptance test (mulo: pooled >= tau);
    kept_fraction: share of the H x W cells whose drafted or proposed token was kept without
    resampling (mulo: outside R_X). wall_ms: all work of the run, not only the timed steps."""
    return dict(target_nfe=sum(s["nfe"] for s in steps if s["model"] == "target"),
                drafter_nfe=sum(s["nfe"] for s in steps if s["model"] == "drafter"),
                wall_ms=round(wall_ms, 3), passed_fraction=passed_fraction, kept_fraction=kept_fraction)
