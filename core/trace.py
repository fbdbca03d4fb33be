"""The Trace: what a run did, step by step, as data (schema "mulo-trace/1").

Every method yields Steps; the engine wraps them into a Trace that round-trips through JSON. A
reader rejects unknown schema versions and malformed files with a TraceError that says what is
wrong. Nothing here calls a model.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

SCHEMA = "mulo-trace/1"
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
        if d.get("schema") != SCHEMA:
            raise TraceError(f"unsupported trace schema {d.get('schema')!r}; this reader knows {SCHEMA!r}")
        missing = [k for k in ("method", "params", "seed", "prompt", "model", "grid", "tokens", "proposal",
                               "draft", "steps", "totals") if k not in d]
        if missing:
            raise TraceError(f"the trace lacks the field(s) {', '.join(missing)}")
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
    if not isinstance(t, dict) or not all(k in t for k in ("target_nfe", "drafter_nfe", "wall_ms", "accepted_fraction")):
        raise TraceError("totals must give target_nfe, drafter_nfe, wall_ms and accepted_fraction")


def totals(steps: list[dict], accepted_fraction: float | None) -> dict:
    return dict(target_nfe=sum(s["nfe"] for s in steps if s["model"] == "target"),
                drafter_nfe=sum(s["nfe"] for s in steps if s["model"] == "drafter"),
                wall_ms=round(sum(s["wall_ms"] for s in steps), 3),
                accepted_fraction=accepted_fraction)
