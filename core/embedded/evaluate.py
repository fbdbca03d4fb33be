"""Measurements of the embedded family on held-out seeds: tokenizer, classifier, ar quality.

Every figure here is computed on scenes from data.HELDOUT_SEED on, never seen in training.
`quality` (prompt adherence and Fréchet distance of a set of images) is shared with the benchmark.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np
import torch
import torch.nn.functional as F

from ..config import RunConfig
from ..distributed import Ranks, gather, shard
from . import data, family
from .domain import Scene
from ..yardsticks import laplacian_energy
from .evaluation import adherence, frechet_distance


def heldout(n: int) -> list[Scene]:
    return data.scenes(data.HELDOUT_SEED, n)


def reference_features(scenes: list[Scene], classifier) -> np.ndarray:
    with torch.inference_mode():
        return classifier.read(data.image_batch(scenes, 64))[1].numpy()


def read_images(images: list[np.ndarray], scenes: list[Scene], classifier) -> tuple[list[float], np.ndarray]:
    """Per image: its adherence to its scene, and the classifier's features (n, F) for Fréchet distances."""
    with torch.inference_mode():
        x = torch.stack([data.to_tensor(im) for im in images])
        if x.shape[-1] != 64:
            x = F.interpolate(x, size=64, mode="bilinear", align_corners=False)
        reads, feats = classifier.read(x)
    return [adherence(s, r) for s, r in zip(scenes, reads)], feats.numpy()


def set_frechet(features: np.ndarray, scenes: list[Scene], classifier) -> float:
    """Fréchet distance of a set's features (n, F) to ground-truth renders of its scenes (nan below 3)."""
    return frechet_distance(features, reference_features(scenes, classifier)) if len(scenes) > 2 else float("nan")


def quality(images: list[np.ndarray], scenes: list[Scene], classifier) -> dict:
    """Prompt adherence and Fréchet distance (vs ground-truth renders of the same scenes)."""
    adh, feats = read_images(images, scenes, classifier)
    return dict(adherence=float(np.mean(adh)), frechet=set_frechet(feats, scenes, classifier), n=len(images))


def tokenizer_figures(n: int, progress: Callable) -> dict:
    tok = family.load_tokenizer()
    used = torch.zeros(tok.vocab_size, dtype=torch.bool)
    psnr = {}
    scenes = heldout(n)
    for size in (64, 32, 16):
        errs = []
        for b in range(0, n, 32):
            img = data.image_batch(scenes[b:b + 32], size)
            with torch.inference_mode():
                idx = tok.encode(img)
                rec = tok.decode(idx)
            used[idx.flatten()] = True
            mse = ((rec - img) / 2).pow(2).mean(dim=(1, 2, 3))  # images in [0, 1] units
            errs.append(10 * torch.log10(1.0 / mse.clamp_min(1e-10)))
            progress(b + 32, n, f"{size}px")
        psnr[f"psnr_{size}px"] = round(float(torch.cat(errs).mean()), 2)
    return dict(codebook_usage=round(float(used.float().mean()), 4), heldout_images=n, **psnr)


UPSAMPLER_HELDOUT = 200   # held-out scenes an up-sampler is measured on at export


def _uint8(img: torch.Tensor) -> list[np.ndarray]:
    return list(((img.clamp(-1, 1) + 1) * 127.5).round().byte().permute(0, 2, 3, 1).numpy())


def _pixel_figures(out: torch.Tensor, truth: torch.Tensor, tok) -> dict:
    """PSNR (dB, [0, 1] units), high-frequency energy over the truth's, and the share of cells whose token
    is the truth's token, per image."""
    mse = ((out - truth) / 2).pow(2).mean(dim=(1, 2, 3))
    energy = [laplacian_energy(a) / max(laplacian_energy(b), 1e-12) for a, b in zip(_uint8(out), _uint8(truth))]
    agree = (tok.encode(out) == tok.encode(truth)).float().mean(dim=(1, 2))
    return dict(psnr=(10 * torch.log10(1.0 / mse.clamp_min(1e-10))).tolist(), sharpness=energy,
                token_accuracy=agree.tolist())


def upsampler_figures(net, job: str, r: int, n: int, progress: Callable, tok=None) -> dict:
    """A trained up-sampler against the training-free ones on n held-out scenes, from the drafter
    grid's tokens of each scene drawn at 1/r of the size. sr: PSNR, sharpness (median ratio to the
    scene drawn at full size) and token accuracy of its re-encoded output, beside bicubic (pixel); learned:
    token accuracy of its argmax, beside nearest and pixel."""
    from ..upsampling import UPSAMPLERS
    from .train import SIZE
    tok = tok or family.load_tokenizer()
    rows: dict[str, dict[str, list]] = {}
    scenes = heldout(n)
    for b in range(0, n, 25):
        part = scenes[b:b + 25]
        truth = data.image_batch(part, SIZE)
        low = tok.encode(data.image_batch(part, SIZE // r))
        with torch.inference_mode():
            if job == "sr":
                small = tok.decode(low)
                outs = {"pixel": F.interpolate(small, scale_factor=r, mode="bicubic", align_corners=False).clamp(-1, 1),
                        "sr": net(small)}
                for name, out in outs.items():
                    for k, v in _pixel_figures(out, truth, tok).items():
                        rows.setdefault(name, {}).setdefault(k, []).extend(v)
            else:
                target = tok.encode(truth)
                for name in ("nearest", "pixel", job):
                    up = torch.stack([UPSAMPLERS[name](t, r, tok, net) for t in low])
                    rows.setdefault(name, {}).setdefault("token_accuracy", []).extend(
                        (up == target).float().mean(dim=(1, 2)).tolist())
        progress(min(b + 25, n), n, job)
    med = {"sharpness"}
    return dict(heldout_images=n, scale=r, **{name: {k: round(float(np.median(v) if k in med else np.mean(v)), 4)
                                                      for k, v in figs.items()} for name, figs in rows.items()})


def classifier_figures(n: int, progress: Callable) -> dict:
    from .evaluation import CELL_HEADS, attribute_targets
    clf, tok = family.load_classifier(), family.load_tokenizer()
    scenes = heldout(n)
    out = {}
    for size in (64, 32, 16):
        hits: dict = {}
        adh = []
        for b in range(0, n, 50):
            chunk = scenes[b:b + 50]
            with torch.inference_mode():
                img = tok.decode(tok.encode(data.image_batch(chunk, size)))  # as generated images arrive
                reads, _ = clf.read(img)
                cell_logits, bg_logits, _ = clf(F.interpolate(img, size=64, mode="bilinear") if size != 64 else img)
            t = attribute_targets(chunk)
            start = 0
            for name, k in CELL_HEADS:
                pred = cell_logits[..., start:start + k].argmax(-1)
                ok = t[name] != -100
                hits.setdefault(name, []).append(((pred == t[name]) & ok).sum().item() / max(ok.sum().item(), 1))
                start += k
            adh += [adherence(s, r) for s, r in zip(chunk, reads)]
            progress(b + 50, n, f"{size}px")
        out[f"{size}px"] = dict({k: round(float(np.mean(v)), 4) for k, v in hits.items()},
                                adherence_on_ground_truth=round(float(np.mean(adh)), 4))
    return dict(heldout_images=n, accuracy=out)


def ar_figures(n: int, progress: Callable, grids=(32, 16, 8), ranks: Ranks = Ranks()) -> dict | None:
    """ar at each grid on n held-out prompts; under torchrun each rank decodes every world-th prompt and
    rank 0 scores the gathered images (the figures of one process). None on ranks other than 0."""
    from .. import engine
    pair = engine.load_pair("embedded")
    clf = family.load_classifier()
    scenes = heldout(n)
    mine = shard(n, ranks)
    out = {}
    for g in grids:
        gp = dataclasses.replace(pair, grid=(g, g))
        runs = []
        for k, i in enumerate(mine):
            tr = engine.run(RunConfig(method="ar", prompt=scenes[i].caption(), seed=i), gp)
            runs.append((i, engine.decode_image(tr.tokens, pair.tokenizer), tr.totals["wall_ms"]))
            progress(k + 1, len(mine), f"{g}x{g}")
        parts = gather(runs, ranks)
        if parts is None:
            continue
        runs = sorted((r for part in parts for r in part), key=lambda r: r[0])
        q = quality([im for _, im, _ in runs], scenes, clf)
        out[f"{g}x{g}"] = dict(adherence=round(q["adherence"], 4), frechet=round(q["frechet"], 3),
                               mean_wall_s=round(float(np.mean([w for _, _, w in runs])) / 1000, 3), prompts=n)
    if not ranks.main:
        return None
    out["reference_frechet_noise_floor"] = round(_split_half_frechet(n, clf), 3)
    return out


def _split_half_frechet(n: int, clf) -> float:
    """FD between two disjoint sets of ground-truth images: the floor a perfect generator would get."""
    a = reference_features(heldout(n), clf)
    b = reference_features(data.scenes(data.HELDOUT_SEED + 500_000, n), clf)
    return frechet_distance(a, b)


def run(what: str, n: int, progress: Callable, grids=(32, 16, 8), record: bool = False,
        ranks: Ranks = Ranks()) -> dict | None:
    """The figures on rank 0 (None on the others). Only ar is sharded across ranks; the tokenizer and
    classifier figures are batched passes that rank 0 computes alone."""
    if what == "ar":
        figs = ar_figures(n, progress, grids, ranks)
    elif not ranks.main:
        return None
    elif what == "tokenizer":
        figs = tokenizer_figures(n, progress)
    else:
        figs = classifier_figures(n, progress)
    if record and figs is not None:
        family.record_evaluation({"ar": "target"}.get(what, what), figs)
    return figs
