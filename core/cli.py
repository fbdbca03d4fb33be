"""Command line: `python -m core {train,export,evaluate,generate,bench,report} ...`. The only printing layer of the core.

One file, just past 500 lines: one parser and its sub-commands' small bodies (each turns flags into a
call of the engine, the bench or a training job and prints the outcome), read as one table of commands.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import threading
import time
from pathlib import Path


class ProgressBar:
    """A one-line progress bar on stderr."""

    def __init__(self, label: str):
        self.label, self.t0, self.last = label, time.perf_counter(), 0

    def __call__(self, done: int, total: int, info: float | str | None = None) -> None:
        if done < self.last:      # a second phase (the distilled job's pool, then its steps): a new clock
            self.t0 = time.perf_counter()
        self.last = done
        frac = done / max(total, 1)
        el = time.perf_counter() - self.t0
        eta = el / max(frac, 1e-9) - el
        bar = "#" * int(30 * frac)
        extra = f" loss {info:.4f}" if isinstance(info, float) else (f" {info}" if info else "")
        sys.stderr.write(f"\r{self.label} [{bar:<30}] {done}/{total} {el:6.0f}s eta {eta:5.0f}s{extra}   ")
        if done >= total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _train(args) -> int:
    import torch
    from .embedded import family, train
    torch.set_num_threads(args.threads) if args.threads else None
    grids = tuple(int(g) for g in args.grids.split(",")) if args.grids else ((32,) if args.job == "drafter" else (32, 16, 8))
    upsampler = args.job in train.UPSAMPLER_JOBS
    if upsampler and args.scale not in (2, 4):
        raise UsageError(f"--scale must be 2 or 4 for the {args.job} job (the up-scale factor r it learns); "
                         f"got {args.scale}")
    if not upsampler and (args.scale or args.detail):
        raise UsageError(f"--scale and --detail are for the up-sampler jobs ({', '.join(train.UPSAMPLER_JOBS)}); "
                         f"the {args.job} job takes neither")
    if args.detail and args.job != "sr":
        raise UsageError(f"--detail weighs the sr job's detail term; the {args.job} job has none")
    if (args.job == "distilled") != bool(args.pool):
        raise UsageError("--pool (how many of the target's own samples to distil on) is for the distilled job, "
                         "which needs it" if args.job == "distilled" else
                         f"--pool is for the distilled job; the {args.job} job takes none")
    name = family.asset_name(args.job, args.scale)
    cfg = train.TrainConfig(job=args.job, steps=args.steps, batch=args.batch, lr=args.lr, data_seed=args.data_seed,
                            ckpt_every=args.ckpt_every, grids=grids, scale=args.scale, detail=args.detail,
                            pool=args.pool)
    run_dir = Path(args.run_dir or f"runs/{name}")
    init = None
    if args.init_from_assets:
        from safetensors.torch import load_file
        init = load_file(str(Path(args.assets) / family.FILES[name]))
    elif args.init_from:
        init = train.read_weights(Path(args.init_from))
    model = train.train(cfg, run_dir, Path(args.assets), ProgressBar(f"train {args.job}"), init)
    if args.export:
        _export_model(name, model, cfg.steps, cfg, Path(args.assets))
    return 0


def train_upsamplers() -> tuple:
    from .embedded.train import UPSAMPLER_JOBS
    return UPSAMPLER_JOBS


def _export_model(name: str, model, step: int, cfg, assets: Path) -> None:
    """Write the weights and their manifest entry; an up-sampler's held-out figures go in with it."""
    from .embedded import evaluate, family
    family.export(name, model, model.cfg.to_dict(), dict(train_steps=step, data_seed=cfg.data_seed,
                                                         train_config=cfg.__dict__), assets)
    print(f"exported {name} at step {step} of {cfg.steps} to {assets}")
    if cfg.job in train_upsamplers():
        figures = evaluate.upsampler_figures(model.eval(), cfg.job, cfg.scale, evaluate.UPSAMPLER_HELDOUT,
                                             ProgressBar(f"evaluate {name}"), family.load_tokenizer(assets))
        family.record_evaluation(name, figures, assets)
        print(f"{name} on {evaluate.UPSAMPLER_HELDOUT} held-out scenes: {figures}")


def build_parser() -> argparse.ArgumentParser:
    from .embedded.train import JOBS
    p = argparse.ArgumentParser(prog="python -m core", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="train (or resume) one model of the embedded family")
    t.add_argument("--job", choices=JOBS, required=True)
    t.add_argument("--steps", type=int, required=True)
    t.add_argument("--batch", type=int, default=16)
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--data-seed", type=int, default=0)
    t.add_argument("--ckpt-every", type=int, default=50)
    t.add_argument("--run-dir", default=None, help="checkpoint and log folder (default runs/<job>)")
    t.add_argument("--assets", default=str(Path(__file__).resolve().parent.parent / "assets"))
    t.add_argument("--export", action="store_true", help="write the trained weights into assets/")
    init = t.add_mutually_exclusive_group()
    init.add_argument("--init-from-assets", action="store_true",
                      help="start a new run from the shipped weights (continue training elsewhere)")
    init.add_argument("--init-from", default="", metavar="FILE",
                      help="start a new run from these weights: a run's ckpt.pt or a .safetensors file")
    t.add_argument("--grids", default="", help="AR jobs: token grids cycled through (default: target 32,16,8; "
                   "drafter 32)")
    t.add_argument("--scale", type=int, default=0, help="sr, learned, distilled: the up-scale factor r it learns (2 or 4); "
                   "exported as <job>_x<r>")
    t.add_argument("--detail", type=float, default=0.0, help="sr: weight of the detail term (L1 of the image "
                   "gradients) beside the pixel L1")
    t.add_argument("--pool", type=int, default=0, help="distilled: how many of the target's own samples (ar, "
                   "sampled once into <run-dir>/pool, resumable) it is distilled on")
    t.add_argument("--threads", type=int, default=0)
    t.set_defaults(func=_train)
    return p


def _add_run_args(p: argparse.ArgumentParser, model: str) -> None:
    """Run knobs; the sampling defaults are those of the chosen model pair (LlamaGen: its official settings)."""
    from . import engine
    from .config import SCALE_DEFAULTS, TREE_SIZES, MethodParams
    m, s = MethodParams(), engine.pair_facts(model)["sampling"]
    p.add_argument("--model", default=model, choices=list(engine.pair_loaders()),
                   help="model pair; sets the sampling defaults below (default: %(default)s)")
    p.add_argument("--prompt", default="a large red circle center on a striped blue background")
    p.add_argument("--tar-ids", default=None, metavar="FILE",
                   help="Tar pairs: a file of TA-Tok ids (text, JSON, .npy or .pt) that conditions both models; "
                   "the run's prompt is its path")
    p.add_argument("--seed", type=int, default=0)
    at = lambda knob: "default: the pick of --scale, " + "; ".join(  # noqa: E731
        f"r = {r}: {d[knob]:g}" for r, d in SCALE_DEFAULTS.items())
    p.add_argument("--k", type=int, default=None, help=f"codebook neighbours pooled (mulo; {at('k')})")
    p.add_argument("--tau", type=float, default=None, help=f"acceptance threshold on pooled mass (mulo; {at('tau')})")
    p.add_argument("--scale", type=int, default=m.scale, help="up-scale factor r (mulo; default: %(default)s)")
    p.add_argument("--radius", type=int, default=None, help=f"Chebyshev expansion radius l (mulo; {at('radius')})")
    p.add_argument("--window", type=int, default=m.window, help="ZipAR window w (zipar; inside mulo islands)")
    p.add_argument("--draft-window", type=int, default=m.draft_window,
                   help="shorthand of --draft-method zipar/window=w (0 = off)")
    p.add_argument("--draft-method", default=m.draft_method,
                   help="method decoding the drafter grid: name[/knob=value...], e.g. zipar/window=4, pjd/pjd_c=1, "
                        "mulo/scale=2 (a cascade)")
    p.add_argument("--draft-rows", type=int, default=m.draft_rows, help="low-res rows per cycle G (0 = all)")
    p.add_argument("--upsampler", default=m.upsampler,
                   help="pixel | nearest | sr | learned (sr and learned: trained networks the pair ships)")
    p.add_argument("--resample", default=m.resample, help="serial | islands | jacobi")
    p.add_argument("--redraft", default=m.redraft, help="resample=jacobi: independent | coupled")
    p.add_argument("--rejection", default=m.rejection, help="local | raster")
    p.add_argument("--context", default=m.context, help="exact | verify: what resampling reads (mulo)")
    p.add_argument("--accept", default=m.accept,
                   help="pooled (pooled mass on B_k >= tau) | exact (min(1, p/q) per cell; upsampler=learned draws "
                        "its proposal from its q) (mulo)")
    p.add_argument("--commit", default=m.commit,
                   help="proposal | target: a passed cell's token is the proposal's or drawn from the target's p "
                        "restricted to B_k, from the same verify pass (mulo, accept=pooled)")
    p.add_argument("--gamma", type=int, default=m.gamma, help="tokens drafted per cycle (sd, cool)")
    sizes = lambda knob: "; ".join(f"{name}: {d[knob]}" for name, d in TREE_SIZES.items())  # noqa: E731
    p.add_argument("--tree", default="cpu", choices=list(TREE_SIZES),
                   help="the tree sizes the five flags below take when not given: cpu (sized for a laptop) | "
                        "paper (as the released code runs LlamaGen) (eagle, lantern, lantern_pp, vvs)")
    p.add_argument("--tree-tokens", type=int, default=None,
                   help=f"draft tree nodes verified per cycle, root included (eagle, lantern, vvs; {sizes('tree_tokens')})")
    p.add_argument("--tree-depth", type=int, default=None,
                   help=f"levels of the draft tree = head passes per cycle (eagle, lantern, vvs; {sizes('tree_depth')})")
    p.add_argument("--tree-top-k", type=int, default=None,
                   help=f"children per expanded node (eagle, lantern, vvs; {sizes('tree_top_k')})")
    p.add_argument("--static-tree", default=None, help=f"lantern_pp's static tree: {sizes('static_tree')}")
    p.add_argument("--delta", type=float, default=m.delta, help="total-variation budget (lantern, vvs)")
    p.add_argument("--lantern-k", type=int, default=None,
                   help=f"neighbours considered (lantern, lantern_pp, vvs; capped at the codebook size; {sizes('lantern_k')})")
    p.add_argument("--lantern-lambda", type=float, default=m.lantern_lambda,
                   help="bound p~(x) <= lambda p(x) (lantern_pp; 1 = lossless)")
    p.add_argument("--lantern-residual", default=m.lantern_residual,
                   help="after a relaxed rejection: moved (the papers' text) | official (the released code's) "
                        "(lantern, lantern_pp, vvs)")
    p.add_argument("--vvs-interval", type=int, default=m.vvs_interval,
                   help="uniform: cycle i (from 0) skips verification when i mod interval = 1; 0 = never (vvs)")
    p.add_argument("--vvs-schedule", default=m.vvs_schedule,
                   help="uniform (every interval-th cycle) | dynamic (when the drafted paths' codes agree) (vvs)")
    p.add_argument("--vvs-threshold", type=float, default=m.vvs_threshold,
                   help="dynamic: the path agreement at which a cycle skips (vvs)")
    p.add_argument("--sjd-window", type=int, default=m.sjd_window, help="Jacobi window L (sjd, scd, gsd; pjd per row)")
    p.add_argument("--sjd-init", default=m.sjd_init, help="fresh guesses: random | repeat | above (sjd, scd, gsd, pjd)")
    p.add_argument("--gsd-group", type=int, default=m.gsd_group, help="rank-window size G of a cluster (gsd)")
    p.add_argument("--gsd-gap", type=float, default=m.gsd_gap, help="cluster members' |p(y) - p(x)| bound (gsd)")
    p.add_argument("--gsd-dist", type=float, default=m.gsd_dist, help="embedding-distance quantile bound (gsd)")
    p.add_argument("--pjd-c", type=int, default=m.pjd_c, help="committed tokens of a row before the next starts (pjd)")
    p.add_argument("--cool-delta", type=float, default=m.cool_delta, help="relaxation scale delta (cool)")
    p.add_argument("--cool-nu", type=float, default=m.cool_nu, help="annealing rate nu over draft positions (cool)")
    p.add_argument("--cool-norm", default=m.cool_norm, help="mu: mean (weights average delta) | first (cool)")
    p.add_argument("--cfg", type=float, default=s.cfg, help="classifier-free guidance scale (default: %(default)s)")
    p.add_argument("--cfg-interval", type=int, default=s.cfg_interval,
                   help="guide cells 0..N+1 only, as LlamaGen's --cfg-interval N (default: %(default)s = every cell)")
    p.add_argument("--temperature", type=float, default=s.temperature, help="0 = greedy (default: %(default)s)")
    p.add_argument("--top-k", type=int, default=s.top_k, help="0 = off (default: %(default)s)")
    p.add_argument("--top-p", type=float, default=s.top_p, help="nucleus mass kept (default: %(default)s)")
    p.add_argument("--threads", type=int, default=0)


def run_config(args, method: str):
    """The RunConfig of the parsed flags: every MethodParams and SamplingConfig field has a flag of its name."""
    from dataclasses import fields

    from .config import SCALE_DEFAULTS, TREE_SIZES, MethodParams, RunConfig, SamplingConfig
    picked = SCALE_DEFAULTS.get(args.scale, {})      # tau, k, radius not given: the pick of the scale
    given = {f.name: getattr(args, f.name) for f in fields(MethodParams)}
    picked = {**picked, **TREE_SIZES[getattr(args, "tree", "cpu")]}   # and the tree knobs: those of --tree
    params = MethodParams(**{**given, **{knob: picked.get(knob, getattr(MethodParams, knob))
                                         for knob in given if given[knob] is None}})
    sampling = SamplingConfig(**{f.name: getattr(args, f.name) for f in fields(SamplingConfig)})
    prompt = args.prompt
    if getattr(args, "tar_ids", None):
        if not args.model.startswith("tar-"):
            raise UsageError(f"--tar-ids conditions a Tar pair (--model tar-...); --model is {args.model}")
        prompt = args.tar_ids
    return RunConfig(method=method, prompt=prompt, seed=args.seed, sampling=sampling, params=params,
                     model=args.model)


class UsageError(ValueError):
    """A command line that cannot work (an output path, a count, a spec); one line, exit 2."""


def check_threads(n: int) -> None:
    """--threads: 0 (torch's default) up to the CPUs of this machine; torch crashes on far more."""
    most = os.cpu_count() or 1
    if not 0 <= n <= most:
        raise UsageError(f"--threads must be 0 (torch's default) to {most}, the CPUs of this machine; got {n}")


def check_run_folder(path: str) -> None:
    """bench --out: a folder (new, or a run folder to resume) that files can be created in, tried before any work."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"--out {path} is a file; give a folder (a new one, or a run folder to resume)")
    folder = next((a for a in (p, *p.parents) if a.exists()), Path("."))   # the folder that gets the new ones
    if not folder.is_dir():
        raise UsageError(f"--out {path}: {folder} is a file, so the folder cannot be made")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".mulo-out."):
            pass
    except OSError as e:
        raise UsageError(f"--out {path}: cannot write in {folder} ({e.strerror or e})") from None


def _image_extensions() -> set[str]:
    from PIL import Image
    Image.init()
    return {ext for ext, fmt in Image.registered_extensions().items() if fmt in Image.SAVE}


def check_output(path: str, flag: str, extensions: set[str]) -> Path:
    """An output path that will take a write: known extension, an existing folder where a file can
    be created (tried, so read-only file systems count too), not a folder itself."""
    p = Path(path)
    if p.suffix.lower() not in extensions:
        raise UsageError(f"{flag} {path}: the file name must end in one of {', '.join(sorted(extensions))}")
    if p.is_dir():
        raise UsageError(f"{flag} {path} is a folder; give a file name")
    folder = p.parent if str(p.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"{flag} {path}: the folder {folder} does not exist")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=f".{p.name}."):
            pass
    except OSError as e:
        raise UsageError(f"{flag} {path}: cannot write in {folder} ({e.strerror or e})") from None
    return p


def check_outputs(**paths) -> dict[str, Path]:
    """Every output of a command checked before any work; two flags never name one file."""
    checked = {flag: check_output(path, flag, exts) for flag, (path, exts) in paths.items() if path}
    seen: dict[Path, str] = {}
    for flag, p in checked.items():
        key = p.resolve()
        if key in seen:
            raise UsageError(f"{seen[key]} and {flag} name the same file {p}; give each its own")
        seen[key] = flag
    return checked


def write_atomic(path: Path, write) -> None:
    """write(temporary path) then rename over path: a reader sees the old file or the whole new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent if str(path.parent) else ".", prefix=f".{path.name}.",
                               suffix=path.suffix)
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _generate(args) -> int:
    import torch
    from PIL import Image
    from . import engine
    from .trace import Trace
    outs = check_outputs(**{"--out": (args.out, _image_extensions()), "--trace": (args.trace, {".json"})})
    if args.threads:
        torch.set_num_threads(args.threads)
    cfg = run_config(args, args.method)
    pair = engine.load_pair(cfg.model)
    engine.context(cfg, pair)  # validate everything before any work or output
    bar, n = ProgressBar(f"{cfg.method}"), 0
    trace = None
    for ev in engine.stream(cfg, pair):
        if isinstance(ev, Trace):
            trace = ev
        else:
            n += len(ev.cells)
            bar(min(n, pair.grid[0] * pair.grid[1]), pair.grid[0] * pair.grid[1], ev.phase)
    img = Image.fromarray(engine.decode_image(trace.tokens, pair.tokenizer))
    out = outs["--out"]
    write_atomic(out, lambda tmp: img.save(tmp, format=Image.registered_extensions()[out.suffix.lower()]))
    if args.trace:
        write_atomic(outs["--trace"], lambda tmp: Path(tmp).write_text(trace.to_json()))
    t = trace.totals
    print(f"{cfg.method}: target NFE {t['target_nfe']}, drafter NFE {t['drafter_nfe']}, "
          f"wall {t['wall_ms'] / 1000:.2f} s, passed {t['passed_fraction']}, kept {t['kept_fraction']} -> {out}")
    return 0


def _export(args) -> int:
    from .embedded import family, train
    run_dir = Path(args.run_dir or f"runs/{family.asset_name(args.job, args.scale)}")
    state = train.read_checkpoint(run_dir / "ckpt.pt")
    cfg = train.TrainConfig(**state["config"])
    model = train.make_job(cfg, Path(args.assets)).model
    model.load_state_dict(state["model"])
    _export_model(family.asset_name(cfg.job, cfg.scale), model.eval(), state["step"], cfg, Path(args.assets))
    return 0


class RankBar:
    """A tqdm bar on stderr per rank, with ETA: rank 0 counts the records of every rank, the others their own."""

    def __init__(self, ranks):
        self.ranks, self.bar = ranks, None

    def __call__(self, done: int, total: int, info: str = "") -> None:
        from tqdm import tqdm
        if self.bar is None:  # records found in the folder count as done but not into the rate
            desc = "bench, all ranks" if self.ranks.main else f"bench, rank {self.ranks.rank}"
            self.bar = tqdm(total=total, initial=done, desc=desc, unit="run", position=self.ranks.rank,
                            file=sys.stderr, dynamic_ncols=True, mininterval=1.0)
        self.bar.update(done - self.bar.n)
        self.bar.set_postfix_str(info, refresh=False)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _interrupt(signum, frame):
    raise KeyboardInterrupt


def _bench(args) -> int:
    import json
    import signal
    import torch
    from . import bench, distributed
    from .runfolder import RunFolder
    if args.prompts < 1:
        raise UsageError(f"--prompts must be at least 1; got {args.prompts}")
    check_outputs(**{"--json": (args.json, {".json"})})
    if args.out:
        check_run_folder(args.out)
    base = run_config(args, "ar")
    bench.check_seeds(args.seed, args.prompts)
    for spec in (m for m in args.methods.split(",") if m):   # a bad value names its spec, before any rank starts
        try:
            bench.parse_spec(spec, base)
        except ValueError as e:
            raise UsageError(str(e) if str(e).startswith("method spec") else f"method spec {spec!r}: {e}") from None
    ranks = distributed.join()
    if args.threads:
        torch.set_num_threads(args.threads)
    bar = RankBar(ranks)
    signal.signal(signal.SIGTERM, _interrupt)  # a pre-empted job stops like Ctrl-C: every finished record stays
    try:
        result = bench.run([m for m in args.methods.split(",") if m], args.prompts, args.seed, base, args.out,
                           ranks, bar)
    except KeyboardInterrupt:
        bar.close()
        if ranks.main and args.out:
            sys.stderr.write(f"interrupted: {len(RunFolder(args.out).records())} records are kept in {args.out}; "
                             f"run the same command again to continue\n")
        elif ranks.main:
            sys.stderr.write("interrupted: nothing kept (give --out DIR to keep records and resume)\n")
        return 130
    except ValueError as e:  # a folder of another configuration, an unknown pair or spec: one line
        bar.close()
        if ranks.main:
            sys.stderr.write(f"error: {e}\n")
        return 2
    finally:
        distributed.leave(ranks)
    bar.close()
    if not ranks.main:
        return 0
    print(bench.table(result))
    if args.out:
        print(f"records and summary.json in {args.out}; `python -m core report {args.out}` draws the report")
    if args.json:
        write_atomic(Path(args.json), lambda tmp: Path(tmp).write_text(json.dumps(result, indent=2)))
    return 0


def _report(args) -> int:
    from . import report
    from .bench import SummaryError
    named = [(flag, Path(v).resolve()) for flag, v in (("--html", args.html), ("--svg", args.svg),
                                                        ("--markdown", args.markdown)) if v]
    for n, (flag, path) in enumerate(named):
        for other, path2 in named[n + 1:]:
            if path == path2:
                raise UsageError(f"{flag} and {other} name the same file ({path}): one would overwrite the other")
    try:
        result = report.combine([report.read_folder(f) for f in args.folder])
        first = report.summary_file(args.folder[0]).parent
        path = report.write(result, args.html or first / "report.html",
                            f"Benchmark report: {', '.join(report.summary_file(f).parent.name for f in args.folder)}")
        print(f"wrote {path}")
        if args.markdown:
            text = report.markdown(result)
            write_atomic(Path(args.markdown), lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))
            print(f"wrote {args.markdown}")
        if args.svg:
            best, meets = report.choose(result, args.family)
            svg = report.frontier_svg(result, args.family)
            write_atomic(Path(args.svg), lambda tmp: Path(tmp).write_text(svg, encoding="utf-8"))
            print(f"wrote {args.svg}")
            print(f"{sum(meets.values())} of {len(meets)} {args.family} specs are inside every bound (each "
                  f"yardstick within {result['floors']['spreads']:g} spreads of its noise floor); the fewest "
                  f"sequential passes among them: {best or 'none'}")
            chosen, tier = report.default_rule(result, args.family)
            print(f"the default rule names {chosen or 'none'} ({tier})")
    except (SummaryError, OSError) as e:
        sys.stderr.write(f"error: {e}\n")
        return 2
    return 0


def _evaluate(args) -> int:
    import json
    import torch
    from . import distributed
    from .embedded import evaluate
    if args.prompts < 1:
        raise UsageError(f"--prompts must be at least 1; got {args.prompts}")
    try:
        grids = tuple(int(g) for g in args.grids.split(","))
    except ValueError:
        raise UsageError(f"--grids must be comma-separated token grid sides, e.g. 32,16,8; got {args.grids!r}") from None
    ranks = distributed.join()
    if args.threads:
        torch.set_num_threads(args.threads)
    label = f"evaluate {args.what}" + ("" if ranks.world == 1 else f", rank {ranks.rank}")
    try:
        figures = evaluate.run(args.what, args.prompts, ProgressBar(label), grids=grids, record=args.record,
                               ranks=ranks)
    finally:
        distributed.leave(ranks)
    if ranks.main:
        print(json.dumps(figures, indent=2))
    return 0


def _extend(p: argparse.ArgumentParser, model: str = "embedded") -> None:
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    g = sub.add_parser("generate", help="generate one image and its Trace")
    g.add_argument("--method", default="mulo")
    _add_run_args(g, model)
    g.add_argument("--out", default="img.png")
    g.add_argument("--trace", default=None, help="write the Trace JSON here")
    g.set_defaults(func=_generate)
    b = sub.add_parser("bench", help="every method on the same prompts and seeds, side by side")
    b.add_argument("--methods", default="ar,zipar,mulo",
                   help="comma-separated specs, each name[:param=value...], e.g. mulo:scale=4:tau=0.05")
    b.add_argument("--prompts", type=int, default=20)
    _add_run_args(b, model)
    b.add_argument("--json", default=None, help="write the full result here")
    b.add_argument("--out", default=None, metavar="DIR",
                   help="run folder: one line per finished record, config.json and summary.json; the same "
                        "command with the same --out resumes (needed under torchrun: a folder every rank reads)")
    b.set_defaults(func=_bench)
    r = sub.add_parser("report", help="one self-contained HTML page (Plotly) from a bench run folder")
    r.add_argument("folder", nargs="+", help="a bench --out folder (or its summary.json); several runs of the "
                   "same prompts, seed and model pair are drawn together (their ar rows must agree)")
    r.add_argument("--html", default=None, help="write the page here (default FOLDER/report.html)")
    r.add_argument("--svg", default=None, metavar="FILE",
                   help="also write a static SVG of one family's frontier (pass speedup against adherence, detail "
                        "FD, sharpness and log-lik gap) and name the spec with the fewest passes inside every bound")
    r.add_argument("--markdown", default=None, metavar="FILE",
                   help="also write the figures as a Markdown table with the noise floors and the blurred control")
    r.add_argument("--family", default="mulo", help="the method family of --svg (default mulo)")
    r.set_defaults(func=_report)
    x = sub.add_parser("export", help="export the latest checkpoint of a training run into assets/")
    x.add_argument("--job", required=True)
    x.add_argument("--run-dir", default=None, help="default runs/<job>, for an up-sampler runs/<job>_x<scale>")
    x.add_argument("--scale", type=int, default=0, help="sr, learned, distilled: the run's up-scale factor r")
    x.add_argument("--assets", default=str(Path(__file__).resolve().parent.parent / "assets"))
    x.set_defaults(func=_export)
    e = sub.add_parser("evaluate", help="measure the embedded family (tokenizer, classifier, ar quality)")
    e.add_argument("--what", choices=("tokenizer", "classifier", "ar"), required=True)
    e.add_argument("--prompts", type=int, default=200, help="held-out scenes / prompts")
    e.add_argument("--grids", default="32,16,8", help="ar: token grids to evaluate")
    e.add_argument("--record", action="store_true", help="write the figures into assets/manifest.json")
    e.add_argument("--threads", type=int, default=0)
    e.set_defaults(func=_evaluate)


INTERRUPTED = {   # what an interrupted command leaves behind, and how to go on
    "generate": "nothing was written (outputs are written whole, at the end)",
    "bench": "no result was written; run the same command again",
    "evaluate": "no figures were recorded; run the same command again",
    "train": "the last checkpoint (every --ckpt-every steps) is kept; run the same command to resume",
    "export": "assets/ is unchanged unless the export finished",
}


def _terminate(signum, frame):
    raise KeyboardInterrupt  # SIGTERM ends a command the way Ctrl-C does


def _chosen_model(argv: list[str] | None) -> str:
    """The --model of the command line, read first: its pair decides the sampling defaults (and --help shows them)."""
    from . import engine
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--model", default="embedded")
    model = pre.parse_known_args(argv)[0].model
    return model if model in engine.pair_loaders() else "embedded"  # an unknown name fails in the full parse


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    _extend(parser, _chosen_model(argv))
    args = parser.parse_args(argv)
    from .config import SEED_END, ParameterError
    from .embedded.domain import PromptError
    from .embedded.family import AssetError
    from .models.llamagen import UnsafeCheckpoint
    from .embedded.train import CheckpointError
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    try:
        check_threads(getattr(args, "threads", 0))
        if not 0 <= getattr(args, "data_seed", 0) < SEED_END:
            raise UsageError(f"--data-seed must be an integer in [0, 2^63); got {args.data_seed}")
        return args.func(args)
    except (ParameterError, PromptError, AssetError, CheckpointError, UnsafeCheckpoint, UsageError,
            FileNotFoundError) as e:
        sys.stderr.write(f"error: {e}\n")  # bad input: one clear line
        return 2
    except OSError as e:  # a disk that filled or went away while writing
        sys.stderr.write(f"error: {e}\n")
        return 1
    except KeyboardInterrupt:
        sys.stderr.write(f"\ninterrupted: {INTERRUPTED.get(args.cmd, 'stopped')}\n")
        return 130
