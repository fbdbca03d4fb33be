"""Quality yardsticks judged against the target's own samples, with their noise floors and bounds.

An accelerated sampler should produce what the target would have produced, so every yardstick here
compares a spec's images with ar's, the target sampling alone, on the same prompts:
- **detail distance to ar** (`fd_ar`): the Fréchet distance between the spec's images and the
  *reference* images (ar on the same prompts at other seeds) on `detail_features`, multi-scale
  filter-bank statistics at the full resolution that see edges and texture (band energies of a
  Laplacian pyramid per colour channel, gradient statistics, local contrast);
- **sharpness against ar** (`sharpness`): high-frequency energy (mean squared Laplacian of the
  luminance) of each image over that of ar's image of the same prompt and seed, median over prompts;
- **log-likelihood gap** (`loglik_gap`, nats per token): the target's mean log-probability of the
  spec's tokens minus that of ar's tokens (core.likelihood computes them; 0 in expectation for a
  lossless method).
Each has a noise floor, the same statistic for the reference set against ar (ar against ar at
other seeds), with a spread (bootstrap over prompts, or the standard error), and a bound that
`FLOOR_SPREADS` spreads of noise cannot cross. `blur` makes the blurred negative control.
Pure functions of images and numbers: nothing here runs a model.
"""
from __future__ import annotations

import math

import numpy as np

FLOOR_SPREADS = 3.0       # a bound sits this many spreads of the noise floor from its centre
BOOTSTRAP = 200           # resamples of the prompts for a bootstrap spread
BOOTSTRAP_SEED = 0
BLUR_SIGMA = 1.0          # the blurred control: a Gaussian of this standard deviation, in pixels
_EPS = 1e-6
_GREY_LEVEL = (1 / 255) ** 2   # the variance of one grey level: a block flatter than this reads as flat
_LUMA = np.array([0.299, 0.587, 0.114])


def _float(img: np.ndarray) -> np.ndarray:
    """(S, S, 3) uint8 -> (3, S, S) float64 in [0, 1]."""
    return np.asarray(img, dtype=np.float64).transpose(2, 0, 1) / 255.0


def _luma(x: np.ndarray) -> np.ndarray:
    """(3, S, S) -> (S, S)."""
    return np.tensordot(_LUMA, x, axes=1)


def _gauss_kernel(sigma: float) -> np.ndarray:
    r = max(1, int(math.ceil(3 * sigma)))
    k = np.exp(-0.5 * (np.arange(-r, r + 1) / sigma) ** 2)
    return k / k.sum()


def _smooth(x: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Separable filtering of the last two axes, edges reflected."""
    r = len(kernel) // 2
    pad = [(0, 0)] * (x.ndim - 2) + [(r, r), (r, r)]
    y = np.pad(x, pad, mode="reflect")
    y = sum(kernel[i] * y[..., i:i + y.shape[-2] - 2 * r, :] for i in range(len(kernel)))
    return sum(kernel[i] * y[..., :, i:i + y.shape[-1] - 2 * r] for i in range(len(kernel)))


_BINOMIAL = np.array([1, 4, 6, 4, 1]) / 16.0


def _laplacian_bands(x: np.ndarray, levels: int = 3) -> list[np.ndarray]:
    """The band-pass levels of a Laplacian pyramid, finest first: x - up(down(x)) at each scale."""
    bands = []
    for _ in range(levels):
        low = _smooth(x, _BINOMIAL)
        bands.append(x - low)
        x = low[..., ::2, ::2]
    return bands


def laplacian_energy(img: np.ndarray) -> float:
    """Mean squared 3x3 Laplacian of the luminance (in [0, 1] units): the image's high-frequency energy."""
    y = _luma(_float(img))
    lap = y[:-2, 1:-1] + y[2:, 1:-1] + y[1:-1, :-2] + y[1:-1, 2:] - 4 * y[1:-1, 1:-1]
    return float((lap ** 2).mean())


def detail_features(img: np.ndarray) -> np.ndarray:
    """(S, S, 3) uint8 -> (18,) float64: statistics that move when edges blur or texture smears.
    Log band energy of a 3-level Laplacian pyramid per colour channel (9), log mean |gradient| along
    rows and columns of the luminance (2), the share of pixels whose gradient exceeds 0.05, 0.1 and
    0.2 (3), quantiles 0.25 / 0.5 / 0.9 of the log variance of 4x4 luminance blocks, floored at one
    grey level (3), and the kurtosis of the finest luminance band / 10 (1: edges are heavy tails)."""
    x = _float(img)
    y = _luma(x)
    feats = [math.log(float((ch ** 2).mean()) + _EPS) for band in _laplacian_bands(x) for ch in band]
    gy, gx = np.abs(np.diff(y, axis=0)), np.abs(np.diff(y, axis=1))
    feats += [math.log(float(gx.mean()) + _EPS), math.log(float(gy.mean()) + _EPS)]
    mag = np.hypot(gx[:-1, :], gy[:, :-1])
    feats += [float((mag > t).mean()) for t in (0.05, 0.1, 0.2)]
    S = y.shape[0] // 4 * 4
    blocks = y[:S, :S].reshape(S // 4, 4, S // 4, 4).transpose(0, 2, 1, 3).reshape(-1, 16)
    feats += list(np.quantile(np.log(blocks.var(axis=1) + _GREY_LEVEL), (0.25, 0.5, 0.9)))
    fine = _laplacian_bands(y[None], 1)[0].ravel()
    feats.append(float(((fine - fine.mean()) ** 4).mean() / (fine.var() ** 2 + _EPS)) / 10.0)
    return np.asarray(feats, dtype=np.float64)


def blur(img: np.ndarray, sigma: float = BLUR_SIGMA) -> np.ndarray:
    """(S, S, 3) uint8 blurred by a Gaussian of `sigma` pixels (the negative control), uint8."""
    y = _smooth(_float(img), _gauss_kernel(sigma))
    return np.clip(np.round(y * 255.0), 0, 255).astype(np.uint8).transpose(1, 2, 0)


# ---- sets of images: each yardstick against ar, its noise floor and its bound ------------------
def fd_to_reference(feats: np.ndarray, ref: np.ndarray, scale: tuple | None = None) -> float | None:
    """Fréchet distance of detail features (n, F) to the reference set's (m, F), each feature scaled
    by `scale` = (mean, spread) of the whole reference set (so no statistic dominates by its units;
    a bootstrap resample keeps the whole set's scale). None below 3 images."""
    from .embedded.evaluation import frechet_distance
    if len(feats) < 3 or len(ref) < 3:
        return None
    mu, sd = scale or (ref.mean(0), ref.std(0) + _EPS)
    return frechet_distance((feats - mu) / sd, (ref - mu) / sd)


def sharpness_ratio(energy: np.ndarray, ar_energy: np.ndarray) -> float:
    """Median over prompts of an image's high-frequency energy over ar's image of the same prompt and seed."""
    return float(np.median(np.asarray(energy) / np.maximum(ar_energy, _EPS)))


def _bootstrap(stat, n: int) -> list[float]:
    """stat(indices) over BOOTSTRAP resamples of n prompts with replacement (paired across sets)."""
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    out = [stat(rng.integers(0, n, n)) for _ in range(BOOTSTRAP)]
    return [x for x in out if x is not None]


def floors(ar: dict, ref: dict) -> dict:
    """The noise floor of every yardstick: the reference set (ar at other seeds) measured against ar as
    any spec is. ar / ref: {'detail': (n, F), 'energy': (n,), 'loglik': (n,), 'adherence': (n,) or None,
    'data_fd': callable(indices) -> Fréchet distance of ar's images of those prompts to the data, or None}.
    Returns {yardstick: {value, spread, and its bound(s)}}; spreads are a bootstrap standard deviation
    over prompts (FD), the standard error of a median (sharpness, on the log ratio) or of a mean over
    prompts (log-likelihood, adherence)."""
    n = len(ar["energy"])
    if n < 3:
        return {}
    k = FLOOR_SPREADS
    out = {}
    fd_value = fd_to_reference(ar["detail"], ref["detail"])
    scale = (ref["detail"].mean(0), ref["detail"].std(0) + _EPS)
    fd_spread = float(np.std(_bootstrap(lambda ix: fd_to_reference(ar["detail"][ix], ref["detail"][ix], scale), n)))
    out["fd_ar"] = dict(value=fd_value, spread=fd_spread, high=fd_value + k * fd_spread)
    log_ratio = np.log(np.maximum(ref["energy"], _EPS) / np.maximum(ar["energy"], _EPS))
    # the standard error of a median, sqrt(pi / 2) sigma / sqrt(n): the bootstrap of a median reads
    # too little spread on these ratios (half of it on 100 prompts), a tall centre with heavy tails
    sh_spread = float(math.sqrt(math.pi / 2) * log_ratio.std(ddof=1) / math.sqrt(n))
    out["sharpness"] = dict(value=sharpness_ratio(ref["energy"], ar["energy"]), spread=sh_spread,
                            low=float(np.exp(-k * sh_spread)), high=float(np.exp(k * sh_spread)))
    d = np.asarray(ref["loglik"]) - np.asarray(ar["loglik"])
    ll_spread = float(d.std(ddof=1) / math.sqrt(n))
    out["loglik_gap"] = dict(value=float(d.mean()), spread=ll_spread, low=-k * ll_spread, high=k * ll_spread)
    if ar.get("adherence") is not None and ref.get("adherence") is not None:
        d = np.asarray(ref["adherence"]) - np.asarray(ar["adherence"])
        spread = float(d.std(ddof=1) / math.sqrt(n))
        base = float(np.mean(ar["adherence"]))
        out["adherence"] = dict(value=float(d.mean()), spread=spread, low=base - k * spread)
    if ar.get("data_fd") is not None:
        base = ar["data_fd"](np.arange(n))
        spread = float(np.std(_bootstrap(ar["data_fd"], n)))
        out["frechet"] = dict(value=base, spread=spread, high=base + k * spread)
    return out


def inside(figures: dict, bounds: dict) -> dict:
    """{yardstick: within its bound (None where the figure or the bound is missing), ..., 'all': every
    known one is inside (None when none is known)}. figures: {yardstick: value}."""
    out = {}
    for name, b in bounds.items():
        v = figures.get(name)
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            out[name] = None
            continue
        out[name] = bool(b.get("low", -math.inf) <= v <= b.get("high", math.inf))
    known = [v for v in out.values() if v is not None]
    out["all"] = all(known) if known else None
    return out
