"""Frozen configurations of a run: sampling, method parameters, the run itself, and their validation.

Validation lives here so that the CLI, the app and the tests reject bad parameters with one message
that names the parameter and its allowed range, before any model runs or any file is written.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

METHODS = ("ar", "zipar", "mulo", "sd", "eagle", "lantern", "lantern_pp", "vvs", "sjd", "scd", "gsd", "pjd", "cool")
TREE_METHODS = ("eagle", "lantern", "lantern_pp", "vvs")   # drafted by the pair's EAGLE head as a tree (core/trees.py)
UPSAMPLERS = ("pixel", "nearest", "sr", "learned", "distilled")   # core/upsampling.py defines them; the last three are trained
RESAMPLE_MODES = ("serial", "islands", "jacobi")
REDRAFTS = ("independent", "coupled")
# methods that can decode the drafter's grid (draft_method): those that need no same-resolution drafter
DRAFT_METHODS = ("ar", "zipar", "sjd", "scd", "gsd", "pjd", "mulo")
SCHEDULED_DRAFTS = ("ar", "zipar")   # drafted in place, band by band; the others decode the whole grid
# the knobs each draft method reads; a nested spec may set only these (any other is a misplaced knob)
_JACOBI = ("sjd_window", "sjd_init")
MULO_KNOBS = ("k", "tau", "scale", "radius", "window", "draft_window", "draft_rows", "upsampler", "resample",
              "rejection", "context", "sjd_window", "redraft", "draft_method", "accept", "commit")
METHOD_KNOBS = {"ar": (), "zipar": ("window",), "sjd": _JACOBI, "scd": _JACOBI,
                "gsd": (*_JACOBI, "gsd_group", "gsd_gap", "gsd_dist"), "pjd": (*_JACOBI, "pjd_c"), "mulo": MULO_KNOBS}
# the knobs every other method reads (the draft methods': METHOD_KNOBS); tests/test_knobs_read.py checks
# against runs that a knob outside a method's set never changes its run
_TREE = ("tree_tokens", "tree_depth", "tree_top_k")
_LANTERN = ("delta", "lantern_k", "lantern_residual")
OTHER_KNOBS = {"sd": ("gamma",), "eagle": _TREE, "lantern": (*_TREE, *_LANTERN),
               "lantern_pp": ("lantern_k", "lantern_lambda", "lantern_residual", "static_tree"),
               "vvs": (*_TREE, *_LANTERN, "vvs_interval", "vvs_schedule", "vvs_threshold"),
               "cool": ("gamma", "cool_delta", "cool_nu", "cool_norm")}
DRAFT_SPEC_MAX = 64
REJECTION_MODES = ("local", "raster")
CONTEXT_MODES = ("exact", "verify")
ACCEPT_RULES = ("pooled", "exact")     # mulo: the verify pass's test of each proposal token
COMMIT_RULES = ("proposal", "target")  # mulo accept=pooled: the token a passed cell commits
SJD_INITS = ("random", "repeat", "above")
COOL_NORMS = ("mean", "first")
VVS_SCHEDULES = ("uniform", "dynamic")
LANTERN_RESIDUALS = ("moved", "official")   # lantern, lantern_pp, vvs: the distribution after a relaxed rejection
STATIC_TREES = ("cpu", "paper")             # lantern_pp: the static draft tree (core/trees.py)
VVS_INTERVAL_MAX = 64
# mulo's defaults of tau, k and radius at each up-scale factor r: the frontier pick of that scale on 100
# held-out prompts (docs/results.md, "The four levers on 100 held-out prompts"), chosen by one rule: the
# fewest sequential passes inside every image bound with a log-lik gap no worse than zipar:window=4's.
# r = 2 is MethodParams' own; `generate --scale 4` alone takes r = 4's. A bench spec sets its knobs over
# MethodParams, so it writes r = 4's out (mulo:scale=4:tau=0.8:k=0:radius=2).
SCALE_DEFAULTS = {2: dict(tau=0.5, k=16, radius=2), 4: dict(tau=0.8, k=0, radius=2)}
# The tree methods' sizes: cpu (MethodParams' own, sized for a laptop) and paper (as the released EAGLE-2 /
# LANTERN / VVS code runs LlamaGen: 59 nodes verified, 4 expansions = 5 levels, top-10; LANTERN++'s
# 57-node static tree; LANTERN's k 1000 neighbours). `--tree paper` sets the five knobs not given.
TREE_SIZES = {"cpu": dict(tree_tokens=12, tree_depth=3, tree_top_k=3, static_tree="cpu", lantern_k=1000),
              "paper": dict(tree_tokens=59, tree_depth=5, tree_top_k=10, static_tree="paper", lantern_k=1000)}


class ParameterError(ValueError):
    """A parameter outside its allowed range; the message names both."""


@dataclass(frozen=True)
class SamplingConfig:
    cfg: float = 3.0            # classifier-free guidance scale s (1 = no guidance)
    temperature: float = 1.0    # 0 = greedy
    top_k: int = 0              # keep the k most likely tokens (0 = all)
    top_p: float = 1.0          # nucleus mass kept (1 = all)
    cfg_interval: int = -1      # guide cells 0..cfg_interval+1 only, as LlamaGen's --cfg-interval (-1 = all)


@dataclass(frozen=True)
class MethodParams:
    k: int = 16                 # mulo: codebook neighbours pooled with the proposal token
    tau: float = 0.5            # mulo: accept iff pooled mass >= tau
    scale: int = 2              # mulo: up-scale factor r (drafter grid = target grid / r)
    radius: int = 2             # mulo: Chebyshev expansion radius l
    window: int = 4             # zipar window w; also the window inside mulo's islands
    draft_window: int = 0       # mulo: shorthand of draft_method=zipar/window=w (0 = off)
    draft_rows: int = 0         # mulo: low-res rows drafted per cycle G (0 = all rows)
    upsampler: str = "pixel"    # mulo: pixel | nearest | sr | learned | distilled (the last three trained, per pair)
    resample: str = "islands"   # mulo: serial | islands (ZipAR inside islands) | jacobi (row-causal Jacobi inside islands)
    redraft: str = "independent"  # mulo resample=jacobi: unaccepted guesses redrawn from p (independent) or coupled (scd)
    draft_method: str = "ar"    # mulo: the method decoding the drafter's grid, name[/knob=value...] (see draft_spec)
    rejection: str = "local"    # mulo: local (expansion) | raster (classic: resample t0, draft and verify again)
    context: str = "verify"     # mulo: verify (passed cells keep verify-time K/V) | exact (rewrite changed K/V)
    accept: str = "pooled"      # mulo: pooled (pooled mass on B_k >= tau) | exact (min(1, p/q) per cell, the
                                # learned up-sampler's proposal drawn from its q, other proposals one-hot)
    commit: str = "proposal"    # mulo accept=pooled: a passed cell commits the proposal's token | a token drawn
                                # from the target's p restricted to B_k (renormalised), from the same verify pass
    gamma: int = 4              # sd, cool: tokens drafted per cycle
    tree_tokens: int = 12       # eagle, lantern, vvs: nodes verified per cycle, the root included (released: 59)
    tree_depth: int = 3         # eagle, lantern, vvs: levels of the dynamic tree = head passes per cycle (released: 5)
    tree_top_k: int = 3         # eagle, lantern, vvs: children per expanded node, nodes expanded per level (released: 10)
    delta: float = 0.2          # lantern, vvs: total-variation budget moved onto the draft token
    lantern_k: int = 1000       # lantern, lantern_pp, vvs: nearest neighbours considered (capped by V - 1; on the
                                # 512-code book 31, 6.1 % of it as 1000 is of 16 384, keeps lantern's log-lik gap)
    lantern_lambda: float = 2.0  # lantern_pp: the relaxed p~(x) stays <= lambda p(x) (1 = lossless)
    lantern_residual: str = "moved"  # lantern, lantern_pp, vvs: after a relaxed rejection, moved (the papers' text:
                                # p~ without x) | official (the released code's; core/methods/lantern.py)
    static_tree: str = "cpu"    # lantern_pp: cpu (23 nodes over 4 levels) | paper (the released 57 over 5)
    vvs_interval: int = 5       # vvs uniform: cycle i (0-based) skips verification when i mod interval = 1 (0 = eagle)
    vvs_schedule: str = "uniform"  # vvs: uniform (every vvs_interval cycles) | dynamic (the drafted paths agree)
    vvs_threshold: float = 0.7  # vvs dynamic: skip when the drafted paths' weighted code cosine is >= this
    sjd_window: int = 16        # sjd, scd, gsd: Jacobi window L; pjd: the window of each active row
    sjd_init: str = "random"    # sjd, scd, gsd, pjd: fresh guesses random | repeat (token to the left) | above
    gsd_group: int = 14         # gsd: rank-window size G of the draft token's cluster (1 = sjd)
    gsd_gap: float = 0.15       # gsd: cluster members have |p(y) - p(x)| < gap
    gsd_dist: float = 0.5       # gsd: embedding-distance filter, as a quantile of the table's pair distances
    pjd_c: int = 6              # pjd: row i + 1 starts once row i has c committed tokens (>= W: one row)
    cool_delta: float = 2.0     # cool: relaxation scale delta of w_i = delta exp(-nu i - mu) (1 with nu 0 = sd)
    cool_nu: float = 0.7        # cool: annealing rate nu over draft positions
    cool_norm: str = "mean"     # cool: mu makes the w_i average delta (mean) or w_1 = delta (first)


@dataclass(frozen=True)
class RunConfig:
    method: str = "mulo"
    prompt: str = "a large red circle center on a striped blue background"
    seed: int = 0
    # None: the model pair's sampling defaults (engine.pair_facts(model)["sampling"]; LlamaGen t2i: CFG 7.5,
    # top-k 1000), which engine.resolved puts here before validation, so a trace records what ran
    sampling: SamplingConfig | None = None
    params: MethodParams = field(default_factory=MethodParams)
    model: str = "embedded"

    def to_dict(self) -> dict:
        return asdict(self)

    def with_params(self, **kw) -> "RunConfig":
        return replace(self, params=replace(self.params, **kw))


_FIELD_TYPES = {name: typ for name, typ in MethodParams.__annotations__.items()}


def knob_value(key: str, text: str):
    """A method knob's value from spec text, typed as its MethodParams field; a bad value names the knob."""
    typ = _FIELD_TYPES[key]
    try:
        return int(text) if typ == "int" else float(text) if typ == "float" else text
    except ValueError:
        raise ParameterError(f"{key} must be {'an integer' if typ == 'int' else 'a number'}; got {_short(text)}") from None


def knobs_read(method: str, p: MethodParams | None = None) -> tuple[str, ...]:
    """The method knobs (MethodParams fields) that a run of `method` with knobs p reads; every other one
    leaves the run as it is. mulo's drafter method inherits the knobs it reads from p (draft_spec)."""
    if method not in METHOD_KNOBS:
        return OTHER_KNOBS.get(method, ())
    own = METHOD_KNOBS[method]
    if method != "mulo":
        return own
    try:
        name, inner = draft_spec(p or MethodParams())
    except ParameterError:
        return own
    extra = knobs_read(name, inner)
    return own + tuple(k for k in extra if k not in own)


def spec_label(method: str, p: MethodParams | None = None) -> str:
    """The run's name as `python -m core bench --methods` takes it: the method and each knob it reads
    that differs from the default (`zipar:window=16`; `zipar` at the defaults)."""
    p, d = p or MethodParams(), MethodParams()
    return "".join([method] + [f":{k}={getattr(p, k):g}" if isinstance(getattr(p, k), float) else f":{k}={getattr(p, k)}"
                               for k in knobs_read(method, p) if getattr(p, k) != getattr(d, k)])


def draft_spec(p: MethodParams) -> tuple[str, MethodParams]:
    """The method that decodes mulo's drafter grid, and its knobs.

    draft_method is `name` or `name/knob=value/...`: the nested method inherits every knob of p (the
    sampling too), except that its own draft_method is ar unless its spec names one; a nested
    `draft_method=` takes the rest of the spec, so a nested mulo's knobs come before it. A knob the
    named method does not read is refused (it would be a misplaced knob of another level).
    draft_window = w > 0 is the shorthand of draft_method=zipar/window=w."""
    if p.draft_window:
        _check(p.draft_method == "ar", "draft_window", "0 when draft_method names a method (draft_window=w is the "
               "shorthand of draft_method=zipar/window=w)", p.draft_window)
        return "zipar", replace(p, draft_window=0, window=p.draft_window)
    spec = "name or name/knob=value/..."
    name, *parts = p.draft_method.split("/")
    _check(name in DRAFT_METHODS, "draft_method", f"{spec}, name one of {', '.join(DRAFT_METHODS)}", p.draft_method)
    over: dict = {}
    for n, part in enumerate(parts):
        key, eq, value = part.partition("=")
        key = key.replace("-", "_")
        _check(eq == "=" and key != "" and value != "", "draft_method", f"{spec}; {part!r} is not knob=value",
               p.draft_method)
        if key == "draft_method":
            over[key] = "/".join([value, *parts[n + 1:]])
            break
        _check(key in METHOD_KNOBS[name] and key not in over, "draft_method",
               f"{spec} with knobs that {name} reads, each once ({', '.join(METHOD_KNOBS[name]) or 'none'}); "
               f"{key!r} is not one (a nested draft_method= takes the rest of the spec)", p.draft_method)
        try:
            over[key] = knob_value(key, value)
        except ParameterError as e:
            raise ParameterError(f"draft_method {_short(p.draft_method)}: {e}") from None
    return name, replace(replace(p, draft_method="ar", draft_window=0), **over)


def _check(ok: bool, name: str, allowed: str, value) -> None:
    if not ok:
        raise ParameterError(f"{name} must be {allowed}; got {_short(value)}")


def _short(value) -> str:
    """A value as a message quotes it: at most 40 characters."""
    s = repr(value)
    return s if len(s) <= 40 else s[:37] + "..."


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# ranges every float knob must keep so that sampling stays finite (float32 logits / temperature,
# u + s (c - u)); the int knobs that size work are bounded by the grid or by these
CFG_MAX = 20.0
TEMPERATURE_MIN, TEMPERATURE_MAX = 0.01, 10.0
GAMMA_MAX = 16
TREE_TOKENS_MAX = 128      # a draft tree's nodes (LANTERN's LlamaGen default: 59)
TREE_DEPTH_MAX = 16
WINDOW_MAX = 4096          # a ZipAR window wider than the grid's rows changes nothing
SJD_WINDOW_MAX = 64
PROMPT_MAX = 500
CFG_INTERVAL_MAX = 256 * 256   # the cells of the largest grid a trace may hold: a larger N guides every cell alike
SEED_END = 2 ** 63             # seeds are in [0, 2^63): what torch.Generator.manual_seed takes


def _check_types(run: RunConfig) -> None:
    """Every field of the right type (numbers finite) before any range is compared."""
    _check(isinstance(run.sampling, SamplingConfig), "sampling", "a SamplingConfig (None, the model pair's "
           "defaults, is resolved by engine.resolved before validation)", run.sampling)
    p, s = run.params, run.sampling
    for name, v in (("method", run.method), ("prompt", run.prompt), ("model", run.model),
                    ("upsampler", p.upsampler), ("resample", p.resample), ("rejection", p.rejection),
                    ("sjd_init", p.sjd_init), ("context", p.context), ("accept", p.accept), ("commit", p.commit),
                    ("redraft", p.redraft), ("draft_method", p.draft_method), ("vvs_schedule", p.vvs_schedule),
                    ("lantern_residual", p.lantern_residual), ("static_tree", p.static_tree)):
        _check(isinstance(v, str), name, "text", v)
    for name, v in (("seed", run.seed), ("top_k", s.top_k), ("cfg_interval", s.cfg_interval), ("k", p.k), ("scale", p.scale), ("radius", p.radius),
                    ("window", p.window), ("draft_window", p.draft_window), ("draft_rows", p.draft_rows),
                    ("gamma", p.gamma), ("tree_tokens", p.tree_tokens), ("tree_depth", p.tree_depth),
                    ("tree_top_k", p.tree_top_k), ("vvs_interval", p.vvs_interval), ("lantern_k", p.lantern_k), ("sjd_window", p.sjd_window),
                    ("gsd_group", p.gsd_group), ("pjd_c", p.pjd_c)):
        _check(_int(v), name, "an integer", v)
    for name, v in (("cfg", s.cfg), ("temperature", s.temperature), ("top_p", s.top_p), ("tau", p.tau),
                    ("delta", p.delta), ("lantern_lambda", p.lantern_lambda), ("vvs_threshold", p.vvs_threshold), ("gsd_gap", p.gsd_gap), ("gsd_dist", p.gsd_dist),
                    ("cool_delta", p.cool_delta), ("cool_nu", p.cool_nu)):
        _check(_num(v), name, "a finite number", v)


def validate(run: RunConfig, vocab_size: int, grid: tuple[int, int], methods) -> None:
    """Raise ParameterError for the first parameter of the wrong type or out of range; `methods` names
    the decoding methods there are (the engine passes its registry, which this module stays below)."""
    _check_types(run)
    p, s = run.params, run.sampling
    H, W = grid
    _check(run.method in methods, "method", f"one of {', '.join(methods)}", run.method)
    _check(len(run.prompt) <= PROMPT_MAX, "prompt", f"at most {PROMPT_MAX} characters", run.prompt)
    _check(0 <= run.seed < SEED_END, "seed", "an integer in [0, 2^63)", run.seed)
    _check(1.0 <= s.cfg <= CFG_MAX, "cfg", f"in [1, {CFG_MAX:g}] (1 = no guidance)", s.cfg)
    _check(s.temperature == 0.0 or TEMPERATURE_MIN <= s.temperature <= TEMPERATURE_MAX, "temperature",
           f"0 (greedy) or in [{TEMPERATURE_MIN:g}, {TEMPERATURE_MAX:g}]", s.temperature)
    _check(0 <= s.top_k <= vocab_size, "top_k", f"in [0, {vocab_size}] (0 = off)", s.top_k)
    _check(0.0 < s.top_p <= 1.0, "top_p", "in (0, 1]", s.top_p)
    _check(-1 <= s.cfg_interval <= CFG_INTERVAL_MAX, "cfg_interval",
           f"an integer in [-1, {CFG_INTERVAL_MAX}] (-1 = every cell)", s.cfg_interval)
    _check(0 <= p.k < vocab_size, "k", f"in [0, {vocab_size - 1}]", p.k)
    _check(0.0 <= p.tau <= 1.0, "tau", "in [0, 1]", p.tau)
    _check(p.scale in (2, 4) and (run.method != "mulo" or (H % p.scale == 0 and W % p.scale == 0)),
           "scale", f"2 or 4, dividing the {H}x{W} grid", p.scale)
    _check(0 <= p.radius and (run.method != "mulo" or p.radius <= max(H, W)), "radius", f"in [0, {max(H, W)}]",
           p.radius)   # only mulo expands; another method's grid may be smaller than mulo's default radius
    _check(1 <= p.window <= WINDOW_MAX, "window", f"in [1, {WINDOW_MAX}]", p.window)
    _check(0 <= p.draft_window <= WINDOW_MAX, "draft_window", f"in [0, {WINDOW_MAX}] (0 = serial drafting)",
           p.draft_window)
    _check(0 <= p.draft_rows <= H // max(p.scale, 1), "draft_rows", f"in [0, {H // max(p.scale, 1)}] (0 = all rows)",
           p.draft_rows)
    _check(p.upsampler in UPSAMPLERS, "upsampler", f"one of {', '.join(UPSAMPLERS)}", p.upsampler)
    _check(p.resample in RESAMPLE_MODES, "resample", f"one of {', '.join(RESAMPLE_MODES)}", p.resample)
    _check(p.redraft in REDRAFTS, "redraft", f"one of {', '.join(REDRAFTS)}", p.redraft)
    _check(p.rejection in REJECTION_MODES, "rejection", f"one of {', '.join(REJECTION_MODES)}", p.rejection)
    _check(p.context in CONTEXT_MODES, "context", f"one of {', '.join(CONTEXT_MODES)}", p.context)
    _check(p.accept in ACCEPT_RULES, "accept", f"one of {', '.join(ACCEPT_RULES)}", p.accept)
    _check(p.commit in COMMIT_RULES and (p.commit == "proposal" or p.accept == "pooled"), "commit",
           f"one of {', '.join(COMMIT_RULES)} (target only with accept=pooled: the exact test commits the token it "
           "accepts)", p.commit)
    _check(1 <= p.gamma <= GAMMA_MAX, "gamma", f"in [1, {GAMMA_MAX}]", p.gamma)
    _check(2 <= p.tree_tokens <= TREE_TOKENS_MAX, "tree_tokens", f"in [2, {TREE_TOKENS_MAX}] (the root and at least "
           "one node)", p.tree_tokens)
    _check(1 <= p.tree_depth <= TREE_DEPTH_MAX, "tree_depth", f"in [1, {TREE_DEPTH_MAX}]", p.tree_depth)
    _check(1 <= p.tree_top_k <= min(vocab_size, TREE_TOKENS_MAX), "tree_top_k",
           f"in [1, {min(vocab_size, TREE_TOKENS_MAX)}]", p.tree_top_k)
    _check(0.0 <= p.delta <= 1.0, "delta", "in [0, 1]", p.delta)
    _check(p.vvs_interval == 0 or 2 <= p.vvs_interval <= VVS_INTERVAL_MAX, "vvs_interval",
           f"0 (every cycle verified) or in [2, {VVS_INTERVAL_MAX}] (cycle i skips when i mod interval = 1, which "
           "never holds at 1)", p.vvs_interval)
    _check(0.0 <= p.vvs_threshold <= 1.0, "vvs_threshold", "in [0, 1] (a weighted cosine)", p.vvs_threshold)
    _check(p.lantern_residual in LANTERN_RESIDUALS, "lantern_residual", f"one of {', '.join(LANTERN_RESIDUALS)}",
           p.lantern_residual)
    _check(p.static_tree in STATIC_TREES, "static_tree", f"one of {', '.join(STATIC_TREES)}", p.static_tree)
    _check(p.vvs_schedule in VVS_SCHEDULES, "vvs_schedule", f"one of {', '.join(VVS_SCHEDULES)}", p.vvs_schedule)
    _check(1.0 <= p.lantern_lambda <= 100.0, "lantern_lambda", "in [1, 100] (1 = lossless)", p.lantern_lambda)
    _check(0 <= p.lantern_k <= 2 ** 31, "lantern_k", ">= 0 (capped at the codebook size)", p.lantern_k)
    _check(1 <= p.sjd_window <= SJD_WINDOW_MAX, "sjd_window", f"in [1, {SJD_WINDOW_MAX}]", p.sjd_window)
    _check(p.sjd_init in SJD_INITS, "sjd_init", f"one of {', '.join(SJD_INITS)}", p.sjd_init)
    _check(1 <= p.gsd_group <= vocab_size, "gsd_group", f"in [1, {vocab_size}] (a rank window of the codebook)",
           p.gsd_group)
    _check(0.0 <= p.gsd_gap <= 1.0, "gsd_gap", "in [0, 1]", p.gsd_gap)
    _check(0.0 <= p.gsd_dist <= 1.0, "gsd_dist", "in [0, 1] (a quantile)", p.gsd_dist)
    _check(1 <= p.pjd_c <= WINDOW_MAX, "pjd_c", f"in [1, {WINDOW_MAX}] (the grid's width or more: one row at a time)",
           p.pjd_c)
    _check(0.0 < p.cool_delta <= 100.0, "cool_delta", "in (0, 100]", p.cool_delta)
    _check(0.0 <= p.cool_nu <= 10.0, "cool_nu", "in [0, 10]", p.cool_nu)
    _check(p.cool_norm in COOL_NORMS, "cool_norm", f"one of {', '.join(COOL_NORMS)}", p.cool_norm)
    if run.method == "mulo":
        _validate_drafting(run, vocab_size, grid, methods)


def _validate_drafting(run: RunConfig, vocab_size: int, grid: tuple[int, int], methods) -> None:
    """mulo's draft_method: a method that can decode the drafter grid, with valid knobs on that grid."""
    p = run.params
    _check(len(p.draft_method) <= DRAFT_SPEC_MAX, "draft_method", f"at most {DRAFT_SPEC_MAX} characters",
           p.draft_method)
    name, sub = draft_spec(p)
    if name not in SCHEDULED_DRAFTS:
        _check(p.draft_rows == 0 and p.rejection == "local", "draft_method",
               f"ar or zipar when draft_rows > 0 or rejection=raster (those draft band by band; {name} "
               f"decodes the whole low-res grid)", p.draft_method)
    h, w = grid[0] // p.scale, grid[1] // p.scale
    try:  # ar and zipar draft in place, band by band: draft_rows is the outer level's knob
        validate(replace(run, method=name, params=replace(sub, draft_rows=0) if name in SCHEDULED_DRAFTS else sub),
                 vocab_size, (h, w), methods)
    except ParameterError as e:
        raise ParameterError(f"draft_method {_short(p.draft_method)} on the {h}x{w} grid: {e}") from None
