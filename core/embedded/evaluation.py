"""The domain's evaluator: a classifier that reads scene attributes back from an image.

Prompt adherence (our GenEval analogue) = the fraction of a prompt's attributes the classifier
recovers from the generated image: per object its presence at its place, shape, colour and size,
plus the object count, background kind and background colour. The Fréchet distance between the
classifier's pooled features of generated and of ground-truth images is our FID analogue.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from .domain import BACKGROUNDS, COLOURS, SHAPES, SIZES, Scene


@dataclass(frozen=True)
class ClassifierConfig:
    width: int = 48          # channels of the first stage (doubled twice)
    feature_dim: int = 64    # pooled feature width used for the Fréchet distance

    def to_dict(self) -> dict:
        return dict(self.__dict__)


# per-cell heads: presence (2), shape, colour, size; global heads: background kind and colour
CELL_HEADS = (("present", 2), ("shape", len(SHAPES)), ("colour", len(COLOURS)), ("size", len(SIZES)))
IGNORE = -100


class Classifier(nn.Module):
    def __init__(self, cfg: ClassifierConfig):
        super().__init__()
        self.cfg = cfg
        w = cfg.width

        def stage(c_in, c_out):
            return nn.Sequential(nn.Conv2d(c_in, c_out, 3, stride=2, padding=1), nn.GroupNorm(8, c_out), nn.SiLU(),
                                 nn.Conv2d(c_out, c_out, 3, padding=1), nn.GroupNorm(8, c_out), nn.SiLU())
        self.trunk = nn.Sequential(stage(3, w), stage(w, 2 * w), stage(2 * w, 4 * w))  # 64 -> 8
        self.cell_head = nn.Linear(4 * w, sum(n for _, n in CELL_HEADS))
        self.feature = nn.Linear(4 * w, cfg.feature_dim)
        self.bg_head = nn.Linear(cfg.feature_dim, len(BACKGROUNDS) + len(COLOURS))

    def forward(self, img: torch.Tensor):
        """img (B, 3, 64, 64) in [-1, 1] -> cell logits (B, 9, sum), bg logits (B, 4 + 8), features (B, F)."""
        h = self.trunk(img)                                                   # (B, C, 8, 8)
        cells = F.adaptive_avg_pool2d(h, 3).flatten(2).transpose(1, 2)       # (B, 9, C)
        feats = torch.tanh(self.feature(h.mean(dim=(2, 3))))
        return self.cell_head(cells), self.bg_head(feats), feats

    def loss(self, img: torch.Tensor, targets: dict) -> torch.Tensor:
        cell_logits, bg_logits, _ = self(img)
        total, start = 0.0, 0
        for name, n in CELL_HEADS:
            part = cell_logits[..., start:start + n].reshape(-1, n)
            total = total + F.cross_entropy(part, targets[name].reshape(-1), ignore_index=IGNORE)
            start += n
        nb = len(BACKGROUNDS)
        total = total + F.cross_entropy(bg_logits[:, :nb], targets["background"])
        return total + F.cross_entropy(bg_logits[:, nb:], targets["bg_colour"])

    @torch.no_grad()
    def read(self, img: torch.Tensor) -> tuple[list[dict], torch.Tensor]:
        """Attributes read from each image (same layout as Scene.attributes()) and (B, F) features."""
        if img.shape[-1] != 64:
            img = F.interpolate(img, size=64, mode="bilinear", align_corners=False)
        cell_logits, bg_logits, feats = self(img)
        out, nb = [], len(BACKGROUNDS)
        for b in range(img.shape[0]):
            objs, start, parts = [], 0, {}
            for name, n in CELL_HEADS:
                parts[name] = cell_logits[b, :, start:start + n].argmax(-1)
                start += n
            for c in range(9):
                if parts["present"][c] == 1:
                    objs.append(dict(shape=SHAPES[parts["shape"][c]], colour=COLOURS[parts["colour"][c]],
                                     size=SIZES[parts["size"][c]], row=c // 3, col=c % 3))
            out.append(dict(objects=objs, background=BACKGROUNDS[int(bg_logits[b, :nb].argmax())],
                            bg_colour=COLOURS[int(bg_logits[b, nb:].argmax())]))
        return out, feats


def attribute_targets(scenes: list[Scene]) -> dict:
    B = len(scenes)
    t = {name: torch.full((B, 9), IGNORE, dtype=torch.long) for name, _ in CELL_HEADS}
    t["present"].zero_()
    for b, s in enumerate(scenes):
        for o in s.objects:
            c = o.row * 3 + o.col
            t["present"][b, c] = 1
            t["shape"][b, c], t["colour"][b, c] = SHAPES.index(o.shape), COLOURS.index(o.colour)
            t["size"][b, c] = SIZES.index(o.size)
    t["background"] = torch.tensor([BACKGROUNDS.index(s.background) for s in scenes])
    t["bg_colour"] = torch.tensor([COLOURS.index(s.bg_colour) for s in scenes])
    return t


def adherence(prompt: Scene, read: dict) -> float:
    """Fraction of the prompt's attributes found in what the classifier read."""
    found = {(o["row"], o["col"]): o for o in read["objects"]}
    hits, total = 0, 0
    for o in prompt.objects:
        got = found.get((o.row, o.col))
        hits += (got is not None) + sum(got is not None and got[a] == getattr(o, a) for a in ("shape", "colour", "size"))
        total += 4
    hits += (len(read["objects"]) == len(prompt.objects)) + (read["background"] == prompt.background) \
        + (read["bg_colour"] == prompt.bg_colour)
    return hits / (total + 3)


def frechet_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Fréchet distance between Gaussians fitted to feature sets a (n, F) and b (m, F)."""
    mu_a, mu_b = a.mean(0), b.mean(0)
    ca, cb = np.cov(a, rowvar=False), np.cov(b, rowvar=False)
    w, v = np.linalg.eigh(ca)
    sa = (v * np.sqrt(np.clip(w, 0, None))) @ v.T                         # ca^(1/2)
    m = sa @ cb @ sa
    tr_sqrt = np.sqrt(np.clip(np.linalg.eigvalsh((m + m.T) / 2), 0, None)).sum()  # Tr (ca^1/2 cb ca^1/2)^1/2
    return float(((mu_a - mu_b) ** 2).sum() + np.trace(ca) + np.trace(cb) - 2 * tr_sqrt)
