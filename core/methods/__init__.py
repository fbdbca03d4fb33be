"""Decoding methods, one file each. A method is a generator: it yields Steps (core.trace) and
returns a Result. Methods compose the shared pieces of core.decoding, core.schedules,
core.islands, core.upsampling and core.acceptance; none copies another."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Result:
    tokens: np.ndarray                    # (H, W) final tokens
    proposal: np.ndarray | None = None    # (H, W) up-sampled proposal (mulo)
    draft: np.ndarray | None = None       # (h, w) low-res draft (mulo)
    passed_fraction: float | None = None  # share of judged cells that passed the acceptance test
    kept_fraction: float | None = None    # share of the H x W cells kept as drafted / proposed
    extra: dict = field(default_factory=dict)


def expected_steps(method: str, params, grid: tuple[int, int]) -> int:
    """About how many Steps a run of `method` yields on `grid`: each method module's own estimate
    (exact for the fixed schedules, by a typical acceptance for the speculative ones), else H W / 2."""
    from . import ar, eagle, lantern, lantern_pp, mulo, sd, vvs, zipar
    own = {"ar": ar, "zipar": zipar, "sd": sd, "lantern": lantern, "mulo": mulo, "eagle": eagle,
           "lantern_pp": lantern_pp, "vvs": vvs}.get(method)
    H, W = grid
    return own.expected_steps(params, grid) if own is not None else H * W // 2


def registry() -> dict:
    from . import ar, cool, eagle, gsd, lantern, lantern_pp, mulo, pjd, scd, sd, sjd, vvs, zipar
    return {"ar": ar.run, "zipar": zipar.run, "sd": sd.run, "lantern": lantern.run, "sjd": sjd.run, "mulo": mulo.run,
            "scd": scd.run, "gsd": gsd.run, "pjd": pjd.run, "cool": cool.run, "eagle": eagle.run,
            "lantern_pp": lantern_pp.run, "vvs": vvs.run}
