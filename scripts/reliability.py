"""Reliability figures of a hosted explorer, measured on loopback (README, "Hosting safely").

    python scripts/reliability.py [--bursts 4,8,16,40] [--runs 50] [--age 20]

1. Bursts: `python app.py` in a subprocess (its own GRADIO_TEMP_DIR); for each burst size n, n
   clients at once each call /generate with identical knobs and seed and download every image;
   latency p50 / p95, failures by kind (only "queue full" is expected, above the queue size),
   h11 protocol errors in the server's log, the server's peak RSS.
2. Disk: --runs generations one after another (distinct images), files in the cache folder after
   each, and after the sweep age has passed.
3. Crafted traces (tests/crafted.py): time and peak traced memory of the app's replay on each,
   the largest reported, plus the largest trace that is accepted (padded to the size limit).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`python app.py` on a free loopback port, with its own cache folder and log."""

    def __init__(self, folder: Path, age_s: int):
        self.cache, self.log = folder / "cache", folder / "server.log"
        port = free_port()
        env = dict(os.environ, GRADIO_TEMP_DIR=str(self.cache), MULO_CACHE_AGE_S=str(age_s), OMP_NUM_THREADS="1",
                   GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(port), GRADIO_ANALYTICS_ENABLED="False")
        self.proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=open(self.log, "w"),
                                     stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{port}/"
        import httpx
        deadline = time.time() + 180
        while time.time() < deadline:
            try:
                if httpx.get(self.url + "config", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.5)
        raise RuntimeError(f"the app did not start; see {self.log}")

    def peak_rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) / 1024

    def files(self) -> int:
        return sum(1 for p in self.cache.rglob("*") if p.is_file())

    def protocol_errors(self) -> int:
        return self.log.read_text(errors="replace").count("LocalProtocolError")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def knobs(**overrides) -> list:
    from app import handlers as h
    return [{**h.DEFAULTS, "scale": 4, "tau": 0.0, **overrides}[k] for k in h.KNOBS]


def one_client(url: str, args: list) -> tuple[float, str | None]:
    """(seconds, None) for a run whose every file came back whole, or (seconds, error text)."""
    from gradio_client import Client
    t0 = time.perf_counter()
    try:
        out = Client(url, verbose=False).predict(*args, api_name="/generate")   # downloads every file
        images = [v for v in out[2:] if isinstance(v, str) and v.endswith(".png")]
        if len(images) < 5 or not all(os.path.getsize(p) > 0 for p in images):
            return time.perf_counter() - t0, "an image came back empty"
        return time.perf_counter() - t0, None
    except Exception as e:   # noqa: BLE001 (the kind of failure is what is measured)
        return time.perf_counter() - t0, str(e)[:200]


def burst(url: str, n: int) -> dict:
    args = [False, *knobs()]
    with ThreadPoolExecutor(n) as pool:
        results = list(pool.map(lambda _: one_client(url, args), range(n)))
    ok = sorted(t for t, e in results if e is None)
    errors = [e for _, e in results if e is not None]
    queue_full = [e for e in errors if "queue is full" in e.lower()]
    q = statistics.quantiles(ok, n=20) if len(ok) >= 2 else [float("nan")] * 19
    return dict(clients=n, ok=len(ok), queue_full=len(queue_full), other_failures=len(errors) - len(queue_full),
                other_examples=sorted(set(e for e in errors if e not in queue_full))[:3],
                p50_s=round(statistics.median(ok), 2) if ok else None, p95_s=round(q[18], 2) if ok else None)


def disk(server: Server, runs: int, age_s: int) -> dict:
    from gradio_client import Client
    client = Client(server.url, verbose=False)
    counts = []
    for n in range(runs):   # tau varies: distinct images every run, one ar baseline for all
        client.predict(False, *knobs(tau=round(0.005 * (n + 1), 3)), api_name="/generate")
        counts.append(server.files())
    time.sleep(age_s + min(60.0, age_s / 4) + 2)
    return dict(runs=runs, files_after_each=counts, most_files=max(counts), files_after_age=server.files(),
                cache_age_s=age_s)


def replay(h, gr, path: Path) -> str:
    """The app's replay of an upload."""
    try:
        h.replay(str(path))
        return "replayed"
    except gr.Error as e:
        return e.message[:90]


def crafted_figures() -> dict:
    import gradio as gr

    from app import handlers as h
    from core.trace import CELLS_PER_CELL, STEPS_PER_CELL
    from crafted import crafted, real_trace
    base = real_trace()
    texts = crafted(base)
    H, W = base["grid"]["target"]
    dh, dw = base["grid"]["draft"]
    cells = H * W + dh * dw
    n = STEPS_PER_CELL * cells - len(base["steps"])                  # steps up to the bound
    per = min(10, (CELLS_PER_CELL * cells - 4 * H * W) // n)          # and about as many cells as allowed
    step = dict(phase="decode", model="target", nfe=1, wall_ms=0.01, cells=[[0, j] for j in range(per)],
                tokens=[0] * per)
    texts["accepted: a real trace with the most steps and cells allowed"] = json.dumps(
        dict(base, steps=base["steps"] + [step] * n))
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, (name, text) in enumerate(texts.items()):
            path = Path(tmp) / f"t{n}.json"
            path.write_text(text)   # each upload is read once (then removed): written before each pass
            t0 = time.perf_counter()
            outcome = replay(h, gr, path)
            seconds = time.perf_counter() - t0
            path.write_text(text)
            tracemalloc.start()   # a second pass for memory: tracing slows allocation-heavy code down
            replay(h, gr, path)
            peak = tracemalloc.get_traced_memory()[1] / 2 ** 20
            tracemalloc.stop()
            rows.append(dict(trace=name, bytes=len(text), seconds=round(seconds, 3), peak_mb=round(peak, 1),
                             outcome=outcome))
    return dict(rows=rows, slowest=max(rows, key=lambda r: r["seconds"]),
                most_memory=max(rows, key=lambda r: r["peak_mb"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bursts", default="4,8,16,40")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--age", type=int, default=20, help="cache age (s) the server sweeps at")
    ap.add_argument("--json", default=None, help="write every figure here")
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(Path(tmp), args.age)
        try:
            one_client(server.url, [False, *knobs()])   # warm-up: the ar baseline is remembered from here on
            out["bursts"] = [burst(server.url, int(n)) for n in args.bursts.split(",")]
            out["protocol_errors"] = server.protocol_errors()
            out["disk"] = disk(server, args.runs, args.age)
            out["server_peak_rss_mb"] = round(server.peak_rss_mb(), 1)
        finally:
            server.close()
    out["crafted"] = crafted_figures()
    print("burst  ok  queue-full  other  p50 s  p95 s")
    for b in out["bursts"]:
        print(f"{b['clients']:>5} {b['ok']:>3} {b['queue_full']:>11} {b['other_failures']:>6} {b['p50_s']:>6} "
              f"{b['p95_s']:>6}  {'; '.join(b['other_examples'])}")
    d = out["disk"]
    print(f"h11 protocol errors in the server log: {out['protocol_errors']}")
    print(f"server peak RSS: {out['server_peak_rss_mb']} MB")
    print(f"files in the cache: at most {d['most_files']} during {d['runs']} runs, {d['files_after_age']} "
          f"after {d['cache_age_s']} s without runs")
    c = out["crafted"]
    print(f"crafted traces: {len(c['rows'])}; slowest {c['slowest']['trace']!r} {c['slowest']['seconds']} s; "
          f"most memory {c['most_memory']['trace']!r} {c['most_memory']['peak_mb']} MB "
          f"({c['most_memory']['bytes']} bytes)")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
