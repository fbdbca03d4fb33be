"""Write assets/shipped_runs.jsonl.gz: every teaching preset and every Lesson run on the default prompt,
seed and pair, with their ar baseline (app.shipped.configs), run now with the shipped pair.

    python scripts/ship_runs.py [--out assets/shipped_runs.jsonl.gz]

One line per run: {"config": its resolved RunConfig, "trace": its trace}. The file is written through a
temporary name and a rename. tests/test_shipped.py fails when a fresh run of a shipped configuration
makes other tokens or passes: run this script again then (about a minute on one core).
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    import torch

    from app import shipped
    from core import engine
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=shipped.PATH)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    lines = []
    for n, cfg in enumerate(shipped.configs(), start=1):
        trace = engine.run(cfg, engine.load_pair(cfg.model))
        lines.append(json.dumps(dict(config=cfg.to_dict(), trace=trace.to_dict()), separators=(",", ":")))
        print(f"{n:3d} {cfg.method:8s} {trace.totals['target_nfe'] + trace.totals['drafter_nfe']:5d} passes "
              f"{trace.totals['wall_ms'] / 1000:6.2f} s", flush=True)
    tmp = args.out.with_name(args.out.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=9) as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, args.out)
    print(f"wrote {args.out} ({args.out.stat().st_size / 2**10:.0f} KiB, {len(lines)} runs) in "
          f"{time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
