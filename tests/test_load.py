"""`python app.py` under load on loopback, as scripts/reliability.py measures it (README, "Hosting
safely"): a burst of concurrent clients with identical seeds gets every image whole or a clear
"queue is full", the server logs no protocol error, and the files of many runs do not pile up."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
import reliability  # noqa: E402

AGE_S = 5   # the cache age the server sweeps at, short for the test


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = reliability.Server(tmp_path_factory.mktemp("served"), AGE_S)
    try:
        reliability.one_client(s.url, [False, *reliability.knobs()])   # warm-up: the ar baseline is remembered
        yield s
    finally:
        s.close()


def test_a_burst_of_clients_with_one_seed_gets_every_image_whole(server):
    b = reliability.burst(server.url, 24)
    assert b["ok"] + b["queue_full"] == 24 and b["other_failures"] == 0, b
    assert b["ok"] >= 20   # the queue holds 32: nobody is turned away at 24
    assert server.protocol_errors() == 0


@pytest.mark.slow
def test_fifty_runs_leave_a_bounded_number_of_files(server):
    d = reliability.disk(server, 50, AGE_S)
    per_run = d["files_after_each"][0]
    assert d["most_files"] < 50 * per_run / 3, d   # swept as it goes: far from growing with every run
    assert d["files_after_age"] <= per_run, d       # and nearly empty once runs stop
