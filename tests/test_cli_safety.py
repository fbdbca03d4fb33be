"""The command line as a shell user meets it (subprocesses): a bad path, count or spec is one line
and exit 2 before any work; an interruption is one line and exit 130 with nothing half-written;
a checkpoint that would run code is refused, never executed."""
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
PROMPT = "a large red circle center on a striped blue background"
FAST = ["--method", "mulo", "--scale", "4", "--tau", "0", "--prompt", PROMPT]


def cli(*args, timeout=120):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "core", *map(str, args)], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def one_line_error(r, *fragments):
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and r.stderr.startswith("error: ") and r.stderr.count("\n") == 1, r.stderr
    for f in fragments:
        assert f in r.stderr, r.stderr


def test_a_trace_into_a_missing_folder_stops_before_the_image_is_written(tmp_path):
    out = tmp_path / "img.png"
    r = cli("generate", *FAST, "--out", out, "--trace", tmp_path / "nowhere" / "t.json")
    one_line_error(r, "--trace", "does not exist")
    assert not out.exists()


def test_an_image_on_a_read_only_path_stops_before_generation(tmp_path):
    t0 = time.perf_counter()
    r = cli("generate", *FAST, "--out", "/proc/img.png")
    one_line_error(r, "--out /proc/img.png", "cannot write")
    assert time.perf_counter() - t0 < 30


def test_out_and_trace_naming_one_file_is_refused(tmp_path):
    r = cli("generate", *FAST, "--out", tmp_path / "y.png", "--trace", tmp_path / "y.png")
    one_line_error(r, "--trace")   # .png is no trace extension: refused before it could overwrite the image
    assert not (tmp_path / "y.png").exists()


def test_an_unknown_image_extension_is_refused(tmp_path):
    one_line_error(cli("generate", *FAST, "--out", tmp_path / "img.xyz"), "--out", ".png")


BAD = [  # (command line, fragments of its one-line error)
    (["bench", "--methods", "ar,mulo:tau=abc", "--prompts", "2"], ["mulo:tau=abc"]),
    (["bench", "--methods", "mulo:colour=red", "--prompts", "2"], ["unknown parameter 'colour'"]),
    (["bench", "--methods", "ar", "--prompts", "0"], ["--prompts must be at least 1"]),
    (["bench", "--methods", "ar", "--prompts", "2", "--threads", "-1"], ["--threads"]),
    (["bench", "--methods", "ar", "--prompts", "2", "--json", "/proc/r.json"], ["--json", "cannot write"]),
    (["generate", "--threads", "-1"], ["--threads"]),
    (["generate", "--cfg", "inf"], ["cfg must be"]),
    (["generate", "--cfg", "1e308"], ["cfg must be"]),
    (["generate", "--temperature", "1e-300"], ["temperature must be"]),
    (["generate", "--seed", "9223372036854775808"], ["seed must be"]),
    (["evaluate", "--what", "ar", "--prompts", "0"], ["--prompts"]),
    (["evaluate", "--what", "ar", "--grids", "32,x"], ["--grids"]),
    (["generate", "--cfg-interval", str(10 ** 30)], ["cfg_interval must be an integer in [-1, 65536] (-1 = every cell); "
                                                    f"got {10 ** 30}"]),
    (["generate", "--cfg-interval", str(2 ** 64)], ["cfg_interval must be an integer in [-1, 65536]"]),
    (["generate", "--gsd-group", str(2 ** 64), "--method", "gsd"], ["gsd_group must be in [1, 512]"]),
    (["generate", "--threads", "100000"], ["--threads must be 0 (torch's default) to", "got 100000"]),
    (["bench", "--methods", "ar", "--prompts", "2", "--threads", "100000"], ["--threads must be"]),
    (["evaluate", "--what", "ar", "--prompts", "1", "--threads", "100000"], ["--threads must be"]),
    (["bench", "--methods", "ar", "--prompts", "2", "--seed", str(2 ** 63 - 2)],
     [f"seed must be an integer in [0, {2 ** 63 - 2 - 1_000_003}] with 2 prompts"]),
    (["bench", "--methods", "ar", "--prompts", "2", "--out", "/proc/run"], ["--out /proc/run: cannot write in /proc"]),
    (["train", "--job", "tokenizer", "--steps", "1", "--data-seed", "-1"], ["--data-seed must be an integer in [0, 2^63)"]),
]


@pytest.mark.long("one CLI process per bad command line (each imports torch)")
def test_a_bad_command_line_is_one_line_and_exit_2(tmp_path):
    """Each case is its own process; four run at a time to spare the suite their start-up."""
    def case(n):
        args, fragments = BAD[n]
        out = tmp_path / f"img{n}.png"
        r = cli(*(args + (["--out", str(out)] if args[0] == "generate" else [])))
        one_line_error(r, *fragments)
        assert not out.exists()
    with ThreadPoolExecutor(4) as pool:
        for n, done in enumerate(pool.map(lambda n: (case(n), n)[1], range(len(BAD)))):
            assert done == n


def test_bench_out_on_a_file_or_a_folder_without_write_access_is_named_before_any_work(tmp_path):
    taken = tmp_path / "notes.txt"
    taken.write_text("not a run folder")
    for out, words in ((taken, f"--out {taken} is a file; give a folder"),
                       (taken / "run", f"--out {taken / 'run'}: {taken} is a file, so the folder cannot be made"),
                       ("/proc", "--out /proc: cannot write in /proc")):
        t0 = time.perf_counter()
        one_line_error(cli("bench", "--methods", "ar", "--prompts", "1", "--threads", "1", "--out", out), words)
        assert time.perf_counter() - t0 < 30                 # refused before the first record
    assert taken.read_text() == "not a run folder"


def as_from_a_terminal() -> None:
    """In the child before exec: Ctrl-C as a terminal delivers it. A shell that starts a job in the
    background (`cmd &`) sets SIGINT to ignored, and a Python started so never raises KeyboardInterrupt."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_when_running(args, sig, tmp_path):
    """Start the command, wait for its progress bar, send sig; (returncode, stderr)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    err = open(tmp_path / "stderr.txt", "w+")
    p = subprocess.Popen([sys.executable, "-m", "core", *map(str, args)], cwd=ROOT, env=env, stderr=err,
                         stdout=subprocess.DEVNULL, preexec_fn=as_from_a_terminal)
    deadline = time.time() + 90
    while time.time() < deadline and "[" not in (tmp_path / "stderr.txt").read_text():
        time.sleep(0.1)
    p.send_signal(sig)
    rc = p.wait(timeout=60)
    return rc, (tmp_path / "stderr.txt").read_text()


def test_sigterm_during_generate_keeps_the_old_output_whole(tmp_path):
    out = tmp_path / "img.png"
    out.write_bytes(b"the previous image")
    rc, err = _interrupt_when_running(["generate", "--method", "ar", "--prompt", PROMPT, "--out", out],
                                      signal.SIGTERM, tmp_path)
    assert rc == 130 and "interrupted: nothing was written" in err and "Traceback" not in err
    assert out.read_bytes() == b"the previous image"


def test_sigint_during_evaluate_says_what_is_kept(tmp_path):
    rc, err = _interrupt_when_running(["evaluate", "--what", "ar", "--prompts", "40", "--grids", "8"],
                                      signal.SIGINT, tmp_path)
    assert rc == 130 and "interrupted: no figures were recorded" in err and "Traceback" not in err


class _Payload:
    """A pickle that, loaded with weights_only=False, would create a file: proof of running code."""
    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("command", ["export", "train"])
def test_a_checkpoint_that_would_run_code_is_refused(tmp_path, command):
    marker = tmp_path / "ran-code"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    torch.save(dict(config={}, model={}, step=1, payload=_Payload(marker)), run_dir / "ckpt.pt")
    args = {"export": ["export", "--job", "tokenizer", "--run-dir", run_dir, "--assets", tmp_path / "assets"],
            "train": ["train", "--job", "tokenizer", "--steps", "1", "--run-dir", tmp_path / "new",
                      "--init-from", run_dir / "ckpt.pt"]}[command]
    r = cli(*args)
    one_line_error(r, "not a plain checkpoint")
    assert not marker.exists()
