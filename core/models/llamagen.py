"""LlamaGen (FoundationVision/LlamaGen) as configurations of our GPT and VQModel, and its model pairs.

Owns: the registry of LlamaGen sizes and official checkpoints, reading their state dicts (.pt with the
weights under "model", "module" or "state_dict", a bare FSDP state dict, or .safetensors) from a local
folder, FLAN-T5-XL caption features left-padded with their masks as LlamaGen's sample_t2i.py does,
and the ModelPair of a pair: t2i stage-2 (32x32) target with the stage-1 (16x16) drafter, or
one c2i model at its grid (with GPT-B at the same grid as the small drafter of a larger model).

Nothing here touches the network unless asked: weights come from `weights_dir`, else the folder named
by MULO_LLAMAGEN_DIR, else ./pretrained_models; with hub=True (the default on a Hugging Face Space)
files absent there come from the hub cache, downloaded into it when needed (see hub.py).
It does not know decoding methods; the LlamaGen quirks that decide logits (zero RoPE on the prefix,
bias-free caption MLP, null class row) are GPTConfig options, the VQ's attention levels a VQConfig one.
"""
from __future__ import annotations

import argparse
import os
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ..config import SamplingConfig
from . import hub as hf
from .caption_text import clean_caption
from .gpt import GPT, GPTConfig
from .pair import ModelPair
from .vq import VQConfig, VQModel

ENV_DIR = "MULO_LLAMAGEN_DIR"
DEFAULT_DIR = Path("pretrained_models")
T5_LEN, T5_DIM = 120, 2048          # caption tokens P and FLAN-T5-XL width
T5_REPO = "google/flan-t5-xl"       # where the hub serves FLAN-T5-XL, and the files read from it
T5_FILES = ["*.json", "spiece.model", "*.safetensors"]
NUM_CLASSES = 1000                  # ImageNet classes of the c2i models
NEIGHBOURS = 1000                   # codebook neighbours kept per code (LANTERN's default k)
# entries of official state dicts that are not weights: codebook usage statistics, derived tables
IGNORED_KEYS = ("quantize.codebook_used", "freqs_cis", "causal_mask")

# size -> (n_layer, n_head, dim), as LlamaGen's GPT_models
SIZES = {"B": (12, 12, 768), "L": (24, 16, 1024), "XL": (36, 20, 1280), "XXL": (48, 24, 1536),
         "3B": (24, 32, 3200)}

VQ16 = VQConfig(codebook_size=16384, codebook_embed_dim=8, codebook_l2_norm=True, ch=128, ch_mult=(1, 1, 2, 2, 4),
                num_res_blocks=2, z_channels=256, norm_groups=32, mid_attn=True, attn_levels=(4,))


def gpt_config(size: str, kind: str = "t2i") -> GPTConfig:
    """LlamaGen GPT-<size>: t2i reads 120 projected T5 tokens, c2i one class token."""
    n_layer, n_head, dim = SIZES[size]
    common = dict(vocab_size=VQ16.codebook_size, dim=dim, n_layer=n_layer, n_head=n_head, multiple_of=256,
                  norm_eps=1e-5, rope_base=10000.0, prefix_rope="zero", caption_bias=False)
    if kind == "t2i":
        return GPTConfig(**common, prefix_len=T5_LEN, caption_dim=T5_DIM)
    if kind == "c2i":
        return GPTConfig(**common, prefix_len=1, num_classes=NUM_CLASSES)
    raise ValueError(f"unknown LlamaGen model kind {kind!r}; available: t2i, c2i")


# the official sampling settings (sample_t2i.py, sample_c2i.py): temperature 1, top-p 1, CFG on every token
SAMPLING = {"t2i": SamplingConfig(cfg=7.5, temperature=1.0, top_k=1000, top_p=1.0),
            "c2i": SamplingConfig(cfg=4.0, temperature=1.0, top_k=2000, top_p=1.0)}


@dataclass(frozen=True)
class Checkpoint:
    file: str                   # official file name
    hub_repo: str               # Hugging Face repository that serves it
    kind: str                   # t2i | c2i | vq
    size: str = ""              # GPT size (SIZES key); empty for the tokenizer
    grid: int = 0               # token grid side (image size / 16)


_T2I_HUB, _C2I_HUB = "peizesun/llamagen_t2i", "FoundationVision/LlamaGen"
CHECKPOINTS = {c.file.removesuffix(".pt"): c for c in [
    Checkpoint("vq_ds16_t2i.pt", _T2I_HUB, "vq"),
    Checkpoint("vq_ds16_c2i.pt", _C2I_HUB, "vq"),
    Checkpoint("t2i_XL_stage1_256.pt", _T2I_HUB, "t2i", "XL", 16),
    Checkpoint("t2i_XL_stage2_512.pt", _T2I_HUB, "t2i", "XL", 32),
    *[Checkpoint(f"c2i_{s}_{res}.pt", _C2I_HUB, "c2i", s, res // 16)
      for s, res in [("B", 256), ("B", 384), ("L", 256), ("L", 384), ("XL", 384), ("XXL", 384), ("3B", 384)]],
]}


@dataclass(frozen=True)
class PairSpec:
    target: str                 # CHECKPOINTS key of the target
    tokenizer: str              # CHECKPOINTS key of the VQ
    drafter: str | None = None  # low-resolution drafter (mulo), same family
    small: str | None = None    # same-resolution smaller drafter (sd, lantern)
    scales: tuple = ()          # up-scale factors the drafter serves


PAIRS = {"llamagen-t2i": PairSpec("t2i_XL_stage2_512", "vq_ds16_t2i", drafter="t2i_XL_stage1_256", scales=(2,))}
for _k, _c in CHECKPOINTS.items():
    if _c.kind == "c2i":
        _small = f"c2i_B_{_c.grid * 16}" if _c.size != "B" else None
        PAIRS[f"llamagen-c2i-{_c.size}-{_c.grid * 16}"] = PairSpec(_k, "vq_ds16_c2i", small=_small)


# the only classes a checkpoint may pickle: the training scripts save their argparse arguments beside the weights
ALLOWED_GLOBALS = (argparse.Namespace,)


class UnsafeCheckpoint(ValueError):
    """A .pt file that pickles classes beyond ALLOWED_GLOBALS; the message names them."""


class MissingWeights(FileNotFoundError):
    """Official files absent from the weights folder; the message names them and where to put them."""


# ---- files ---------------------------------------------------------------------------------------
def weights_folder(weights_dir: str | Path | None = None) -> Path:
    return Path(weights_dir or os.environ.get(ENV_DIR) or DEFAULT_DIR)


def _local(folder: Path, name: str) -> Path | None:
    for path in (folder / CHECKPOINTS[name].file, folder / f"{name}.safetensors"):
        if path.exists():
            return path
    return None


def _from_hub(repo: str, file: str, folder: Path, progress: hf.Progress | None = None, patterns=None) -> Path:
    """A hub file (or, with patterns, a snapshot folder) from the hub cache, downloaded when absent."""
    try:
        return hf.snapshot(repo, patterns, progress) if patterns else hf.download(repo, file, progress)
    except ImportError as e:
        raise MissingWeights(f"{file} is not in {folder} and huggingface_hub is not installed") from e
    except Exception as e:  # offline, unknown host, HTTP error: one message for all
        raise MissingWeights(f"could not fetch {file} from the Hugging Face hub ({repo}): "
                             f"{type(e).__name__}. Offline? Put the file in {folder} instead.") from e


def locate(names: list[str], weights_dir: str | Path | None = None, hub: bool = False,
           progress: hf.Progress | None = None) -> dict[str, Path]:
    """Paths of the named checkpoints; raises MissingWeights naming every absent file at once.
    hub: take files absent from the folder from the hub cache, downloading them (progress: see hub.py)."""
    folder = weights_folder(weights_dir)
    found = {n: _local(folder, n) for n in names}
    if hub:
        found = {n: p or _from_hub(CHECKPOINTS[n].hub_repo, CHECKPOINTS[n].file, folder, progress)
                 for n, p in found.items()}
    missing = [n for n, p in found.items() if p is None]
    if missing:
        lines = "\n".join(f"  {CHECKPOINTS[n].file}  (https://huggingface.co/{CHECKPOINTS[n].hub_repo}/"
                          f"resolve/main/{CHECKPOINTS[n].file})" for n in missing)
        raise MissingWeights(f"LlamaGen weights not found in {folder.resolve()}:\n{lines}\n"
                             f"Download them into one folder and set {ENV_DIR} to it (or pass weights_dir=...); "
                             f"a .safetensors file with the same stem works too.")
    return found


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """The weights of an official checkpoint: under "model" (DDP), "module" (DeepSpeed), "state_dict",
    or the file itself (FSDP, safetensors)."""
    path = Path(path)
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file
        return load_file(str(path))
    try:
        with torch.serialization.safe_globals(list(ALLOWED_GLOBALS)):
            obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:
        found = [g for g in torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
                 if g not in {f"{c.__module__}.{c.__qualname__}" for c in ALLOWED_GLOBALS}]
        raise UnsafeCheckpoint(
            f"{path} pickles {', '.join(found) or 'objects'} beside its weights; only "
            f"{', '.join(f'{c.__module__}.{c.__qualname__}' for c in ALLOWED_GLOBALS)} is read, since unpickling "
            f"anything else can run code. If you trust the file, save its weights alone (the 'model' entry, or "
            f"as .safetensors) and load that.") from e
    for key in ("model", "module", "state_dict"):
        if key in obj:
            return obj[key]
    if all(isinstance(v, torch.Tensor) for v in obj.values()):
        return obj
    raise ValueError(f"{path}: no weights under 'model', 'module' or 'state_dict' (keys: {sorted(obj)[:8]})")


def load_weights(model: torch.nn.Module, state: dict[str, torch.Tensor], name: str) -> torch.nn.Module:
    """Load an official state dict strictly, up to IGNORED_KEYS; the error names what does not fit."""
    state = {k.removeprefix("module.").removeprefix("_orig_mod."): v for k, v in state.items()}
    state = {k: v for k, v in state.items() if k not in IGNORED_KEYS}
    own = model.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    wrong = [f"{k} {tuple(state[k].shape)} != {tuple(own[k].shape)}" for k in own
             if k in state and state[k].shape != own[k].shape]
    if missing or unexpected or wrong:
        raise ValueError(f"{name} does not fit its LlamaGen configuration: missing {missing[:4]}, "
                         f"unexpected {unexpected[:4]}, shape mismatch {wrong[:4]}")
    model.load_state_dict(state, assign=True)
    return model


def build(name: str, state: dict[str, torch.Tensor] | None = None) -> torch.nn.Module:
    """The model of a CHECKPOINTS entry; with a state dict, built on the meta device and loaded in place."""
    ck = CHECKPOINTS[name]
    make = (lambda: VQModel(VQ16)) if ck.kind == "vq" else (lambda: GPT(gpt_config(ck.size, ck.kind)))
    if state is None:
        return make().eval()
    with torch.device("meta"):
        model = make()
    return load_weights(model, state, ck.file).eval()


# ---- captions ------------------------------------------------------------------------------------
def clean_prompt(text: str) -> str:
    """The prompt as LlamaGen's T5 preprocessing leaves it (see caption_text for the rules)."""
    return clean_caption(text)


def left_pad(feats: torch.Tensor, n_valid: int | None = None, length: int = T5_LEN) -> tuple[torch.Tensor, torch.Tensor]:
    """(n, C) T5 features of the valid tokens (first n_valid rows) -> ((length, C) zeros then the
    tokens, (length,) mask), LlamaGen's left padding; longer captions are truncated at the end."""
    n = min(feats.shape[0] if n_valid is None else n_valid, length)
    out = feats.new_zeros(length, feats.shape[-1])
    out[length - n:] = feats[:n]
    mask = torch.zeros(length, dtype=torch.bool)
    mask[length - n:] = True
    return out, mask


class T5Captions:
    """prompt -> left-padded ((120, 2048) features, (120,) mask) from a local FLAN-T5-XL folder."""

    def __init__(self, path: str | Path, device="cpu", dtype=torch.float32):
        from transformers import AutoTokenizer, T5EncoderModel
        self.tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.model = T5EncoderModel.from_pretrained(str(path), local_files_only=True, dtype=dtype).to(device).eval()
        self.device = device

    @torch.no_grad()
    def __call__(self, prompt: str) -> tuple[torch.Tensor, torch.Tensor]:
        enc = self.tokenizer([clean_prompt(prompt)], max_length=T5_LEN, padding="max_length", truncation=True,
                             add_special_tokens=True, return_tensors="pt")
        feats = self.model(input_ids=enc.input_ids.to(self.device),
                           attention_mask=enc.attention_mask.to(self.device)).last_hidden_state[0]
        return left_pad(feats.float().cpu(), int(enc.attention_mask.sum()))


class FeatureCaptions:
    """Precomputed T5 features of the valid tokens, as LlamaGen's extract_t5_feature.py writes them:
    a .pt dict {prompt: (n, 2048) or (1, n, 2048)}, or one .npy (1, n, 2048) that serves every prompt."""

    def __init__(self, path: str | Path):
        path = Path(path)
        if path.suffix == ".npy":
            import numpy as np
            self.table, self.any = {}, torch.from_numpy(np.load(path)).float().reshape(-1, T5_DIM)
        else:
            self.table, self.any = torch.load(path, map_location="cpu", weights_only=True), None

    def __call__(self, prompt: str) -> tuple[torch.Tensor, torch.Tensor]:
        if self.any is not None:
            return left_pad(self.any)
        if prompt not in self.table:
            raise KeyError(f"no precomputed caption features for {prompt!r}; available: {list(self.table)[:5]}")
        return left_pad(self.table[prompt].float().reshape(-1, T5_DIM))


def text_caption(encode: Callable[[str], tuple]) -> Callable:
    """ModelPair.caption for t2i: the same T5 features for every grid, computed once per prompt."""
    memo: dict = {}

    def caption(prompt: str, grid: tuple[int, int]):
        if prompt not in memo:
            memo[prompt] = encode(prompt)
        return memo[prompt]
    return caption


def class_caption(prompt, grid=None) -> tuple[torch.Tensor, torch.Tensor]:
    """ModelPair.caption for c2i: the prompt is an ImageNet class id (0..999) -> ((1,) id, (1,) mask)."""
    s = str(prompt).strip()
    if not s.isdigit() or int(s) >= NUM_CLASSES:
        raise ValueError(f"a class-conditional LlamaGen model takes a class id in [0, {NUM_CLASSES - 1}] "
                         f"as its prompt; got {prompt!r}")
    return torch.tensor([int(s)]), torch.ones(1, dtype=torch.bool)


def t5_folder(weights_dir=None) -> Path:
    """Where FLAN-T5-XL is read from: MULO_T5_DIR, else <weights>/t5-ckpt/flan-t5-xl."""
    return Path(os.environ.get("MULO_T5_DIR") or weights_folder(weights_dir) / "t5-ckpt" / "flan-t5-xl")


def _t5_path(weights_dir, hub: bool = False, progress: hf.Progress | None = None) -> Path:
    path = t5_folder(weights_dir)
    if path.exists():
        return path
    if hub:
        return _from_hub(T5_REPO, T5_REPO, path, progress, T5_FILES)
    raise MissingWeights(f"FLAN-T5-XL not found at {path}: put the {T5_REPO} files there, set "
                         f"MULO_T5_DIR, or pass captions=FeatureCaptions(path) with precomputed features")


def _default_captions(weights_dir, device="cpu", hub: bool = False) -> Callable:
    """T5 features from FLAN-T5-XL (see _t5_path), in bf16 on CUDA as LlamaGen's sample scripts run it,
    float32 on the CPU."""
    return T5Captions(_t5_path(weights_dir, hub), device, default_dtype(device))


# ---- pairs ---------------------------------------------------------------------------------------
def default_dtype(device) -> torch.dtype:
    return torch.bfloat16 if torch.device(device).type == "cuda" else torch.float32


def lantern_folder(name: str, weights_dir: str | Path | None = None) -> Path:
    """Where a pair's LANTERN-format EAGLE drafter is read from (tree methods): <weights>/lantern-<pair>/."""
    return weights_folder(weights_dir) / f"lantern-{name}"


def _head_loader(name: str, weights_dir, device, dtype) -> Callable:
    def load():
        from .eagle import load_lantern
        try:
            return load_lantern(lantern_folder(name, weights_dir)).to(device=device, dtype=dtype)
        except FileNotFoundError as e:
            raise MissingWeights(str(e)) from None
    return load


def assemble(name: str, target: GPT, tokenizer: VQModel, grid: tuple[int, int], caption: Callable,
             drafter: GPT | None = None, small: GPT | None = None, scales: tuple = (), device="cpu",
             dtype: torch.dtype | None = None, head_net: Callable | None = None):
    """ModelPair from built models; the GPTs in dtype (bf16 on CUDA by default), the tokenizer
    in float32 (code lookup). Without a drafter the target serves its own grid only."""
    dtype = dtype or default_dtype(device)
    target, drafter, small = (m.to(device=device, dtype=dtype) if m is not None else None
                              for m in (target, drafter, small))
    tokenizer = tokenizer.to(device=device, dtype=torch.float32)
    return ModelPair(name, target, drafter or target, small, tokenizer, grid, caption,
                     tokenizer.neighbours(NEIGHBOURS).cpu(), scales=scales, device=str(device), head_net=head_net,
                     tree_neighbours=tokenizer.neighbours(NEIGHBOURS, raw=True).cpu())   # as LANTERN's code


def load_pair(name: str = "llamagen-t2i", weights_dir: str | Path | None = None, device="cpu",
              dtype: torch.dtype | None = None, captions: Callable | None = None, hub: bool = False):
    """ModelPair of a PAIRS entry from official checkpoints (see locate for where they are read).

    captions: prompt -> ((120, 2048), (120,)) for t2i (T5Captions, FeatureCaptions); default: a local FLAN-T5-XL."""
    if name not in PAIRS:
        raise ValueError(f"unknown LlamaGen pair {name!r}; available: {', '.join(PAIRS)}")
    spec = PAIRS[name]
    keys = [k for k in (spec.target, spec.tokenizer, spec.drafter, spec.small) if k]
    paths = locate(keys, weights_dir, hub)
    ck = CHECKPOINTS[spec.target]
    caption = text_caption(captions or _default_captions(weights_dir, device, hub)) if ck.kind == "t2i" else class_caption
    models = {k: build(k, read_state_dict(p)) for k, p in paths.items()}
    return assemble(name, models[spec.target], models[spec.tokenizer], (ck.grid, ck.grid), caption,
                    models.get(spec.drafter), models.get(spec.small), spec.scales, device, dtype,
                    _head_loader(name, weights_dir, device, dtype or default_dtype(device)))


def pair_files(name: str) -> list[str]:
    """CHECKPOINTS keys a PAIRS entry reads."""
    spec = PAIRS[name]
    return [k for k in (spec.target, spec.tokenizer, spec.drafter, spec.small) if k]


def to_fetch(name: str, weights_dir: str | Path | None = None) -> list[str]:
    """Files of a pair that are neither in the weights folder nor in the hub cache (FLAN-T5-XL as
    its repository name); looks at files only, never the network."""
    folder, kind = weights_folder(weights_dir), CHECKPOINTS[PAIRS[name].target].kind
    out = [CHECKPOINTS[k].file for k in pair_files(name)
           if _local(folder, k) is None and hf.cached(CHECKPOINTS[k].hub_repo, CHECKPOINTS[k].file) is None]
    if kind == "t2i" and not t5_folder(folder).exists() and hf.cached(T5_REPO, "config.json") is None:
        out.append(T5_REPO)
    return out


def fetch_pair(name: str, weights_dir: str | Path | None = None, progress: hf.Progress | None = None) -> None:
    """Download into the hub cache every file of a pair that the weights folder lacks (MissingWeights
    when the hub cannot be reached), reporting progress; loads nothing."""
    locate(pair_files(name), weights_dir, hub=True, progress=progress)
    if CHECKPOINTS[PAIRS[name].target].kind == "t2i":
        _t5_path(weights_dir, hub=True, progress=progress)


def found_pairs(weights_dir: str | Path | None = None) -> dict[str, str]:
    """{pair name: one line on it} for the pairs whose files are all in the weights folder (the T5
    encoder too for t2i), and on a Hugging Face Space every pair (its files come from the hub when
    chosen); looks at file names only, loads nothing, never the network."""
    folder, out, space = weights_folder(weights_dir), {}, hf.on_space()
    for name, spec in PAIRS.items():
        ck = CHECKPOINTS[spec.target]
        here = (all(_local(folder, k) is not None for k in pair_files(name))
                and (ck.kind != "t2i" or t5_folder(folder).exists()))
        if not (here or space):
            continue
        fetch = [] if here else to_fetch(name, weights_dir)
        where = (f"weights in {folder}" if here else "weights in the hub cache" if not fetch
                 else f"downloads {', '.join(fetch)} from the Hugging Face hub when chosen")
        out[name] = (f"LlamaGen {ck.kind} GPT-{ck.size}, {ck.grid}x{ck.grid} tokens"
                     + (f", drafter {CHECKPOINTS[spec.drafter].grid}x{CHECKPOINTS[spec.drafter].grid}"
                        if spec.drafter else "") + f"; {where}")
    return out


def pair_facts(name: str) -> dict:
    """What a UI needs before loading a pair: codebook size, mulo scales, default sampling, the kind of prompt."""
    spec = PAIRS[name]
    kind = CHECKPOINTS[spec.target].kind
    return dict(vocab_size=VQ16.codebook_size, scales=spec.scales, sampling=SAMPLING[kind],
                prompt="free text (read by FLAN-T5-XL)" if kind == "t2i" else f"an ImageNet class id, 0 to {NUM_CLASSES - 1}")


def pair_loaders() -> dict[str, Callable]:
    """{pair name: loader} for engine.load_pair: weights from MULO_LLAMAGEN_DIR, device from MULO_DEVICE
    (default cpu); the hub cache (downloading) only on a Hugging Face Space."""
    return {n: (lambda n=n: load_pair(n, device=os.environ.get("MULO_DEVICE", "cpu"), hub=hf.on_space()))
            for n in PAIRS}
