"""LlamaGen against its authors' code: golden fixtures written by scripts/llamagen_golden.py from the
official FoundationVision/LlamaGen modules (tiny random models, fixed seeds; see golden.json).

Tolerances: logits 1e-5 absolute (fp32; the official and our attention reduce in other orders),
processed distributions 1e-5, VQ pixels 5e-5, tokens and top-k/top-p filtering exact."""
import argparse
import dataclasses
import importlib.util
import json
import pathlib
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from core import engine
from core import sampling as sampling_mod
from core.config import RunConfig, SamplingConfig
from core.decoding import Decoder
from core.models import llamagen as lg
from core.models.gpt import GPT
from core.models.vq import VQConfig, VQModel

torch.set_num_threads(1)
HERE = Path(__file__).parent / "fixtures" / "llamagen_golden"
META = json.loads((HERE / "golden.json").read_text())
GOLD = load_file(str(HERE / "golden.safetensors"))
LOGIT_TOL, PROB_TOL, PIXEL_TOL = 1e-5, 1e-5, 5e-5
NAMES = ("t2i", "t2i_s1", "c2i")   # t2i_s1: the t2i weights on a 4x4 grid, as the stage-1 drafter


def _script():
    spec = importlib.util.spec_from_file_location("llamagen_golden", HERE.parents[2] / "scripts" / "llamagen_golden.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def gpt_config(kind: str):
    a = META["gpt"][kind]
    over = dict(vocab_size=a["vocab_size"], dim=a["dim"], n_layer=a["n_layer"], n_head=a["n_head"],
                multiple_of=a["multiple_of"], prefix_len=a["cls_token_num"])
    over.update(caption_dim=a["caption_dim"]) if kind == "t2i" else over.update(num_classes=a["num_classes"])
    return dataclasses.replace(lg.gpt_config("B", kind), **over)


def load_gpt(kind: str, state: dict | None = None) -> GPT:
    """The official checkpoint, read as a user's file is read (the training args pickled beside it)."""
    state = state if state is not None else lg.read_state_dict(HERE / f"{kind}.pt")
    with torch.device("meta"):
        model = GPT(gpt_config(kind))
    return lg.load_weights(model, state, f"{kind}.pt").eval()


def load_vq() -> VQModel:
    m = META["vq"]
    state = _script().seeded_state(m["shapes"], m["seed"], m["std"])
    assert _script().checksum(state) == m["checksum"], "the seeded VQ weights differ from the fixture's: regenerate"
    a = m["args"]
    cfg = dataclasses.replace(lg.VQ16, codebook_size=a["codebook_size"], codebook_embed_dim=a["codebook_embed_dim"],
                              ch=a["ch"], ch_mult=tuple(a["ch_mult"]), num_res_blocks=a["num_res_blocks"],
                              z_channels=a["z_channels"], attn_levels=(len(a["ch_mult"]) - 1,))
    with torch.device("meta"):
        model = VQModel(cfg)
    return lg.load_weights(model, state, "vq").eval()


def caption(kind: str):
    if kind == "t2i":
        return GOLD["t2i_caption"], GOLD["t2i_mask"].bool()
    return torch.tensor([META["class_id"]]), torch.ones(1, dtype=torch.bool)


def grid(name: str) -> tuple[int, int]:
    return (META["grids"][name],) * 2


@pytest.fixture(scope="module")
def models():
    return {k: load_gpt(k) for k in ("t2i", "c2i")}


@pytest.fixture(scope="module")
def vq():
    return load_vq()


def pair(models, vq, name: str):
    kind = name.split("_")[0]
    feats, mask = caption(kind)
    return lg.assemble(f"golden-{name}", models[kind], vq, grid(name), lambda prompt, g: (feats, mask),
                       small=load_gpt(kind), dtype=torch.float32)


SMALL_BOOK = dict(k=16)   # the fixtures' codebooks are tiny; mulo's default k (128) is for larger books


def prompt(name: str) -> str:
    return str(META["class_id"]) if name.startswith("c2i") else "fixture caption"


# ---- logits -------------------------------------------------------------------------------------
def forced_logits(model: GPT, name: str) -> torch.Tensor:
    """(2, N, V) teacher-forced logits, conditional then unconditional row, full causal forward."""
    feats, mask = caption(name.split("_")[0])
    tokens = GOLD[f"{name}_forced_tokens"][None].expand(2, -1)
    with torch.no_grad():
        return model(feats[None].expand(2, *feats.shape), mask[None].expand(2, -1), tokens, grid(name),
                     drop=torch.tensor([False, True]))


def cached_logits(model: GPT, name: str) -> torch.Tensor:
    """The same logits through the positional KV cache: prefill, then every fed token in one call."""
    feats, mask = caption(name.split("_")[0])
    tokens = GOLD[f"{name}_forced_tokens"]
    cache = model.new_cache(2, grid(name), "cpu")
    first = model.prefill(cache, feats[None].expand(2, *feats.shape), mask[None].expand(2, -1), grid(name),
                          drop=torch.tensor([False, True]))
    rest = model.forward_cells(cache, tokens[None, :-1].expand(2, -1), torch.arange(len(tokens) - 1), grid(name))
    return torch.cat([first[:, None], rest], dim=1)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("path", [forced_logits, cached_logits])
def test_logits_equal_the_official_model_on_its_own_checkpoint(models, name, path):
    ours = path(models[name.split("_")[0]], name)
    assert (ours - GOLD[f"{name}_forced_logits"]).abs().max() <= LOGIT_TOL


def test_a_perturbed_weight_breaks_the_logit_comparison():
    state = lg.read_state_dict(HERE / "t2i.pt")
    state["layers.1.attention.wo.weight"] = state["layers.1.attention.wo.weight"].clone()
    state["layers.1.attention.wo.weight"][0, 0] += 1e-3
    assert (forced_logits(load_gpt("t2i", state), "t2i") - GOLD["t2i_forced_logits"]).abs().max() > LOGIT_TOL


# ---- decoding -----------------------------------------------------------------------------------
def greedy(models, vq, name: str, method: str = "ar", **sampling) -> list[int]:
    s = SamplingConfig(temperature=0.0, **sampling)
    run = RunConfig(method=method, prompt=prompt(name), seed=0, sampling=s).with_params(**SMALL_BOOK)
    trace = engine.run(run, pair(models, vq, name))
    assert all(trace.params[k] == v for k, v in sampling.items())  # every sampling knob is in the trace
    return [t for row in trace.tokens for t in row]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("cfg", [1.0, 4.0, 7.5])
def test_greedy_tokens_equal_official_generate(models, vq, name, cfg):
    assert greedy(models, vq, name, cfg=cfg) == GOLD[f"{name}_greedy_cfg{cfg:g}"].tolist()


def test_cfg_interval_switches_guidance_off_where_official_generate_does(models, vq):
    c = META["cfg_interval"]
    official = {ci: GOLD[f"t2i_greedy_cfg7.5_interval{ci}"].tolist() for ci in (c - 1, c, c + 1)}
    # the fixture can tell an off-by-one: each of the three intervals gives other tokens
    assert official[c] != official[c - 1] and official[c] != official[c + 1]
    for ci, tokens in official.items():
        assert greedy(models, vq, "t2i", cfg=7.5, cfg_interval=ci) == tokens


@pytest.mark.parametrize("method", ["sd", "sjd"])
def test_speculative_methods_see_the_same_cfg_interval(models, vq, method):
    c = META["cfg_interval"]
    assert greedy(models, vq, "t2i", method, cfg=7.5, cfg_interval=c) == GOLD[f"t2i_greedy_cfg7.5_interval{c}"].tolist()


def sampled_config() -> SamplingConfig:
    s = META["sampled"]
    return SamplingConfig(cfg=s["cfg_scale"], temperature=s["temperature"], top_k=s["top_k"], top_p=s["top_p"],
                          cfg_interval=s["cfg_interval"])


def test_processed_distribution_of_every_step_equals_official_sampling(models):
    """Along the official sampled tokens, the decoder's processed distribution (CFG with its
    interval, temperature, top-k, top-p) equals the one official sample() drew from."""
    tokens = GOLD["t2i_sampled_tokens"].long().tolist()
    feats, mask = caption("t2i")
    dec = Decoder(models["t2i"], grid("t2i"), feats, mask, sampled_config(), "cpu")
    dec.prefill()
    rest = dec.feed(list(range(len(tokens) - 1)), tokens[:-1], [True] * (len(tokens) - 1))
    ours = torch.cat([dec.p0[None], rest])
    assert (ours - GOLD["t2i_sampled_probs"]).abs().max() <= PROB_TOL
    assert torch.equal(ours > 0, GOLD["t2i_sampled_probs"] > 0)  # the same tokens survive the filters


def test_sampled_tokens_equal_official_sampling_with_the_same_seed(models, vq):
    s = META["sampled"]
    run = RunConfig(method="ar", prompt="fixture caption", seed=s["seed"],
                    sampling=sampled_config()).with_params(**SMALL_BOOK)
    trace = engine.run(run, pair(models, vq, "t2i"))
    assert [t for row in trace.tokens for t in row] == GOLD["t2i_sampled_tokens"].tolist()


@pytest.mark.parametrize("name, top_k, top_p", [("p08", 0, 0.8), ("p09", 0, 0.9), ("k5p095", 5, 0.95),
                                                ("k12", 12, 1.0)])
def test_top_k_and_top_p_filtering_equal_the_official_rule_bit_for_bit(name, top_k, top_p):
    logits = GOLD["filter_logits"]
    ours = sampling_mod.processed(logits, SamplingConfig(cfg=1.0, top_k=top_k, top_p=top_p))
    assert torch.equal(ours, GOLD[f"filter_{name}"])


def test_the_unshifted_nucleus_rule_fails_the_filtering_fixture():
    """cum - p > top_p instead of the shifted cumulative sum keeps another token on a boundary row."""
    z = GOLD["filter_logits"]
    srt, idx = z.sort(dim=-1, descending=True)
    p = srt.softmax(-1)
    drop = p.cumsum(-1) - p > 0.9
    unshifted = z.masked_fill(drop.scatter(-1, idx, drop), float("-inf")).softmax(-1)
    assert not torch.equal(unshifted, GOLD["filter_p09"])


# ---- tokenizer ----------------------------------------------------------------------------------
def test_vq_decode_equals_official_decode_code(vq):
    """decode_code's pixels as the official sample scripts save them (clamped to [-1, 1])."""
    with torch.no_grad():
        pixels = vq.decode(GOLD["vq_codes"][None])[0]
    expected = GOLD["vq_pixels"].clamp(-1, 1)
    assert (expected != GOLD["vq_pixels"]).any()  # some pixels exercise the clamp
    assert (pixels - expected).abs().max() <= PIXEL_TOL


# ---- captions and checkpoints -------------------------------------------------------------------
@pytest.mark.parametrize("raw, cleaned", META["captions"])
def test_prompt_cleaning_equals_official_text_preprocessing(raw, cleaned):
    assert lg.clean_prompt(raw) == cleaned


def test_the_official_checkpoint_keeps_its_training_args():
    obj = torch.load(HERE / "t2i.pt", map_location="cpu", weights_only=False)  # our own fixture: trusted
    assert isinstance(obj["args"], argparse.Namespace) and set(obj) == {"model", "steps", "args"}


def test_a_checkpoint_pickling_other_classes_is_refused_with_a_clear_error(tmp_path):
    state = lg.read_state_dict(HERE / "c2i.pt")
    torch.save({"model": state, "args": argparse.Namespace(data_path=pathlib.PosixPath("/data"))}, tmp_path / "w.pt")
    with pytest.raises(lg.UnsafeCheckpoint, match=r"pathlib\.PosixPath.*argparse\.Namespace"):
        lg.read_state_dict(tmp_path / "w.pt")
