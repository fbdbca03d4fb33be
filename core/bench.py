"""Side-by-side benchmark: every method on the same held-out prompts and seeds, measured record by record.

A method spec is a name with optional parameter overrides, `mulo:scale=4:tau=0.05`. One record is one
(spec, prompt, seed) run: its NFE, wall-clock, passed and kept fractions, per-phase time, tokens,
adherence and classifier features. Records go into a run folder (core.runfolder) as they finish; under
torchrun each rank measures the prompts i with i % world == rank, every spec of a prompt back to back
on one device, and rank 0 merges all records once every rank is done. Reports per spec: target and
drafter NFE, wall-clock, speedup vs ar (headline: ratio of sequential passes, target + drafter, and
wall ratio; target-only NFE ratio as a detail), passed and kept fractions, per-phase time, prompt
adherence and Fréchet distance (computed at the merge, over the whole set). Quality always sits
beside speed. Wall ratios pair records measured by one worker (one rank on one host), never across.
"""
from __future__ import annotations

import dataclasses
import json
import re
import socket
import tempfile
import time
from typing import Callable

import numpy as np

from . import engine, likelihood, yardsticks
from .config import SEED_END, MethodParams, ParameterError, RunConfig, SamplingConfig, knobs_read
from .distributed import Ranks, barrier, broadcast, shard
from .embedded import family
from .embedded.evaluate import heldout, read_images, reference_features
from .embedded.evaluation import frechet_distance
from .runfolder import SCHEMA, RunFolder, RunFolderError, record_key
from .trace import MAX_BYTES, NAME, PHASES, SCHEMA as TRACE_SCHEMA

RECORD_SCHEMA = f"{SCHEMA}+{TRACE_SCHEMA}"  # a record measured by other code is measured again
REFERENCE = "reference"          # ar on the same prompts at other seeds: what the target itself draws
REFERENCE_SEED = 1_000_003       # the reference of prompt i is drawn at seed + i + REFERENCE_SEED
_PARAM_TYPES = {f.name: f.type for f in dataclasses.fields(MethodParams)}
_SAMPLING_FIELDS = {f.name for f in dataclasses.fields(SamplingConfig)}


def parse_spec(spec: str, base: RunConfig) -> tuple[str, RunConfig]:
    """'mulo:scale=4:tau=0.05' -> (label, RunConfig); a spec's sampling knobs go over the base's sampling
    (a base without one: its pair's defaults)."""
    base = engine.resolved(base)
    name, *pairs = spec.split(":")
    params, sampling = {}, {}
    for kv in pairs:
        if "=" not in kv:
            raise ValueError(f"method spec {spec!r}: {kv!r} is not key=value")
        key, value = kv.split("=", 1)
        key = key.replace("-", "_")
        if key in _SAMPLING_FIELDS:
            sampling[key] = int(value) if key in ("top_k", "cfg_interval") else float(value)
        elif key in _PARAM_TYPES:
            typ = _PARAM_TYPES[key]
            params[key] = int(value) if typ in (int, "int") else float(value) if typ in (float, "float") else value
        else:
            raise ValueError(f"method spec {spec!r}: unknown parameter {key!r}")
    cfg = dataclasses.replace(base, method=name, params=dataclasses.replace(base.params, **params),
                              sampling=dataclasses.replace(base.sampling, **sampling))
    return spec, cfg


def configs_of(specs: list[str], base: RunConfig) -> list[tuple[str, RunConfig]]:
    """Parsed specs, ar first when it is not among them (it is the reference)."""
    configs = [parse_spec(s, base) for s in dict.fromkeys(specs)]
    if not any(c.method == "ar" for _, c in configs):
        configs.insert(0, parse_spec("ar", base))
    return configs


def run_config(configs: list[tuple[str, RunConfig]], n_prompts: int, seed: int) -> dict:
    """What a run folder holds: a rerun with a different one is refused."""
    base = configs[0][1]
    return dict(schema=SCHEMA, record_schema=RECORD_SCHEMA, model=base.model, prompts=n_prompts, seed=seed,
                specs=[label for label, _ in configs], reference_seed=REFERENCE_SEED,
                base=dict(sampling=dataclasses.asdict(base.sampling), params=dataclasses.asdict(base.params)))


# Knobs added after run folders were written, at the value that reproduces what every run made before
# they existed: a folder whose config lacks one resumes as if it said this value.
ADDED_KNOBS = {"base": {"params": {"accept": "pooled", "commit": "proposal", "lantern_residual": "moved",
                                   "static_tree": "cpu", "vvs_interval": 5, "vvs_threshold": 0.7}}}
# Knobs removed since, and the method whose records they shaped: a folder that names one resumes (the
# knob left out of the comparison) unless a spec runs that method, whose records an earlier reading made.
REMOVED_KNOBS = {"vvs_skip": "vvs"}


def _check_removed(folder: RunFolder, configs) -> dict:
    """The base knobs left out of the folder comparison (claim's `removed`): those no spec reads (a default
    of a method the run does not measure may change and the folder still resumes) and those removed since
    (REMOVED_KNOBS); a folder that names a removed knob is refused if a spec runs the method it shaped."""
    f = folder.path / "config.json"
    try:
        params = json.loads(f.read_text())["base"]["params"] if f.exists() else {}
    except (ValueError, KeyError, TypeError):
        params = {}                             # claim names what is wrong with it
    params = params if isinstance(params, dict) else {}
    gone = [k for k in REMOVED_KNOBS if k in params]
    hit = [k for k in gone if any(c.method == REMOVED_KNOBS[k] for _, c in configs)]
    if hit:
        raise RunFolderError(f"{folder.path} holds {REMOVED_KNOBS[hit[0]]} records of an earlier reading of it "
                             f"({hit[0]}, since removed); they cannot be resumed: choose another --out")
    read = {k for _, c in configs for k in knobs_read(c.method, c.params)}
    unread = {f.name for f in dataclasses.fields(MethodParams)} - read
    return {"base": {"params": {k: None for k in [*gone, *unread]}}}


def check_seeds(seed: int, n_prompts: int) -> None:
    """Every seed a bench of n_prompts draws (prompt i at seed + i, its reference at seed + i + REFERENCE_SEED)
    is one the engine takes: ParameterError naming seed otherwise, before any work."""
    last = SEED_END - n_prompts - REFERENCE_SEED
    if not (isinstance(seed, int) and 0 <= seed <= last):
        raise ParameterError(f"seed must be an integer in [0, {last}] with {n_prompts} prompts (prompt i runs at "
                             f"seed + i, its reference at seed + i + {REFERENCE_SEED}, each below 2^63); got {seed}")


def run(specs: list[str], n_prompts: int, seed: int, base: RunConfig | None = None, out=None,
        ranks: Ranks = Ranks(), progress: Callable = lambda *a: None, poll_s: float = 0.5) -> dict | None:
    """Measure this rank's shard into the run folder `out`, skipping records already there; wait for the
    other ranks; rank 0 merges every record and returns the result (other ranks return None).
    progress(done, total, info): rank 0 counts every rank's records, the others their own shard."""
    if out is None:
        if ranks.world > 1:
            raise RunFolderError("several ranks need a run folder they all read: give --out DIR")
        with tempfile.TemporaryDirectory(prefix="mulo-bench-") as tmp:
            return run(specs, n_prompts, seed, base, tmp, ranks, progress, poll_s)
    check_seeds(seed, n_prompts)
    base = engine.resolved(base or RunConfig())   # the pair's sampling defaults unless the base gives its own
    configs = configs_of(specs, base)
    pair = engine.load_pair(base.model)
    for _, c in configs:  # every spec is valid before the folder is claimed or any work starts
        engine.context(c, pair)
    folder = RunFolder(out)
    refusal = None
    if ranks.main:
        try:
            folder.claim(run_config(configs, n_prompts, seed), added=ADDED_KNOBS,
                         removed=_check_removed(folder, configs))
        except RunFolderError as e:
            refusal = str(e)
    refusal = broadcast(refusal, ranks)  # every rank stops on rank 0's refusal, none waits for it
    if refusal:
        raise RunFolderError(refusal)
    if not ranks.main:
        folder.claim(run_config(configs, n_prompts, seed), write=False, added=ADDED_KNOBS,
                     removed=_check_removed(folder, configs))
    scenes = heldout(n_prompts)
    model = configs[0][1].model
    ar_cfg = next(cfg for _, cfg in configs if cfg.method == "ar")
    want = {i: [(label, dataclasses.replace(cfg, prompt=scenes[i].caption(), seed=seed + i)) for label, cfg in configs]
            + [(REFERENCE, dataclasses.replace(ar_cfg, prompt=scenes[i].caption(), seed=seed + i + REFERENCE_SEED))]
            for i in range(n_prompts)}
    keys = {_key(label, c, model) for runs in want.values() for label, c in runs}
    done = folder.records()
    todo = [(i, label, c) for i in shard(n_prompts, ranks) for label, c in want[i] if _key(label, c, model) not in done]
    total = len(keys) if ranks.main else len(shard(n_prompts, ranks)) * (len(configs) + 1)
    count = (lambda: len(keys & folder.records().keys())) if ranks.main else \
        (lambda: total - len(todo) + measured)
    measured = 0
    progress(count(), total, "")
    try:
        if todo:
            clf = family.load_classifier() if model == "embedded" else None  # the domain's evaluator
            engine.run(todo[0][2], pair)  # warm-up: the first run of a process pays one-off costs
            worker = f"{socket.gethostname()}:{pair.device}:rank{ranks.rank}/{ranks.world}"
            for i, label, c in todo:  # prompt-major: each prompt sees every spec back to back
                folder.append(measure(label, c, i, scenes[i], pair, clf, worker), ranks.rank)
                measured += 1
                progress(count(), total, label)
        while len(keys & folder.records().keys()) < len(keys):  # the other ranks are still measuring
            time.sleep(poll_s)
            progress(count(), total, "waiting for the other ranks")
    finally:
        folder.close()
    progress(count(), total, "done")
    barrier(ranks)
    if not ranks.main:
        return None
    records = folder.records()
    by_spec = {label: [records[_key(label, c, model)] for i in range(n_prompts) for lb, c in want[i] if lb == label]
               for label in [lb for lb, _ in configs] + [REFERENCE]}
    result = merge(configs, by_spec, scenes, seed, family.load_classifier() if model == "embedded" else None)
    folder.write_summary(result)
    return result


def _key(label: str, c: RunConfig, model: str) -> tuple:
    return record_key(dict(spec=label, prompt=c.prompt, seed=c.seed, model=model, schema=RECORD_SCHEMA))


def measure(label: str, c: RunConfig, i: int, scene, pair, clf, worker: str) -> dict:
    """One record: run the spec on one prompt and seed, time it, and judge its tokens (judge). A run
    without sampling runs and is judged at the pair's defaults."""
    c = engine.resolved(c, pair)
    t0 = time.perf_counter()
    tr = engine.run(c, pair)
    wall = (time.perf_counter() - t0) * 1000.0
    record = dict(spec=label, method=c.method, prompt_index=i, prompt=c.prompt, seed=c.seed, model=pair.name,
                  schema=RECORD_SCHEMA, worker=worker, target_nfe=tr.totals["target_nfe"],
                  drafter_nfe=tr.totals["drafter_nfe"], wall_ms=wall, passed=tr.totals["passed_fraction"],
                  kept=tr.totals["kept_fraction"],
                  phase_ms={p: sum(s["wall_ms"] for s in tr.steps if s["phase"] == p) for p in PHASES},
                  level_nfe=tr.totals["level_nfe"],
                  level_ms=[sum(s["wall_ms"] for s in tr.steps if s.get("level", 0) == lv)
                            for lv in range(len(tr.totals["level_nfe"]))],
                  target_fed=sum(s.get("fed", 0) for s in tr.steps if s["model"] == "target"),
                  model_ms={m: sum(s["wall_ms"] for s in tr.steps if s["model"] == m) for m in ("target", "drafter")},
                  tokens=tr.tokens)
    return dict(record, **judge(label, c, scene, tr.tokens, pair, clf))


JUDGED = ("adherence", "features", "detail", "energy", "loglik", "impossible", "blur")   # what judge adds


def judge(label: str, c: RunConfig, scene, tokens, pair, clf) -> dict:
    """What the yardsticks need of one record's tokens: its image read back (adherence and detail
    features by the domain's classifier, clf None for none), high-frequency energy, the target's
    log-likelihood of the tokens under the run's sampling; an ar record also measures its image
    blurred, the negative control. c is resolved (its sampling the run's)."""
    image = engine.decode_image(tokens, pair.tokenizer)
    adh, feats = read_images([image], [scene], clf) if clf else ([None], [None])
    out = dict(adherence=adh[0], features=None if feats[0] is None else feats[0].tolist(),
               **_yardstick_inputs(image, tokens, c, pair))
    if c.method == "ar" and label != REFERENCE:
        blurred = yardsticks.blur(image)
        out["blur"] = _yardstick_inputs(blurred, encode_image(blurred, pair.tokenizer), c, pair)
    return out


def _yardstick_inputs(image, tokens, c: RunConfig, pair) -> dict:
    ll = likelihood.loglik(pair, c.prompt, tokens, c.sampling)
    return dict(detail=yardsticks.detail_features(image).tolist(), energy=yardsticks.laplacian_energy(image),
                loglik=ll["loglik"], impossible=ll["impossible"])


def encode_image(image: np.ndarray, tokenizer) -> np.ndarray:
    """(S, S, 3) uint8 -> (H, W) token grid: the tokenizer's codes of an image (the blurred control's tokens)."""
    import torch
    x = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1).float()[None] / 127.5 - 1.0
    with torch.inference_mode():
        return tokenizer.encode(x.to(next(tokenizer.parameters()).device))[0].cpu().numpy()


def merge(configs: list[tuple[str, RunConfig]], by_spec: dict[str, list[dict]], scenes, seed: int, clf) -> dict:
    """The summary of complete records (by spec, in prompt order, the reference among them): means,
    ratios against ar on the same prompts and seeds, and quality: adherence and the Fréchet distance to
    the data (None for a pair the embedded domain's classifier cannot read, clf None), and the
    yardsticks against the target's own samples (core.yardsticks) with their noise floors, bounds, the
    verdict of each spec and of the blurred control."""
    ar_label = next(label for label, c in configs if c.method == "ar")
    ar, ref = by_spec[ar_label], by_spec[REFERENCE]
    ar_passes = np.mean([r["target_nfe"] + r["drafter_nfe"] for r in ar])
    data_feats = reference_features(scenes, clf) if clf is not None and len(scenes) > 2 else None
    sets = {label: _set_of(rs, data_feats) for label, rs in by_spec.items()}
    floors = yardsticks.floors(sets[ar_label], sets[REFERENCE])
    figures = lambda s: _figures(s, sets[ar_label], sets[REFERENCE])  # noqa: E731
    summary = {}
    for label, cfg in configs:
        rs = by_spec[label]
        mean = lambda key: float(np.mean([r[key] for r in rs]))  # noqa: E731
        passes = float(np.mean([r["target_nfe"] + r["drafter_nfe"] for r in rs]))
        quality = figures(sets[label])
        summary[label] = dict(
            method=cfg.method, target_nfe=mean("target_nfe"), drafter_nfe=mean("drafter_nfe"), passes=passes,
            wall_ms=mean("wall_ms"), passes_speedup=float(ar_passes / passes),
            wall_speedup=wall_speedup(ar, rs),
            target_nfe_speedup=float(np.mean([r["target_nfe"] for r in ar]) / mean("target_nfe")),
            passed=_mean_or_none([r["passed"] for r in rs]), kept=_mean_or_none([r["kept"] for r in rs]),
            fed_per_pass=float(np.sum([r["target_fed"] for r in rs]) / max(np.sum([r["target_nfe"] for r in rs]), 1)),
            phase_ms={p: float(np.mean([r["phase_ms"][p] for r in rs])) for p in PHASES},
            level_nfe=np.mean([r["level_nfe"] for r in rs], axis=0).tolist(),   # passes per level (0 target)
            level_ms=np.mean([r["level_ms"] for r in rs], axis=0).tolist(),     # timed ms per level
            pass_ms=_pass_ms(rs),

            **quality, impossible=mean("impossible"), inside=yardsticks.inside(quality, floors))
    blurred = figures(_set_of([dict(r["blur"], adherence=None, features=None) for r in ar], None))
    workers = sorted({r["worker"] for rs in by_spec.values() for r in rs})
    return dict(schema=SCHEMA, model=configs[0][1].model, prompts=len(scenes), seed=seed,
                specs=[label for label, _ in configs], workers=workers,
                records=sum(len(rs) for rs in by_spec.values()), summary=summary,
                floors=dict(floors, reference_seed=REFERENCE_SEED, spreads=yardsticks.FLOOR_SPREADS,
                            reference=figures(sets[REFERENCE])),
                controls=dict(blur=dict(blurred, sigma_px=yardsticks.BLUR_SIGMA, inside=yardsticks.inside(blurred, floors))))


def _pass_ms(rs: list[dict]) -> dict | None:
    """Timed ms per pass of the target and of the drafter (None where it made none), and the
    drafter's cost per pass as a share of the target's: what a drafter pass is worth in the headline,
    which counts every pass alike. None for records made before the bench timed each model."""
    if not all("model_ms" in r for r in rs):
        return None
    per = {m: (sum(r["model_ms"][m] for r in rs) / n if (n := sum(r[f"{m}_nfe"] for r in rs)) else None)
           for m in ("target", "drafter")}
    per["drafter_share"] = per["drafter"] / per["target"] if per["drafter"] and per["target"] else None
    return per


def _set_of(rs: list[dict], data_feats) -> dict:
    """A spec's records as the arrays the yardsticks read (in prompt order)."""
    adh = [r["adherence"] for r in rs]
    feats = [r["features"] for r in rs]
    out = dict(detail=np.array([r["detail"] for r in rs], dtype=np.float64), energy=np.array([r["energy"] for r in rs]),
               loglik=np.array([r["loglik"] for r in rs]), adherence=None if None in adh else np.array(adh),
               data_fd=None)
    if data_feats is not None and None not in feats:
        f = np.array(feats, dtype=np.float64)
        out["data_fd"] = lambda ix: frechet_distance(f[ix], data_feats[ix])
    return out


def _figures(s: dict, ar: dict, ref: dict) -> dict:
    """Every quality figure of one set against ar (same prompts and seeds) and the reference."""
    n = len(s["energy"])
    return dict(adherence=None if s["adherence"] is None else float(np.mean(s["adherence"])),
                frechet=None if s["data_fd"] is None else s["data_fd"](np.arange(n)),
                fd_ar=yardsticks.fd_to_reference(s["detail"], ref["detail"]),
                sharpness=yardsticks.sharpness_ratio(s["energy"], ar["energy"]),
                loglik=float(np.mean(s["loglik"])), loglik_gap=float(np.mean(s["loglik"] - ar["loglik"])))


def wall_speedup(ar: list[dict], rs: list[dict]) -> float:
    """ar's mean wall over the spec's, per worker (the two measured on one device, interleaved), then
    averaged over workers weighted by their prompts. Never a ratio of times from two devices."""
    ar_by_prompt = {r["prompt_index"]: r for r in ar}
    pairs: dict[str, tuple[list, list]] = {}
    for r in rs:
        a = ar_by_prompt[r["prompt_index"]]
        if a["worker"] == r["worker"]:
            pa, pm = pairs.setdefault(r["worker"], ([], []))
            pa.append(a["wall_ms"])
            pm.append(r["wall_ms"])
    n = sum(len(a) for a, _ in pairs.values())
    if not n:
        return float("nan")
    return float(sum(len(a) * np.mean(a) / np.mean(m) for a, m in pairs.values()) / n)


def _mean_or_none(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


class SummaryError(ValueError):
    """A summary file that cannot be shown: not JSON, another schema, missing figures."""


SUMMARY_FIELDS = ("method", "passes", "passes_speedup", "wall_ms", "wall_speedup", "target_nfe", "drafter_nfe",
                  "adherence", "frechet", "fd_ar", "sharpness", "loglik_gap", "phase_ms")
QUALITY_FIELDS = ("adherence", "frechet", "fd_ar", "sharpness", "loglik_gap")  # None where not measured


SUMMARY_DEPTH = 6   # a summary nests 4 levels (result, controls, blur, inside); more is not a summary
LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:=/+-]{0,199}")   # a bench spec: no spaces, quotes or markup
YARDSTICK_BOUNDS = ("fd_ar", "sharpness", "loglik_gap")        # what a run of 3 prompts or more has floors for


def read_summary(text: str | bytes) -> dict:
    """A run folder's summary.json (or bench --json output), checked field by field: every field a
    figure, a table or a page reads is there with its type, every name is plain text, and no size or
    nesting reaches the parser's limits (SummaryError naming the first one wrong)."""
    if len(text) > MAX_BYTES:
        raise SummaryError(f"the summary is {len(text) / 2**20:.1f} MiB; at most {MAX_BYTES // 2**20} MiB are read")
    if isinstance(text, bytes) and text[:2] == b"\x1f\x8b":
        raise SummaryError("the file is gzip-compressed: unpack it and give the summary.json itself")
    try:
        d = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SummaryError(f"the summary is not valid JSON: {e}") from None
    except RecursionError:
        raise SummaryError(f"the summary nests deeper than {SUMMARY_DEPTH} levels") from None
    _check_depth(d)
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        got = d.get("schema") if isinstance(d, dict) else type(d).__name__
        raise SummaryError(f"not a benchmark summary: schema {_show(got)}, expected {SCHEMA!r} "
                           f"(the summary.json of a `python -m core bench --out DIR` run folder)")
    summary = d.get("summary")
    if not isinstance(summary, dict) or not summary:
        raise SummaryError("the summary has no per-method figures (field 'summary')")
    for label, s in summary.items():
        if not LABEL.fullmatch(label):
            raise SummaryError(f"the summary names a spec {_show(label)}; a spec is name[:knob=value...] in "
                               "letters, digits and . _ : = / + -")
        missing = [k for k in SUMMARY_FIELDS if not isinstance(s, dict) or k not in s]
        if missing:
            raise SummaryError(f"the figures of {label!r} lack {', '.join(missing)}")
        bad = [k for k in SUMMARY_FIELDS[1:-1] if not _number(s[k]) and not (k in QUALITY_FIELDS and s[k] is None)]
        bad += [k for k in ("passed", "kept", "target_nfe_speedup", "fed_per_pass") if not _number(s.get(k, 0), True)]
        bad += [] if _numbers(s["phase_ms"], dict) else ["phase_ms"]
        bad += [] if _numbers(s.get("level_nfe", []), list) else ["level_nfe"]
        if bad:
            raise SummaryError(f"the figures of {label!r} are not numbers: {', '.join(bad)}")
        if not (isinstance(s["method"], str) and NAME.fullmatch(s["method"])):
            raise SummaryError(f"the figures of {label!r}: method must be a method name; got {_show(s['method'])}")
        if not _verdicts(s.get("inside", {})):
            raise SummaryError(f"the figures of {label!r}: inside must map yardsticks to true, false or null")
    _check_run_fields(d)
    return d


def _check_run_fields(d: dict) -> None:
    """The fields of the run itself: what it measured, and the floors and controls its bounds come from."""
    for key, ok, what in (
            ("prompts", lambda v: _int(v) and v >= 1, "an integer >= 1"),
            ("seed", lambda v: _int(v) and 0 <= v < SEED_END, "an integer in [0, 2^63)"),
            ("specs", lambda v: isinstance(v, list) and all(isinstance(x, str) and x in d["summary"] for x in v),
             "a list of the labels of 'summary'")):
        if key not in d:
            raise SummaryError(f"the summary lacks the field {key!r} (a `python -m core bench --out DIR` run "
                               "writes it)")
        if not ok(d[key]):
            raise SummaryError(f"the summary's {key} must be {what}; got {_show(d[key])}")
    for key, ok, what in (
            ("model", lambda v: isinstance(v, str) and NAME.fullmatch(v), "a model pair name"),
            ("records", lambda v: _int(v) and v >= 0, "an integer >= 0"),
            ("workers", lambda v: isinstance(v, list) and all(isinstance(w, str) and len(w) <= 200 for w in v),
             "a list of worker names"),
            ("floors", _floors_ok, "the noise floors: spreads, reference_seed and each yardstick's value, spread "
                                   "and bounds as numbers"),
            ("controls", _controls_ok, "the blurred control: sigma_px, its yardsticks as numbers and its verdicts")):
        if key in d and not ok(d[key]):
            raise SummaryError(f"the summary's {key} must be {what}; got {_show(d[key])}")


def _floors_ok(f) -> bool:
    if not isinstance(f, dict):
        return False
    bounds = {k: v for k, v in f.items() if k in (*YARDSTICK_BOUNDS, "adherence", "frechet")}
    return (all(_numbers(b, dict) and _number(b.get("value")) and _number(b.get("spread")) for b in bounds.values())
            and ("fd_ar" not in f or (all(k in f for k in YARDSTICK_BOUNDS) and _number(f.get("spreads"))
                                      and _int(f.get("reference_seed")))))


def _controls_ok(c) -> bool:
    """A yardstick of the blurred control is a number, or None where the run could not measure it (the
    detail FD needs 3 images: a bench of 1 or 2 prompts has none), as a spec's quality figures are."""
    b = c.get("blur") if isinstance(c, dict) else None
    return isinstance(c, dict) and (b is None or (
        isinstance(b, dict) and _number(b.get("sigma_px"))
        and all(k in b and _number(b[k], or_none=True) for k in YARDSTICK_BOUNDS)
        and _verdicts(b.get("inside")) and "all" in b["inside"]))


def _check_depth(d) -> None:
    """Iteratively: no nesting a summary does not have reaches a reader's recursion."""
    stack = [(d, 1)]
    while stack:
        v, depth = stack.pop()
        if depth > SUMMARY_DEPTH:
            raise SummaryError(f"the summary nests deeper than {SUMMARY_DEPTH} levels")
        children = v.values() if isinstance(v, dict) else v
        stack.extend((x, depth + 1) for x in children if isinstance(x, (dict, list)))


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _number(v, or_none: bool = False) -> bool:
    return (v is None and or_none) or (isinstance(v, (int, float)) and not isinstance(v, bool))


def _numbers(v, kind) -> bool:
    """A dict (of names) or a list of numbers."""
    return isinstance(v, kind) and all(_number(x) for x in (v.values() if kind is dict else v))


def _verdicts(v) -> bool:
    return isinstance(v, dict) and all(x is None or isinstance(x, bool) for x in v.values())


def _show(v) -> str:
    """A value from a file, quoted for a message: at most 40 characters."""
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


def table(result: dict) -> str:
    """Headline first: sequential passes (target + drafter) and wall-clock, each as a ratio to ar; then
    quality: adherence, FD to the data, detail FD to ar's samples, sharpness ÷ ar, log-lik gap, and
    whether the spec is inside every bound (yes / no / - when the run is too small to have bounds);
    d/t ms: a drafter pass's timed cost as a share of a target pass's."""
    head = (f"{'method':<34}{'passes':>7}{'pass x':>7}{'wall s':>8}{'wall x':>7}{'tgt NFE':>8}{'drf NFE':>8}"
            f"{'tgt x':>7}{'fed/p':>7}{'passed':>7}{'kept':>6}{'adher.':>7}{'FD':>7}{'FD ar':>7}{'sharp':>6}"
            f"{'ll gap':>7}{'inside':>7}{'d/t ms':>7}  per-phase ms "
            f"({'/'.join(p[:6] for p in PHASES)})  passes per level (0 target/1 drafter/2 ...)")
    lines = [head, "-" * len(head)]
    num = lambda x, digits: "-" if x is None or not np.isfinite(x) else f"{x:.{digits}f}"  # noqa: E731
    frac = lambda x: num(x, 2)  # noqa: E731
    verdict = lambda s: {True: "yes", False: "no"}.get((s.get("inside") or {}).get("all"), "-")  # noqa: E731
    for label, s in result["summary"].items():
        ph = "/".join(f"{s['phase_ms'][p]:.0f}" for p in PHASES)
        lines.append(f"{label:<34}{s['passes']:>7.0f}{s['passes_speedup']:>7.2f}{s['wall_ms'] / 1000:>8.2f}"
                     f"{s['wall_speedup']:>7.2f}{s['target_nfe']:>8.0f}{s['drafter_nfe']:>8.0f}"
                     f"{s['target_nfe_speedup']:>7.2f}{s['fed_per_pass']:>7.1f}{frac(s['passed']):>7}{frac(s['kept']):>6}"
                     f"{num(s['adherence'], 3):>7}{num(s['frechet'], 2):>7}{num(s['fd_ar'], 2):>7}"
                     f"{num(s['sharpness'], 2):>6}{num(s['loglik_gap'], 3):>7}{verdict(s):>7}"
                     f"{num((s.get('pass_ms') or {}).get('drafter_share'), 2):>7}  {ph}  "
                     + "/".join(f"{n:.0f}" for n in s.get("level_nfe", [])))
    lines += ["", floors_text(result)]
    return "\n".join(lines)


def floors_text(result: dict) -> str:
    """The noise floors and bounds in words, and the blurred control's figures."""
    f = result.get("floors") or {}
    b = (result.get("controls") or {}).get("blur")
    num = lambda x, fmt: "–" if x is None else format(x, fmt)  # noqa: E731
    control = b and (f"control: ar blurred (Gaussian {b['sigma_px']:g} px): FD ar {num(b['fd_ar'], '.2f')}, sharpness "
                     f"{num(b['sharpness'], '.3f')}, log-lik gap {num(b['loglik_gap'], '+.3f')}")
    if "fd_ar" not in f:
        n = result.get("prompts")
        size = f"this run has {n} prompt{'s' * (n != 1)}" if isinstance(n, int) else "this run is too small"
        return "\n".join([f"bounds: none: {size}, and noise floors need at least 3 prompts (ar against ar at other "
                          "seeds), so no floor or bound is given and no figure is judged inside or outside"]
                         + ([f"{control} -> - (no bounds to judge it by)"] if control else []))
    k = f["spreads"]
    out = [f"noise floors (reference = ar at seeds + {f['reference_seed']}; bound = floor ± {k:g} spreads):",
           f"  FD to ar's samples: floor {f['fd_ar']['value']:.2f} ± {f['fd_ar']['spread']:.2f} -> bound <= "
           f"{f['fd_ar']['high']:.2f}",
           f"  sharpness ÷ ar: floor {f['sharpness']['value']:.3f} (log spread {f['sharpness']['spread']:.3f}) -> "
           f"bound {f['sharpness']['low']:.3f} .. {f['sharpness']['high']:.3f}",
           f"  log-lik gap (nats/token): floor {f['loglik_gap']['value']:+.3f} ± {f['loglik_gap']['spread']:.3f} -> "
           f"bound {f['loglik_gap']['low']:+.3f} .. {f['loglik_gap']['high']:+.3f}"]
    if "adherence" in f:
        out.append(f"  adherence: floor {f['adherence']['value']:+.3f} ± {f['adherence']['spread']:.3f} -> bound >= "
                   f"{f['adherence']['low']:.3f}")
    if "frechet" in f:
        out.append(f"  FD to the data: ar {f['frechet']['value']:.2f} ± {f['frechet']['spread']:.2f} -> bound <= "
                   f"{f['frechet']['high']:.2f}")
    if b:
        verdict = {True: "INSIDE (the yardsticks cannot see blur!)", False: "outside", None: "-"}[b["inside"]["all"]]
        out.append(f"{control} -> {verdict}")
    return "\n".join(out)
