"""`python app.py` under load on loopback, as scripts/reliability.py measures it (docs/hosting.md, "Hosting
safely"): a burst of concurrent clients with identical seeds gets every image whole or a clear
"queue is full", the server logs no protocol error, the files of many runs do not pile up, its memory
levels off over a long soak, and crafted replays leave little behind. The slow ones run with --slow;
their fast counterparts are in test_hosting (what a session keeps per run, replays at once, six
sessions on one file) and test_trace_safety (what a crafted replay costs while read and after)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
import reliability  # noqa: E402

AGE_S = 30  # the cache age the server sweeps at, short for the test (900 s in use); at 5 s a burst client
            # on a loaded 2-core machine once fetched its image after the sweep had taken it (403)
SOAK_SLOPE_MB = 0.1   # MB per run after the first 20 of 100 (before the views' copies were dropped: 0.45)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = reliability.Server(tmp_path_factory.mktemp("served"), AGE_S)
    try:
        reliability.one_client(s.url, [False, *reliability.knobs()])   # warm-up: the ar baseline is remembered
        yield s
    finally:
        s.close()


@pytest.mark.long("24 concurrent clients, each a whole Generate")
def test_a_burst_of_clients_with_one_seed_gets_every_image_whole(server):
    b = reliability.burst(server.url, 24)
    assert b["ok"] + b["queue_full"] == 24 and b["other_failures"] == 0, (b["other_examples"], b)
    assert b["ok"] >= 20   # the queue holds 32: nobody is turned away at 24
    assert server.protocol_errors() == 0


@pytest.mark.slow
def test_fifty_runs_leave_a_bounded_number_of_files(server):
    d = reliability.disk(server, 50, AGE_S)
    per_run = d["files_after_each"][0]
    assert d["most_files"] < 50 * per_run / 3, d   # swept as it goes: far from growing with every run
    assert d["files_after_age"] <= per_run, d       # and nearly empty once runs stop


def test_six_sessions_replay_one_file_at_once(server):
    f = reliability.same_file(server.url, 6)
    assert (f["stored_paths"], f["replayed"]) == (1, 6), f


@pytest.mark.slow
def test_memory_levels_off_over_a_hundred_runs(server):
    k = reliability.soak(server, 100)
    assert k["slope_mb_per_run"] < SOAK_SLOPE_MB, k


@pytest.mark.slow
def test_crafted_replays_leave_the_server_s_memory_bounded():
    """The file of 6.3 M numbers (before: accepted, +240 MB a session for an hour) is refused; the
    largest accepted trace is kept compact by every session that replays it."""
    from crafted import largest_accepted, millions_of_numbers, real_trace
    base = real_trace()
    for text, peak_mb, retained_mb in ((millions_of_numbers(base), 150, 40), (largest_accepted(base), 250, 40)):
        for case, r in reliability.replay_memory(text, 10, AGE_S).items():
            assert r["peak_mb"] < peak_mb and r["retained_mb"] < retained_mb, (case, r)


FREES = """
import re, runpy, sys, threading
sys.path.insert(0, ROOT)
def rss():
    return int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read()).group(1)) / 1024
if sys.argv[1] == "set":
    assert runpy.run_path(ROOT + "/app.py")["return_freed_memory"]()
def read():
    data = bytearray(24 * 2 ** 20)
    data[::4096] = bytes(len(data[::4096]))
    del data
before = rss()
for _ in range(4):
    t = threading.Thread(target=read)
    t.start()
    t.join()
print(rss() - before)
"""


def test_the_server_gives_large_freed_blocks_back(tmp_path):
    """What app.py sets before it serves: threads that read (and dropped) an upload of 24 MiB leave the
    process's RSS where it was, not ~25 MB higher each (glibc's default)."""
    script = tmp_path / "frees.py"
    script.write_text(f"ROOT = {str(ROOT)!r}\n" + FREES)
    run = lambda how: subprocess.run([sys.executable, str(script), how], capture_output=True, text=True,  # noqa: E731
                                     timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    grew = {}
    for how in ("default", "set"):
        done = run(how)
        assert done.returncode == 0, done.stderr
        grew[how] = float(done.stdout.split()[-1])
    assert grew["set"] < 8 and grew["default"] > 16, grew   # the default is the control: it keeps one
