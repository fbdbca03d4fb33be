"""Tar pairs as a user meets them: tiny random checkpoints in the official layouts (tar.write_tiny) in
a weights folder, loaded by name, every method run on them, the CLI as a process, and each missing
piece refused by name. Exactness against the official code is tests/test_tar_golden.py."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core import engine
from core.config import ParameterError, RunConfig
from core.methods import registry
from core.models import tar
from core.models.eagle import DraftHead
from core.trace import Trace

torch.set_num_threads(1)
ROOT = Path(__file__).resolve().parents[1]
SAME_RES_DRAFTER = {"sd", "cool"}   # need a same-resolution small drafter; Tar ships none


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("tar")
    tar.write_tiny(d)
    return d


@pytest.fixture(scope="module")
def pair(folder):
    p = tar.load_pair("tar-1024-512", weights_dir=folder)
    torch.manual_seed(3)
    head = DraftHead.for_target(p.target).eval()
    p.head_net = lambda: head           # a random EAGLE head for the tree methods (none ships for Tar)
    return p


def ids_prompt(folder) -> str:
    return str(folder / "ids.txt")


def test_the_tiny_files_keep_the_official_layouts(folder):
    ar = torch.load(folder / "ar_dtok_lp_1024px.pth", weights_only=True)
    assert set(ar) == {"model"} and set(ar["model"]) == {"name", "args", "sd"}
    assert "clip_proj.weight" in ar["model"]["sd"] and ar["model"]["args"]["model_type"] == "clip_cond"
    tok = torch.load(folder / "ta_tok.pth", weights_only=True)["model"]
    assert "bottleneck.regularizer.embedding.weight" in tok["sd"] and tok["args"]["decoder_depth"] == 1


@pytest.mark.parametrize("name, grids", [("tar-1024-512", ((16, 16), (8, 8))), ("tar-1024-256", ((16, 16), (4, 4))),
                                         ("tar-512-256", ((8, 8), (4, 4)))])
def test_each_pair_loads_its_target_and_drafter_at_their_grids(folder, name, grids):
    p = tar.load_pair(name, weights_dir=folder)
    s = tar.PAIRS[name].scale
    assert p.grid == grids[0] and p.scales == (s,) and grids[1] == (grids[0][0] // s, grids[0][1] // s)
    assert p.multiscale.cfg.abs_positions == grids[1][0] * grids[1][1] + 81 - 1
    feats, mask = p.caption(ids_prompt(folder), p.grid)
    assert feats.shape == (81, 48) and bool(mask.all())


def test_both_models_of_a_pair_read_the_same_features(folder, pair):
    a = pair.caption(ids_prompt(folder), pair.grid)[0]
    b = pair.caption(ids_prompt(folder), (8, 8))[0]
    assert torch.equal(a, b)
    tok = tar.load_tatok(folder / "ta_tok.pth")
    assert torch.allclose(a, tok.decode_ids(tar.read_ids(folder / "ids.txt")[None])[0], atol=1e-6)


@pytest.mark.parametrize("method", sorted(set(registry()) - SAME_RES_DRAFTER))
def test_every_method_runs_on_a_tiny_tar_pair(folder, pair, method):
    run = RunConfig(method=method, prompt=ids_prompt(folder), seed=1, sampling=tar.SAMPLING,
                    model="tar-1024-512").with_params(tau=0.05, k=16, radius=1, window=4, sjd_window=8)
    trace = engine.run(run, pair)
    assert Trace.from_json(trace.to_json()).tokens == trace.tokens and len(trace.tokens) == 16
    assert all(0 <= t < 64 for row in trace.tokens for t in row)


@pytest.mark.parametrize("method", sorted(SAME_RES_DRAFTER))
def test_methods_needing_a_same_resolution_drafter_say_tar_has_none(folder, pair, method):
    with pytest.raises(ValueError, match="ships no same-resolution drafter"):
        engine.run(RunConfig(method=method, prompt=ids_prompt(folder), model="tar-1024-512"), pair)


def test_mulo_at_another_scale_names_the_one_the_pair_serves(folder, pair):
    with pytest.raises(ParameterError, match="scale must be one of 2"):
        engine.run(RunConfig(method="mulo", prompt=ids_prompt(folder)).with_params(scale=4, k=16), pair)


# ---- prompts and refusals ---------------------------------------------------------------------------
@pytest.mark.parametrize("text, n", [("1 2 3", 3), ("[4, 5]", 2), ("<I7><I8><I9>", 3), ("1,2\n3", 3)])
def test_ids_files_in_every_written_form(tmp_path, text, n):
    path = tmp_path / ("ids.json" if text.startswith("[") else "ids.txt")
    path.write_text(text)
    assert tar.read_ids(path).numel() == n


def test_a_wrong_number_of_ids_is_refused_naming_the_count(folder, pair, tmp_path):
    (tmp_path / "short.txt").write_text("1 2 3")
    with pytest.raises(ParameterError, match="reads 81 TA-Tok ids; .* gives 3"):
        engine.run(RunConfig(method="ar", prompt=str(tmp_path / "short.txt")), pair)


def test_a_missing_ids_file_is_refused(pair, tmp_path):
    with pytest.raises(ParameterError, match="does not exist"):
        engine.run(RunConfig(method="ar", prompt=str(tmp_path / "none.txt")), pair)


def test_missing_checkpoints_are_named_with_where_they_come_from(tmp_path):
    with pytest.raises(tar.MissingWeights) as e:
        tar.load_pair("tar-1024-256", weights_dir=tmp_path)
    msg = str(e.value)
    for f in ("ar_dtok_lp_1024px.pth", "ar_dtok_lp_256px.pth", "vq_ds16_t2i.pt", "huggingface.co/csuhan/TA-Tok",
              "MULO_TAR_DIR"):
        assert f in msg
    assert "ar_dtok_lp_512px.pth" not in msg


def test_ids_without_ta_tok_are_refused_naming_its_file(folder, tmp_path):
    for f in folder.iterdir():
        if f.name != "ta_tok.pth":
            (tmp_path / f.name).symlink_to(f)
    p = tar.load_pair("tar-512-256", weights_dir=tmp_path)
    with pytest.raises(tar.MissingWeights, match=r"ta_tok\.pth.*\n?.*|TA-Tok turns ids into features"):
        p.caption(str(folder / "ids.txt"), p.grid)


def test_an_image_without_the_teacher_configuration_is_refused_naming_it(folder, pair, tmp_path, monkeypatch):
    from PIL import Image
    monkeypatch.delenv("MULO_TAR_TEACHER", raising=False)
    Image.new("RGB", (32, 32)).save(tmp_path / "photo.png")
    with pytest.raises(tar.MissingWeights, match="siglip2-so400m-patch14-384.*config.json"):
        pair.caption(str(tmp_path / "photo.png"), pair.grid)


def test_an_image_is_encoded_by_ta_tok_when_its_teacher_is_there(folder, tmp_path, monkeypatch):
    """Reconstruction mode: the fixtures' tiny teacher (126 px, 81 tokens) with a TA-Tok of its width."""
    import numpy as np
    from PIL import Image
    from transformers import AutoConfig
    gold = Path(__file__).parent / "fixtures" / "tar_golden"
    monkeypatch.setenv("MULO_TAR_TEACHER", str(gold / "teacher"))
    img = (np.random.default_rng(0).random((126, 126, 3)) * 255).astype("uint8")
    Image.fromarray(img).save(tmp_path / "photo.png")
    cond = tar.Conditioning(81, weights_dir=gold.parent / "none")
    cond._tatok = tar.load_tatok(gold / "ta_tok.pth", AutoConfig.from_pretrained(str(gold / "teacher")))
    cond._with_encoder = True
    ids = cond.ids(str(tmp_path / "photo.png"))
    expect = cond._tatok.encode_image(torch.from_numpy(img).float().div(255).permute(2, 0, 1)[None])[0]
    assert torch.equal(ids, expect) and ids.numel() == 81


def test_text_without_the_tar_llm_is_refused_naming_its_folder(pair, monkeypatch):
    monkeypatch.delenv("MULO_TAR_LLM", raising=False)
    with pytest.raises(tar.MissingWeights, match="csuhan/Tar-1.5B.*--tar-ids"):
        pair.caption("a photo of a macaw", pair.grid)


def test_an_unsafe_checkpoint_is_refused(tmp_path):
    import pathlib
    torch.save({"model": {"name": "x", "args": {"p": pathlib.PosixPath("/data")}, "sd": {}}}, tmp_path / "w.pth")
    from core.models.llamagen import UnsafeCheckpoint
    with pytest.raises(UnsafeCheckpoint, match="plain data"):
        tar.read_official(tmp_path / "w.pth")


def test_a_class_conditional_checkpoint_is_refused_naming_its_model_type(folder):
    spec = tar.read_official(folder / "ar_dtok_lp_256px.pth")
    spec["args"] = dict(spec["args"], model_type="class_cond")
    with pytest.raises(ValueError, match="class_cond.*clip_cond"):
        tar.gpt_config(spec)


def test_the_pair_defaults_are_the_official_pipelines(folder):
    s = engine.pair_facts("tar-1024-512")["sampling"]
    assert (s.cfg, s.top_k, s.top_p, s.temperature, s.cfg_interval) == (4.0, 0, 1.0, 1.0, -1)


# ---- the CLI -------------------------------------------------------------------------------------
def _cli(folder, *args):
    env = dict(os.environ, MULO_TAR_DIR=str(folder), OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    env.pop("MULO_TAR_LLM", None)
    return subprocess.run([sys.executable, "-m", "core", "generate", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


def test_a_mulo_run_through_the_cli_writes_the_image_and_trace(folder, tmp_path):
    out = _cli(folder, "--model", "tar-1024-512", "--tar-ids", str(folder / "ids.txt"), "--method", "mulo",
               "--k", "16", "--out", str(tmp_path / "m.png"), "--trace", str(tmp_path / "m.json"), "--threads", "1")
    assert out.returncode == 0, out.stderr
    trace = Trace.from_json((tmp_path / "m.json").read_text())
    assert trace.model == "tar-1024-512" and trace.prompt == str(folder / "ids.txt")
    assert trace.params["cfg"] == 4.0 and trace.params["top_k"] == 0 and len(trace.tokens) == 16
    assert (tmp_path / "m.png").stat().st_size > 0


def test_the_cli_refuses_a_text_prompt_without_the_llm_in_one_line(folder):
    out = _cli(folder, "--model", "tar-512-256", "--prompt", "a macaw", "--method", "ar")
    assert out.returncode == 2 and "Tar-1.5B" in out.stderr and "Traceback" not in out.stderr


def test_the_cli_refuses_tar_ids_for_another_family(folder):
    out = _cli(folder, "--model", "embedded", "--tar-ids", str(folder / "ids.txt"))
    assert out.returncode == 2 and "--tar-ids" in out.stderr


def test_on_a_hosted_app_prompt_files_come_from_the_prompt_folders_only(folder, tmp_path, monkeypatch):
    monkeypatch.setenv("SPACE_ID", "someone/mulo-sd-explorer")
    monkeypatch.delenv(tar.PROMPTS_ENV, raising=False)
    (tmp_path / "ids.txt").write_text((folder / "ids.txt").read_text())
    cond = tar.Conditioning(81, weights_dir=folder)
    with pytest.raises(ParameterError, match="read from .* only"):
        cond(str(tmp_path / "ids.txt"))
    with pytest.raises(ParameterError, match="read from .* only"):
        cond("/etc/../etc/hosts.txt")
    assert cond(str(folder / "ids.txt"))[0].shape == (81, 48)      # the weights folder is a prompt folder
    monkeypatch.setenv(tar.PROMPTS_ENV, str(tmp_path))
    assert cond(str(tmp_path / "ids.txt"))[0].shape == (81, 48)
    monkeypatch.delenv("SPACE_ID")                                   # control: off a Space any path is read
    assert tar.Conditioning(81, weights_dir=folder)(str(tmp_path / "ids.txt"))[0].shape == (81, 48)
