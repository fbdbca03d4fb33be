import json

import numpy as np
import pytest
from PIL import Image

from core import engine
from core.cli import main

PROMPT = "a large red circle center on a striped blue background"


@pytest.mark.parametrize("flags, name", [(["--tau", "1.5"], "tau"), (["--k", "-1"], "k"), (["--scale", "3"], "scale"),
                                         (["--radius", "-1"], "radius"), (["--window", "0"], "window")])
def test_bad_parameters_stop_generate_before_any_output(tmp_path, capsys, flags, name):
    out, trace = tmp_path / "img.png", tmp_path / "trace.json"
    code = main(["generate", "--method", "mulo", "--prompt", PROMPT, "--out", str(out), "--trace", str(trace), *flags])
    assert code == 2
    assert capsys.readouterr().err.startswith(f"error: {name} must be")
    assert not out.exists() and not trace.exists()


def test_an_unknown_word_stops_generate_with_the_word_named(tmp_path, capsys):
    code = main(["generate", "--prompt", "a red dragon center on a striped blue background", "--out", str(tmp_path / "x.png")])
    assert code == 2 and "'dragon'" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()


def test_generate_writes_the_image_and_a_readable_trace(tmp_path):
    out, trace = tmp_path / "img.png", tmp_path / "trace.json"
    assert main(["generate", "--method", "mulo", "--scale", "4", "--prompt", PROMPT, "--seed", "1", "--out", str(out),
                 "--trace", str(trace)]) == 0
    d = json.loads(trace.read_text())
    assert out.stat().st_size > 0 and d["schema"] == "mulo-trace/3" and d["grid"] == {"target": [32, 32], "draft": [8, 8], "levels": [[32, 32], [8, 8]]}
    # the file is a PNG of the trace's tokens decoded, at the tokenizer's size (32 tokens x 2 pixels)
    with open(out, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    img = Image.open(out)
    assert img.format == "PNG" and img.mode == "RGB" and img.size == (64, 64)
    assert np.array_equal(np.asarray(img), engine.decode_image(d["tokens"], engine.load_pair("embedded").tokenizer))
    assert np.asarray(img).std() > 5                      # a picture, not a blank


@pytest.mark.parametrize("model, cfg, top_k", [("llamagen-c2i-B-256", "4.0", "2000"), ("llamagen-t2i", "7.5", "1000"),
                                               ("embedded", "3.0", "0")])
def test_generate_help_shows_the_sampling_defaults_of_the_chosen_pair(capsys, model, cfg, top_k):
    with pytest.raises(SystemExit):
        main(["generate", "--model", model, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"guidance scale (default: {cfg})" in text and f"--top-k TOP_K 0 = off (default: {top_k})" in text
    assert "--cfg-interval" in text and "(default: -1 = every cell)" in text


def test_a_bad_cfg_interval_stops_generate_naming_the_knob(tmp_path, capsys):
    code = main(["generate", "--method", "ar", "--cfg-interval", "-2", "--out", str(tmp_path / "x.png")])
    assert code == 2 and capsys.readouterr().err.startswith("error: cfg_interval must be")
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize("argv, words", [
    (["--job", "sr"], "error: --scale must be 2 or 4 for the sr job (the up-scale factor r it learns); got 0"),
    (["--job", "learned", "--scale", "3"], "error: --scale must be 2 or 4 for the learned job"),
    (["--job", "target", "--scale", "2"], "error: --scale and --detail are for the up-sampler jobs (sr, learned, "
                                          "distilled)"),
    (["--job", "distilled", "--scale", "4"], "error: --pool (how many of the target's own samples to distil on) "
                                             "is for the distilled job, which needs it"),
    (["--job", "learned", "--scale", "4", "--pool", "8"], "error: --pool is for the distilled job; the learned job "
                                                          "takes none"),
    (["--job", "learned", "--scale", "2", "--detail", "1"], "error: --detail weighs the sr job's detail term"),
])
def test_the_up_sampler_jobs_name_their_knobs(tmp_path, capsys, argv, words):
    code = main(["train", *argv, "--steps", "1", "--run-dir", str(tmp_path / "run")])
    assert code == 2 and capsys.readouterr().err.startswith(words)
    assert not (tmp_path / "run").exists()


def test_generate_with_a_trained_up_sampler_writes_its_proposal(tmp_path):
    trace = tmp_path / "trace.json"
    code = main(["generate", "--method", "mulo", "--prompt", PROMPT, "--upsampler", "sr", "--scale", "4", "--tau", "0",
                 "--out", str(tmp_path / "img.png"), "--trace", str(trace)])
    t = json.loads(trace.read_text())
    assert code == 0 and t["params"]["upsampler"] == "sr" and t["tokens"] == t["proposal"]


@pytest.mark.parametrize("flags, want", [
    (["--scale", "4"], dict(scale=4, tau=0.8, k=0, radius=2)),                 # the r = 4 pick
    (["--scale", "4", "--tau", "0.3"], dict(scale=4, tau=0.3, k=0, radius=2)),  # a given knob stays given
    ([], dict(scale=2, tau=0.5, k=16, radius=2)),                                # r = 2: MethodParams' own
    (["--scale", "2", "--k", "4"], dict(scale=2, tau=0.5, k=4, radius=2))])
def test_scale_alone_gives_the_frontier_pick_of_that_scale(tmp_path, flags, want):
    """`generate --scale 4` runs the r = 4 pick of docs/results.md, as a process; the control is the r = 2
    row, which would equal the r = 4 one if the pick were ignored (or applied at every scale)."""
    import subprocess
    import sys
    trace = tmp_path / "t.json"
    done = subprocess.run([sys.executable, "-m", "core", "generate", "--method", "mulo", "--prompt", PROMPT,
                           "--threads", "1", "--out", str(tmp_path / "x.png"), "--trace", str(trace), *flags],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    params = json.loads(trace.read_text())["params"]
    assert {knob: params[knob] for knob in want} == want
