"""Reliability figures of a hosted explorer, measured on loopback (docs/hosting.md).

    python scripts/reliability.py [--bursts 4,8,16,40] [--runs 50] [--age 20] [--soak 100] [--hold 60]
                                  [--only bursts,disk,crafted,soak,replays,same_file,flood,class]
                                  [--class-size 30] [--identical 100]

1. Bursts: `python app.py` in a subprocess (its own GRADIO_TEMP_DIR); for each burst size n, n
   clients at once each call /generate with identical knobs and seed and download every image;
   latency p50 / p95, failures by kind (only "queue full" is expected, above the queue size),
   h11 protocol errors in the server's log, the server's peak RSS.
2. Disk: --runs generations one after another (distinct images), files in the cache folder after
   each, and after the sweep age has passed.
3. Crafted traces (tests/crafted.py): time and peak traced memory of the app's replay on each,
   the largest reported, plus the largest trace that is accepted (padded to the size limit).
4. Soak: --soak generations in one session (distinct images), the server's RSS after each, and its
   slope (MB per run, least squares) after the first 20.
5. Replays: the server's peak and retained RSS (--hold seconds after the last) for a crafted trace
   replayed by one session, by four sessions at once, and by four sessions one after another (--replays:
   by default the file of 6.3 M numbers in one step, the costliest refused file, and the largest trace
   the reader accepts), each session uploading a file of its own (the text with k separators' spaces dropped);
   each case on a fresh server, RSS counted from after a warm-up, uploads included.
6. Same file: six sessions upload one trace (one stored path) and replay it at once; how many replay it.
7. Flood: uploads of 4 MiB from one client, as fast as they go, for 5 s: MB/s stored, how many refused
   and the first refusal's words.
8. Class (a fresh server, --class-size clients): a class starting within 10 s, each opening the page and
   picking a preset or a Lesson step on the default prompt and seed (p50 / p95 / max, refused); as many
   live Generates of distinct seeds at once (served, told their place in the model's line, refused, peak
   RSS); --identical Generates of one seed at once (how many the server computed).
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

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024

    def reset_peak(self) -> None:
        """The peak RSS from now on (Linux: 5 to clear_refs resets VmHWM to the current RSS)."""
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")

    def files(self) -> int:
        return sum(1 for p in self.cache.rglob("*") if p.is_file())

    def protocol_errors(self) -> int:
        return self.log.read_text(errors="replace").count("LocalProtocolError")

    def warmed(self, most_s: float = 300) -> str | None:
        """Wait for the server's "shipped runs warmed" log line (app.py warms them on start); its words, or
        None when a server of older code never says it (then 30 s pass first)."""
        deadline = time.time() + most_s
        while time.time() < deadline:
            line = next((x for x in self.log.read_text(errors="replace").splitlines() if "shipped runs warmed" in x), None)
            if line is not None:
                return line.split("shipped runs warmed: ")[-1]
            if "shipped runs" not in Path(ROOT / "app.py").read_text() and time.time() > deadline - most_s + 30:
                return None
            time.sleep(1)
        return None

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def knobs(**overrides) -> list:
    from app import inputs
    return [{**inputs.DEFAULTS, "scale": 4, "tau": 0.0, **overrides}[k] for k in inputs.KNOBS]


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


def replay(replays, gr, path: Path) -> str:
    """The app's replay of an upload."""
    try:
        replays.replay(str(path))
        return "replayed"
    except gr.Error as e:
        return e.message[:90]


def crafted_figures() -> dict:
    import gradio as gr

    from app import replays
    from crafted import crafted, largest_accepted, real_trace
    base = real_trace()
    texts = crafted(base)
    texts["accepted: a real trace with the most steps and cells allowed"] = largest_accepted(base)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, (name, text) in enumerate(texts.items()):
            path = Path(tmp) / f"t{n}.json"
            path.write_text(text)
            t0 = time.perf_counter()
            outcome = replay(replays, gr, path)
            seconds = time.perf_counter() - t0
            path.write_text(text)   # (a reader that removed what it read had it gone)
            tracemalloc.start()   # a second pass for memory: tracing slows allocation-heavy code down
            replay(replays, gr, path)
            peak = tracemalloc.get_traced_memory()[1] / 2 ** 20
            tracemalloc.stop()
            rows.append(dict(trace=name, bytes=len(text), seconds=round(seconds, 3), peak_mb=round(peak, 1),
                             outcome=outcome))
    return dict(rows=rows, slowest=max(rows, key=lambda r: r["seconds"]),
                most_memory=max(rows, key=lambda r: r["peak_mb"]))


def slope(ys: list[float]) -> float:
    """Least-squares slope of ys against their index."""
    n = len(ys)
    mx, my = (n - 1) / 2, sum(ys) / n
    return sum((x - mx) * (y - my) for x, y in enumerate(ys)) / sum((x - mx) ** 2 for x in range(n))


def soak(server: Server, runs: int, skip: int = 20) -> dict:
    """RSS after each of `runs` generations in one session; the slope after the first `skip`."""
    from gradio_client import Client
    client = Client(server.url, verbose=False)
    rss = []
    for n in range(runs):
        client.predict(False, *knobs(tau=round(0.002 * (n + 1), 4)), api_name="/generate")
        rss.append(round(server.rss_mb(), 1))
    return dict(runs=runs, rss_mb=rss, slope_mb_per_run=round(slope(rss[skip:]), 3), skip=skip)


def upload(url: str, data: bytes, name: str = "trace.json") -> str:
    """The stored path, or 'upload refused (HTTP n)' when the upload route refuses the file."""
    import httpx
    r = httpx.post(url + "gradio_api/upload", files={"files": (name, data, "application/json")}, timeout=120)
    if r.status_code in (411, 413, 429):
        return f"upload refused (HTTP {r.status_code})"
    r.raise_for_status()
    return r.json()[0]


def replay_call(url: str, path: str, session: str | None = None) -> str:
    """'replayed', or the error the app answered (an upload the route refused is never replayed)."""
    if path.startswith("upload refused"):
        return path
    from appserver import call
    msg = call(url, "replay", [dict(path=path, meta={"_type": "gradio.FileData"}), False], session_hash=session,
               timeout=300)
    return "replayed" if msg["success"] else str(msg["output"].get("error"))[:160]


def replay_memory(text: str, hold_s: float, age_s: int) -> dict:
    """Peak and retained RSS (MB over the warmed-up server) for `text` replayed by one session, four at
    once and four one after another, each on a fresh server."""
    import uuid
    from crafted import real_trace
    warm = json.dumps(real_trace())
    out = {}
    for case in ("one", "four at once", "four sessions"):
        with tempfile.TemporaryDirectory() as tmp:
            server = Server(Path(tmp), age_s)
            try:
                replay_call(server.url, upload(server.url, warm.encode(), "warm.json"))   # first-use costs
                n = 1 if case == "one" else 4       # each session its own file (trailing spaces apart)
                time.sleep(2)
                base = server.rss_mb()
                server.reset_peak()
                # a file of its own per session, no longer than the text: k separators lose their space
                sessions = [(uuid.uuid4().hex[:11], text.replace(", ", ",", k).encode()) for k in range(n)]
                if case == "four at once":
                    paths = [upload(server.url, data) for _, data in sessions]
                    with ThreadPoolExecutor(4) as pool:
                        outcomes = list(pool.map(lambda sp: replay_call(server.url, sp[1], sp[0][0]),
                                                 zip(sessions, paths)))
                else:
                    outcomes = [replay_call(server.url, upload(server.url, data), s) for s, data in sessions]
                peak = server.peak_rss_mb()
                time.sleep(hold_s)
                out[case] = dict(outcome=sorted(set(outcomes)), base_mb=round(base, 1),
                                 peak_mb=round(peak - base, 1), retained_mb=round(server.rss_mb() - base, 1),
                                 hold_s=hold_s)
            finally:
                server.close()
    return out


def same_file(url: str, n: int = 6) -> dict:
    """n sessions upload one trace (one stored path) and replay it at once."""
    import uuid
    from crafted import real_trace
    data = json.dumps(real_trace()).encode()
    paths = {upload(url, data) for _ in range(n)}
    with ThreadPoolExecutor(n) as pool:
        outcomes = list(pool.map(lambda s: replay_call(url, next(iter(paths)), s),
                                 [uuid.uuid4().hex[:11] for _ in range(n)]))
    return dict(sessions=n, stored_paths=len(paths), replayed=outcomes.count("replayed"),
                failures=sorted(set(o for o in outcomes if o != "replayed")))


def flood(url: str, seconds: float = 5.0, size: int = 4 * 2 ** 20) -> dict:
    """One client uploading `size` bytes again and again for `seconds`: what the route stores and refuses."""
    import httpx
    stored = refused = 0
    first = None
    t0 = time.perf_counter()
    with httpx.Client(timeout=60) as http:
        while time.perf_counter() - t0 < seconds:
            r = http.post(url + "gradio_api/upload", files={"files": (f"f{stored + refused}.json", os.urandom(size),
                                                                       "application/json")})
            if r.status_code == 200:
                stored += 1
            else:
                refused += 1
                first = first or f"HTTP {r.status_code}: {r.text}"
    took = time.perf_counter() - t0
    return dict(seconds=round(took, 1), stored_mb=round(stored * size / 2 ** 20), refused=refused,
                stored_mb_per_s=round(stored * size / 2 ** 20 / took), first_refusal=first)


def quantile_s(seconds: list[float], q: float) -> float | None:
    """The q-quantile of the times (the nearest-rank one), rounded to 0.01 s; None for none."""
    if not seconds:
        return None
    ranked = sorted(seconds)
    return round(ranked[min(len(ranked) - 1, max(0, int(round(q * len(ranked) + 0.5)) - 1))], 2)


def _told(job) -> tuple[str, bool]:
    """(the last status line, whether any update told the client its place in the model's line)."""
    outs = job.outputs()
    # a client gets the outputs but the gr.State: the status comes first
    statuses = [o[0] for o in outs if isinstance(o, (list, tuple)) and o and isinstance(o[0], str)]
    return (statuses[-1] if statuses else ""), any("in line" in t for t in statuses)


def class_taught(url: str, clients: int, within_s: float) -> dict:
    """A class: `clients` start within `within_s` s (evenly spread); each opens the page and picks a
    teaching preset (then its shipped run, as the page does) or a Lesson step, in turn, on the default
    prompt and seed, and reads the result. Seconds from opening the page to the result."""
    import httpx
    from gradio_client import Client

    from app import inputs, lesson, links
    names = list(links.PRESETS)
    picks = [("preset", names[n % len(names)]) if n % 2 == 0 else ("lesson", n // 2 % len(lesson.STEPS) + 1)
             for n in range(clients)]

    def one(n: int):
        time.sleep(n * within_s / max(clients - 1, 1))
        t0 = time.perf_counter()
        try:
            httpx.get(url, timeout=60).raise_for_status()
            client = Client(url, verbose=False)
            kind, what = picks[n]
            if kind == "preset":
                client.predict(what, api_name="/preset")
                values = {**inputs.DEFAULTS, **links.PRESETS[what][1]}
                # the page shows a preset's shipped run itself; a server without one is pressed Generate on
                out = client.predict(False, *(values[k] for k in inputs.KNOBS),
                                     api_name="/preset_run" if "/preset_run" in endpoints else "/generate")
                said = out[0]   # the status (a client gets no gr.State)
            else:
                out = client.predict(what, inputs.DEFAULTS["prompt"], inputs.DEFAULTS["seed"], "embedded",
                                     *([False] if "live" in str(endpoints.get(f"/lesson_{what}")) else []),
                                     api_name=f"/lesson_{what}")
                said = out[-1]
            return kind, time.perf_counter() - t0, None if str(said).startswith("Done") else f"said: {str(said)[:120]}"
        except Exception as e:   # noqa: BLE001 (the kind of failure is what is measured)
            return picks[n][0], time.perf_counter() - t0, str(e)[:200]
    endpoints = Client(url, verbose=False).view_api(print_info=False, return_format="dict")["named_endpoints"]
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(one, range(clients)))
    ok = [t for _, t, e in results if e is None]
    errors = [e for _, _, e in results if e is not None]
    by_kind = {kind: dict(p50_s=quantile_s([t for k, t, e in results if k == kind and e is None], 0.5),
                          max_s=quantile_s([t for k, t, e in results if k == kind and e is None], 1.0))
               for kind in ("preset", "lesson")}
    return dict(clients=clients, within_s=within_s, ok=len(ok), refused=sum("queue is full" in e.lower() for e in errors),
                failures=len(errors), examples=sorted(set(errors))[:3], p50_s=quantile_s(ok, 0.5),
                p95_s=quantile_s(ok, 0.95), max_s=quantile_s(ok, 1.0), by_kind=by_kind)


def class_live(server: Server, seeds: list[int]) -> dict:
    """Clients at once, each a Generate of its own seed (0 .. n-1 distinct: live runs, nothing remembered) or
    all of one seed (identical: computed once?): served, told their place while they waited, refused,
    the seconds to each result, how many runs the server computed (statuses not answered from the cache)
    and its peak RSS."""
    from gradio_client import Client
    # the pages open first (a client each, 8 at a time), then every request is sent at once: the load
    # measured is the requests', not a hundred page loads on the same two cores
    with ThreadPoolExecutor(8) as pool:
        clients = list(pool.map(lambda _: Client(server.url, verbose=False), seeds))
    server.reset_peak()

    def one(n_seed):
        n, seed = n_seed
        t0 = time.perf_counter()
        try:
            job = clients[n].submit(False, *knobs(seed=seed), api_name="/generate")
            final = job.result()
            said, told = _told(job)
            said = final[0] if isinstance(final, (list, tuple)) and final and isinstance(final[0], str) else said
            return time.perf_counter() - t0, said, told, None
        except Exception as e:   # noqa: BLE001
            return time.perf_counter() - t0, "", False, str(e)[:200]
    with ThreadPoolExecutor(len(seeds)) as pool:
        results = list(pool.map(one, enumerate(seeds)))
    ok = [r for r in results if r[3] is None and r[1].startswith("Done")]
    errors = [r[3] for r in results if r[3] is not None]
    return dict(clients=len(seeds), distinct_seeds=len(set(seeds)), served=len(ok),
                computed=sum("from the cache" not in r[1] for r in ok), told_place=sum(r[2] for r in results),
                refused=sum("queue is full" in e.lower() or "line is full" in e for e in errors),
                failures=len(results) - len(ok), examples=sorted(set(errors))[:3],
                p50_s=quantile_s([r[0] for r in ok], 0.5), p95_s=quantile_s([r[0] for r in ok], 0.95),
                max_s=quantile_s([r[0] for r in ok], 1.0), peak_rss_mb=round(server.peak_rss_mb(), 1))


SECTIONS = ("bursts", "disk", "crafted", "soak", "replays", "same_file", "flood", "class")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bursts", default="4,8,16,40")
    ap.add_argument("--runs", type=int, default=50)
    ap.add_argument("--age", type=int, default=20, help="cache age (s) the server sweeps at")
    ap.add_argument("--soak", type=int, default=100, help="generations of the soak")
    ap.add_argument("--hold", type=float, default=60, help="seconds after the replays before RSS is read again")
    ap.add_argument("--only", default=",".join(SECTIONS), help="the sections to measure, comma-separated")
    ap.add_argument("--replays", default="6.3 M numbers in one step's prob,524k short steps,largest accepted",
                    help="the crafted traces (tests/crafted.py names) whose replays are measured, comma-separated")
    ap.add_argument("--class-size", type=int, default=30, help="clients of the class sections")
    ap.add_argument("--identical", type=int, default=100, help="identical live requests at once (class)")
    ap.add_argument("--json", default=None, help="write every figure here")
    args = ap.parse_args(argv)
    only = set(args.only.split(","))
    import torch
    torch.set_num_threads(1)
    out = {}
    if only & {"bursts", "disk", "soak", "same_file", "flood"}:
        with tempfile.TemporaryDirectory() as tmp:
            server = Server(Path(tmp), args.age)
            try:
                one_client(server.url, [False, *knobs()])   # warm-up: the ar baseline is remembered from here on
                if "bursts" in only:
                    out["bursts"] = [burst(server.url, int(n)) for n in args.bursts.split(",")]
                    out["protocol_errors"] = server.protocol_errors()
                if "disk" in only:
                    out["disk"] = disk(server, args.runs, args.age)
                    save(out, args.json)
                if "same_file" in only:
                    out["same_file"] = same_file(server.url)
                    save(out, args.json)
                if "soak" in only:
                    out["soak"] = soak(server, args.soak)
                    save(out, args.json)
                if "flood" in only:
                    out["flood"] = flood(server.url)
                    save(out, args.json)
                out["server_peak_rss_mb"] = round(server.peak_rss_mb(), 1)
            finally:
                server.close()
    if "class" in only:   # a fresh server: nothing remembered but what ships
        with tempfile.TemporaryDirectory() as tmp:
            server = Server(Path(tmp), args.age)
            try:
                out["warmed"] = server.warmed()
                out["class"] = dict(taught=class_taught(server.url, args.class_size, 10.0))
                save(out, args.json)
                out["class"]["different"] = class_live(server, [1000 + n for n in range(args.class_size)])
                save(out, args.json)
                out["class"]["identical"] = class_live(server, [5000] * args.identical)
                save(out, args.json)
            finally:
                server.close()
    if "crafted" in only:
        out["crafted"] = crafted_figures()
    if "replays" in only:
        from crafted import crafted, largest_accepted, real_trace
        base = real_trace()
        texts = dict(crafted(base), **{"largest accepted": largest_accepted(base)})
        out["replays"] = {}
        for name in args.replays.split(","):
            out["replays"][name] = replay_memory(texts[name], args.hold, args.age)
            save(out, args.json)
    report(out)
    save(out, args.json)
    return 0


def save(out: dict, path: str | None) -> None:
    """The figures so far (each section saves them, so a later section's failure loses none)."""
    if path:
        Path(path).write_text(json.dumps(out, indent=2))


def report(out: dict) -> None:
    if "bursts" in out:
        print("burst  ok  queue-full  other  p50 s  p95 s")
        for b in out["bursts"]:
            print(f"{b['clients']:>5} {b['ok']:>3} {b['queue_full']:>11} {b['other_failures']:>6} {b['p50_s']:>6} "
                  f"{b['p95_s']:>6}  {'; '.join(b['other_examples'])}")
        print(f"h11 protocol errors in the server log: {out['protocol_errors']}")
    if "server_peak_rss_mb" in out:
        print(f"server peak RSS: {out['server_peak_rss_mb']} MB")
    if "disk" in out:
        d = out["disk"]
        print(f"files in the cache: at most {d['most_files']} during {d['runs']} runs, {d['files_after_age']} "
              f"after {d['cache_age_s']} s without runs")
    if "crafted" in out:
        c = out["crafted"]
        print(f"crafted traces: {len(c['rows'])}; slowest {c['slowest']['trace']!r} {c['slowest']['seconds']} s; "
              f"most memory {c['most_memory']['trace']!r} {c['most_memory']['peak_mb']} MB "
              f"({c['most_memory']['bytes']} bytes)")
    if "soak" in out:
        k = out["soak"]
        print(f"soak: {k['runs']} runs, RSS {k['rss_mb'][0]} -> {k['rss_mb'][-1]} MB, slope after run {k['skip']}: "
              f"{k['slope_mb_per_run']} MB/run")
    if "same_file" in out:
        f = out["same_file"]
        print(f"same file: {f['replayed']} of {f['sessions']} sessions replayed it ({f['stored_paths']} stored "
              f"path); failures: {f['failures']}")
    if "flood" in out:
        f = out["flood"]
        print(f"flood: {f['stored_mb']} MB stored in {f['seconds']} s ({f['stored_mb_per_s']} MB/s), {f['refused']} "
              f"refused; first refusal: {f['first_refusal']}")
    if "class" in out:
        c = out["class"]
        t = c["taught"]
        print(f"class, presets and Lesson steps: {t['clients']} clients within {t['within_s']:g} s, {t['ok']} served, "
              f"{t['refused']} refused, {t['failures']} failed, p50 {t['p50_s']} s, p95 {t['p95_s']} s, "
              f"max {t['max_s']} s {'; '.join(t['examples'])}")
        for kind in ("different", "identical"):
            if kind in c:
                d = c[kind]
                print(f"class, {d['clients']} live Generates at once of {d['distinct_seeds']} seed(s): {d['served']} "
                      f"served, {d['computed']} computed, {d['told_place']} told their place, {d['refused']} refused, "
                      f"{d['failures']} failed, p50 {d['p50_s']} s, p95 {d['p95_s']} s, max {d['max_s']} s, "
                      f"peak RSS {d['peak_rss_mb']} MB {'; '.join(d['examples'])}")
    for name, cases in out.get("replays", {}).items():
        for case, r in cases.items():
            print(f"replay {name!r}, {case}: peak +{r['peak_mb']} MB, retained +{r['retained_mb']} MB after "
                  f"{r['hold_s']:g} s over {r['base_mb']} MB; {r['outcome']}")


if __name__ == "__main__":
    raise SystemExit(main())
