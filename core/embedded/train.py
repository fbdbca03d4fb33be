"""Training of the embedded family: tokenizer, multi-resolution target/drafter, small drafter, classifier,
mulo's trained up-samplers (sr: pixel super-resolution; learned: token space, on the data; distilled: the
same network on the target's own samples, by KL to the target's processed distribution), one per scale r, and
the EAGLE draft head of the tree methods (eagle, lantern, lantern_pp, vvs) on the target's features.

Owns the resumable loop (checkpoint every few steps; a rerun continues where it stopped), the
per-job losses and the deterministic data stream (the batch of step s depends only on the data seed
and s). Reports progress through a callback; never prints.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F

from ..models.gpt import GPT, GPTConfig
from ..models.vq import VQConfig, VQModel
from . import data
from .evaluation import Classifier, ClassifierConfig, attribute_targets

JOBS = ("tokenizer", "target", "drafter", "classifier", "sr", "learned", "distilled", "eagle")
UPSAMPLER_JOBS = ("sr", "learned", "distilled")   # trained per scale r (TrainConfig.scale), exported as <job>_x<r>
# the embedded family's configurations (the target serves all three grids; see family.py)
TOKENIZER = VQConfig()
TARGET = GPTConfig(vocab_size=TOKENIZER.codebook_size, dim=128, n_layer=4, n_head=4, prefix_len=data.CAPTION_LEN,
                   caption_dim=64, caption_vocab=data.CAPTION_VOCAB, rope_ref_grid=32,
                   layout_places=data.LAYOUT_PLACES, layout_factors=data.LAYOUT_FACTORS,
                   layout_template=data.LAYOUT_TEMPLATE)
SMALL_DRAFTER = GPTConfig(vocab_size=TOKENIZER.codebook_size, dim=96, n_layer=2, n_head=3,
                          prefix_len=data.CAPTION_LEN, caption_dim=32, caption_vocab=data.CAPTION_VOCAB,
                          rope_ref_grid=32, layout_places=data.LAYOUT_PLACES, layout_factors=data.LAYOUT_FACTORS,
                          layout_template=data.LAYOUT_TEMPLATE)
CLASSIFIER = ClassifierConfig()
SIZE = 64   # the target's image side in pixels (32 tokens of TOKENIZER.downsample pixels)


@dataclass(frozen=True)
class TrainConfig:
    job: str                  # one of JOBS
    steps: int                # total optimizer steps
    batch: int                # images per step
    lr: float                 # peak learning rate (warm-up then cosine decay)
    data_seed: int = 0        # seeds the data stream and the initialisation
    ckpt_every: int = 50      # steps between resumable checkpoints
    warmup: int = 50
    grids: tuple = (32, 16, 8)  # AR jobs: token grids cycled through, one per step
    scale: int = 0            # up-sampler jobs: r (2 or 4)
    detail: float = 0.0       # sr: weight of the detail term (L1 of the image gradients) beside the pixel L1
    pool: int = 0             # distilled: how many of the target's own samples it is distilled on


def _lr(cfg: TrainConfig, step: int) -> float:
    if step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    frac = (step - cfg.warmup) / max(1, cfg.steps - cfg.warmup)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def _scene_batch(cfg: TrainConfig, step: int, n: int):
    rng = data.rng_for(cfg.data_seed * 1_000_003 + step)
    seeds = rng.integers(0, data.HELDOUT_SEED, size=n)
    return [data.sample_scene(int(s)) for s in seeds], rng


class TokenizerJob:
    def __init__(self, cfg: TrainConfig, assets: Path | None):
        self.cfg, self.model = cfg, VQModel(TOKENIZER)
        self.usage = torch.zeros(TOKENIZER.codebook_size)
        self.latents: torch.Tensor | None = None  # (n, d) normalized latents of the last step

    def loss(self, step: int):
        if step % 25 == 0 and self.latents is not None:  # restart dead codes on recent latents
            dead = torch.nonzero(self.usage == 0).squeeze(1)
            if len(dead):
                pick = torch.randint(0, self.latents.shape[0], (len(dead),))
                with torch.no_grad():
                    self.model.quantize.embedding.weight[dead] = self.latents[pick]
            self.usage.zero_()
        scenes, rng = _scene_batch(self.cfg, step, self.cfg.batch)
        size = (64, 32, 16)[step % 3]
        img = data.image_batch(scenes, size)
        if size == 64:  # random 32x32 crops keep the step cheap; the network is fully convolutional
            y, x = (int(v) for v in rng.integers(0, 33, size=2))
            img = img[:, :, y:y + 32, x:x + 32]
        rec, idx, vq_loss, flat = self.model(img)
        self.usage += torch.bincount(idx.flatten(), minlength=TOKENIZER.codebook_size)
        self.latents = flat.detach()
        return F.mse_loss(rec, img) + vq_loss


class ARJob:
    def __init__(self, cfg: TrainConfig, assets: Path, model_cfg: GPTConfig):
        from .family import load_tokenizer
        self.cfg, self.model = cfg, GPT(model_cfg)
        self.tokenizer = load_tokenizer(assets)

    def loss(self, step: int):
        grid = self.cfg.grids[step % len(self.cfg.grids)]
        # equal token count per step whatever the grid: 32x32 steps take batch, coarser ones more images
        n = self.cfg.batch * (32 // grid) ** 2 // (2 if grid == 8 else 1)
        scenes, rng = _scene_batch(self.cfg, step, n)
        img = data.image_batch(scenes, grid * TOKENIZER.downsample)
        tokens = self.tokenizer.encode(img).flatten(1)  # (B, N)
        caps, masks = zip(*(data.caption_ids(s.caption(), grid) for s in scenes))
        caps, masks = torch.stack(caps), torch.stack(masks)
        drop = torch.from_numpy(rng.random(n) < 0.1)  # caption dropout teaches the null caption (CFG)
        masks = masks | drop[:, None]
        logits = self.model(caps, masks, tokens, (grid, grid), drop=drop)
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens.reshape(-1))


class ClassifierJob:
    def __init__(self, cfg: TrainConfig, assets: Path):
        from .family import load_tokenizer
        self.cfg, self.model = cfg, Classifier(CLASSIFIER)
        self.tokenizer = load_tokenizer(assets)

    def loss(self, step: int):
        scenes, rng = _scene_batch(self.cfg, step, self.cfg.batch)
        size = (64, 32, 16)[step % 3]
        img = data.image_batch(scenes, size)
        if rng.random() < 0.5:  # generated images come through the tokenizer: learn its artefacts
            img = self.tokenizer.decode(self.tokenizer.encode(img))
        img = F.interpolate(img, size=64, mode="bilinear", align_corners=False) if size != 64 else img
        return self.model.loss(img, attribute_targets(scenes))


def image_gradients(img: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Horizontal and vertical finite differences of (B, C, S, S) images."""
    return img[..., :, 1:] - img[..., :, :-1], img[..., 1:, :] - img[..., :-1, :]


def low_resolution_decode(tokenizer, scenes, r: int) -> torch.Tensor:
    """What mulo's drafter hands the sr up-sampler: the tokens of the scene at 1/r of the target's size,
    decoded (B, 3, SIZE / r, SIZE / r)."""
    return tokenizer.decode(tokenizer.encode(data.image_batch(scenes, SIZE // r)))


def low_resolution_tokens(tokenizer, scenes, target: torch.Tensor, r: int, rng) -> torch.Tensor:
    """What the learned up-sampler reads: per image, at random, the drafter-grid tokens of the scene drawn
    at 1/r of the size (as the drafter samples them) or D_r of the target tokens (as mulo refreshes the
    drafter's prefix: decode, area-resize / r, encode)."""
    drawn = tokenizer.encode(data.image_batch(scenes, SIZE // r))
    down = tokenizer.encode(F.interpolate(tokenizer.decode(target), scale_factor=1.0 / r, mode="area"))
    pick = torch.from_numpy(rng.random(len(scenes)) < 0.5)[:, None, None]
    return torch.where(pick, drawn, down)


class SRJob:
    """Pixel L1 against the scene drawn at full size, plus `detail` x L1 of the image gradients."""
    def __init__(self, cfg: TrainConfig, assets: Path):
        from ..models.upsamplers import SRConfig, SRNet
        from .family import load_tokenizer
        _check_scale(cfg)
        self.cfg, self.model = cfg, SRNet(SRConfig(scale=cfg.scale))
        self.tokenizer = load_tokenizer(assets)

    def loss(self, step: int):
        scenes, _ = _scene_batch(self.cfg, step, self.cfg.batch)
        out = self.model(low_resolution_decode(self.tokenizer, scenes, self.cfg.scale))
        img = data.image_batch(scenes, SIZE)
        loss = F.l1_loss(out, img)
        if self.cfg.detail:
            loss = loss + self.cfg.detail * sum(F.l1_loss(a, b) for a, b in zip(image_gradients(out),
                                                                                  image_gradients(img)))
        return loss


class LearnedJob:
    """Cross-entropy of the target's tokens of the scene given the low-resolution tokens."""
    def __init__(self, cfg: TrainConfig, assets: Path):
        from ..models.upsamplers import TokenUpsampler, TokenUpsamplerConfig
        from .family import load_tokenizer
        _check_scale(cfg)
        self.cfg = cfg
        self.model = TokenUpsampler(TokenUpsamplerConfig(scale=cfg.scale, vocab_size=TOKENIZER.codebook_size))
        self.tokenizer = load_tokenizer(assets)

    def loss(self, step: int):
        scenes, rng = _scene_batch(self.cfg, step, self.cfg.batch)
        target = self.tokenizer.encode(data.image_batch(scenes, SIZE))
        low = low_resolution_tokens(self.tokenizer, scenes, target, self.cfg.scale, rng)
        return F.cross_entropy(self.model(low), target)


POOL_SEED = 7_000_000   # distilled: the pool's scenes are drawn by rng_for(POOL_SEED + data_seed), below HELDOUT_SEED


def pool_scene_seeds(data_seed: int, n: int) -> list[int]:
    """The training scenes (seeds below HELDOUT_SEED) whose captions the target samples for the pool."""
    return [int(s) for s in data.rng_for(POOL_SEED + data_seed).integers(0, data.HELDOUT_SEED, size=n)]


def target_pool(folder: Path, n: int, data_seed: int, progress: Callable[[int, int, float], None] = lambda *a: None):
    """n of the target's own samples (ar under the pair's sampling defaults, run seed = the sample's index),
    one file per sample (folder/<i>.npz: tokens, scene seed), written whole or not at all; samples
    already there are kept, so an interrupted pool resumes. Returns (n, N) tokens and the scene seeds."""
    import numpy as np
    from ..config import RunConfig
    folder.mkdir(parents=True, exist_ok=True)
    seeds, pair = pool_scene_seeds(data_seed, n), None
    out = []
    for i, seed in enumerate(seeds):
        path = folder / f"{i:05d}.npz"
        if not path.exists():
            from .. import engine
            pair = pair or engine.load_pair("embedded")
            trace = engine.run(RunConfig(method="ar", prompt=data.sample_scene(seed).caption(), seed=i), pair)
            tmp = folder / f".{i:05d}.tmp.npz"
            np.savez(tmp, tokens=np.asarray(trace.tokens, np.int16).reshape(-1), scene=seed)
            tmp.replace(path)
        with np.load(path) as f:
            if int(f["scene"]) != seed:
                raise ValueError(f"{path} holds a sample of scene {int(f['scene'])}, not {seed}: the pool was "
                                 f"made with another --data-seed; use a new run folder")
            out.append(torch.from_numpy(f["tokens"].astype(np.int64)))
        progress(i + 1, n, "target samples in the pool")
    return torch.stack(out), seeds


def target_probs(target, tokens: torch.Tensor, captions: list[str], sampling) -> torch.Tensor:
    """(B, N) token grids of the 32x32 target -> (B, N, V): the target's processed distribution at every
    cell given the grid's tokens before it (one teacher-forced, cache-free forward with CFG's null
    caption beside), as core.likelihood.target_distribution for a batch."""
    from ..sampling import processed
    from .family import caption
    grid, B = (32, 32), tokens.shape[0]
    caps, masks = zip(*(caption(c, grid) for c in captions))
    caps, masks = torch.stack(caps), torch.stack(masks)
    two = sampling.cfg != 1.0
    if two:
        caps, masks, tokens = caps.repeat(2, 1), masks.repeat(2, 1), tokens.repeat(2, 1)
    drop = torch.arange(caps.shape[0]) >= B
    logits = target(caps, masks, tokens, grid, drop=drop)                    # (2B, N, V), conditional first
    return processed(logits, sampling, cells=torch.arange(tokens.shape[1]))


class DistilledJob:
    """The learned up-sampler's network distilled against the target: on the target's own samples x (the
    pool), q(. | D_r(x)) at every cell is fitted to the target's processed distribution p(. | x_<t) there,
    by the cross-entropy H(p, q) = KL(p || q) + H(p). The KL-optimal q given the low-resolution tokens is
    the mean of p over the contexts that share them, so its argmax maximises the expected p(proposal)
    (the acceptance of a one-hot proposal) and its sampled form the expected 1 - TV(p, q)."""
    def __init__(self, cfg: TrainConfig, assets: Path, run_dir: Path | None = None):
        from ..models.upsamplers import TokenUpsampler, TokenUpsamplerConfig
        from .family import SAMPLING, load_gpt, load_tokenizer
        _check_scale(cfg)
        if cfg.pool < cfg.batch:
            raise ValueError(f"the distilled job needs --pool of at least --batch ({cfg.batch}) target samples; "
                             f"got {cfg.pool}")
        self.cfg, self.run_dir, self.sampling = cfg, run_dir, SAMPLING
        self.model = TokenUpsampler(TokenUpsamplerConfig(scale=cfg.scale, vocab_size=TOKENIZER.codebook_size))
        self.tokenizer = load_tokenizer(assets)
        self.target = load_gpt("target", assets)
        self.target.requires_grad_(False)
        self.tokens = None

    def prepare(self, progress) -> None:
        """Sample (or resume) the pool of the target's samples and their low-resolution tokens."""
        if self.run_dir is None:
            raise ValueError("the distilled job samples its pool into its run folder; none given")
        self.tokens, seeds = target_pool(self.run_dir / "pool", self.cfg.pool, self.cfg.data_seed, progress)
        self.captions = [data.sample_scene(s).caption() for s in seeds]
        with torch.no_grad():
            r, grids = self.cfg.scale, self.tokens.reshape(-1, 32, 32)
            self.low = torch.cat([self.tokenizer.encode(F.interpolate(self.tokenizer.decode(g), scale_factor=1.0 / r,
                                                                      mode="area")) for g in grids.split(64)])
            # the target's p of every pool sample, once (2 MiB a sample), not a target forward per step
            self.p = torch.cat([target_probs(self.target, self.tokens[i:i + 8], self.captions[i:i + 8],
                                             self.sampling) for i in range(0, len(self.tokens), 8)])

    def loss(self, step: int):
        rng = data.rng_for(self.cfg.data_seed * 1_000_003 + step)
        pick = torch.from_numpy(rng.choice(self.cfg.pool, size=self.cfg.batch, replace=False))
        p = self.p[pick]
        logq = torch.log_softmax(self.model(self.low[pick]).float(), 1).flatten(2).transpose(1, 2)   # (B, N, V)
        return -(p * logq).sum(-1).mean()


class EagleJob:
    """The draft head on the frozen target's own features over the domain's scenes, as EAGLE and
    LANTERN train theirs: smooth L1 of the predicted next feature plus 0.1 x the cross-entropy of its
    logits against the target's distribution there, uniform noise (width 0.2) on the input features,
    10 % of the captions dropped so the head also learns the unconditional branch of CFG."""
    NOISE, P_WEIGHT = 0.2, 0.1

    def __init__(self, cfg: TrainConfig, assets: Path):
        from ..models.eagle import DraftHead
        from .family import load_gpt, load_tokenizer
        self.cfg = cfg
        self.target = load_gpt("target", assets)
        self.target.requires_grad_(False)
        self.model = DraftHead.for_target(self.target)
        self.tokenizer = load_tokenizer(assets)

    def loss(self, step: int):
        grid, t = (32, 32), self.target
        scenes, rng = _scene_batch(self.cfg, step, self.cfg.batch)
        with torch.no_grad():
            tokens = self.tokenizer.encode(data.image_batch(scenes, SIZE)).flatten(1)      # (B, N)
            caps, masks = zip(*(data.caption_ids(s.caption(), grid[0]) for s in scenes))
            caps, masks = torch.stack(caps), torch.stack(masks)
            drop = torch.from_numpy(rng.random(len(scenes)) < 0.1)
            out: dict = {}
            t(caps, masks | drop[:, None], tokens, grid, drop=drop, out=out)
            feats = out["hidden"]                                # (B, N, D): feats[:, c] predicts cell c
            cond = t.cell_conditioning(caps, grid, drop)         # (B, N, D) per predicted cell, or None
            gen = torch.Generator().manual_seed(self.cfg.data_seed * 1_000_003 + step)
            noise = (torch.rand(feats[:, :-1].shape, generator=gen) - 0.5) * self.NOISE
        P, N = t.cfg.prefix_len, tokens.shape[1]
        # at cell c the head reads x_c and the feature that predicted it, and predicts the feature at c
        pred = self.model(tokens[:, :-1], feats[:, :-1] + noise, t.rope(grid, "cpu")[P:P + N - 1],
                          None if cond is None else cond[:, 1:])
        goal = feats[:, 1:]
        v_loss = F.smooth_l1_loss(pred, goal)
        p_goal = torch.softmax(t.output(goal).float(), -1)
        p_loss = -(p_goal * torch.log_softmax(t.output(pred).float(), -1)).sum(-1).mean()
        return v_loss + self.P_WEIGHT * p_loss


def _check_scale(cfg: TrainConfig) -> None:
    if cfg.scale not in (2, 4):
        raise ValueError(f"the {cfg.job} job needs --scale 2 or 4 (the up-scale factor r it learns); got {cfg.scale}")


def make_job(cfg: TrainConfig, assets: Path, run_dir: Path | None = None):
    if cfg.job == "tokenizer":
        return TokenizerJob(cfg, assets)
    if cfg.job == "target":
        return ARJob(cfg, assets, TARGET)
    if cfg.job == "drafter":
        return ARJob(cfg, assets, SMALL_DRAFTER)
    if cfg.job == "classifier":
        return ClassifierJob(cfg, assets)
    if cfg.job == "sr":
        return SRJob(cfg, assets)
    if cfg.job == "learned":
        return LearnedJob(cfg, assets)
    if cfg.job == "distilled":
        return DistilledJob(cfg, assets, run_dir)
    if cfg.job == "eagle":
        return EagleJob(cfg, assets)
    raise ValueError(f"unknown job {cfg.job!r}; choose one of {', '.join(JOBS)}")


class CheckpointError(ValueError):
    """A checkpoint that is not plain data (tensors, numbers, text, lists and dicts of them)."""


def read_checkpoint(path: Path) -> dict:
    """A run checkpoint as plain data. torch.load runs with weights_only=True: a file that would
    need to run code to load (a crafted pickle) is refused, never executed."""
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise
    except Exception as e:  # UnpicklingError and the like: the message says what it would have run
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path} is not a plain checkpoint (tensors, numbers, text); refused to load "
                              f"it: {first[:200]}") from None
    if not isinstance(state, dict) or not {"config", "model", "step"} <= set(state):
        raise CheckpointError(f"{path} is not a training checkpoint of this project (config, model, step)")
    return state


def read_weights(path: Path) -> dict:
    """A state dict from a run checkpoint (ckpt.pt) or a safetensors file."""
    if not path.exists():
        raise FileNotFoundError(f"no weights at {path}")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file
        return load_file(str(path))
    return read_checkpoint(path)["model"]


def train(cfg: TrainConfig, run_dir: Path, assets: Path,
          progress: Callable[[int, int, float], None] = lambda *a: None,
          init: dict | None = None) -> torch.nn.Module:
    """Train (or resume) one job in run_dir; returns the trained module. Logs to run_dir/log.jsonl.

    init: a state dict to start from when run_dir has no checkpoint yet (e.g. the shipped weights,
    to continue training in a new place without the optimizer state). Modules the init lacks (a
    conditioning added to the configuration since) keep their fresh initialisation; anything else
    that does not match is an error."""
    run_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(cfg.data_seed)
    job = make_job(cfg, assets, run_dir)
    if hasattr(job, "prepare"):       # data the job makes once (the distilled job's pool), resumable
        job.prepare(progress)
    opt = torch.optim.AdamW(job.model.parameters(), lr=cfg.lr, betas=(0.9, 0.95), weight_decay=0.01)
    ckpt, start = run_dir / "ckpt.pt", 0
    if init is not None and not ckpt.exists():
        missing, unexpected = job.model.load_state_dict(init, strict=False)
        if unexpected or any(not k.startswith("layout.") for k in missing):
            raise ValueError(f"the init weights do not fit the {cfg.job} configuration: "
                             f"missing {missing}, unexpected {unexpected}")
    if ckpt.exists():
        state = read_checkpoint(ckpt)
        changed = {k for k in cfg.__dict__ if state["config"].get(k) != cfg.__dict__[k]}
        if changed - {"steps"}:  # a new total only re-draws the learning-rate curve from here on
            raise ValueError(f"{ckpt} was made with another {', '.join(sorted(changed))}; use a new run folder")
        job.model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start = state["step"]
        torch.set_rng_state(state["torch_rng"])
    log = open(run_dir / "log.jsonl", "a")
    job.model.train()
    for step in range(start, cfg.steps):
        t0 = time.perf_counter()
        for g in opt.param_groups:
            g["lr"] = _lr(cfg, step)
        loss = job.loss(step)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(job.model.parameters(), 1.0)
        opt.step()
        value = loss.item()
        log.write(json.dumps(dict(step=step + 1, loss=value, lr=_lr(cfg, step),
                                  sec=round(time.perf_counter() - t0, 3))) + "\n")
        progress(step + 1, cfg.steps, value)
        if (step + 1) % cfg.ckpt_every == 0 or step + 1 == cfg.steps:
            log.flush()
            torch.save(dict(config=cfg.__dict__, model=job.model.state_dict(), opt=opt.state_dict(),
                            step=step + 1, torch_rng=torch.get_rng_state()), ckpt)
    log.close()
    job.model.eval()
    return job.model
