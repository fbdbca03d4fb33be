"""GPU timing of the engine on LlamaGen-XL (default) or Tar's AR-DTok at real size, random weights.

--family llamagen (default): LlamaGen-XL (36 layers, width 1280); a stage-1 style drafter at 16x16 and
a stage-2 style target at 32x32 share a VQ-16 tokenizer, as in the llamagen-t2i pair.
--family tar: Tar's AR-DTok llama-abs-LP (30 layers, 20 heads, width 1280), built through
tar.gpt_config from official-style {"name": "llama-abs-LP", "args": {...}} entries (learned absolute
positions, 729 TA-Tok features of width 1152 through one biased projection): --tar-pair tar-1024-512
(default: 1024 px target on a 64x64 grid, 512 px drafter on 32x32, r = 2), tar-512-256 (32x32 and
16x16) or tar-1024-256 (r = 4); LlamaGen's VQ-16 as tokenizer; the conditioning is one fixed random
(729, 1152) feature matrix (no TA-Tok needed). Methods needing a same-resolution drafter (sd, cool)
report that Tar ships none.

Reports, per method spec: target and drafter NFE, wall-clock, NFE and wall
ratios against ar, per-phase time; then the engine's overhead: a verify forward through the
positional cache (masks, CFG, processed distribution) against a bare causal forward over the same
tokens, and one single-cell decode step. Random weights make acceptance meaningless: read the
timings and NFE, not the acceptance.

Then, with --compile, the single-token step through torch.compile (inductor) and with CUDA graphs
("reduce-overhead"), and the ar and mulo wall-clock with each.

    python scripts/gpu_bench.py [--family llamagen|tar] [--tar-pair tar-1024-512|tar-512-256|tar-1024-256]
        [--specs ar zipar:window=16 mulo mulo:tau=0 sjd eagle lantern] [--seeds 1] [--dtype bf16] [--compile]
    python scripts/gpu_bench.py --family tar --specs ar mulo        # Tar 1024 px / 512 px on a GPU

Without a GPU: --dry builds the real-size configurations only (models on the meta device; sizes,
parameter counts and grids printed, nothing run); --tiny runs the whole script on the CPU with tiny
models of the same layout (grids a quarter of the real sides) to check the code path, not to time.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
DEVICE = "cuda"


def sync() -> None:
    """Wait for the GPU (nothing to wait for on the CPU, --tiny)."""
    if torch.cuda.is_available() and DEVICE == "cuda":
        torch.cuda.synchronize()


def cuda_time(fn, repeat: int = 5) -> float:
    """Median milliseconds of fn() with the device synchronized around each call."""
    times = []
    for _ in range(repeat):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1000.0)
    return statistics.median(times)


def random_model(make, device):
    """A real-size model with random weights, allocated on the device without a CPU copy."""
    with torch.device("meta"):
        model = make()
    model = model.to_empty(device=device)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.fill_(1.0 if "norm" in name and name.endswith("weight") else 0.0)
            else:
                torch.nn.init.normal_(p, std=0.02)
    return model.eval()


TAR_GRIDS = {1024: 64, 512: 32, 256: 16}     # AR-DTok image size -> token grid side (VQ-16)


def tar_spec(px: int, tiny: bool = False) -> dict:
    """An official-style AR-DTok entry without weights: {"name": "llama-abs-LP", "args": ...} at px
    (its sizes come from the name, as in the released checkpoints); tiny: sizes in the args, the TINY
    widths of tar.py, a quarter of the grid side."""
    from core.models import tar
    side = TAR_GRIDS[px] // (4 if tiny else 1)
    args = dict(model_type="clip_cond", vocab_size=16384, cls_token_num=tar.FEATURES, cond_dim=tar.FEATURE_DIM,
                max_seq_len=side * side, token_dropout_p=0.0, resid_dropout_p=0.0, ffn_dropout_p=0.0,
                class_dropout_prob=0.1)
    if not tiny:
        return {"name": "llama-abs-LP", "args": args}
    t = tar.TINY
    args.update(vocab_size=t["vocab_size"], cls_token_num=t["prefix"], cond_dim=t["cond_dim"], n_layer=t["n_layer"],
                n_head=t["n_head"], dim=t["dim"], multiple_of=t["multiple_of"])
    return {"name": "llama-abs-tiny", "args": args}


def tiny_llamagen_config():
    """LlamaGen's t2i layout (120 T5 tokens of 2048, zero prefix rotation) at tiny width (--tiny)."""
    from core.models import llamagen as lg
    from core.models.gpt import GPTConfig
    return GPTConfig(vocab_size=64, dim=32, n_layer=2, n_head=2, multiple_of=32, norm_eps=1e-5, prefix_rope="zero",
                     caption_bias=False, prefix_len=lg.T5_LEN, caption_dim=lg.T5_DIM)


def build(args, dev, dtype, needs_small: bool):
    """(pair, target, drafter, caption, sampling, description) of the chosen family; --dry: None after
    printing the real-size configurations."""
    from core.models import llamagen as lg
    from core.models import tar
    from core.models.eagle import DraftHead
    from core.models.gpt import GPT
    from core.models.vq import VQModel

    if args.family == "tar":
        spec = tar.PAIRS[args.tar_pair]
        t_px, d_px = tar.CHECKPOINTS[spec.target].px, tar.CHECKPOINTS[spec.drafter].px
        (t_cfg, grid), (d_cfg, dgrid) = (tar.gpt_config(tar_spec(px, args.tiny), f"AR-DTok {px} px")
                                         for px in (t_px, d_px))
        if (dgrid[0] * spec.scale, dgrid[1] * spec.scale) != grid:
            raise ValueError(f"{args.tar_pair}: drafter grid {dgrid} is not the target's {grid} / {spec.scale}")
        vq_cfg, name = tar.TINY_VQ if args.tiny else lg.VQ16, f"{args.tar_pair}-random"
        desc = (f"Tar AR-DTok {'tiny' if args.tiny else 'llama-abs-LP'} target {t_px} px {grid[0]}x{grid[1]}, "
                f"drafter {d_px} px {dgrid[0]}x{dgrid[1]} (r = {spec.scale}), {t_cfg.prefix_len} x {t_cfg.caption_dim} "
                "random features")
    else:
        t_cfg = d_cfg = tiny_llamagen_config() if args.tiny else lg.gpt_config("XL", "t2i")
        grid, dgrid = ((8, 8), (4, 4)) if args.tiny else ((32, 32), (16, 16))
        vq_cfg, name = tar.TINY_VQ if args.tiny else lg.VQ16, "llamagen-xl-random"
        desc = f"target/drafter GPT-{'tiny' if args.tiny else 'XL'}"
    if args.dry:
        with torch.device("meta"):
            target, drafter = GPT(t_cfg), GPT(d_cfg)
        target.check_grid(grid)
        drafter.check_grid(dgrid)
        for role, m, g in (("target", target, grid), ("drafter", drafter, dgrid)):
            c = m.cfg
            print(f"{role:<8} {c.n_layer} layers, {c.n_head} heads, width {c.dim}, vocab {c.vocab_size}, prefix "
                  f"{c.prefix_len} x {c.caption_dim} ({c.caption_proj}), abs positions {c.abs_positions}, grid "
                  f"{g[0]}x{g[1]}: {sum(p.numel() for p in m.parameters()) / 1e6:.0f}M parameters")
        print(f"{desc}\n--dry: configurations only, nothing run")
        return None

    torch.manual_seed(0)
    target = random_model(lambda: GPT(t_cfg), dev)
    drafter = random_model(lambda: GPT(d_cfg), dev)
    tok = random_model(lambda: VQModel(vq_cfg), dev)
    head = random_model(lambda: DraftHead.for_target(target), dev)   # LANTERN's drafter shape on this target
    if args.family == "tar":
        feats = torch.randn(t_cfg.prefix_len, t_cfg.caption_dim)     # one prompt's TA-Tok features, fixed
        ones = torch.ones(t_cfg.prefix_len, dtype=torch.bool)
        caption = lambda prompt, grid=None: (feats, ones)           # noqa: E731 (both models read the same)
        pair = tar.assemble(name, target, drafter, tok, grid, tar.PAIRS[args.tar_pair].scale, caption, device=dev,
                            dtype=dtype, head_net=lambda: head)
        return pair, target, drafter, caption, tar.SAMPLING, desc
    caption = lg.text_caption(lambda prompt: lg.left_pad(torch.randn(12, lg.T5_DIM)))
    pair = lg.assemble(name, target, tok, grid, caption, drafter=drafter,
                       small=drafter if needs_small else None, scales=(2,), device=dev, dtype=dtype,
                       head_net=lambda: head)
    return pair, target, drafter, caption, lg.SAMPLING["t2i"], desc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--specs", nargs="+", default=["ar", "zipar:window=16", "mulo", "mulo:tau=0", "sjd", "eagle", "lantern"])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    ap.add_argument("--compile", action="store_true", help="also time the compiled single-token step")
    ap.add_argument("--family", choices=["llamagen", "tar"], default="llamagen",
                    help="llamagen: LlamaGen-XL t2i (default); tar: Tar's AR-DTok llama-abs-LP")
    ap.add_argument("--tar-pair", choices=["tar-1024-512", "tar-512-256", "tar-1024-256"], default="tar-1024-512",
                    help="with --family tar: target / drafter resolutions (default 1024 px / 512 px)")
    ap.add_argument("--dry", action="store_true", help="build the real-size configurations only (no GPU needed)")
    ap.add_argument("--tiny", action="store_true", help="tiny models on the CPU: checks the code path, times nothing")
    args = ap.parse_args()
    global DEVICE
    if args.tiny:
        DEVICE = "cpu"
    elif not (args.dry or torch.cuda.is_available()):
        sys.exit("gpu_bench.py needs a CUDA device (torch.cuda.is_available() is False); nothing was run.")

    from core import engine
    from core.bench import parse_spec
    from core.config import RunConfig
    from core.decoding import Decoder, predict
    from core.trace import PHASES

    dev = DEVICE
    dtype = torch.float32 if args.tiny else {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    needs_small = any(s.split(":")[0] in ("sd", "cool") for s in args.specs)
    built = build(args, dev, dtype, needs_small)
    if built is None:
        return
    pair, target, drafter, caption, sampling, desc = built
    if args.tiny:  # LlamaGen's top-k 1000 exceeds the tiny codebook
        sampling = dataclasses.replace(sampling, top_k=min(sampling.top_k, pair.vocab_size))
    print(f"{torch.cuda.get_device_name() if dev == 'cuda' else 'CPU (--tiny)'}  {'fp32' if args.tiny else args.dtype}  "
          f"{desc} {sum(p.numel() for p in target.parameters()) / 1e6:.0f}M"
          + ("  (sd/cool use the 16x16 drafter's weights at 32x32: same capacity)"
             if needs_small and args.family == "llamagen" else "")
          + "  (tree methods: a random one-layer EAGLE head)")

    # 1. methods, side by side (ar first: the reference)
    base = RunConfig(prompt="a random caption", sampling=sampling, model=pair.name)
    specs = args.specs if any(s.split(":")[0] == "ar" for s in args.specs) else ["ar", *args.specs]
    configs = [parse_spec(s, base) for s in specs]
    engine.run(configs[0][1], pair)  # warm-up: kernels, allocator, RoPE tables
    rows = {}
    for label, cfg in configs:
        runs = []
        for seed in range(args.seeds):
            sync()
            t0 = time.perf_counter()
            try:
                tr = engine.run(dataclasses.replace(cfg, seed=seed), pair)
            except Exception as e:  # report and go on: one method's failure says where the GPU path breaks
                runs = f"{type(e).__name__}: {e}"[:160]
                break
            sync()
            runs.append((tr, (time.perf_counter() - t0) * 1000.0))
        rows[label] = runs
    ref = rows[configs[0][0]]
    ar_nfe = statistics.mean(t.totals["target_nfe"] for t, _ in ref)
    ar_wall = statistics.mean(w for _, w in ref)
    print(f"\n{'method':<24}{'tgt NFE':>8}{'drf NFE':>8}{'wall s':>8}{'NFE x':>7}{'wall x':>7}  per-phase ms "
          + "/".join(PHASES))
    for label, runs in rows.items():
        if isinstance(runs, str):
            print(f"{label:<24}FAILED  {runs}")
            continue
        nfe = statistics.mean(t.totals["target_nfe"] for t, _ in runs)
        dnfe = statistics.mean(t.totals["drafter_nfe"] for t, _ in runs)
        wall = statistics.mean(w for _, w in runs)
        phase = [statistics.mean(sum(s["wall_ms"] for s in t.steps if s["phase"] == p) for t, _ in runs) for p in PHASES]
        print(f"{label:<24}{nfe:>8.0f}{dnfe:>8.0f}{wall / 1000:>8.2f}{ar_nfe / nfe:>7.2f}{ar_wall / wall:>7.2f}  "
              + "/".join(f"{x:.0f}" for x in phase))

    # 2. engine overhead: verify through the cache vs a bare causal forward over the same tokens
    feats, mask = caption("overhead", pair.grid)
    N, V = pair.grid[0] * pair.grid[1], pair.vocab_size
    tokens = torch.randint(0, V, (2, N), device=dev)
    dec = Decoder(target, pair.grid, feats, mask, base.sampling, dev)
    dec.prefill()
    known = tokens[0].cpu().numpy()
    with torch.inference_mode():
        verify = cuda_time(lambda: predict(dec, list(range(N)), known))
        one = cuda_time(lambda: dec.feed([N - 2], [int(known[N - 2])], [True]), repeat=20)
        bare = cuda_time(lambda: target(feats[None].expand(2, -1, -1).to(dev), torch.ones(
            2, target.cfg.prefix_len, dtype=torch.bool, device=dev), tokens, pair.grid))
    print(f"\nverify {N} cells via the engine: {verify:.1f} ms   bare causal forward (prefix + same tokens): "
          f"{bare:.1f} ms   ratio {verify / bare:.2f}\nsingle-cell decode step via the engine: {one:.2f} ms")

    # 3. the single-token step compiled (inductor), then with CUDA graphs
    if not args.compile:
        return

    def one_run_ms(cfg) -> float:
        engine.run(cfg, pair)  # warm-up at this configuration (and, when compiled, its capture)
        sync()
        t0 = time.perf_counter()
        engine.run(cfg, pair)
        sync()
        return (time.perf_counter() - t0) * 1000.0

    pair_cfgs = [parse_spec(label, base)[1] for label in ("ar", "mulo")]
    walls = {"eager": tuple(one_run_ms(c) for c in pair_cfgs)}  # measured the same way as the compiled runs
    for mode in ("default", "reduce-overhead"):
        try:
            for m in {id(x): x for x in (target, drafter)}.values():
                m.compile_step(mode=mode)
            with torch.inference_mode():
                for _ in range(3):  # compile and warm up (CUDA graphs record on a later call)
                    dec.feed([N - 2], [int(known[N - 2])], [True])
                step = cuda_time(lambda: dec.feed([N - 2], [int(known[N - 2])], [True]), repeat=20)
            walls[mode] = tuple(one_run_ms(c) for c in pair_cfgs)
            print(f"compiled step ({mode}): {step:.2f} ms vs eager {one:.2f} ms ({one / step:.2f}x); "
                  f"ar {walls[mode][0] / 1000:.2f} s, mulo {walls[mode][1] / 1000:.2f} s")
        except Exception as e:  # report and go on: which mode fails is the finding
            print(f"compiled step ({mode}) FAILED: {type(e).__name__}: {str(e)[:200]}")
    for mode, (a, m) in walls.items():
        print(f"{mode:<16} ar {a / 1000:.2f} s  mulo {m / 1000:.2f} s  mulo wall speedup over this ar {a / m:.2f}x")


if __name__ == "__main__":
    main()
