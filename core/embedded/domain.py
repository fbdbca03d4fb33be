"""The procedural text-to-image domain: seeded captioned scenes with ground-truth attributes.

Owns the vocabulary, the scene sampler, the renderer (any square resolution, anti-aliased by
supersampling so that the same scene at 16, 32 and 64 pixels is one picture at three scales), the
caption writer and the caption parser. Knows nothing about tokens or models.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

SHAPES = ("circle", "square", "triangle", "diamond", "cross")
COLOURS = ("red", "orange", "yellow", "green", "cyan", "blue", "purple", "pink")
SIZES = ("small", "medium", "large")
BACKGROUNDS = ("gradient", "striped", "checkered", "noisy")
ROWS = ("top", "middle", "bottom")
COLS = ("left", "center", "right")
# the position words of the nine cells in raster order, as captions write and the parser reads them
PLACES = tuple("center" if (r, c) == (1, 1) else f"{ROWS[r]} {COLS[c]}" for r in range(3) for c in range(3))
FILLER = ("a", "an", "and", "on", "background")

RGB = {
    "red": (232, 44, 44), "orange": (247, 142, 24), "yellow": (244, 224, 40), "green": (44, 196, 70),
    "cyan": (36, 214, 224), "blue": (48, 86, 236), "purple": (156, 60, 210), "pink": (248, 124, 194),
}
RADIUS = {"small": 0.075, "medium": 0.115, "large": 0.155}  # fraction of the image side
VOCABULARY = tuple(sorted(set(SHAPES + COLOURS + SIZES + BACKGROUNDS + ROWS + COLS + FILLER)))


class PromptError(ValueError):
    """A prompt the domain cannot read; the message names the offending word or phrase."""


@dataclass(frozen=True)
class SceneObject:
    shape: str
    colour: str
    size: str
    row: int  # 0..2 (top, middle, bottom)
    col: int  # 0..2 (left, center, right)

    def position_words(self) -> str:
        return PLACES[self.row * 3 + self.col]


@dataclass(frozen=True)
class Scene:
    objects: tuple[SceneObject, ...]
    background: str
    bg_colour: str
    # texture and placement parameters: not in the caption, sampled with the scene
    texture: tuple[float, ...] = field(default=(0.0, 0.15, 0.0))
    jitter: tuple[tuple[float, float], ...] = ()

    def caption(self) -> str:
        parts = [f"a {o.size} {o.colour} {o.shape} {o.position_words()}" for o in self.objects]
        body = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
        article = "an" if self.background[0] in "aeiou" else "a"
        return f"{body} on {article} {self.background} {self.bg_colour} background"

    def attributes(self) -> dict:
        """Ground truth as plain data (what the evaluator's classifier must read back)."""
        return {
            "objects": [dict(shape=o.shape, colour=o.colour, size=o.size, row=o.row, col=o.col)
                        for o in self.objects],
            "background": self.background, "bg_colour": self.bg_colour,
        }


def sample_scene(seed: int) -> Scene:
    """The scene of a seed: deterministic, independent of everything else."""
    rng = np.random.default_rng(np.random.PCG64(seed))
    n = int(rng.integers(1, 4))
    cells = rng.choice(9, size=n, replace=False)
    bg_colour = COLOURS[int(rng.integers(len(COLOURS)))]
    objects = []
    for c in sorted(int(c) for c in cells):
        colour = COLOURS[int(rng.integers(len(COLOURS)))]
        objects.append(SceneObject(SHAPES[int(rng.integers(len(SHAPES)))], colour,
                                   SIZES[int(rng.integers(len(SIZES)))], c // 3, c % 3))
    background = BACKGROUNDS[int(rng.integers(len(BACKGROUNDS)))]
    texture = (float(rng.uniform(0, np.pi)), float(rng.uniform(0.10, 0.22)), float(rng.integers(1 << 30)))
    jitter = tuple((float(rng.uniform(-0.025, 0.025)), float(rng.uniform(-0.025, 0.025))) for _ in objects)
    return Scene(tuple(objects), background, bg_colour, texture, jitter)


# ---------------------------------------------------------------------------------------------
# rendering

def _background(scene: Scene, yy: np.ndarray, xx: np.ndarray) -> np.ndarray:
    base = np.asarray(RGB[scene.bg_colour], np.float32) / 255.0
    dark, light = base * 0.22, base * 0.50
    angle, period, tex_seed = scene.texture
    u = np.cos(angle) * xx + np.sin(angle) * yy  # (S, S) coordinate along the texture direction
    if scene.background == "gradient":
        a = (u - u.min()) / max(float(u.max() - u.min()), 1e-6)
    elif scene.background == "striped":
        a = (np.floor(u / period) % 2).astype(np.float32)
    elif scene.background == "checkered":
        a = ((np.floor(xx / period) + np.floor(yy / period)) % 2).astype(np.float32)
    else:  # noisy: value noise on an 8x8 lattice, bilinearly interpolated, so it survives down-scaling
        lattice = np.random.default_rng(int(tex_seed)).random((9, 9)).astype(np.float32)
        gy, gx = yy * 8, xx * 8
        y0, x0 = np.clip(gy.astype(int), 0, 7), np.clip(gx.astype(int), 0, 7)
        fy, fx = gy - y0, gx - x0
        a = (lattice[y0, x0] * (1 - fy) * (1 - fx) + lattice[y0 + 1, x0] * fy * (1 - fx)
             + lattice[y0, x0 + 1] * (1 - fy) * fx + lattice[y0 + 1, x0 + 1] * fy * fx)
    return dark + (light - dark) * a[..., None]


def _shape_mask(shape: str, dy: np.ndarray, dx: np.ndarray, r: float) -> np.ndarray:
    if shape == "circle":
        return dx ** 2 + dy ** 2 <= r ** 2
    if shape == "square":
        return (np.abs(dx) <= r * 0.85) & (np.abs(dy) <= r * 0.85)
    if shape == "diamond":
        return np.abs(dx) + np.abs(dy) <= r * 1.1
    if shape == "cross":
        arm = r * 0.36
        return ((np.abs(dx) <= arm) & (np.abs(dy) <= r)) | ((np.abs(dy) <= arm) & (np.abs(dx) <= r))
    # triangle, apex up
    top, bottom = -r, r * 0.8
    inside_y = (dy >= top) & (dy <= bottom)
    half_width = (dy - top) / (bottom - top) * r
    return inside_y & (np.abs(dx) <= half_width)


def render(scene: Scene, size: int = 64, supersample: int = 4) -> np.ndarray:
    """(size, size, 3) uint8 RGB image of the scene, anti-aliased by box-filtered supersampling."""
    s = size * supersample
    coords = (np.arange(s, dtype=np.float32) + 0.5) / s
    yy, xx = np.meshgrid(coords, coords, indexing="ij")
    img = _background(scene, yy, xx)
    for obj, (jy, jx) in zip(scene.objects, scene.jitter or [(0.0, 0.0)] * len(scene.objects)):
        cy, cx = (obj.row + 0.5) / 3 + jy, (obj.col + 0.5) / 3 + jx
        mask = _shape_mask(obj.shape, yy - cy, xx - cx, RADIUS[obj.size])
        img[mask] = np.asarray(RGB[obj.colour], np.float32) / 255.0
    img = img.reshape(size, supersample, size, supersample, 3).mean(axis=(1, 3))
    return np.clip(np.round(img * 255.0), 0, 255).astype(np.uint8)


# ---------------------------------------------------------------------------------------------
# captions

def tokenize(prompt: str) -> list[str]:
    """Lower-cased words of a prompt; every word must be in VOCABULARY."""
    words = re.findall(r"[a-zA-Z]+|[^\sa-zA-Z,.]", prompt.lower())
    if not words:
        raise PromptError("the prompt is empty; write e.g. 'a red circle center on a striped blue background'")
    for w in words:
        if w not in VOCABULARY:
            shown = w if len(w) <= 40 else w[:37] + "..."
            raise PromptError(f"unknown word {shown!r} in the prompt; the vocabulary is: {', '.join(VOCABULARY)}")
    return words


def parse_prompt(prompt: str) -> Scene:
    """Read a caption into a Scene (texture parameters left at their defaults).

    Grammar: object {("," | "and") object} "on" ["a"|"an"] background-kind colour "background",
    object = ["a"|"an"] [size] colour shape position, position = row [col] | "center".
    A missing size reads as "medium".
    """
    words = tokenize(prompt)
    if "on" not in words:
        raise PromptError("the prompt needs a background clause, e.g. '... on a striped blue background'")
    cut = words.index("on")
    obj_words, bg_words = words[:cut], [w for w in words[cut + 1:] if w not in ("a", "an", "background")]
    if len(bg_words) != 2 or bg_words[0] not in BACKGROUNDS or bg_words[1] not in COLOURS:
        raise PromptError(f"the background clause must read '<{'|'.join(BACKGROUNDS)}> <colour> background', "
                          f"got {' '.join(words[cut + 1:])!r}")
    groups: list[list[str]] = [[]]
    for w in obj_words:  # "a", "an" and "and" each open a new object (commas are dropped by tokenize)
        if w in ("a", "an", "and"):
            if groups[-1]:
                groups.append([])
        else:
            groups[-1].append(w)
    groups = [g for g in groups if g]
    if not 1 <= len(groups) <= 3:
        raise PromptError(f"a prompt describes 1 to 3 objects, got {len(groups)}")
    objects = [_parse_object(g) for g in groups]
    cells = [(o.row, o.col) for o in objects]
    if len(set(cells)) != len(cells):
        raise PromptError("two objects share one position; give each object its own place")
    objects.sort(key=lambda o: o.row * 3 + o.col)
    return Scene(tuple(objects), bg_words[0], bg_words[1])


def _parse_object(g: list[str]) -> SceneObject:
    text = " ".join(g)
    size = g.pop(0) if g and g[0] in SIZES else "medium"
    if len(g) < 3 or g[0] not in COLOURS or g[1] not in SHAPES:
        raise PromptError(f"an object reads '[size] <colour> <shape> <position>', got {text!r}")
    pos = g[2:]
    if pos == ["center"]:
        row, col = 1, 1
    elif len(pos) == 2 and pos[0] in ROWS and pos[1] in COLS:
        row, col = ROWS.index(pos[0]), COLS.index(pos[1])
    else:
        raise PromptError(f"a position reads '<top|middle|bottom> <left|center|right>' or 'center', "
                          f"got {' '.join(pos)!r} in {text!r}")
    return SceneObject(g[1], g[0], size, row, col)


def canonical_prompt(prompt: str) -> str:
    """The caption the models were trained on for the scene a prompt describes."""
    return parse_prompt(prompt).caption()
