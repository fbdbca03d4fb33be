"""GPU timing of the engine on LlamaGen-XL at real size (36 layers, width 1280, random weights).

A stage-1 style drafter at 16x16 and a stage-2 style target at 32x32 share a VQ-16 tokenizer, as
in the llamagen-t2i pair. Reports, per method spec: target and drafter NFE, wall-clock, NFE and wall
ratios against ar, per-phase time; then the engine's overhead: a verify forward through the
positional cache (masks, CFG, processed distribution) against a bare causal forward over the same
tokens, and one single-cell decode step. Random weights make acceptance meaningless: read the
timings and NFE, not the acceptance.

Then, with --compile, the single-token step through torch.compile (inductor) and with CUDA graphs
("reduce-overhead"), and the ar and mulo wall-clock with each.

    python scripts/gpu_bench.py [--specs ar zipar:window=16 mulo mulo:tau=0 sjd eagle lantern] [--seeds 1] [--dtype bf16] [--compile]
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


def cuda_time(fn, repeat: int = 5) -> float:
    """Median milliseconds of fn() with the device synchronized around each call."""
    times = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--specs", nargs="+", default=["ar", "zipar:window=16", "mulo", "mulo:tau=0", "sjd", "eagle", "lantern"])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    ap.add_argument("--compile", action="store_true", help="also time the compiled single-token step")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_bench.py needs a CUDA device (torch.cuda.is_available() is False); nothing was run.")

    from core import engine
    from core.bench import parse_spec
    from core.config import RunConfig
    from core.decoding import Decoder, predict
    from core.models import llamagen as lg
    from core.models.gpt import GPT
    from core.models.vq import VQModel
    from core.trace import PHASES

    dev, dtype = DEVICE, {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    torch.manual_seed(0)
    target = random_model(lambda: GPT(lg.gpt_config("XL", "t2i")), dev)
    drafter = random_model(lambda: GPT(lg.gpt_config("XL", "t2i")), dev)
    tok = random_model(lambda: VQModel(lg.VQ16), dev)
    caption = lg.text_caption(lambda prompt: lg.left_pad(torch.randn(12, lg.T5_DIM)))
    needs_small = any(s.split(":")[0] in ("sd", "cool") for s in args.specs)
    from core.models.eagle import DraftHead
    head = random_model(lambda: DraftHead.for_target(target), dev)   # LANTERN's LlamaGen-XL drafter shape
    pair = lg.assemble("llamagen-xl-random", target, tok, (32, 32), caption, drafter=drafter,
                       small=drafter if needs_small else None, scales=(2,), device=dev, dtype=dtype,
                       head_net=lambda: head)
    print(f"{torch.cuda.get_device_name()}  {args.dtype}  target/drafter GPT-XL {sum(p.numel() for p in target.parameters()) / 1e6:.0f}M"
          + ("  (sd/cool use the 16x16 drafter's weights at 32x32: same capacity)" if needs_small else "")
          + "  (tree methods: a random one-layer EAGLE head)")

    # 1. methods, side by side (ar first: the reference)
    base = RunConfig(prompt="a random caption", sampling=lg.SAMPLING["t2i"], model=pair.name)
    specs = args.specs if any(s.split(":")[0] == "ar" for s in args.specs) else ["ar", *args.specs]
    configs = [parse_spec(s, base) for s in specs]
    engine.run(configs[0][1], pair)  # warm-up: kernels, allocator, RoPE tables
    rows = {}
    for label, cfg in configs:
        runs = []
        for seed in range(args.seeds):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            try:
                tr = engine.run(dataclasses.replace(cfg, seed=seed), pair)
            except Exception as e:  # report and go on: one method's failure says where the GPU path breaks
                runs = f"{type(e).__name__}: {e}"[:160]
                break
            torch.cuda.synchronize()
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
    N, V = 32 * 32, pair.vocab_size
    tokens = torch.randint(0, V, (2, N), device=dev)
    dec = Decoder(target, pair.grid, feats, mask, base.sampling, dev)
    dec.prefill()
    known = tokens[0].cpu().numpy()
    with torch.inference_mode():
        verify = cuda_time(lambda: predict(dec, list(range(N)), known))
        one = cuda_time(lambda: dec.feed([N - 2], [int(known[N - 2])], [True]), repeat=20)
        bare = cuda_time(lambda: target(feats[None].expand(2, -1, -1).to(dev), torch.ones(2, lg.T5_LEN, dtype=torch.bool,
                                        device=dev), tokens, pair.grid))
    print(f"\nverify {N} cells via the engine: {verify:.1f} ms   bare causal forward (prefix + same tokens): "
          f"{bare:.1f} ms   ratio {verify / bare:.2f}\nsingle-cell decode step via the engine: {one:.2f} ms")

    # 3. the single-token step compiled (inductor), then with CUDA graphs
    if not args.compile:
        return

    def one_run_ms(cfg) -> float:
        engine.run(cfg, pair)  # warm-up at this configuration (and, when compiled, its capture)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        engine.run(cfg, pair)
        torch.cuda.synchronize()
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
