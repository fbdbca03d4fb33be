"""Write the Tar golden fixtures of tests/test_tar_golden.py from the official code (csuhan/Tar).

    python scripts/tar_golden.py /path/to/Tar [--rev <commit>] [--out tests/fixtures/tar_golden]

The argument is a local checkout of csuhan/Tar (fetched by whoever regenerates the fixtures; nothing of
it is kept in this repository). Its modules build tiny random models with fixed seeds and produce
every expected value; this script only wires them together and saves:

  ar8.pth, ar4.pth    official AR-DTok models (random weights, 81 features of width 48, 8x8 and 4x4
                      grids) in the official layout {"model": {"name", "args", "sd"}}; the official init
                      zeroes the output head (every logit 0), so every weight is drawn instead
  ta_tok.pth          an official TA-Tok (tiny SigLIP teacher, one-layer SigLIP2 decoder), same layout
  teacher/config.json the tiny teacher's transformers configuration (TA-Tok reads it to build its encoder)
  golden.safetensors  TA-Tok ids, the features the official decode_from_bottleneck makes of them, the
                      ids the official encoder gives an image (deterministic evaluation mode);
                      teacher-forced logits of both CFG rows (zero features) by the full forward and
                      through the official KV cache; greedy tokens of the official generate() at CFG
                      1 and 4; the official pipeline's sampled run (CFG 4, temperature 1, no top-k /
                      top-p) with the processed distribution of every step; VQ pixels as
                      VQVAE.decode_from_bottleneck gives them
  llm/                a tiny random Qwen2 "Tar LLM" with a word-level tokenizer holding the chat and
                      <I..> tokens, and golden.safetensors' llm_ids: the 81 TA-Tok ids the official
                      TextToImageInference.generate_image samples from LLM_PROMPT with LLM_SEED
                      (its visual tokenizer replaced by a recorder of the ids it is handed)
  golden.json         configurations, seeds and settings, and the VQ's keys, shapes and checksum

The official ta_tok.py imports torchvision's Resize (used only to resize images of another size than
the encoder's); where torchvision does not import, a stand-in that refuses to run is put in its place.
The VQ's weights are drawn by llamagen_golden.seeded_state from the keys, shapes and seed in
golden.json, as for the LlamaGen fixtures.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import types
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "tests" / "fixtures" / "tar_golden"
SEED = 4321
FEATURES, COND_DIM = 81, 48                   # 9x9 TA-Tok tokens (Tar's pool_scale 3 count) of width 48
AR_ARGS = dict(dim=32, n_layer=2, n_head=2, multiple_of=32, vocab_size=64, model_type="clip_cond",
               cond_dim=COND_DIM, cls_token_num=FEATURES, token_dropout_p=0.0, resid_dropout_p=0.0,
               ffn_dropout_p=0.0, class_dropout_prob=0.1)
GRIDS = {"ar8": 8, "ar4": 4}
CFG_SCALES = (1.0, 4.0)
SAMPLED = dict(cfg_scale=4.0, temperature=1.0, top_k=0, top_p=1.0, seed=11)   # the official pipeline's
TEACHER = dict(vision_config=dict(hidden_size=COND_DIM, intermediate_size=96, num_hidden_layers=2,
                                  num_attention_heads=2, image_size=126, patch_size=14),
               text_config=dict(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                vocab_size=64, max_position_embeddings=16))
TATOK_ARGS = dict(bottleneck={"name": "bottleneck", "args": {"bottleneck_dim": 8, "regularizer": {
    "name": "simvq", "args": {"codebook_size": 32, "l2_normalized": True, "stochastic": True,
                              "stochastic_temperature": 0.03}}}},
    bottleneck_token_num=FEATURES, input_size=126, pool_scale=1, decoder_depth=1, select_layer_id=-2)
LLM_PROMPT, LLM_SEED = "a photo of a macaw", 0
LLM_WORDS = "a photo of macaw the cat dog red blue system user assistant You are helpful assistant.".split()
CHAT = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
VQ_ARGS = dict(codebook_size=64, codebook_embed_dim=8, ch=32, ch_mult=[1, 2], num_res_blocks=1, z_channels=32)
VQ_STD = 0.05


def _official(root: Path):
    sys.path.insert(0, str(root))
    import transformers  # noqa: F401  (before any stand-in: it asks whether torchvision is installed)
    from transformers import AutoModel, SiglipConfig, Siglip2VisionModel  # noqa: F401
    try:
        import torchvision.transforms  # noqa: F401
    except Exception:  # a torchvision built for another torch: ta_tok.py only needs the name
        tv = types.ModuleType("torchvision")
        tv.transforms = types.ModuleType("torchvision.transforms")

        class Resize:
            def __init__(self, *a, **k):
                pass

            def __call__(self, x):
                raise RuntimeError("the fixtures' images are the encoder's size; nothing is resized")
        tv.transforms.Resize = Resize
        sys.modules["torchvision"], sys.modules["torchvision.transforms"] = tv, tv.transforms
    import tok.ar_dtok  # noqa: F401  (registers bottleneck, simvq, vqvae)
    from tok import models
    from tok.ar_dtok import ar_model, generate as gen_mod, vqvae
    from tok.ta_tok import TextAlignedTokenizer
    return models, ar_model, gen_mod, vqvae, TextAlignedTokenizer


def _ar(models, ar_model, grid: int, seed: int):
    models.models.setdefault("llama-abs-tiny", lambda **kwargs: ar_model.ARModel(ar_model.ModelArgs(**kwargs)))
    spec = {"name": "llama-abs-tiny", "args": dict(AR_ARGS, max_seq_len=grid * grid)}
    torch.manual_seed(seed)
    model = models.make(spec).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # the official init zeroes the output head; draw every weight instead
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g) if "norm" in name
                    else 0.3 * torch.randn(p.shape, generator=g))
    return model, spec


def _both(cond):
    return torch.cat([cond, torch.zeros_like(cond)])  # the official null condition: zero features


def _forced(model, cond, tokens):
    """(2, N, V) by the official full forward (training path): features, then the N - 1 fed tokens."""
    logits, _ = model(tokens[None, :-1].expand(2, -1), _both(cond))
    return logits


def _cached(model, gen_mod, cond, tokens):
    """(2, N, V) through the official KV cache: generate() sets the caches up for N cells, then one
    prefill over both rows and one forward over the N - 1 fed tokens, in sampling mode."""
    N, T = tokens.shape[0], model.cls_token_num
    with model.sampling():
        gen_mod.generate(model, cond, N, cfg_scale=2.0, sample_logits=False)
        first, _ = model(None, _both(cond), input_pos=torch.arange(T))
        rest, _ = model(tokens[None, :-1].expand(2, -1), None, input_pos=torch.arange(T, T + N - 1))
    return torch.cat([first[:, -1:], rest], dim=1)


def _greedy(model, gen_mod, cond, N, cfg_scale):
    with model.sampling():
        return gen_mod.generate(model, cond, N, cfg_scale=cfg_scale, temperature=1.0, top_k=0, top_p=1.0,
                                sample_logits=False)[0]


def _sampled(model, gen_mod, cond, N):
    """ARModel.sample with the pipeline's settings; the tokens and every step's processed distribution."""
    seen, inner = [], gen_mod.sample

    def recording(logits, **kw):
        idx, probs = inner(logits, **kw)
        seen.append(probs[0].clone())
        return idx, probs
    gen_mod.sample = recording
    try:
        torch.manual_seed(SAMPLED["seed"])
        s = SAMPLED
        tokens = model.sample(cond, cfg_scale=s["cfg_scale"], temperature=s["temperature"], top_k=s["top_k"],
                              top_p=s["top_p"], seq_length=N)[0]
    finally:
        gen_mod.sample = inner
    return tokens, torch.stack(seen)


def _tatok(TextAlignedTokenizer, teacher: Path):
    from transformers import SiglipConfig
    SiglipConfig(**TEACHER).save_pretrained(str(teacher))
    torch.manual_seed(SEED)
    tok = TextAlignedTokenizer(teacher=str(teacher), **json.loads(json.dumps(TATOK_ARGS))).eval()
    tok.set_vq_eval_deterministic(True)
    return tok


def _vq(vqvae) -> tuple[dict, dict[str, torch.Tensor]]:
    sys.path.insert(0, str(HERE))
    from llamagen_golden import checksum, seeded_state
    a = VQ_ARGS
    model = vqvae.VQModel(vqvae.ModelArgs(codebook_size=a["codebook_size"], codebook_embed_dim=a["codebook_embed_dim"],
                                          encoder_ch_mult=a["ch_mult"], decoder_ch_mult=a["ch_mult"],
                                          z_channels=a["z_channels"]))
    model.encoder = vqvae.Encoder(ch=a["ch"], ch_mult=a["ch_mult"], num_res_blocks=a["num_res_blocks"],
                                  z_channels=a["z_channels"])
    model.decoder = vqvae.Decoder(ch=a["ch"], ch_mult=a["ch_mult"], num_res_blocks=a["num_res_blocks"],
                                  z_channels=a["z_channels"])
    shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    state = seeded_state(shapes, SEED, VQ_STD)
    model.load_state_dict(state)
    model.eval()
    g = torch.Generator().manual_seed(SEED)
    codes = torch.randint(0, a["codebook_size"], (1, 16), generator=g)
    # VQVAE.decode_from_bottleneck without its file loading: decode_code on the square grid, then ScalingLayer.inv
    wrapper = vqvae.VQVAE.__new__(vqvae.VQVAE)
    torch.nn.Module.__init__(wrapper)
    wrapper.model, wrapper.codebook_embed_dim = model, a["codebook_embed_dim"]
    from tok.utils import ScalingLayer
    wrapper.scale_layer = ScalingLayer(mean=[0.5, 0.5, 0.5], std=[0.5, 0.5, 0.5])
    pixels = wrapper.decode_from_bottleneck(codes)[0]
    meta = dict(args=VQ_ARGS, seed=SEED, std=VQ_STD, shapes=shapes, checksum=checksum(state))
    return meta, {"vq_codes": codes[0], "vq_pixels": pixels}


def _llm(root: Path, folder: Path, codebook: int) -> torch.Tensor:
    """A tiny Tar LLM in folder, and the ids the official text path samples from it."""
    from tokenizers import Tokenizer, models as tok_models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    special = ["<unk>", "<|im_start|>", "<|im_end|>", "<im_start>", "<S0>", "<S1>", "<S2>"]
    images = [f"<I{i}>" for i in range(codebook)]
    vocab = {w: i for i, w in enumerate(dict.fromkeys(special + LLM_WORDS + images))}
    core = Tokenizer(tok_models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.add_special_tokens(special[:3])
    core.add_tokens(special[3:] + images)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token="<|im_end|>",
                                        pad_token="<unk>")
    tokenizer.chat_template = CHAT
    tokenizer.save_pretrained(str(folder))
    torch.manual_seed(SEED)
    cfg = Qwen2Config(vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=256,
                      eos_token_id=vocab["<|im_end|>"], pad_token_id=0, tie_word_embeddings=False)
    model = Qwen2ForCausalLM(cfg).eval()
    with torch.no_grad():  # sharper than the default init, so the ids depend on the prompt
        model.lm_head.weight.normal_(0, 1.0)
    model.save_pretrained(str(folder))

    sys.path.insert(0, str(root))
    import t2i_inference as official
    seen = []

    class Recorder:  # stands in for the visual tokenizer: records the ids, returns a blank image
        def decode_from_encoder_indices(self, ids, args):
            seen.append(ids[0].clone())
            return torch.zeros(1, 4, 4, 3, dtype=torch.uint8)
    inf = official.TextToImageInference.__new__(official.TextToImageInference)
    inf.config = official.T2IConfig(model_path=str(folder), device="cpu", dtype=torch.float32, seq_len=FEATURES)
    inf.device = torch.device("cpu")
    inf.model = Qwen2ForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    inf.tokenizer = official.AutoTokenizer.from_pretrained(str(folder))
    inf.visual_tokenizer = Recorder()
    torch.manual_seed(LLM_SEED)
    inf.generate_image(LLM_PROMPT)
    return seen[0]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", type=Path, help="local checkout of csuhan/Tar")
    ap.add_argument("--rev", default="unknown", help="the checkout's commit, recorded in golden.json")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    torch.set_grad_enabled(False)
    models, ar_model, gen_mod, vqvae, TextAlignedTokenizer = _official(args.checkout.resolve())
    args.out.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    meta: dict = dict(source=f"csuhan/Tar@{args.rev}", torch=torch.__version__, seed=SEED, grids=GRIDS,
                      cfg_scales=list(CFG_SCALES), sampled=SAMPLED, tatok=TATOK_ARGS, teacher=TEACHER)

    # TA-Tok: ids -> features (decode_from_bottleneck), image -> ids (the encoder, deterministic)
    teacher = args.out / "teacher"
    tok = _tatok(TextAlignedTokenizer, teacher)
    sd = {k: v for k, v in tok.state_dict().items()}
    saved_args = dict(json.loads(json.dumps(TATOK_ARGS)), teacher="google/siglip2-so400m-patch14-384")
    torch.save({"model": {"args": saved_args, "sd": sd}}, args.out / "ta_tok.pth")
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, TATOK_ARGS["bottleneck"]["args"]["regularizer"]["args"]["codebook_size"], (1, FEATURES),
                        generator=g)
    feats = tok.decode_from_bottleneck(ids)
    image = torch.rand(1, 3, 126, 126, generator=g)
    tensors.update(tatok_ids=ids[0], tatok_features=feats[0], image=image[0],
                   image_ids=tok.encode(image)["bottleneck_rep"][0])

    codebook = TATOK_ARGS["bottleneck"]["args"]["regularizer"]["args"]["codebook_size"]
    tensors["llm_ids"] = _llm(args.checkout.resolve(), args.out / "llm", codebook)
    meta.update(llm_prompt=LLM_PROMPT, llm_seed=LLM_SEED)

    # AR-DTok on those features
    for i, (name, grid) in enumerate(GRIDS.items()):
        model, spec = _ar(models, ar_model, grid, SEED + i)
        torch.save({"model": {"name": spec["name"], "args": spec["args"], "sd": model.state_dict()}},
                   args.out / f"{name}.pth")
        N = grid * grid
        tokens = torch.randint(0, AR_ARGS["vocab_size"], (N,), generator=g)
        tensors[f"{name}_forced_tokens"] = tokens
        tensors[f"{name}_forced_logits"] = _forced(model, feats, tokens)
        tensors[f"{name}_cached_logits"] = _cached(model, gen_mod, feats, tokens)
        for s in CFG_SCALES:
            tensors[f"{name}_greedy_cfg{s:g}"] = _greedy(model, gen_mod, feats, N, s)
        if name == "ar8":
            tensors["ar8_sampled_tokens"], tensors["ar8_sampled_probs"] = _sampled(model, gen_mod, feats, N)

    meta["vq"], vq_tensors = _vq(vqvae)
    tensors.update(vq_tensors)
    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(args.out / "golden.safetensors"))
    (args.out / "golden.json").write_text(json.dumps(meta, indent=1) + "\n")
    for f in sorted(args.out.rglob("*")):
        if f.is_file():
            print(f"{f.stat().st_size:>8}  {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
