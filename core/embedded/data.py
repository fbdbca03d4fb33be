"""Training and evaluation data drawn from the procedural domain.

Seeds below HELDOUT_SEED train; seeds from HELDOUT_SEED on are held out for evaluation.
Owns scene -> tensor conversion and caption -> word-id conversion (the embedded text encoder's input).
"""
from __future__ import annotations

import numpy as np
import torch

from .domain import COLOURS, SHAPES, SIZES, VOCABULARY, Scene, parse_prompt, render, sample_scene, tokenize

HELDOUT_SEED = 10_000_000
GRID_SIDES = (32, 16, 8)                  # the embedded family's token grids
CAPTION_LEN = 28                           # word slots P of the caption prefix
# caption ids: 0 = padding, 1..len(VOCABULARY) = words, then one id per grid side
WORD_ID = {w: i + 1 for i, w in enumerate(VOCABULARY)}
GRID_ID = {g: len(VOCABULARY) + 1 + i for i, g in enumerate(GRID_SIDES)}
CAPTION_VOCAB = len(VOCABULARY) + 1 + len(GRID_SIDES)
# layout columns after the words: per place of the 3x3 grid (raster order) the shape, colour and size
# index of its object, or the attribute's count when the place is empty
LAYOUT_PLACES = 9
LAYOUT_FACTORS = (len(SHAPES), len(COLOURS), len(SIZES))
LAYOUT_TEMPLATE = (0, 2)                   # shape and size pick a learned per-offset template


def layout_ids(scene: Scene) -> torch.Tensor:
    """(LAYOUT_PLACES * 3,) ids: what the caption puts at each place."""
    out = torch.tensor(LAYOUT_FACTORS).repeat(LAYOUT_PLACES, 1)
    for o in scene.objects:
        out[o.row * 3 + o.col] = torch.tensor([SHAPES.index(o.shape), COLOURS.index(o.colour), SIZES.index(o.size)])
    return out.flatten()


def to_tensor(img: np.ndarray) -> torch.Tensor:
    """(S, S, 3) uint8 -> (3, S, S) float in [-1, 1]."""
    return torch.from_numpy(img).permute(2, 0, 1).float() / 127.5 - 1.0


def caption_ids(prompt: str, grid: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded (P,) word ids ending with the grid token followed by the layout ids the parsed
    prompt gives (see layout_ids), and the (P,) prefix mask.

    The embedded family attends to its padding words (a learned "empty" word), so the mask is all
    True; masked padding is a feature of the model (used by LlamaGen-style adapters), not of the domain.
    """
    ids = [WORD_ID[w] for w in tokenize(prompt)] + [GRID_ID[grid]]
    if len(ids) > CAPTION_LEN:
        raise ValueError(f"the prompt has {len(ids) - 1} words; at most {CAPTION_LEN - 1} fit the caption prefix")
    out = torch.zeros(CAPTION_LEN, dtype=torch.long)
    out[CAPTION_LEN - len(ids):] = torch.tensor(ids)
    return torch.cat([out, layout_ids(parse_prompt(prompt))]), torch.ones(CAPTION_LEN, dtype=torch.bool)


def scenes(start: int, count: int) -> list[Scene]:
    return [sample_scene(s) for s in range(start, start + count)]


def image_batch(scene_list: list[Scene], size: int) -> torch.Tensor:
    """(B, 3, size, size) in [-1, 1]."""
    return torch.stack([to_tensor(render(s, size)) for s in scene_list])


def rng_for(seed: int) -> np.random.Generator:
    return np.random.default_rng(np.random.PCG64(seed))
