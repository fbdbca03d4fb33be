"""ModelPair: a target, its drafters and their shared tokenizer, as the engine runs them.

The type sits below the engine and every family's loader (the embedded family, LlamaGen), so a
loader builds a pair without importing the engine that runs it.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch


@dataclass
class ModelPair:
    """A target, its drafters and their shared tokenizer."""
    name: str
    target: torch.nn.Module             # GPT at the target grid
    multiscale: torch.nn.Module         # GPT serving the low-res grids (mulo's drafter)
    small: torch.nn.Module | None       # same-resolution small drafter (sd, lantern)
    tokenizer: torch.nn.Module
    grid: tuple[int, int]
    caption: Callable                   # (prompt, grid) -> ((P,) ids or features, (P,) mask)
    neighbours: torch.Tensor            # (V, K) nearest codes, nearest first
    scales: tuple = (2, 4)              # up-scale factors r the multiscale drafter serves
    device: str = "cpu"
    upsampler_net: Callable | None = None   # (name, r) -> a trained up-sampler's network (sr, learned),
    #                                         loaded on first use; raises an error naming the file it needs

    head_net: Callable | None = None        # () -> the EAGLE draft head on the target's features (tree
    #                                         methods), loaded on first use; raises an error naming its file
    tree_neighbours: torch.Tensor | None = None   # (V, K) the tree methods' own table where their released
    #                                         code builds another (LANTERN: L2 on the raw codebook weights)

    def draft_head(self, method: str = "eagle") -> torch.nn.Module:
        """The pair's EAGLE draft head; ValueError naming what is missing when it has none."""
        if self.head_net is None:
            raise ValueError(f"{method} drafts with an EAGLE draft head on the target's features; the {self.name} "
                             "model pair has none")
        return self.head_net()

    def upsampler(self, name: str, r: int) -> torch.nn.Module:
        """The pair's trained network for upsampler=name at scale=r; ValueError when it ships none."""
        if self.upsampler_net is None:
            raise ValueError(f"upsampler={name}: the {self.name} model pair ships no trained up-samplers; "
                             "use pixel or nearest")
        return self.upsampler_net(name, r)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size
