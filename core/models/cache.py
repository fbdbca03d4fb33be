"""Positional KV cache: one slot per prefix position and per grid cell, indexed by absolute position.

Slot s < P holds prefix position s; slot P + t holds cell t (raster index). Rolling back or
rewriting a cell is writing its slot again; slots never written are masked, never read as zeros.
"""
from __future__ import annotations

import torch


class KVCache:
    def __init__(self, n_layer: int, batch: int, n_head: int, prefix_len: int, n_cells: int, head_dim: int,
                 device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32):
        self.prefix_len, self.n_cells = prefix_len, n_cells
        slots = prefix_len + n_cells
        self.k = torch.zeros(n_layer, batch, n_head, slots, head_dim, device=device, dtype=dtype)
        self.v = torch.zeros_like(self.k)
        # (B, S) which slots hold a key; prefix padding stays False so it is never attended
        self.valid = torch.zeros(batch, slots, dtype=torch.bool, device=device)
        # (B, n_cells, D) layout conditioning per predicted cell, set at prefill by models that have it
        self.cond: torch.Tensor | None = None

    def write(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        # slots (T,), k/v (B, h, T, d)
        self.k[layer].index_copy_(2, slots, k)
        self.v[layer].index_copy_(2, slots, v)
