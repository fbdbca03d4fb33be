"""Composition root: a RunConfig becomes models + a method, whose Steps become a Trace.

`stream` yields each Step as the method produces it (the app and the CLI show progress from it)
and finally the Trace; `run` returns just the Trace. Model pairs are loaded once per process.
"""
from __future__ import annotations

import os
import time
from dataclasses import replace
from functools import lru_cache
from typing import Callable, Iterator

import numpy as np
import torch

from .config import TREE_METHODS, ParameterError, RunConfig, SamplingConfig, draft_spec, validate
from .decoding import MethodContext
from .methods import registry
from .models.pair import ModelPair
from .upsampling import TRAINED
from .trace import Step, Trace, totals


def pair_loaders() -> dict[str, Callable[[], ModelPair]]:
    """Model pairs by name: the embedded family, then outside families (their weights load on demand)."""
    from .embedded import family
    from .models import llamagen, tar
    return {"embedded": family.load_pair, **llamagen.pair_loaders(), **tar.pair_loaders()}


def found_pairs() -> dict[str, str]:
    """{pair name: one line on it} for the pairs whose weights are on this machine, embedded first.
    Looks at files only; nothing is loaded."""
    from .embedded import family
    from .models import llamagen, tar
    return {"embedded": family.DESCRIPTION, **llamagen.found_pairs(), **tar.found_pairs()}


def pair_facts(name: str) -> dict:
    """Codebook size, mulo scales, default sampling and prompt kind of a pair, without loading it."""
    from .embedded import family
    from .models import llamagen, tar
    if name == "embedded":
        return family.pair_facts()
    if name in llamagen.PAIRS:
        return llamagen.pair_facts(name)
    if name in tar.PAIRS:
        return tar.pair_facts(name)
    raise ValueError(f"unknown model pair {name!r}; available: {', '.join(pair_loaders())}")


def pair_family(name):
    """The module of the outside family (core.models.llamagen, core.models.tar) that names the pair
    `name`, or None (the embedded pair, a name of no family). Each such module has PAIRS, CHECKPOINTS,
    ENV_DIR, pair_files(name), to_fetch(name) and fetch_pair(name, progress=...). Loads nothing."""
    from .models import llamagen, tar
    if not isinstance(name, str):
        return None
    return next((f for f in (llamagen, tar) if name in f.PAIRS), None)


def pair_sampling(name) -> SamplingConfig | None:
    """The sampling defaults of the pair `name` (pair_facts' "sampling"; LlamaGen and Tar: their official
    settings), or None for a name no family knows (a test's toy pair). Reads no file, loads nothing."""
    if name == "embedded":
        from .embedded import family
        return family.SAMPLING
    return pair_facts(name)["sampling"] if pair_family(name) is not None else None


def resolved(run: RunConfig, pair: ModelPair | None = None) -> RunConfig:
    """run with the sampling it runs with: its own when it gives one (never overridden), else the
    defaults of its pair: `pair`'s when given and a family names it (the pair that runs, the trace's
    model), else run.model's; SamplingConfig() for a pair no family names."""
    if run.sampling is not None:
        return run
    for name in ([pair.name] if pair is not None else []) + [run.model]:
        sampling = pair_sampling(name)
        if sampling is not None:
            return replace(run, sampling=sampling)
    return replace(run, sampling=SamplingConfig())


@lru_cache(maxsize=2)
def load_pair(name: str = "embedded") -> ModelPair:
    loaders = pair_loaders()
    if name not in loaders:
        raise ValueError(f"unknown model pair {name!r}; available: {', '.join(loaders)}")
    pair = loaders[name]()
    mode = os.environ.get("MULO_COMPILE", "")
    if mode:  # "default" or "reduce-overhead" (CUDA graphs): compile the single-token step
        for gpt in {id(m): m for m in (pair.target, pair.multiscale, pair.small) if m is not None}.values():
            gpt.compile_step(mode=mode)
    return pair


def _neighbours(pair: ModelPair, method: str):
    """The neighbour table a method reads: the tree methods' own where the pair has one (LANTERN's, on the
    raw codebook weights, for the LlamaGen and Tar pairs), else the pair's."""
    own = getattr(pair, "tree_neighbours", None)
    return own if method in TREE_METHODS and own is not None else pair.neighbours


def context(run: RunConfig, pair: ModelPair) -> MethodContext:
    run = resolved(run, pair)   # sampling None: the pair's defaults
    validate(run, pair.vocab_size, pair.grid, registry())
    if run.method == "mulo" and run.params.scale not in pair.scales:
        raise ParameterError(f"scale must be one of {', '.join(map(str, pair.scales))} for the {pair.name} "
                             f"model pair; got {run.params.scale}")
    if run.method == "mulo" and run.params.k > pair.neighbours.shape[1]:
        raise ParameterError(f"k must be at most {pair.neighbours.shape[1]} for the {pair.name} model pair (its "
                             f"codebook neighbour table holds {pair.neighbours.shape[1]} per code); got {run.params.k}")
    if run.method == "mulo":
        _check_cascade(run.params, pair)
        _check_upsamplers(run.params, pair)
    pair.caption(run.prompt, pair.grid)  # unknown words fail here, before any model runs
    gen = torch.Generator(device="cpu").manual_seed(run.seed)
    drafter = pair.multiscale if run.method == "mulo" else pair.small
    if run.method in ("sd", "cool") and drafter is None:
        raise ValueError(f"the {pair.name} pair ships no same-resolution drafter for {run.method}")
    head = None
    if run.method in TREE_METHODS:
        try:
            head = pair.draft_head(run.method)
        except (ValueError, RuntimeError) as e:
            raise ParameterError(f"method {run.method}: {e}") from None
    return MethodContext(target=pair.target, drafter=drafter, tokenizer=pair.tokenizer, grid=pair.grid,
                         caption=lambda grid: pair.caption(run.prompt, grid), sampling=run.sampling,
                         params=run.params, gen=gen, device=pair.device, neighbours=_neighbours(pair, run.method).cpu(),
                         upsampler_net=pair.upsampler, head=head)


def _check_upsamplers(p, pair: ModelPair) -> None:
    """Every mulo level with a trained up-sampler (sr, learned, distilled) finds the pair's network for its scale
    (loaded here, once, before any model runs)."""
    while True:
        if p.upsampler in TRAINED:
            try:
                pair.upsampler(p.upsampler, p.scale)
            except (ValueError, RuntimeError) as e:
                raise ParameterError(str(e)) from None
        name, sub = draft_spec(p)
        if name != "mulo":
            return
        p = sub


def _check_cascade(p, pair: ModelPair) -> None:
    """Every level of a cascade (draft_method=mulo/...) drafts on a grid the pair's multi-resolution
    model serves, and pools at most the neighbours its table holds."""
    r = p.scale
    while True:
        name, sub = draft_spec(p)
        if name != "mulo":
            return
        H, W = pair.grid
        if r * sub.scale not in pair.scales:
            served = ", ".join(f"{H // s}x{W // s}" for s in pair.scales)
            raise ParameterError(f"draft_method {p.draft_method!r} drafts its {H // r}x{W // r} grid on "
                                 f"{H // (r * sub.scale)}x{W // (r * sub.scale)}; the {pair.name} pair's "
                                 f"multi-resolution model serves {served}")
        if sub.k > pair.neighbours.shape[1]:
            raise ParameterError(f"draft_method {p.draft_method!r}: k must be at most {pair.neighbours.shape[1]} "
                                 f"for the {pair.name} model pair; got {sub.k}")
        p, r = sub, r * sub.scale


def _grid_list(a) -> list | None:
    return None if a is None else np.asarray(a).astype(int).tolist()


def stream(run: RunConfig, pair: ModelPair | None = None) -> Iterator[Step | Trace]:
    """Yield every Step of the run as it happens, then the Trace."""
    pair = pair or load_pair(run.model)
    run = resolved(run, pair)   # the trace's params record the sampling that ran
    t0 = time.perf_counter()
    ctx = context(run, pair)
    method = registry()[run.method]
    steps: list[dict] = []
    gen = method(ctx)
    work = 0.0  # seconds spent inside the run (the consumer's time between steps is not the run's)
    while True:
        # inference mode is per thread and a consumer (Gradio) may resume this generator on another
        # thread: enter it around each step, never across a yield
        with torch.inference_mode():
            try:
                step = next(gen)
            except StopIteration as stop:
                result = stop.value
                break
            finally:
                work += time.perf_counter() - t0
        steps.append(step.to_dict())
        yield step
        t0 = time.perf_counter()
    draft_grid = None if result.draft is None else list(result.draft.shape)
    params = dict(run.params.__dict__, **run.sampling.__dict__)
    nested = [dict(grid=lv["grid"], method=lv["method"], tokens=_grid_list(lv["tokens"]),
                   proposal=_grid_list(lv["proposal"]), draft=_grid_list(lv["draft"]))
              for lv in result.extra.get("levels", [])]
    grids = [list(pair.grid)] + ([draft_grid] if draft_grid else []) + [lv["grid"] for lv in nested[1:]]
    if nested and nested[-1]["draft"] is not None:  # the deepest run drafted on a grid of its own
        grids.append(list(np.asarray(nested[-1]["draft"]).shape))
    yield Trace(method=run.method, params=params, seed=run.seed, prompt=run.prompt, model=pair.name,
                grid=dict(target=list(pair.grid), draft=draft_grid, levels=grids), tokens=_grid_list(result.tokens),
                proposal=_grid_list(result.proposal), draft=_grid_list(result.draft), steps=steps,
                totals=totals(steps, work * 1000.0, result.passed_fraction, result.kept_fraction, len(grids)),
                levels=nested or None)


def run(run_cfg: RunConfig, pair: ModelPair | None = None) -> Trace:
    out = None
    for out in stream(run_cfg, pair):
        pass
    return out


def decode_image(trace_tokens, tokenizer) -> np.ndarray:
    """(H, W) token grid -> (S, S, 3) uint8 image."""
    with torch.inference_mode():
        tokens = torch.as_tensor(np.asarray(trace_tokens), dtype=torch.long)[None]
        img = tokenizer.decode(tokens.to(next(tokenizer.parameters()).device))[0].float()
    return ((img.clamp(-1, 1) + 1) * 127.5).round().byte().permute(1, 2, 0).cpu().numpy()

