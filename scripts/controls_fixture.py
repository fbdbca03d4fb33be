"""Write tests/fixtures/controls.jsonl.gz: the runs the quality controls (tests/test_quality_controls.py)
judge, made by the bench on the shipped pair.

    python scripts/controls_fixture.py [--work runs/controls-fixture] [--out tests/fixtures/controls.jsonl.gz]

One `python -m core bench` run of N held-out prompts (seed 0) of SPECS, the reference among its
records, and a third ar set on the same prompts at seeds THIRD_SEED + i that no run of the bench uses.
Each record keeps what its run made (tokens, passes, passed and kept fractions, times) and leaves out
what the bench computes from the tokens (bench.JUDGED: the image read back, detail features, energy,
log-likelihood, the blurred control): the test computes those again from the tokens with today's
yardsticks. The file's first line is the bench's run configuration with the third set's seed; then one
record per line, each with "set": "bench" or "third".

About 8 minutes on one core (ar 6.8 s a prompt, three ar sets). The work folder is a bench run folder:
an interrupted run resumes there. The test re-runs prompt 0 of every set (and the last prompt of the
cheap ones) and fails when the engine no longer makes these tokens: run this script again then.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

N = 24
SPECS = ["ar", "scd", "mulo:tau=0", "mulo:tau=0:scale=4"]
SEED = 0
THIRD_SEED = 2_000_029


def third_config(i: int, prompt: str):
    from core.config import RunConfig
    return dataclasses.replace(RunConfig(method="ar"), prompt=prompt, seed=THIRD_SEED + i)


def strip(record: dict) -> dict:
    from core import bench
    return {k: v for k, v in record.items() if k not in bench.JUDGED}


def bench_records(folder: Path) -> list[dict]:
    """The bench folder's records with their tokens (RunFolder.records leaves the tokens out), the
    first of duplicates by key."""
    from core.runfolder import record_key
    seen = {}
    for f in sorted(folder.glob("records-*.jsonl")):
        for line in f.read_text().splitlines():
            if line.strip():
                r = json.loads(line)
                seen.setdefault(record_key(r), r)
    missing = [k for k, r in seen.items() if "tokens" not in r]
    if missing:
        raise SystemExit(f"{folder}: {len(missing)} records without tokens; remove the folder and run again")
    return list(seen.values())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", type=Path, default=ROOT / "runs" / "controls-fixture")
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "fixtures" / "controls.jsonl.gz")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args(argv)
    import torch
    torch.set_num_threads(a.threads)
    from core import bench, engine
    from core.embedded import family
    from core.embedded.evaluate import heldout

    a.work.mkdir(parents=True, exist_ok=True)
    say = lambda done, total, info: print(f"  bench {done}/{total} {info}", flush=True)   # noqa: E731
    bench.run(SPECS, N, seed=SEED, out=a.work / "bench", progress=say)
    config = json.loads((a.work / "bench" / "config.json").read_text())
    records = [dict(strip(r), set="bench") for r in bench_records(a.work / "bench")]

    third_file = a.work / "third.jsonl"   # one line per finished prompt: resumable like the bench
    third = {}
    if third_file.exists():
        for line in third_file.read_text().splitlines():
            r = json.loads(line)
            third[r["prompt_index"]] = r
    pair, clf = engine.load_pair("embedded"), family.load_classifier()
    with third_file.open("a") as f:
        for i, scene in enumerate(heldout(N)):
            if i in third:
                continue
            r = strip(bench.measure("ar", third_config(i, scene.caption()), i, scene, pair, clf, "fixture"))
            f.write(json.dumps(r) + "\n")
            f.flush()
            third[i] = r
            print(f"  third ar set {len(third)}/{N}", flush=True)
    records += [dict(third[i], set="third") for i in range(N)]
    records.sort(key=lambda r: (r["set"], r["spec"], r["prompt_index"]))

    head = dict(config, third_seed=THIRD_SEED)
    text = "\n".join(json.dumps(x, sort_keys=True) for x in [head] + records) + "\n"
    tmp = a.out.with_suffix(".tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
        gz.write(text.encode())
    os.replace(tmp, a.out)
    print(f"wrote {a.out} ({a.out.stat().st_size // 1024} KiB, {len(records)} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
