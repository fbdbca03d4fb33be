"""Side-by-side benchmark: every method on the same held-out prompts and seeds, in one process.

A method spec is a name with optional parameter overrides, `mulo:scale=4:tau=0.05`. Reports per
spec: target and drafter NFE, wall-clock, speedup vs ar (headline: ratio of sequential passes,
target + drafter, and wall ratio; target-only NFE ratio as a detail), passed and kept fractions,
per-phase time, prompt adherence and Fréchet distance. Quality always sits beside speed.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from . import engine, family
from .config import MethodParams, RunConfig, SamplingConfig
from .evaluate import heldout, quality
from .trace import PHASES

_PARAM_TYPES = {f.name: f.type for f in dataclasses.fields(MethodParams)}
_SAMPLING_FIELDS = {f.name for f in dataclasses.fields(SamplingConfig)}


def parse_spec(spec: str, base: RunConfig) -> tuple[str, RunConfig]:
    """'mulo:scale=4:tau=0.05' -> (label, RunConfig)."""
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


def run(specs: list[str], n_prompts: int, seed: int, base: RunConfig | None = None,
        progress: Callable = lambda *a: None) -> dict:
    base = base or RunConfig()
    pair = engine.load_pair(base.model)
    clf = family.load_classifier()
    scenes = heldout(n_prompts)
    configs = [parse_spec(s, base) for s in specs]
    if not any(c.method == "ar" for _, c in configs):
        configs.insert(0, parse_spec("ar", base))
    for _, c in configs:  # every spec is valid before any work starts
        engine.context(c, pair)
    engine.run(dataclasses.replace(configs[0][1], prompt=scenes[0].caption(), seed=seed), pair)  # warm-up
    rows: dict[str, list[dict]] = {label: [] for label, _ in configs}
    images: dict[str, list[np.ndarray]] = {label: [] for label, _ in configs}
    total, done = len(configs) * n_prompts, 0
    for i, scene in enumerate(scenes):  # prompt-major: each prompt sees every method back to back
        for label, cfg in configs:
            c = dataclasses.replace(cfg, prompt=scene.caption(), seed=seed + i)
            t0 = time.perf_counter()
            tr = engine.run(c, pair)
            wall = (time.perf_counter() - t0) * 1000.0
            phase_ms = {p: sum(s["wall_ms"] for s in tr.steps if s["phase"] == p) for p in PHASES}
            rows[label].append(dict(target_nfe=tr.totals["target_nfe"], drafter_nfe=tr.totals["drafter_nfe"],
                                    wall_ms=wall, passed=tr.totals["passed_fraction"],
                                    kept=tr.totals["kept_fraction"], phase_ms=phase_ms,
                                    target_fed=sum(s.get("fed", 0) for s in tr.steps if s["model"] == "target")))
            images[label].append(engine.decode_image(tr.tokens, pair.tokenizer))
            done += 1
            progress(done, total, label)
    ar_label = next(label for label, c in configs if c.method == "ar")
    ar_nfe = np.mean([r["target_nfe"] for r in rows[ar_label]])
    ar_wall = np.mean([r["wall_ms"] for r in rows[ar_label]])
    summary = {}
    for label, cfg in configs:
        rs = rows[label]
        q = quality(images[label], scenes, clf)
        passes = np.mean([r["target_nfe"] + r["drafter_nfe"] for r in rs])
        summary[label] = dict(
            method=cfg.method, target_nfe=float(np.mean([r["target_nfe"] for r in rs])),
            drafter_nfe=float(np.mean([r["drafter_nfe"] for r in rs])), passes=float(passes),
            wall_ms=float(np.mean([r["wall_ms"] for r in rs])),
            passes_speedup=float(ar_nfe / passes),
            wall_speedup=float(ar_wall / np.mean([r["wall_ms"] for r in rs])),
            target_nfe_speedup=float(ar_nfe / np.mean([r["target_nfe"] for r in rs])),
            passed=_mean_or_none([r["passed"] for r in rs]), kept=_mean_or_none([r["kept"] for r in rs]),
            fed_per_pass=float(np.sum([r["target_fed"] for r in rs]) / max(np.sum([r["target_nfe"] for r in rs]), 1)),
            phase_ms={p: float(np.mean([r["phase_ms"][p] for r in rs])) for p in PHASES},
            adherence=q["adherence"], frechet=q["frechet"])
    return dict(prompts=n_prompts, seed=seed, specs=[label for label, _ in configs], summary=summary)


def _mean_or_none(xs: list) -> float | None:
    xs = [x for x in xs if x is not None]
    return float(np.mean(xs)) if xs else None


def table(result: dict) -> str:
    """Headline first: sequential passes (target + drafter) and wall-clock, each as a ratio to ar."""
    head = (f"{'method':<34}{'passes':>7}{'pass x':>7}{'wall s':>8}{'wall x':>7}{'tgt NFE':>8}{'drf NFE':>8}"
            f"{'tgt x':>7}{'fed/p':>7}{'passed':>7}{'kept':>6}{'adher.':>7}{'FD':>7}  per-phase ms "
            f"({'/'.join(p[:6] for p in PHASES)})")
    lines = [head, "-" * len(head)]
    frac = lambda x: "-" if x is None else f"{x:.2f}"  # noqa: E731
    for label, s in result["summary"].items():
        ph = "/".join(f"{s['phase_ms'][p]:.0f}" for p in PHASES)
        lines.append(f"{label:<34}{s['passes']:>7.0f}{s['passes_speedup']:>7.2f}{s['wall_ms'] / 1000:>8.2f}"
                     f"{s['wall_speedup']:>7.2f}{s['target_nfe']:>8.0f}{s['drafter_nfe']:>8.0f}"
                     f"{s['target_nfe_speedup']:>7.2f}{s['fed_per_pass']:>7.1f}{frac(s['passed']):>7}{frac(s['kept']):>6}"
                     f"{s['adherence']:>7.3f}{s['frechet']:>7.2f}  {ph}")
    return "\n".join(lines)
