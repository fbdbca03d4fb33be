"""The embedded model family on disk: safetensors weights plus a manifest with provenance.

Owns loading (checksums verified) and exporting of the tokenizer, the multi-resolution target
(which also serves as the 16x16 and 8x8 drafter), the small same-resolution drafter and the
evaluator's classifier. Nothing here downloads anything.
"""
from __future__ import annotations

import hashlib
import json
from functools import lru_cache
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..config import SamplingConfig
from ..models.gpt import GPT, GPTConfig
from ..models.pair import ModelPair
from ..models.upsamplers import SRConfig, SRNet, TokenUpsampler, TokenUpsamplerConfig
from ..models.vq import VQConfig, VQModel
from . import data
from .domain import canonical_prompt
from .evaluation import Classifier, ClassifierConfig

DESCRIPTION = "the shipped procedural-scenes family, 32x32 tokens, drafters 16x16 and 8x8"
SAMPLING = SamplingConfig()   # the pair's sampling defaults: CFG 3, temperature 1, no top-k / top-p
ASSETS = Path(__file__).resolve().parent.parent.parent / "assets"
MANIFEST = "manifest.json"
UPSAMPLER_NETS = ("sr", "learned", "distilled")   # mulo's trained up-samplers, one file per scale
FILES = {"tokenizer": "tokenizer.safetensors", "target": "target.safetensors",
         "drafter": "drafter.safetensors", "classifier": "classifier.safetensors",
         **{f"{job}_x{r}": f"{job}_x{r}.safetensors" for job in UPSAMPLER_NETS for r in (2, 4)},
         "eagle": "eagle.safetensors"}


def asset_name(job: str, scale: int = 0) -> str:
    """The file name stem a training job exports to: the job, or for an up-sampler job <job>_x<scale>."""
    return f"{job}_x{scale}" if job in UPSAMPLER_NETS else job


def train_command(name: str) -> str:
    job, _, r = name.partition("_x")
    return f"python -m core train --job {job}" + (f" --scale {r}" if r else "")


class AssetError(RuntimeError):
    """Missing or corrupted shipped weights."""


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_manifest(assets: Path = ASSETS) -> dict:
    path = assets / MANIFEST
    if not path.exists():
        return {"schema": "mulo-assets/1", "models": {}}
    return json.loads(path.read_text())


def _entry(name: str, assets: Path, verify: bool) -> tuple[dict, dict]:
    entry = read_manifest(assets)["models"].get(name)
    path = assets / FILES[name]
    if entry is None or not path.exists():
        raise AssetError(f"the {name} weights are missing: expected {path} listed in {assets / MANIFEST}; "
                         f"train them with `{train_command(name)} --steps N --export`")
    if verify and sha256(path) != entry["sha256"]:
        raise AssetError(f"{path} does not match the checksum in {assets / MANIFEST}")
    return entry, load_file(str(path))


def load_tokenizer(assets: Path = ASSETS, verify: bool = True) -> VQModel:
    entry, state = _entry("tokenizer", assets, verify)
    cfg = dict(entry["config"])
    cfg["ch_mult"] = tuple(cfg["ch_mult"])
    model = VQModel(VQConfig(**cfg))
    model.load_state_dict(state)
    return model.eval()


def load_gpt(name: str, assets: Path = ASSETS, verify: bool = True) -> GPT:
    entry, state = _entry(name, assets, verify)
    model = GPT(GPTConfig(**entry["config"]))
    model.load_state_dict(state)
    return model.eval()


def _load_network(key: str, build, assets: Path, verify: bool) -> torch.nn.Module:
    """A shipped network built by build(its manifest config) and loaded; AssetError names the file
    when it is missing, corrupt or does not fit that configuration."""
    entry, state = _entry(key, assets, verify)
    model = build(entry["config"])
    try:
        model.load_state_dict(state)
    except RuntimeError as e:
        raise AssetError(f"{assets / FILES[key]} does not fit its manifest configuration: {str(e)[:200]}") from None
    return model.eval()


@lru_cache(maxsize=None)
def load_upsampler(name: str, r: int, assets: Path = ASSETS, verify: bool = True) -> torch.nn.Module:
    """The shipped network of upsampler=name (sr, learned, distilled) for scale r; AssetError names the file."""
    key = asset_name(name, r)
    if key not in FILES:
        raise AssetError(f"upsampler={name} has no trained network for scale={r}")
    cls, cfg_cls = (SRNet, SRConfig) if name == "sr" else (TokenUpsampler, TokenUpsamplerConfig)
    return _load_network(key, lambda cfg: cls(cfg_cls(**cfg)), assets, verify)


@lru_cache(maxsize=None)
def load_head(assets: Path = ASSETS, verify: bool = True) -> torch.nn.Module:
    """The shipped EAGLE draft head of the target (tree methods); AssetError names the file."""
    from ..models.eagle import DraftHead, HeadConfig
    return _load_network("eagle", lambda cfg: DraftHead(HeadConfig(**cfg)), assets, verify)


def load_classifier(assets: Path = ASSETS, verify: bool = True) -> Classifier:
    entry, state = _entry("classifier", assets, verify)
    model = Classifier(ClassifierConfig(**entry["config"]))
    model.load_state_dict(state)
    return model.eval()


def export(name: str, model: torch.nn.Module, config: dict, provenance: dict, assets: Path = ASSETS) -> Path:
    """Write weights (fp16 for the GPTs and the up-samplers, fp32 otherwise) and record config, checksum and provenance."""
    assets.mkdir(parents=True, exist_ok=True)
    path = assets / FILES[name]
    half = name in ("target", "drafter", "eagle") or name.startswith(tuple(f"{n}_" for n in UPSAMPLER_NETS))
    state = {k: (v.half() if half and v.is_floating_point() else v).contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(path))
    manifest = read_manifest(assets)
    manifest["models"][name] = dict(file=FILES[name], sha256=sha256(path), bytes=path.stat().st_size,
                                    config=config, **provenance)
    (assets / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return path


def record_evaluation(name: str, figures: dict, assets: Path = ASSETS) -> None:
    manifest = read_manifest(assets)
    manifest["models"][name].setdefault("evaluation", {}).update(figures)
    (assets / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


def caption(prompt: str, grid: tuple[int, int]):
    """ModelPair.caption of the family: the canonical caption's word and layout ids for the grid."""
    return data.caption_ids(canonical_prompt(prompt), grid[0])


def load_pair() -> ModelPair:
    """The "embedded" pair: the multi-resolution target (its own drafter at 16x16 and 8x8), the small
    same-resolution drafter when shipped, and the tokenizer."""
    tok = load_tokenizer()
    target = load_gpt("target")
    small = load_gpt("drafter") if (ASSETS / FILES["drafter"]).exists() else None
    return ModelPair("embedded", target, target, small, tok, (32, 32), caption, tok.neighbours(tok.vocab_size - 1),
                     upsampler_net=load_upsampler, head_net=load_head)


def pair_facts() -> dict:
    """Codebook size, mulo scales, default sampling and prompt kind of the pair, read from the manifest
    (nothing loaded)."""
    vocab = read_manifest()["models"]["tokenizer"]["config"]["codebook_size"]
    return dict(vocab_size=vocab, scales=(2, 4), sampling=SAMPLING,
                prompt="the domain's words (sizes, colours, shapes, places, backgrounds)")
