"""Tar (csuhan/Tar): its AR-DTok detokenizers as configurations of our GPT, TA-Tok's conditioning, and
the model pairs of the paper's main setting.

Owns: the official AR-DTok checkpoints ({"model": {"name", "args", "sd"}}, read as plain data) turned
into GPTConfig (learned absolute positions and no RoPE, 729 TA-Tok features through one biased
projection, all-zero features as CFG's null caption); TA-Tok's way from its 729 ids to those features
(the SimVQ codebook, its out projection, the small SigLIP2 decoder of transformers, the task layer),
from an image to its ids (reconstruction mode; the SigLIP2 teacher's vision tower) and from text to
ids through the Tar LLM (transformers, Qwen2); and the pairs: 1024 px target with the 512 px (r = 2)
or 256 px (r = 4) drafter, 512 px target with the 256 px drafter, all on LlamaGen's VQ-16.

What is the same as LlamaGen (the VQ, the GPT blocks, reading .pt files safely, the hub cache) is
shared with llamagen.py; what differs is here. Weights come from `weights_dir`, else MULO_TAR_DIR,
else ./pretrained_models; with hub=True (the default on a Space) absent files come from the hub cache.
Every piece a run needs and does not find refuses by name, saying which file it needs and where.
"""
from __future__ import annotations

import json
import math
import os
import pickle
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..config import ParameterError, SamplingConfig
from . import hub as hf
from . import llamagen as lg
from .gpt import GPT, GPTConfig
from .vq import VQConfig, VQModel

ENV_DIR = "MULO_TAR_DIR"
HUB_REPO = "csuhan/TA-Tok"              # AR-DTok and TA-Tok checkpoints
TEACHER_REPO = "google/siglip2-so400m-patch14-384"   # TA-Tok's encoder configuration (image mode)
LLM_REPO = "csuhan/Tar-1.5B"            # the text path (Qwen2.5-based Tar LLM)
FEATURES = 729                          # TA-Tok tokens of an image (27 x 27), AR-DTok's prefix
FEATURE_DIM = 1152                      # SigLIP2-so400m width, AR-DTok's cond_dim

# official AR-DTok sizes (llama-abs-*): name -> (n_layer, n_head, dim)
SIZES = {"llama-abs-S": (12, 6, 384), "llama-abs-B": (12, 12, 768), "llama-abs-L": (24, 16, 1024),
         "llama-abs-LP": (30, 20, 1280), "llama-abs-XL": (36, 20, 1280), "llama-abs-XXL": (48, 24, 1536),
         "llama-abs-XXXL": (48, 40, 2560)}

# the official pipeline (t2i_inference.py -> MMAutoEncoder.ar_sample): CFG 4.0 on every token, and
# temperature 1 with no top-k / top-p in the detokenizer (those settings belong to the LLM's sampling)
SAMPLING = SamplingConfig(cfg=4.0, temperature=1.0, top_k=0, top_p=1.0, cfg_interval=-1)
# the Tar LLM's sampling of TA-Tok ids from text (T2IConfig of t2i_inference.py)
LLM_SAMPLING = dict(temperature=1.0, top_p=0.95, top_k=1200)
LLM_SEED = 0            # seed of the LLM's sampling (the ids of one prompt are drawn once, then reused)
PROMPTS_ENV = "MULO_TAR_PROMPTS"       # on a Space: the folders (os.pathsep-separated) prompt files are read from
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
IDS_SUFFIXES = (".txt", ".json", ".npy", ".pt")


@dataclass(frozen=True)
class Checkpoint:
    file: str
    hub_repo: str
    px: int = 0                 # image size an AR-DTok checkpoint generates (grid = px / 16)


CHECKPOINTS = {c.file.rsplit(".", 1)[0]: c for c in [
    Checkpoint("ar_dtok_lp_256px.pth", HUB_REPO, 256),
    Checkpoint("ar_dtok_lp_512px.pth", HUB_REPO, 512),
    Checkpoint("ar_dtok_lp_1024px.pth", HUB_REPO, 1024),
    Checkpoint("ta_tok.pth", HUB_REPO),
    Checkpoint("vq_ds16_t2i.pt", "peizesun/llamagen_t2i"),
]}


@dataclass(frozen=True)
class PairSpec:
    target: str
    drafter: str
    scale: int


PAIRS = {"tar-1024-512": PairSpec("ar_dtok_lp_1024px", "ar_dtok_lp_512px", 2),
         "tar-1024-256": PairSpec("ar_dtok_lp_1024px", "ar_dtok_lp_256px", 4),
         "tar-512-256": PairSpec("ar_dtok_lp_512px", "ar_dtok_lp_256px", 2)}
TOKENIZER = "vq_ds16_t2i"
TATOK = "ta_tok"

MissingWeights = lg.MissingWeights


# ---- files ---------------------------------------------------------------------------------------
def weights_folder(weights_dir: str | Path | None = None) -> Path:
    return Path(weights_dir or os.environ.get(ENV_DIR) or lg.DEFAULT_DIR)


def _local(folder: Path, name: str) -> Path | None:
    path = folder / CHECKPOINTS[name].file
    return path if path.exists() else None


def _where(name: str) -> str:
    c = CHECKPOINTS[name]
    return f"{c.file}  (https://huggingface.co/{c.hub_repo}/resolve/main/{c.file})"


def locate(names: list[str], weights_dir=None, hub: bool = False, progress: hf.Progress | None = None,
           needed_for: str = "") -> dict[str, Path]:
    """Paths of the named files; MissingWeights naming every absent one at once (and what needs it)."""
    folder = weights_folder(weights_dir)
    found = {n: _local(folder, n) for n in names}
    if hub:
        found = {n: p or lg._from_hub(CHECKPOINTS[n].hub_repo, CHECKPOINTS[n].file, folder, progress)
                 for n, p in found.items()}
    missing = [n for n, p in found.items() if p is None]
    if missing:
        lines = "\n".join(f"  {_where(n)}" for n in missing)
        raise MissingWeights(f"Tar files not found in {folder.resolve()}{needed_for}:\n{lines}\n"
                             f"Download them into one folder and set {ENV_DIR} to it (or pass weights_dir=...).")
    return found


def read_official(path: str | Path) -> dict:
    """The {"name", "args", "sd"} entry of an official Tar checkpoint (under "model"), read as plain data:
    tensors, numbers, strings and containers only, never pickled classes."""
    path = Path(path)
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as e:
        raise lg.UnsafeCheckpoint(f"{path} pickles objects beside its weights; only plain data is read, since "
                                  f"unpickling anything else can run code ({str(e).splitlines()[0][:200]})") from e
    spec = obj.get("model", obj) if isinstance(obj, dict) else None
    if not (isinstance(spec, dict) and "sd" in spec and "args" in spec):
        raise ValueError(f"{path}: not an official Tar checkpoint (expected {{'model': {{'name', 'args', 'sd'}}}}; "
                         f"keys: {sorted(obj)[:8] if isinstance(obj, dict) else type(obj).__name__})")
    return spec


def _strict(model: nn.Module, state: dict, name: str, prefix: str = "", ignore: tuple = ()) -> nn.Module:
    """Load state[prefix + key] into every parameter and buffer of model; the error names what does not fit.
    Entries of state outside model (under other prefixes, or starting with ignore) are not read."""
    own = model.state_dict()
    sub = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
    sub = {k: v for k, v in sub.items() if not k.startswith(ignore)} if ignore else sub
    missing = sorted(set(own) - set(sub))
    wrong = [f"{k} {tuple(sub[k].shape)} != {tuple(own[k].shape)}" for k in own
             if k in sub and sub[k].shape != own[k].shape]
    if missing or wrong:
        raise ValueError(f"{name} does not fit its configuration: missing {missing[:4]}, shape mismatch {wrong[:4]}")
    model.load_state_dict({k: sub[k] for k in own}, strict=True)
    return model


# ---- AR-DTok -------------------------------------------------------------------------------------
def gpt_config(spec: dict, name: str = "AR-DTok") -> tuple[GPTConfig, tuple[int, int]]:
    """(GPTConfig, grid) of an official AR-DTok entry: sizes from its name (llama-abs-*), or from its
    args when it names none of them (tiny test models); the prefix is cls_token_num features of
    cond_dim, the grid max_seq_len cells."""
    a = dict(spec["args"])
    if a.get("model_type", "class_cond") != "clip_cond":
        raise ValueError(f"{name}: model_type {a.get('model_type')!r}; AR-DTok reads TA-Tok features (clip_cond)")
    if a.get("frame_prediction"):
        raise ValueError(f"{name}: frame prediction models are not image detokenizers")
    if spec.get("name") in SIZES:
        n_layer, n_head, dim = SIZES[spec["name"]]
    elif all(k in a for k in ("n_layer", "n_head", "dim")):
        n_layer, n_head, dim = a["n_layer"], a["n_head"], a["dim"]
    else:
        raise ValueError(f"{name}: unknown model {spec.get('name')!r}; known: {', '.join(SIZES)}")
    if a.get("n_kv_head") not in (None, n_head):
        raise ValueError(f"{name}: grouped-query attention (n_kv_head {a['n_kv_head']}) is not supported")
    cells, prefix = int(a.get("max_seq_len", 2048)), int(a.get("cls_token_num", 1))
    side = math.isqrt(cells)
    if side * side != cells:
        raise ValueError(f"{name}: max_seq_len {cells} is not a square grid")
    cfg = GPTConfig(vocab_size=int(a.get("vocab_size", 8192)), dim=dim, n_layer=n_layer, n_head=n_head,
                    multiple_of=int(a.get("multiple_of", 256)), ffn_dim_multiplier=a.get("ffn_dim_multiplier"),
                    norm_eps=float(a.get("norm_eps", 1e-5)), rope_base=float(a.get("rope_base", 10000)),
                    prefix_len=prefix, caption_dim=int(a.get("cond_dim", 1152)), caption_proj="linear",
                    prefix_rope="zero", abs_positions=cells + prefix - 1)
    return cfg, (side, side)


# official key -> ours (everything else has the same name in both)
RENAMED = {"clip_proj.weight": "cls_embedding.cap_proj.weight", "clip_proj.bias": "cls_embedding.cap_proj.bias"}


def our_keys(sd: dict) -> dict:
    return {RENAMED.get(k.removeprefix("module.").removeprefix("_orig_mod."), k.removeprefix("module.")
                        .removeprefix("_orig_mod.")): v for k, v in sd.items()}


def build_gpt(spec: dict, name: str = "AR-DTok") -> tuple[GPT, tuple[int, int]]:
    """Our GPT holding an official AR-DTok entry's weights, and its grid."""
    cfg, grid = gpt_config(spec, name)
    with torch.device("meta"):
        model = GPT(cfg)
    state = our_keys(spec["sd"])
    own = model.state_dict()
    missing, unexpected = sorted(set(own) - set(state)), sorted(set(state) - set(own))
    wrong = [f"{k} {tuple(state[k].shape)} != {tuple(own[k].shape)}" for k in own
             if k in state and state[k].shape != own[k].shape]
    if missing or unexpected or wrong:
        raise ValueError(f"{name} does not fit its configuration: missing {missing[:4]}, unexpected "
                         f"{unexpected[:4]}, shape mismatch {wrong[:4]}")
    model.load_state_dict(state, assign=True)
    return model.eval(), grid


def official_entry(model: GPT, name: str = "llama-abs-tiny") -> dict:
    """Our GPT as an official AR-DTok entry {"name", "args", "sd"} (tiny test checkpoints; real sizes
    are named, so their args carry no sizes)."""
    c = model.cfg
    cells = c.abs_positions - c.prefix_len + 1
    args = dict(model_type="clip_cond", vocab_size=c.vocab_size, cls_token_num=c.prefix_len, cond_dim=c.caption_dim,
                max_seq_len=cells, multiple_of=c.multiple_of, norm_eps=c.norm_eps)
    if name not in SIZES:
        args.update(n_layer=c.n_layer, n_head=c.n_head, dim=c.dim)
    back = {v: k for k, v in RENAMED.items()}
    return {"name": name, "args": args, "sd": {back.get(k, k): v for k, v in model.state_dict().items()}}


# ---- the VQ --------------------------------------------------------------------------------------
def vq_config(state: dict) -> VQConfig:
    """The VQConfig a LlamaGen-layout VQ state dict was built with, read from its shapes (VQ-16 for the
    official file; smaller ones in tests). Normalized codes and 32-group norms, as every LlamaGen VQ."""
    v, d = state["quantize.embedding.weight"].shape
    ch = state["encoder.conv_in.weight"].shape[0]
    levels = sorted({int(m.group(1)) for k in state for m in [re.match(r"encoder\.conv_blocks\.(\d+)\.", k)] if m})
    ch_mult = tuple(state[f"encoder.conv_blocks.{i}.res.0.conv1.weight"].shape[0] // ch for i in levels)
    blocks = {int(m.group(1)) for k in state for m in [re.match(r"encoder\.conv_blocks\.0\.res\.(\d+)\.", k)] if m}
    attn = tuple(i for i in levels if f"encoder.conv_blocks.{i}.attn.0.q.weight" in state)
    cfg = VQConfig(codebook_size=v, codebook_embed_dim=d, codebook_l2_norm=True, ch=ch, ch_mult=ch_mult,
                   num_res_blocks=len(blocks), z_channels=state["quant_conv.weight"].shape[1], norm_groups=32,
                   mid_attn="encoder.mid.1.q.weight" in state, attn_levels=attn)
    return lg.VQ16 if cfg == lg.VQ16 else cfg


def build_vq(state: dict) -> VQModel:
    state = {k: v for k, v in state.items() if k not in lg.IGNORED_KEYS}
    with torch.device("meta"):
        model = VQModel(vq_config(state))
    return lg.load_weights(model, state, CHECKPOINTS[TOKENIZER].file).eval()


# ---- TA-Tok --------------------------------------------------------------------------------------
class SimVQ(nn.Module):
    """TA-Tok's codebook: code vectors are embedding_proj(embedding), L2-normalized when l2_normalized."""

    def __init__(self, codebook_size: int, dim: int, l2_normalized: bool):
        super().__init__()
        self.embedding = nn.Embedding(codebook_size, dim)
        self.embedding_proj = nn.Linear(dim, dim)
        self.l2_normalized = l2_normalized

    def codes(self) -> torch.Tensor:
        emb = self.embedding_proj(self.embedding.weight)
        return F.normalize(emb, p=2, dim=-1) if self.l2_normalized else emb

    def decode(self, ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(ids, self.codes())

    def encode(self, z: torch.Tensor) -> torch.Tensor:
        """(B, n, d) -> (B, n) ids of the nearest codes (cosine when normalized, as the deterministic
        evaluation mode of the stochastic quantizer picks its most likely code)."""
        emb = self.codes()
        if self.l2_normalized:
            return (F.normalize(z, p=2, dim=-1) @ emb.T).argmax(-1)
        d = z.pow(2).sum(-1, keepdim=True) + emb.pow(2).sum(-1) - 2 * z @ emb.T
        return d.argmin(-1)


class Bottleneck(nn.Module):
    def __init__(self, input_dim: int, bottleneck_dim: int, codebook_size: int, l2_normalized: bool):
        super().__init__()
        self.in_linear = nn.Linear(input_dim, bottleneck_dim)
        self.out_linear = nn.Linear(bottleneck_dim, bottleneck_dim)
        self.regularizer = SimVQ(codebook_size, bottleneck_dim, l2_normalized)


class TATok(nn.Module):
    """TA-Tok's ways to the 729 features AR-DTok reads: ids -> features (decode_ids), and with its
    teacher's configuration an image -> ids (encode_image). Module names follow the official ones."""

    def __init__(self, args: dict, hidden: int, decoder_cfg, encoder_cfg=None):
        super().__init__()
        from transformers import Siglip2VisionModel
        b = args["bottleneck"]["args"]
        reg = b["regularizer"]["args"]
        self.args, self.bottleneck_dim = args, int(b["bottleneck_dim"])
        self.codebook_size = int(reg["codebook_size"])
        self.bottleneck = Bottleneck(hidden, self.bottleneck_dim, self.codebook_size, bool(reg.get("l2_normalized")))
        self.decoder = Siglip2VisionModel(decoder_cfg)
        self.decode_task_layer = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, hidden))
        self.encoder = None
        if encoder_cfg is not None:
            from transformers import AutoModel
            self.encoder = AutoModel.from_config(encoder_cfg).vision_model
            self.encode_task_layer = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh())

    @property
    def input_size(self) -> int:
        return int(self.args.get("input_size", 384))

    @torch.no_grad()
    def decode_ids(self, ids: torch.Tensor) -> torch.Tensor:
        """(B, n) TA-Tok ids, n a square -> (B, n, hidden) features: codes, out projection, the SigLIP2
        decoder over the p x p grid of them (patch size 1), the task layer."""
        if ids.min() < 0 or ids.max() >= self.codebook_size:
            raise ParameterError(f"prompt: TA-Tok ids must lie in [0, {self.codebook_size - 1}]; got "
                                 f"{int(ids.min())}..{int(ids.max())}")
        p = math.isqrt(ids.shape[1])
        if p * p != ids.shape[1]:
            raise ValueError(f"TA-Tok ids form a square grid; got {ids.shape[1]}")
        dtype = self.decode_task_layer[0].weight.dtype
        z = self.bottleneck.out_linear(self.bottleneck.regularizer.decode(ids).to(dtype))
        mask = torch.ones(z.shape[:2], dtype=torch.int, device=z.device)
        shapes = torch.tensor([[p, p]] * z.shape[0], device=z.device)
        h = self.decoder(z, mask, shapes).last_hidden_state
        return self.decode_task_layer(h)

    @torch.no_grad()
    def encode_image(self, image: torch.Tensor, pool_scale: int | None = None) -> torch.Tensor:
        """(B, 3, S, S) in [0, 1] -> (B, n) ids: resized to the teacher's input, its hidden states at
        select_layer_id, average-pooled by pool_scale, the task layer, the in projection, the nearest codes."""
        if self.encoder is None:
            raise ValueError("this TA-Tok was built without its encoder (ids only)")
        x = (image - 0.5) / 0.5
        if tuple(x.shape[-2:]) != (self.input_size, self.input_size):
            x = F.interpolate(x, size=(self.input_size, self.input_size), mode="bilinear", align_corners=False,
                              antialias=True)
        dtype = self.encode_task_layer[0].weight.dtype
        h = self.encoder(x.to(dtype), output_hidden_states=True).hidden_states[int(self.args.get("select_layer_id", -2))]
        scale = pool_scale or int(self.args.get("pool_scale", 1))
        if scale != 1:
            p = math.isqrt(h.shape[1])
            g = h.transpose(1, 2).reshape(h.shape[0], h.shape[2], p, p)
            h = F.avg_pool2d(g, scale, scale).flatten(2).transpose(1, 2)
        return self.bottleneck.regularizer.encode(self.bottleneck.in_linear(self.encode_task_layer(h)))


def _decoder_config(args: dict, sd: dict, hidden: int):
    from transformers import Siglip2VisionConfig
    cfg = Siglip2VisionConfig()
    cfg.update({"patch_size": 1, "num_hidden_layers": int(args.get("decoder_depth", 3)),
                "num_channels": int(args["bottleneck"]["args"]["bottleneck_dim"]), "hidden_size": hidden})
    return cfg


def teacher_folder(weights_dir=None) -> Path:
    """Where TA-Tok's teacher configuration (SigLIP2-so400m config.json) is read from (image mode)."""
    return Path(os.environ.get("MULO_TAR_TEACHER") or weights_folder(weights_dir) / TEACHER_REPO.split("/")[1])


def llm_folder(weights_dir=None) -> Path:
    """Where the Tar LLM (a transformers Qwen2 folder with its tokenizer) is read from (text mode)."""
    return Path(os.environ.get("MULO_TAR_LLM") or weights_folder(weights_dir) / LLM_REPO.split("/")[1])


def _teacher_config(weights_dir, hub: bool):
    from transformers import AutoConfig
    folder = teacher_folder(weights_dir)
    if not (folder / "config.json").exists():
        if hub:
            folder = lg._from_hub(TEACHER_REPO, "config.json", folder, None, ["config.json"])
        else:
            raise MissingWeights(f"an image prompt is encoded by TA-Tok's SigLIP2 encoder, whose configuration is "
                                 f"not at {folder / 'config.json'}: put {TEACHER_REPO}'s config.json there "
                                 f"(https://huggingface.co/{TEACHER_REPO}/resolve/main/config.json) or set "
                                 f"MULO_TAR_TEACHER to its folder")
    return AutoConfig.from_pretrained(str(folder), local_files_only=True)


def load_tatok(path: str | Path, encoder_cfg=None) -> TATok:
    """TA-Tok from an official ta_tok.pth: the ids path always, the encoder too when encoder_cfg is given."""
    spec = read_official(path)
    args, sd = spec["args"], spec["sd"]
    hidden = sd["decode_task_layer.0.weight"].shape[0]
    # built on the CPU, not on the meta device: transformers keeps tables that no state dict holds
    # (the position ids of its embeddings) as buffers filled at construction
    model = TATok(args, hidden, _decoder_config(args, sd, hidden), encoder_cfg)
    keep = ("bottleneck.", "decoder.", "decode_task_layer.") + (("encoder.", "encode_task_layer.")
                                                               if encoder_cfg is not None else ())
    state = {k: v for k, v in sd.items() if k.startswith(keep)}
    return _strict(model, state, CHECKPOINTS[TATOK].file).eval()


# ---- conditioning: what a Tar prompt is ------------------------------------------------------------
def read_ids(path: str | Path) -> torch.Tensor:
    """TA-Tok ids from a file: .txt (integers separated by spaces, commas or new lines, or the Tar
    LLM's text with <I123> tokens), .json (a list), .npy, .pt (a tensor) -> (n,) int64."""
    path = Path(path)
    if path.suffix == ".npy":
        import numpy as np
        ids = torch.from_numpy(np.load(path)).reshape(-1)
    elif path.suffix == ".pt":
        ids = torch.load(path, map_location="cpu", weights_only=True).reshape(-1)
    else:
        text = path.read_text()
        if path.suffix == ".json":
            ids = torch.tensor(json.loads(text)).reshape(-1)
        else:
            found = re.findall(r"<I(\d+)>", text) or re.findall(r"-?\d+", text)
            ids = torch.tensor([int(x) for x in found])
    if ids.is_floating_point() and not bool((ids == ids.round()).all()):
        raise ParameterError(f"prompt: {path} holds numbers that are not integers; TA-Tok ids are")
    return ids.long()


def llm_ids(text_ids: list[int], n: int = FEATURES) -> torch.Tensor:
    """The first n ids of the LLM's output, padded with 0 when it gave fewer (as the official pipeline)."""
    return torch.tensor(text_ids[:n] + [0] * max(0, n - len(text_ids)))


class TarText:
    """text -> 729 TA-Tok ids through the Tar LLM as t2i_inference.py samples it: the chat template,
    '<im_start><S0>', 729 new tokens (temperature 1, top-p 0.95, top-k 1200), the <I..> codes read back."""

    def __init__(self, folder: str | Path, device="cpu", dtype=torch.float32):
        from transformers import AutoTokenizer, Qwen2ForCausalLM
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
        self.model = Qwen2ForCausalLM.from_pretrained(str(folder), local_files_only=True, dtype=dtype).to(device).eval()
        self.device = device

    @torch.no_grad()
    def __call__(self, prompt: str, n: int = FEATURES, seed: int = LLM_SEED) -> torch.Tensor:
        messages = [{"role": "system", "content": "You are a helpful assistant."}, {"role": "user", "content": prompt}]
        text = self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        text += "<im_start><S0>"
        inputs = self.tokenizer(text, return_tensors="pt")
        torch.manual_seed(seed)
        out = self.model.generate(inputs.input_ids.to(self.device), max_new_tokens=n, do_sample=True, **LLM_SAMPLING)
        codes = [int(x) for x in re.findall(r"<I(\d+)>", self.tokenizer.batch_decode(out)[0])]
        return llm_ids(codes, n)


class Conditioning:
    """ModelPair.caption of a Tar pair: a prompt -> ((P, 1152) TA-Tok features, (P,) mask), the same
    features for both models of the pair, computed once per prompt. A prompt is
      - the path of an ids file (see read_ids): TA-Tok's decoder turns the ids into features;
      - the path of an image: TA-Tok encodes it to ids first (reconstruction mode);
      - any other text: the Tar LLM samples the ids first.
    Each piece is loaded on first use and refuses by name when its file is missing."""

    def __init__(self, prefix_len: int, weights_dir=None, hub: bool = False, device="cpu", dtype=torch.float32,
                 tatok: TATok | None = None, text: Callable | None = None):
        self.prefix_len, self.weights_dir, self.hub, self.device, self.dtype = prefix_len, weights_dir, hub, device, dtype
        self._tatok, self._text, self._with_encoder = tatok, text, tatok is not None and tatok.encoder is not None
        self.memo: dict = {}

    def tatok(self, encoder: bool = False, why: str = "") -> TATok:
        if self._tatok is None or (encoder and not self._with_encoder):
            path = locate([TATOK], self.weights_dir, self.hub, needed_for=why)[TATOK]
            cfg = _teacher_config(self.weights_dir, self.hub) if encoder else None
            self._tatok = load_tatok(path, cfg).to(device=self.device, dtype=self.dtype)
            self._with_encoder = encoder
        return self._tatok

    def text(self) -> Callable:
        if self._text is None:
            folder = llm_folder(self.weights_dir)
            if not (folder / "config.json").exists():
                if not self.hub:
                    raise MissingWeights(f"a text prompt is turned into TA-Tok ids by the Tar LLM, which is not at "
                                         f"{folder}: put {LLM_REPO} there (https://huggingface.co/{LLM_REPO}) or "
                                         f"set MULO_TAR_LLM, or give as the prompt the path of a file of "
                                         f"{self.prefix_len} TA-Tok ids (on the command line: --tar-ids FILE) or "
                                         f"of an image")
                folder = lg._from_hub(LLM_REPO, LLM_REPO, folder, None, ["*.json", "*.safetensors", "*.txt", "*.model"])
            self._text = TarText(folder, self.device, self.dtype)
        return self._text

    def readable(self, path: Path) -> None:
        """On a hosted app (a Space) a prompt may name files in the prompt folders only (PROMPTS_ENV,
        else the weights folder), so a visitor cannot probe the host's other files."""
        if not hf.on_space():
            return
        roots = [Path(p).resolve() for p in os.environ.get(PROMPTS_ENV, "").split(os.pathsep) if p]
        roots = roots or [weights_folder(self.weights_dir).resolve()]
        if not any(path.resolve().is_relative_to(r) for r in roots):
            raise ParameterError(f"prompt: on a hosted app ids and image files are read from "
                                 f"{', '.join(map(str, roots))} only (set {PROMPTS_ENV} to change it)")

    def ids(self, prompt: str) -> torch.Tensor:
        path = Path(prompt.strip())
        if path.suffix.lower() in IDS_SUFFIXES + IMAGE_SUFFIXES:
            self.readable(path)
        if path.suffix.lower() in IDS_SUFFIXES + IMAGE_SUFFIXES and not path.exists():
            raise ParameterError(f"prompt names the file {path}, which does not exist")
        if path.suffix.lower() in IDS_SUFFIXES:
            ids = read_ids(path)
        elif path.suffix.lower() in IMAGE_SUFFIXES:
            import numpy as np
            from PIL import Image
            img = torch.from_numpy(np.asarray(Image.open(path).convert("RGB"), dtype=np.float32) / 255.0)
            tok = self.tatok(encoder=True, why=" (an image prompt is encoded by TA-Tok)")
            side = tok.encoder.config.image_size // tok.encoder.config.patch_size   # the teacher's tokens per side
            pool = max(1, side // max(1, math.isqrt(self.prefix_len)))                # 27 // 27 = 1 for 729 ids
            ids = tok.encode_image(img.permute(2, 0, 1)[None].to(self.device), pool)[0].cpu()
        else:
            ids = self.text()(prompt, self.prefix_len)
        if ids.numel() != self.prefix_len:
            raise ParameterError(f"prompt: this Tar pair reads {self.prefix_len} TA-Tok ids; {prompt!r} gives {ids.numel()}")
        return ids

    def __call__(self, prompt: str, grid=None) -> tuple[torch.Tensor, torch.Tensor]:
        if prompt not in self.memo:
            ids = self.ids(prompt)
            feats = self.tatok(why=" (TA-Tok turns ids into features)").decode_ids(ids[None].to(self.device))[0]
            self.memo[prompt] = (feats.float().cpu(), torch.ones(self.prefix_len, dtype=torch.bool))
        return self.memo[prompt]


# ---- pairs ---------------------------------------------------------------------------------------
def _head_loader(name: str, weights_dir, device, dtype) -> Callable:
    def load():
        from .eagle import load_lantern
        try:
            return load_lantern(weights_folder(weights_dir) / f"lantern-{name}").to(device=device, dtype=dtype)
        except FileNotFoundError as e:
            raise MissingWeights(str(e)) from None
    return load


def assemble(name: str, target: GPT, drafter: GPT, tokenizer: VQModel, grid, scale: int, caption: Callable,
             device="cpu", dtype=None, head_net=None):
    """ModelPair of built models: the drafter serves grid / scale, and both read the same features."""
    if target.cfg.prefix_len != drafter.cfg.prefix_len or target.cfg.caption_dim != drafter.cfg.caption_dim:
        raise ValueError(f"{name}: target and drafter read different conditioning ({target.cfg.prefix_len} x "
                         f"{target.cfg.caption_dim} against {drafter.cfg.prefix_len} x {drafter.cfg.caption_dim})")
    drafter.check_grid((grid[0] // scale, grid[1] // scale))
    return lg.assemble(name, target, tokenizer, grid, caption, drafter=drafter, scales=(scale,), device=device,
                       dtype=dtype, head_net=head_net)


def load_pair(name: str = "tar-1024-512", weights_dir=None, device="cpu", dtype=None, hub: bool = False,
              conditioning: Callable | None = None):
    """ModelPair of a PAIRS entry from official checkpoints (see locate). conditioning: prompt ->
    ((729, 1152), (729,)); default: Conditioning (ids files, images, text; TA-Tok loaded on first use)."""
    if name not in PAIRS:
        raise ValueError(f"unknown Tar pair {name!r}; available: {', '.join(PAIRS)}")
    spec = PAIRS[name]
    paths = locate([spec.target, spec.drafter, TOKENIZER], weights_dir, hub, needed_for=f" (pair {name})")
    target, grid = build_gpt(read_official(paths[spec.target]), CHECKPOINTS[spec.target].file)
    drafter, dgrid = build_gpt(read_official(paths[spec.drafter]), CHECKPOINTS[spec.drafter].file)
    if (dgrid[0] * spec.scale, dgrid[1] * spec.scale) != grid:
        raise ValueError(f"{name}: the drafter's {dgrid[0]}x{dgrid[1]} grid is not the target's {grid[0]}x{grid[1]} "
                         f"divided by {spec.scale}")
    tokenizer = build_vq(lg.read_state_dict(paths[TOKENIZER]))
    dtype = dtype or lg.default_dtype(device)
    caption = conditioning or Conditioning(target.cfg.prefix_len, weights_dir, hub, device, torch.float32)
    return assemble(name, target, drafter, tokenizer, grid, spec.scale, caption, device, dtype,
                    _head_loader(name, weights_dir, device, dtype))


def pair_files(name: str) -> list[str]:
    spec = PAIRS[name]
    return [spec.target, spec.drafter, TOKENIZER, TATOK]


def to_fetch(name: str, weights_dir=None) -> list[str]:
    """Files of a pair in neither the weights folder nor the hub cache; never the network."""
    folder = weights_folder(weights_dir)
    return [CHECKPOINTS[k].file for k in pair_files(name)
            if _local(folder, k) is None and hf.cached(CHECKPOINTS[k].hub_repo, CHECKPOINTS[k].file) is None]


def fetch_pair(name: str, weights_dir=None, progress: hf.Progress | None = None) -> None:
    """Download into the hub cache every file of a pair the weights folder lacks; loads nothing."""
    locate(pair_files(name), weights_dir, hub=True, progress=progress)


def found_pairs(weights_dir=None) -> dict[str, str]:
    """{pair: one line} for the pairs whose files are all in the weights folder, and on a Space every
    pair; file names only, never the network."""
    folder, out, space = weights_folder(weights_dir), {}, hf.on_space()
    for name, spec in PAIRS.items():
        here = all(_local(folder, k) is not None for k in pair_files(name))
        if not (here or space):
            continue
        fetch = [] if here else to_fetch(name, weights_dir)
        where = (f"weights in {folder}" if here else "weights in the hub cache" if not fetch
                 else f"downloads {', '.join(fetch)} from the Hugging Face hub when chosen")
        t, d = CHECKPOINTS[spec.target].px, CHECKPOINTS[spec.drafter].px
        later = ("; text prompts fetch csuhan/Tar-1.5B, image prompts the SigLIP2 configuration, on first use"
                 if space else "")
        out[name] = (f"Tar AR-DTok {t} px ({t // 16}x{t // 16} tokens), drafter {d} px (r = {spec.scale}); "
                     f"{where}{later}")
    return out


def pair_facts(name: str) -> dict:
    return dict(vocab_size=lg.VQ16.codebook_size, scales=(PAIRS[name].scale,), sampling=SAMPLING,
                prompt=f"the path of a file of {FEATURES} TA-Tok ids, of an image (TA-Tok), or text (the Tar LLM)")


def pair_loaders() -> dict[str, Callable]:
    """{pair: loader}: weights from MULO_TAR_DIR, device from MULO_DEVICE; the hub only on a Space."""
    return {n: (lambda n=n: load_pair(n, device=os.environ.get("MULO_DEVICE", "cpu"), hub=hf.on_space()))
            for n in PAIRS}


# ---- tiny random checkpoints in the official layout (tests, demos) ------------------------------------
TINY = dict(dim=32, n_layer=2, n_head=2, multiple_of=32, vocab_size=64, prefix=81, cond_dim=48)


def tiny_gpt(grid: int, seed: int, **over) -> GPT:
    """A random AR-DTok-like GPT (TINY sizes) on a grid x grid raster; its output head is random too."""
    t = dict(TINY, **over)
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=t["vocab_size"], dim=t["dim"], n_layer=t["n_layer"], n_head=t["n_head"],
                         multiple_of=t["multiple_of"], prefix_len=t["prefix"], caption_dim=t["cond_dim"],
                         caption_proj="linear", prefix_rope="zero", abs_positions=grid * grid + t["prefix"] - 1)).eval()


TINY_GRIDS = {"ar_dtok_lp_1024px": 16, "ar_dtok_lp_512px": 8, "ar_dtok_lp_256px": 4}   # 1/4 of the real sides
TINY_TATOK = dict(bottleneck_dim=8, codebook_size=32, decoder_depth=1)
TINY_VQ = VQConfig(codebook_size=TINY["vocab_size"], codebook_embed_dim=8, codebook_l2_norm=True, ch=32,
                   ch_mult=(1, 1, 2, 2, 4), num_res_blocks=1, z_channels=32, norm_groups=32, mid_attn=True,
                   attn_levels=(4,))


def tiny_tatok_args(prefix: int = TINY["prefix"]) -> dict:
    t = TINY_TATOK
    reg = {"name": "simvq", "args": {"codebook_size": t["codebook_size"], "l2_normalized": True, "stochastic": True,
                                     "stochastic_temperature": 0.03}}
    return {"bottleneck": {"name": "bottleneck", "args": {"bottleneck_dim": t["bottleneck_dim"], "regularizer": reg}},
            "bottleneck_token_num": prefix, "input_size": 384, "teacher": TEACHER_REPO, "pool_scale": 1,
            "decoder_depth": t["decoder_depth"], "select_layer_id": -2}


def tiny_tatok(seed: int = 0) -> TATok:
    """A random TA-Tok (ids path) of TINY width; its decoder keeps the official SigLIP2 defaults
    (12 heads, 3072 hidden units) but for its width, depth and channels."""
    args = tiny_tatok_args()
    torch.manual_seed(seed)
    return TATok(args, TINY["cond_dim"], _decoder_config(args, {}, TINY["cond_dim"])).eval()


def write_tiny(folder: str | Path, seed: int = 0) -> Path:
    """Random tiny stand-ins of every Tar file, in the official layouts, into folder (MULO_TAR_DIR):
    the three AR-DTok checkpoints (grids 16, 8 and 4: the 1024, 512 and 256 px roles), ta_tok.pth,
    vq_ds16_t2i.pt, and ids.txt (81 TA-Tok ids to give as the prompt). Returns the ids file."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for i, (name, grid) in enumerate(TINY_GRIDS.items()):
        torch.save({"model": official_entry(tiny_gpt(grid, seed + i))}, folder / CHECKPOINTS[name].file)
    tok = tiny_tatok(seed)
    torch.save({"model": {"name": "ta_tok", "args": tiny_tatok_args(), "sd": tok.state_dict()}},
               folder / CHECKPOINTS[TATOK].file)
    torch.manual_seed(seed)
    torch.save({"model": VQModel(TINY_VQ).state_dict()}, folder / CHECKPOINTS[TOKENIZER].file)
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, TINY_TATOK["codebook_size"], (TINY["prefix"],), generator=gen)
    path = folder / "ids.txt"
    path.write_text(" ".join(map(str, ids.tolist())) + "\n")
    return path
