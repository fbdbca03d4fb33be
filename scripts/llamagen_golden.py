"""Write the LlamaGen golden fixtures of tests/test_llamagen_golden.py from the official code.

    python scripts/llamagen_golden.py /path/to/LlamaGen [--rev <commit>] [--out tests/fixtures/llamagen_golden]

The argument is a local checkout of FoundationVision/LlamaGen (fetched by whoever regenerates the
fixtures; nothing of it is kept in this repository). Its own modules build tiny models with fixed
seeds and produce every expected value; this script only wires them together and saves:

  t2i.pt, c2i.pt      official GPTs (random weights) saved as the training scripts save them:
                      {"model": state_dict, "steps": 0, "args": argparse.Namespace}
  golden.safetensors  inputs and outputs: caption features and mask, teacher-forced logits (both CFG
                      rows) through the official KV cache, greedy tokens of generate() at several CFG
                      scales and cfg_interval values (t2i at 8x8 and, same weights, 4x4), one sampled
                      run with the processed distribution of every step, top-k/top-p filtering of
                      logits with ties at the nucleus boundary, and VQ decode_code pixels
  golden.json         configurations, seeds, settings of every run, the VQ's keys and shapes, and
                      the prompt-cleaning table: official T5Embedder.text_preprocessing outputs

The VQ is too large to store even at its smallest official shape (GroupNorm of 32 groups), so its
weights are drawn by `seeded_state` from the keys, shapes and seed in golden.json; the test draws
the same values and checks their checksum before comparing pixels.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "llamagen_golden"
SEED = 1234
GPT_ARGS = dict(dim=32, n_layer=2, n_head=2, multiple_of=32, vocab_size=32, norm_eps=1e-5, rope_base=10000)
T2I_ARGS = dict(GPT_ARGS, model_type="t2i", cls_token_num=120, caption_dim=16)  # 120: the null caption's length
C2I_ARGS = dict(GPT_ARGS, model_type="c2i", cls_token_num=1, num_classes=10)
GRIDS = {"t2i": 8, "t2i_s1": 4, "c2i": 8}       # token grid side; t2i_s1: the t2i weights on a 4x4 grid
CAPTION_TOKENS = 7                               # valid caption tokens, left-padded to 120
CLASS_ID = 3
CFG_SCALES = (1.0, 4.0, 7.5)
SAMPLED = dict(cfg_scale=4.0, cfg_interval=5, temperature=0.9, top_k=20, top_p=0.8, seed=7)
VQ_ARGS = dict(codebook_size=32, codebook_embed_dim=8, ch=32, ch_mult=[1, 2], num_res_blocks=1, z_channels=32)
VQ_STD = 0.05
CAPTIONS = [
    "A blue Porsche 356 parked in front of a yellow brick wall.",
    '"a cat sitting on a mat"',
    "'a dog in the snow'",
    "a cat (orange) [with] {stripes}",
    "salt & pepper on a table",
    "cats &amp; dogs &quot;playing&quot;",
    "photo from https://example.com/cats/1.jpg of a cat",
    "see www.example.org for a red car",
    "\u201ccurly quotes\u201d and \u2018single\u2019 \u2014 dashes \u2013 here",
    "this-is-my-cute-cat",
    "this_is_my_cute_cat",
    "a--b__c",
    "poster #12 of a lighthouse",
    "item #123456 in stock",
    "serial 1234567 of a robot",
    "a <b>bold</b> <i>move</i>",
    "hello @someone how are you",
    "\u732b a cat \u72ac",
    "IP 192.168.0.1 server rack",
    "download free wallpaper.png now",
    "free shipping worldwide shipping on shoes",
    "click for details about a vase",
    "page 12 of the manual",
    "a 1920x1080 photo of a beach",
    "jc6640 model number",
    "line one\\nline two",
    "a . b . c",
    "wow...amazing",
    "***SALE*** today",
    "A Cat,a dog.a bird",
    "trailing comma,",
    "-leading dash",
    "caf%C3%A9+au+lait",
    "  spaced   out   words  ",
    "a red circle: big",
    "an astronaut riding a horse on mars, 4k",
    "a <person> on a beach at 10:30 ",
    '"""AUSVERKAUFT"""',
    "fish &amp;amp; chips",
    "\uff21\uff22\uff23 fullwidth and \ufb01sh ligature",
    "a photo of a cat.",
    "rock-n-roll band on stage",
]


def seeded_state(shapes: dict[str, list[int]], seed: int, std: float) -> dict[str, torch.Tensor]:
    """Weights for the given keys and shapes: in key order, a normal draw from one generator; GroupNorm
    scales (".norm*.weight", 1-D) are 1 + draw, every other tensor std * draw."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for key, shape in shapes.items():
        x = torch.randn(shape, generator=g) * std
        out[key] = 1.0 + x if (len(shape) == 1 and ".norm" in key and key.endswith(".weight")) else x
    return out


def checksum(state: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for key in sorted(state):
        h.update(key.encode())
        h.update(state[key].float().contiguous().numpy().tobytes())
    return h.hexdigest()


# ---- the official side ---------------------------------------------------------------------------
def _official(root: Path):
    sys.path.insert(0, str(root))
    from autoregressive.models import generate as gen_mod
    from autoregressive.models.gpt import ModelArgs, Transformer
    from language.t5 import T5Embedder
    from tokenizer.tokenizer_image import vq_model
    return gen_mod, ModelArgs, Transformer, T5Embedder, vq_model


def _gpt(ModelArgs, Transformer, args: dict, grid: int, seed: int):
    torch.manual_seed(seed)
    model = Transformer(ModelArgs(**args, block_size=grid * grid)).eval()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # the official init zeroes the output head; draw every weight instead
        for name, p in model.named_parameters():
            p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g) if "norm" in name
                    else 0.3 * torch.randn(p.shape, generator=g))
    return model


def _on_grid(model, Transformer, ModelArgs, args: dict, grid: int):
    """The same weights under another block_size (the 2D RoPE table follows the grid)."""
    other = Transformer(ModelArgs(**args, block_size=grid * grid)).eval()
    other.load_state_dict(model.state_dict())
    return other


def _cond(kind: str, caption: torch.Tensor) -> torch.Tensor:
    return caption[None] if kind == "t2i" else torch.tensor([CLASS_ID])


def _teacher_forced(model, gen_mod, kind: str, cond, mask, tokens: torch.Tensor) -> torch.Tensor:
    """(2, N, V) logits of every cell, conditional row then unconditional, through the official cache:
    generate() sets up the caches and the caption mask for N cells, then one prefill over both rows and
    one forward over all N - 1 fed tokens."""
    N = tokens.shape[0]
    gen_mod.generate(model, cond, N, emb_masks=mask, cfg_scale=2.0, sample_logits=False)
    null = (torch.zeros_like(cond) + model.cls_embedding.uncond_embedding if kind == "t2i"
            else torch.full_like(cond, model.num_classes))
    T = model.cls_token_num
    first, _ = model(None, torch.cat([cond, null]), input_pos=torch.arange(T))
    rest, _ = model(tokens[None, :-1].expand(2, -1), None, input_pos=torch.arange(T, T + N - 1))
    return torch.cat([first[:, -1:], rest], dim=1)


def _greedy(model, gen_mod, cond, mask, N, cfg_scale, cfg_interval=-1) -> torch.Tensor:
    return gen_mod.generate(model, cond, N, emb_masks=mask, cfg_scale=cfg_scale, cfg_interval=cfg_interval,
                            temperature=1.0, top_k=0, top_p=1.0, sample_logits=False)[0]


def _sampled(model, gen_mod, cond, mask, N) -> tuple[torch.Tensor, torch.Tensor]:
    """Official sampling with SAMPLED settings; returns the tokens and the processed distribution of
    every step (recorded by wrapping the module's sample function)."""
    seen, inner = [], gen_mod.sample

    def recording(logits, **kw):
        idx, probs = inner(logits, **kw)
        seen.append(probs[0].clone())
        return idx, probs
    gen_mod.sample = recording
    try:
        torch.manual_seed(SAMPLED["seed"])
        s = SAMPLED
        tokens = gen_mod.generate(model, cond, N, emb_masks=mask, cfg_scale=s["cfg_scale"],
                                  cfg_interval=s["cfg_interval"], temperature=s["temperature"], top_k=s["top_k"],
                                  top_p=s["top_p"], sample_logits=True)[0]
    finally:
        gen_mod.sample = inner
    return tokens, torch.stack(seen)


def _filtering(gen_mod) -> dict[str, torch.Tensor]:
    """Logits with nucleus boundaries that rounding decides, and the official processed distributions."""
    g = torch.Generator().manual_seed(SEED)
    rows = [torch.randn(64, generator=g) * 3 for _ in range(6)]
    rows += [torch.log(torch.tensor([0.5, 0.3, 0.1, 0.05, 0.05] + [0.0] * 59) + 1e-30),  # cum hits 0.8, 0.9 exactly
             torch.log(torch.tensor([0.1] * 10 + [0.0] * 54) + 1e-30),                      # flat prefix of ties
             torch.tensor([2.0] * 8 + [1.0] * 8 + [0.0] * 48)]
    logits = torch.stack(rows)
    out = {"filter_logits": logits}
    for name, kw in {"p08": dict(top_k=0, top_p=0.8), "p09": dict(top_k=0, top_p=0.9),
                     "k5p095": dict(top_k=5, top_p=0.95), "k12": dict(top_k=12, top_p=1.0)}.items():
        out[f"filter_{name}"] = gen_mod.logits_to_probs(logits.clone(), temperature=1.0, **kw)
    return out


def _vq(vq_model) -> tuple[dict, dict[str, torch.Tensor]]:
    a = VQ_ARGS
    model = vq_model.VQModel(vq_model.ModelArgs(codebook_size=a["codebook_size"], codebook_embed_dim=a["codebook_embed_dim"],
                                                encoder_ch_mult=a["ch_mult"], decoder_ch_mult=a["ch_mult"],
                                                z_channels=a["z_channels"]))
    model.encoder = vq_model.Encoder(ch=a["ch"], ch_mult=a["ch_mult"], num_res_blocks=a["num_res_blocks"],
                                     z_channels=a["z_channels"])
    model.decoder = vq_model.Decoder(ch=a["ch"], ch_mult=a["ch_mult"], num_res_blocks=a["num_res_blocks"],
                                     z_channels=a["z_channels"])
    shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    state = seeded_state(shapes, SEED, VQ_STD)
    model.load_state_dict(state)
    model.eval()
    g = torch.Generator().manual_seed(SEED)
    codes = torch.randint(0, a["codebook_size"], (1, 4, 4), generator=g)
    with torch.no_grad():
        pixels = model.decode_code(codes.flatten(), [1, a["codebook_embed_dim"], 4, 4])[0]
    meta = dict(args=VQ_ARGS, seed=SEED, std=VQ_STD, shapes=shapes, checksum=checksum(state))
    return meta, {"vq_codes": codes[0], "vq_pixels": pixels}


def _clean(T5Embedder) -> list[list[str]]:
    embedder = T5Embedder.__new__(T5Embedder)  # the cleaning needs no model
    embedder.use_text_preprocessing = True
    return [[c, embedder.text_preprocessing(c)] for c in CAPTIONS]


def fuzz(T5Embedder, n: int, seed: int = 0) -> tuple[int, int, list]:
    """Our cleaning against the official one on n random punctuation-heavy strings:
    (strings compared, mismatches, the first few). Strings the official parser rejects are skipped."""
    import random
    import warnings
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from core.models.caption_text import clean_caption
    warnings.filterwarnings("ignore")
    embedder = T5Embedder.__new__(T5Embedder)
    embedder.use_text_preprocessing = True
    pieces = list("abcXYZ019 .,:;-_'\"#&@/()[]{}*~|\\+%<>!?\n") + [
        "http://", "www.", ".com", "&amp;", "&quot;", "\u201c", "\u201d", "\u2014", "\u732b", "\ufb01", "\uff21",
        "\\n", "#12", "123456", "<b>", "</b>", "<person>", ".jpg", "free shipping", "page 3 ", "\u00e9"]
    rng, compared, bad = random.Random(seed), 0, []
    for _ in range(n):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 25)))
        try:
            expected = embedder.text_preprocessing(text)
        except Exception:  # BeautifulSoup rejects some markup outright
            continue
        compared += 1
        if clean_caption(text) != expected:
            bad.append((text, expected, clean_caption(text)))
    return compared, len(bad), bad[:5]


def _interval(model, gen_mod, cond, mask, N, cfg_scale) -> int:
    """A cfg_interval whose greedy tokens differ from both neighbours' (so an off-by-one shows)."""
    runs = {c: _greedy(model, gen_mod, cond, mask, N, cfg_scale, c) for c in range(9, N - 2)}
    for c in range(10, N - 3):
        if not torch.equal(runs[c], runs[c - 1]) and not torch.equal(runs[c], runs[c + 1]):
            return c
    raise RuntimeError("no cfg_interval separates its neighbours; change SEED")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkout", type=Path, help="local checkout of FoundationVision/LlamaGen")
    ap.add_argument("--rev", default="unknown", help="the checkout's commit, recorded in golden.json")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--fuzz", type=int, default=0, metavar="N",
                    help="instead: compare our prompt cleaning with the official one on N random strings")
    args = ap.parse_args(argv)
    torch.set_grad_enabled(False)
    gen_mod, ModelArgs, Transformer, T5Embedder, vq_model = _official(args.checkout.resolve())
    if args.fuzz:
        compared, bad, first = fuzz(T5Embedder, args.fuzz)
        print(f"prompt cleaning: {bad} mismatches in {compared} strings")
        for row in first:
            print("  ", *map(repr, row))
        return 1 if bad else 0
    args.out.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, torch.Tensor] = {}
    meta: dict = dict(source=f"FoundationVision/LlamaGen@{args.rev}", torch=torch.__version__, seed=SEED,
                      gpt={"t2i": T2I_ARGS, "c2i": C2I_ARGS}, grids=GRIDS, class_id=CLASS_ID,
                      cfg_scales=list(CFG_SCALES), sampled=SAMPLED)

    g = torch.Generator().manual_seed(SEED)
    caption = torch.zeros(120, T2I_ARGS["caption_dim"])
    caption[-CAPTION_TOKENS:] = torch.randn(CAPTION_TOKENS, T2I_ARGS["caption_dim"], generator=g)
    mask = torch.zeros(120, dtype=torch.bool)
    mask[-CAPTION_TOKENS:] = True
    tensors["t2i_caption"], tensors["t2i_mask"] = caption, mask.to(torch.uint8)

    models = {"t2i": _gpt(ModelArgs, Transformer, T2I_ARGS, GRIDS["t2i"], SEED),
              "c2i": _gpt(ModelArgs, Transformer, C2I_ARGS, GRIDS["c2i"], SEED + 1)}
    models["t2i_s1"] = _on_grid(models["t2i"], Transformer, ModelArgs, T2I_ARGS, GRIDS["t2i_s1"])
    for kind in ("t2i", "c2i"):
        train_args = argparse.Namespace(gpt_type=kind, **(T2I_ARGS if kind == "t2i" else C2I_ARGS))
        torch.save({"model": models[kind].state_dict(), "steps": 0, "args": train_args}, args.out / f"{kind}.pt")

    for name, model in models.items():
        kind = name.split("_")[0]
        N = GRIDS[name] ** 2
        cond = _cond(kind, caption)
        m = mask[None].int() if kind == "t2i" else None
        tokens = torch.randint(0, GPT_ARGS["vocab_size"], (N,), generator=g)
        tensors[f"{name}_forced_tokens"] = tokens
        tensors[f"{name}_forced_logits"] = _teacher_forced(model, gen_mod, kind, cond, m, tokens)
        for s in CFG_SCALES:
            tensors[f"{name}_greedy_cfg{s:g}"] = _greedy(model, gen_mod, cond, m, N, s)
        if name == "t2i":
            c = _interval(model, gen_mod, cond, m, N, 7.5)
            meta["cfg_interval"] = c
            for ci in (c - 1, c, c + 1):
                tensors[f"t2i_greedy_cfg7.5_interval{ci}"] = _greedy(model, gen_mod, cond, m, N, 7.5, ci)
            tensors["t2i_sampled_tokens"], tensors["t2i_sampled_probs"] = _sampled(model, gen_mod, cond, m, N)

    tensors.update(_filtering(gen_mod))
    meta["vq"], vq_tensors = _vq(vq_model)
    tensors.update(vq_tensors)
    meta["captions"] = _clean(T5Embedder)

    from safetensors.torch import save_file
    save_file({k: v.contiguous() for k, v in tensors.items()}, str(args.out / "golden.safetensors"))
    (args.out / "golden.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False) + "\n")
    for f in sorted(args.out.iterdir()):
        print(f"{f.stat().st_size:>8}  {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
