"""Tar against its authors' code: golden fixtures written by scripts/tar_golden.py from the official
csuhan/Tar modules (tiny random AR-DTok models, a tiny TA-Tok, fixed seeds; see golden.json).

Tolerances: logits 1e-5 absolute (fp32; the official and our attention reduce in other orders),
features 1e-5, processed distributions 1e-5, VQ pixels 5e-5, tokens and ids exact."""
import importlib.util
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from core import engine
from core.config import RunConfig, SamplingConfig
from core.decoding import Decoder
from core.models import tar
from core.models.gpt import GPT

torch.set_num_threads(1)
HERE = Path(__file__).parent / "fixtures" / "tar_golden"
META = json.loads((HERE / "golden.json").read_text())
GOLD = load_file(str(HERE / "golden.safetensors"))
LOGIT_TOL, FEATURE_TOL, PROB_TOL, PIXEL_TOL = 1e-5, 1e-5, 1e-5, 5e-5


def _seeded(meta):
    spec = importlib.util.spec_from_file_location("llamagen_golden", HERE.parents[2] / "scripts" / "llamagen_golden.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    state = mod.seeded_state(meta["shapes"], meta["seed"], meta["std"])
    assert mod.checksum(state) == meta["checksum"], "the seeded VQ weights differ from the fixture's: regenerate"
    return state


def grid(name):
    return (META["grids"][name],) * 2


@pytest.fixture(scope="module")
def models():
    return {n: tar.build_gpt(tar.read_official(HERE / f"{n}.pth"), n)[0] for n in META["grids"]}


@pytest.fixture(scope="module")
def vq():
    return tar.build_vq(_seeded(META["vq"]))


@pytest.fixture(scope="module")
def tatok():
    return tar.load_tatok(HERE / "ta_tok.pth")


def features():
    return GOLD["tatok_features"], torch.ones(GOLD["tatok_features"].shape[0], dtype=torch.bool)


def both(x):
    return x[None].expand(2, *x.shape)


DROP = torch.tensor([False, True])   # the unconditional row reads the null condition (zero features)


def forced(model: GPT, name: str) -> torch.Tensor:
    feats, mask = features()
    with torch.no_grad():
        return model(both(feats), both(mask), both(GOLD[f"{name}_forced_tokens"]), grid(name), drop=DROP)


def cached(model: GPT, name: str) -> torch.Tensor:
    feats, mask = features()
    tokens = GOLD[f"{name}_forced_tokens"]
    cache = model.new_cache(2, grid(name), "cpu")
    first = model.prefill(cache, both(feats), both(mask), grid(name), drop=DROP)
    rest = model.forward_cells(cache, both(tokens[:-1]), torch.arange(len(tokens) - 1), grid(name))
    return torch.cat([first[:, None], rest], dim=1)


# ---- checkpoints and logits ---------------------------------------------------------------------
def test_the_official_layout_is_read_with_its_sizes_from_the_args():
    spec = tar.read_official(HERE / "ar8.pth")
    assert set(spec) == {"name", "args", "sd"} and "clip_proj.weight" in spec["sd"] and "abs_pe" in spec["sd"]
    cfg, g = tar.gpt_config(spec)
    assert g == (8, 8) and cfg.prefix_len == 81 and cfg.abs_positions == 64 + 81 - 1 and cfg.caption_proj == "linear"


@pytest.mark.parametrize("name", ["ar8", "ar4"])
@pytest.mark.parametrize("path", [forced, cached])
@pytest.mark.parametrize("official", ["forced", "cached"])
def test_logits_equal_the_official_full_and_kv_cached_forwards(models, name, path, official):
    """Ours by both paths against the official full forward (training) and its KV-cached sampling mode."""
    assert (path(models[name], name) - GOLD[f"{name}_{official}_logits"]).abs().max() <= LOGIT_TOL


def test_a_perturbed_position_breaks_the_logit_comparison():
    spec = tar.read_official(HERE / "ar8.pth")
    spec["sd"]["abs_pe"] = spec["sd"]["abs_pe"].clone()
    spec["sd"]["abs_pe"][0, 90, 3] += 1e-3        # the position of cell 9
    model = tar.build_gpt(spec)[0]
    assert (forced(model, "ar8") - GOLD["ar8_forced_logits"]).abs().max() > LOGIT_TOL


def test_the_learned_null_caption_of_llamagen_would_break_cfg(models):
    """Control: the unconditional row is the official one only with zero features for the null condition."""
    feats, mask = features()
    with torch.no_grad():
        wrong = models["ar8"](both(feats), both(mask), both(GOLD["ar8_forced_tokens"]), grid("ar8"),
                              drop=torch.tensor([False, False]))
    assert (wrong[1] - GOLD["ar8_forced_logits"][1]).abs().max() > LOGIT_TOL
    assert (wrong[0] - GOLD["ar8_forced_logits"][0]).abs().max() <= LOGIT_TOL


def test_a_checkpoint_of_another_shape_is_refused_naming_the_keys():
    spec = tar.read_official(HERE / "ar8.pth")
    spec["args"] = dict(spec["args"], max_seq_len=16)
    with pytest.raises(ValueError, match="abs_pe"):
        tar.build_gpt(spec)


# ---- decoding -----------------------------------------------------------------------------------
def pair(models, vq):
    return tar.assemble("golden-tar", models["ar8"], models["ar4"], vq, grid("ar8"), 2,
                        lambda prompt, g: features(), dtype=torch.float32)


@pytest.mark.parametrize("cfg", META["cfg_scales"])
@pytest.mark.parametrize("method", ["ar", "sjd"])
def test_greedy_tokens_equal_official_generate(models, vq, cfg, method):
    run = RunConfig(method=method, prompt="ids", seed=0, sampling=SamplingConfig(cfg=cfg, temperature=0.0))
    trace = engine.run(run, pair(models, vq))
    assert [t for row in trace.tokens for t in row] == GOLD[f"ar8_greedy_cfg{cfg:g}"].tolist()


def test_the_drafter_grid_greedy_tokens_equal_official_generate(models, vq):
    p = tar.assemble("golden-tar-4", models["ar4"], models["ar4"], vq, grid("ar4"), 1,
                     lambda prompt, g: features(), dtype=torch.float32)
    run = RunConfig(method="ar", prompt="ids", seed=0, sampling=SamplingConfig(cfg=4.0, temperature=0.0))
    assert [t for row in engine.run(run, p).tokens for t in row] == GOLD["ar4_greedy_cfg4"].tolist()


def sampled() -> SamplingConfig:
    s = META["sampled"]
    return SamplingConfig(cfg=s["cfg_scale"], temperature=s["temperature"], top_k=s["top_k"], top_p=s["top_p"])


def test_processed_distribution_of_every_step_equals_official_sampling(models):
    tokens = GOLD["ar8_sampled_tokens"].long().tolist()
    feats, mask = features()
    dec = Decoder(models["ar8"], grid("ar8"), feats, mask, sampled(), "cpu")
    dec.prefill()
    rest = dec.feed(list(range(len(tokens) - 1)), tokens[:-1], [True] * (len(tokens) - 1))
    ours = torch.cat([dec.p0[None], rest])
    assert (ours - GOLD["ar8_sampled_probs"]).abs().max() <= PROB_TOL


def test_sampled_tokens_equal_the_official_pipeline_with_the_same_seed(models, vq):
    """The pipeline's settings are the pair's defaults: CFG 4, temperature 1, no top-k or top-p."""
    assert tar.SAMPLING == sampled()
    run = RunConfig(method="ar", prompt="ids", seed=META["sampled"]["seed"], sampling=tar.SAMPLING)
    trace = engine.run(run, pair(models, vq))
    assert [t for row in trace.tokens for t in row] == GOLD["ar8_sampled_tokens"].tolist()


# ---- TA-Tok -------------------------------------------------------------------------------------
def test_features_from_ids_equal_the_official_decode_from_bottleneck(tatok):
    ours = tatok.decode_ids(GOLD["tatok_ids"][None])[0]
    assert (ours - GOLD["tatok_features"]).abs().max() <= FEATURE_TOL


def test_unnormalized_codes_break_the_feature_comparison(tatok):
    """Control: the SimVQ codes are L2-normalized; without it the features are others."""
    tatok.bottleneck.regularizer.l2_normalized = False
    try:
        ours = tatok.decode_ids(GOLD["tatok_ids"][None])[0]
    finally:
        tatok.bottleneck.regularizer.l2_normalized = True
    assert (ours - GOLD["tatok_features"]).abs().max() > FEATURE_TOL


def test_an_image_encodes_to_the_official_ids():
    from transformers import AutoConfig
    tok = tar.load_tatok(HERE / "ta_tok.pth", AutoConfig.from_pretrained(str(HERE / "teacher")))
    ids = tok.encode_image(GOLD["image"][None])[0]
    assert torch.equal(ids, GOLD["image_ids"])
    other = tok.encode_image(GOLD["image"].flip(-1)[None])[0]   # control: another image, other ids
    assert not torch.equal(other, GOLD["image_ids"])


def test_ids_outside_the_codebook_are_refused_naming_the_prompt(tatok):
    from core.config import ParameterError
    with pytest.raises(ParameterError, match=r"prompt: TA-Tok ids must lie in \[0, 31\]"):
        tatok.decode_ids(torch.full((1, 81), 32))


# ---- the VQ -------------------------------------------------------------------------------------
def test_the_vq_configuration_is_read_from_its_shapes_and_decodes_as_the_official_one(vq):
    a = META["vq"]["args"]
    assert (vq.cfg.ch, list(vq.cfg.ch_mult), vq.cfg.num_res_blocks, vq.cfg.z_channels) == (
        a["ch"], a["ch_mult"], a["num_res_blocks"], a["z_channels"])
    side = int(GOLD["vq_codes"].numel() ** 0.5)
    with torch.no_grad():
        pixels = vq.decode(GOLD["vq_codes"].reshape(1, side, side))[0] * 0.5 + 0.5   # [-1, 1] -> [0, 1]
    expected = GOLD["vq_pixels"].clamp(0, 1)           # as the pipeline's post_process saves them
    assert (expected != GOLD["vq_pixels"]).any()       # some pixels exercise the clamp
    assert (pixels - expected).abs().max() <= PIXEL_TOL
    assert (pixels.flip(-1) - expected).abs().max() > PIXEL_TOL                          # control


# ---- the text path ------------------------------------------------------------------------------
def test_text_becomes_the_ids_the_official_text_path_samples():
    """A tiny random Tar LLM: the chat template, <im_start><S0>, the LLM's sampling settings, the <I..>
    codes read back and padded with 0 to 81, against the official TextToImageInference."""
    text = tar.TarText(HERE / "llm")
    ids = text(META["llm_prompt"], 81, META["llm_seed"])
    assert torch.equal(ids, GOLD["llm_ids"])
    assert (GOLD["llm_ids"] == 0).any() and (GOLD["llm_ids"] > 0).any()   # codes read back, then padding
    assert not torch.equal(text(META["llm_prompt"], 81, META["llm_seed"] + 1), GOLD["llm_ids"])   # control


def test_a_text_prompt_conditions_a_pair_through_the_llm(monkeypatch):
    monkeypatch.setenv("MULO_TAR_LLM", str(HERE / "llm"))
    cond = tar.Conditioning(81, weights_dir=HERE, tatok=tar.load_tatok(HERE / "ta_tok.pth"))
    feats, mask = cond(META["llm_prompt"])
    expect = cond.tatok().decode_ids(GOLD["llm_ids"][None])[0]
    assert torch.allclose(feats, expect, atol=1e-6) and bool(mask.all())
