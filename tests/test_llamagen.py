"""The LlamaGen adapter, offline: official key structure, checkpoint reading, captions, and every
method end to end on a tiny pair with LlamaGen's layout (random weights, no files from anywhere)."""
import argparse
import dataclasses
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from core import engine
from core.config import RunConfig
from core.methods import registry
from core.models import llamagen as lg
from core.models.gpt import GPT
from core.models.vq import VQModel
from core.trace import Trace

torch.set_num_threads(1)
FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "llamagen_keys.json").read_text())
TINY = dict(dim=64, n_layer=2, n_head=4, vocab_size=64)
TINY_VQ = dataclasses.replace(lg.VQ16, codebook_size=64, ch=32, ch_mult=(1, 2), num_res_blocks=1, z_channels=32,
                              attn_levels=(1,))
GRID = (8, 8)  # target; the stage-1 style drafter serves 4x4 (r = 2)


def _shapes(model) -> dict:
    return {k: list(v.shape) for k, v in model.state_dict().items()}


def _official(name: str) -> dict:
    return {k: v for k, v in FIXTURE[name].items() if k not in lg.IGNORED_KEYS}


@pytest.mark.parametrize("name, make", [
    ("gpt_xl_t2i", lambda: GPT(lg.gpt_config("XL", "t2i"))),
    ("gpt_b_c2i", lambda: GPT(lg.gpt_config("B", "c2i"))),
    ("vq_16", lambda: VQModel(lg.VQ16)),
])
def test_real_size_configs_have_exactly_the_official_keys_and_shapes(name, make):
    with torch.device("meta"):
        model = make()
    assert _shapes(model) == _official(name)


def test_only_non_weight_entries_of_the_official_state_dicts_are_ignored():
    ignored = {k for n in ("gpt_xl_t2i", "gpt_b_c2i", "vq_16") for k in FIXTURE[n] if k in lg.IGNORED_KEYS}
    assert ignored == {"quantize.codebook_used"}


def tiny_gpt(kind: str, seed: int, **over) -> GPT:
    torch.manual_seed(seed)
    extra = dict(prefix_len=16, caption_dim=32) if kind == "t2i" else {}
    model = GPT(dataclasses.replace(lg.gpt_config("B", kind), **{**TINY, **extra, **over})).eval()
    for p in model.parameters():  # sharper than the default init, so acceptance tests see rejections
        torch.nn.init.normal_(p, std=0.2)
    return model


def tiny_vq(seed: int = 0) -> VQModel:
    torch.manual_seed(seed)
    return VQModel(TINY_VQ).eval()


def test_tiny_configs_keep_the_official_key_structure():
    def structure(keys):  # layer and level numbers dropped
        return {".".join(p for p in k.split(".") if not p.isdigit()) for k in keys}
    assert structure(_shapes(tiny_gpt("t2i", 0))) == structure(_official("gpt_xl_t2i"))
    assert structure(_shapes(tiny_gpt("c2i", 0))) == structure(_official("gpt_b_c2i"))
    assert structure(_shapes(tiny_vq())) == structure(_official("vq_16"))


@pytest.mark.parametrize("layout", ["ddp", "deepspeed", "fsdp", "safetensors"])
def test_an_official_style_checkpoint_loads_and_gives_the_same_logits(tmp_path, layout):
    src = tiny_gpt("t2i", 0)
    state = {("module." if layout == "deepspeed" else "") + k: v for k, v in src.state_dict().items()}
    path = tmp_path / ("w.safetensors" if layout == "safetensors" else "w.pt")
    if layout == "safetensors":
        save_file(state, str(path))
    elif layout == "fsdp":
        torch.save(state, path)
    else:  # the weights under their key, the training arguments beside them
        key = {"ddp": "model", "deepspeed": "module"}[layout]
        torch.save({key: state, "args": argparse.Namespace(lr=1e-4)}, path)
    with torch.device("meta"):
        dst = GPT(src.cfg)
    dst = lg.load_weights(dst, lg.read_state_dict(path), "w").eval()
    feats, mask = lg.left_pad(torch.randn(5, 32), length=16)
    tokens = torch.randint(0, 64, (1, 64))
    with torch.no_grad():
        assert torch.equal(src(feats[None], mask[None], tokens, GRID), dst(feats[None], mask[None], tokens, GRID))


def test_the_vq_loads_an_official_state_dict_with_its_usage_statistics(tmp_path):
    src = tiny_vq()
    torch.save({"model": {**src.state_dict(), "quantize.codebook_used": torch.zeros(65536)}}, tmp_path / "vq.pt")
    with torch.device("meta"):
        dst = VQModel(TINY_VQ)
    dst = lg.load_weights(dst, lg.read_state_dict(tmp_path / "vq.pt"), "vq.pt").eval()
    img = torch.rand(1, 3, 16, 16) * 2 - 1
    assert torch.equal(src.encode(img), dst.encode(img))


def test_a_checkpoint_of_another_shape_is_rejected_naming_the_keys():
    state = tiny_gpt("t2i", 0, n_layer=3).state_dict()
    with torch.device("meta"):
        dst = GPT(tiny_gpt("t2i", 0).cfg)
    with pytest.raises(ValueError, match=r"unexpected \['layers\.2\."):
        lg.load_weights(dst, state, "w")


def test_missing_weights_name_the_files_and_where_to_put_them(tmp_path, monkeypatch):
    monkeypatch.setenv(lg.ENV_DIR, str(tmp_path))
    with pytest.raises(lg.MissingWeights) as e:
        engine.load_pair("llamagen-t2i")
    for needed in ("vq_ds16_t2i.pt", "t2i_XL_stage1_256.pt", "t2i_XL_stage2_512.pt", lg.ENV_DIR, str(tmp_path)):
        assert needed in str(e.value)
    with pytest.raises(lg.MissingWeights, match="c2i_L_384.pt"):
        lg.load_pair("llamagen-c2i-L-384", weights_dir=tmp_path)


def test_left_padding_puts_the_valid_tokens_last_with_zeros_before():
    feats = torch.arange(1, 7, dtype=torch.float32)[:, None].expand(6, 3)
    out, mask = lg.left_pad(feats, n_valid=4, length=10)
    assert mask.tolist() == [False] * 6 + [True] * 4
    assert out[:6].abs().sum() == 0 and out[6:, 0].tolist() == [1, 2, 3, 4]


def test_a_class_conditional_prompt_is_a_class_id():
    ids, mask = lg.class_caption("207")
    assert ids.tolist() == [207] and mask.tolist() == [True]
    with pytest.raises(ValueError, match="class id"):
        lg.class_caption("a dog")


def _features(prompt: str) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(len(prompt))
    return lg.left_pad(torch.randn(len(prompt.split()), 32, generator=g), length=16)


@pytest.fixture(scope="module")
def t2i_pair():
    """Stage-2 style target at 8x8, stage-1 style drafter at 4x4; the drafter also serves sd/cool at 8x8, and a
    random EAGLE head on the target's features the tree methods."""
    from core.models.eagle import DraftHead
    drafter, target = tiny_gpt("t2i", 1), tiny_gpt("t2i", 0)
    torch.manual_seed(2)
    head = DraftHead.for_target(target).eval()
    return lg.assemble("tiny-llamagen-t2i", target, tiny_vq(), GRID, lg.text_caption(_features),
                       drafter=drafter, small=drafter, scales=(2,), head_net=lambda: head)


@pytest.mark.parametrize("method", sorted(registry()))
def test_every_method_runs_on_a_tiny_llamagen_pair_and_gives_a_valid_trace(t2i_pair, method):
    # k = 16: the tiny pair's codebook holds 64 codes (mulo's default k = 128 is for larger books)
    run = RunConfig(method=method, prompt="a photo of a cat", seed=1).with_params(tau=0.05, k=16, radius=1, window=4,
                                                                                   sjd_window=8)
    trace = engine.run(run, t2i_pair)
    again = Trace.from_json(trace.to_json())
    assert again.tokens == trace.tokens and len(trace.tokens) == GRID[0]
    assert all(0 <= t < 64 for row in trace.tokens for t in row)
    assert trace.totals["target_nfe"] >= 1


def test_a_class_conditional_pair_runs_in_bfloat16():
    pair = lg.assemble("tiny-llamagen-c2i", tiny_gpt("c2i", 0, num_classes=10), tiny_vq(), GRID, lg.class_caption,
                       small=tiny_gpt("c2i", 1, num_classes=10, n_layer=1), dtype=torch.bfloat16)
    assert pair.target.tok_embeddings.weight.dtype == torch.bfloat16
    for method in ("ar", "sd"):
        trace = engine.run(RunConfig(method=method, prompt="7", seed=0).with_params(k=16), pair)   # a 64-code book
        assert Trace.from_json(trace.to_json()).tokens == trace.tokens


def test_the_tree_methods_read_lantern_s_table_l2_on_the_raw_codebook_weights(t2i_pair):
    """LANTERN's released code ranks neighbours by L2 on `embedding.weight` as stored; the pair's own table
    (mulo's B_k, gsd) is L2 on the L2-normalised codes the VQ looks up. Oracle: a brute-force ranking of the
    raw weights; the control: the normalised table, which ranks otherwise."""
    from core.config import MethodParams
    w = t2i_pair.tokenizer.quantize.embedding.weight.detach().float().cpu()
    d = torch.cdist(w, w)
    d.fill_diagonal_(float("inf"))
    K = t2i_pair.tree_neighbours.shape[1]
    want = d.argsort(dim=1)[:, :K]
    assert torch.equal(t2i_pair.tree_neighbours, want)
    assert not torch.equal(t2i_pair.neighbours[:, :K], want)
    for method, table in (("lantern", t2i_pair.tree_neighbours), ("mulo", t2i_pair.neighbours)):
        ctx = engine.context(RunConfig(method=method, prompt="a photo of a cat", params=MethodParams(k=16)), t2i_pair)
        assert torch.equal(ctx.neighbours, table.cpu())
