"""The EAGLE draft head: one decoder layer that reads the target's own features.

At the slot of cell c the head reads fc(concat(embedding of x_c, f)), f the target's normed last
hidden state at the query that predicted x_c (the last prefix slot for c = 0), and predicts the
target's feature at cell c; the target's output head turns that prediction into logits for cell
c + 1. Inside a draft tree a node reads its parent's *predicted* feature instead, and attends to
the committed cells and to its own ancestors (the tree mask of GPT.forward_cells).

Module and key names follow the EAGLE / LANTERN drafters (`embed_tokens`, `fc` with a bias,
`layers.0.self_attn.{q,k,v,o}_proj`, `layers.0.mlp.{gate,up,down}_proj`,
`layers.0.post_attention_layernorm`; the first layer has no input norm, the head no final norm and
no output head of its own), so a LANTERN-format LlamaGen drafter state dict loads unchanged. Its
positions are the target's own 2-D RoPE of each cell; its attention covers the image cells and, for a
LANTERN checkpoint (HeadConfig.caption_slots), the caption slots as LANTERN's drafter reads them: token 0
with the target's feature at each caption slot but the last, under a RoPE of zeros (zero keys: each
slot is read with a logit of 0 by every query), padded slots included. The embedded head has none.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .cache import KVCache
from .gpt import RMSNorm, _CachedContext, apply_rope, cell_attention, rope_parts

KEYS = ("embed_tokens.weight", "fc.weight", "fc.bias", "layers.0.self_attn.q_proj.weight",
        "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.v_proj.weight", "layers.0.self_attn.o_proj.weight",
        "layers.0.mlp.gate_proj.weight", "layers.0.mlp.up_proj.weight", "layers.0.mlp.down_proj.weight",
        "layers.0.post_attention_layernorm.weight")


@dataclass(frozen=True)
class HeadConfig:
    vocab_size: int = 512
    dim: int = 128                 # the target's width: the head reads and predicts its features
    n_head: int = 4
    ffn_dim: int = 384             # LlamaGen-XL's LANTERN drafter: 3584 at width 1280
    norm_eps: float = 1e-5
    caption_slots: bool = False    # LANTERN's drafter: attends over the caption slots too (see DraftHead)

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    def to_dict(self) -> dict:
        return dict(self.__dict__)

    @classmethod
    def for_target(cls, target_cfg) -> "HeadConfig":
        hidden = int(2 * 4 * target_cfg.dim / 3)
        hidden = target_cfg.multiple_of * math.ceil(hidden / target_cfg.multiple_of)
        return cls(vocab_size=target_cfg.vocab_size, dim=target_cfg.dim, n_head=target_cfg.n_head,
                   ffn_dim=hidden, norm_eps=target_cfg.norm_eps)

    @classmethod
    def from_state(cls, state: dict, n_head: int, norm_eps: float = 1e-6, caption_slots: bool = True) -> "HeadConfig":
        """The configuration a LANTERN-format state dict implies (n_head is not in the weights; LANTERN
        trains its drafters with caption slots)."""
        missing = [k for k in KEYS if k not in state]
        if missing:
            raise ValueError(f"not a LANTERN-format drafter: missing {', '.join(missing[:4])}")
        V, D = state["embed_tokens.weight"].shape
        return cls(vocab_size=V, dim=D, n_head=n_head, ffn_dim=state["layers.0.mlp.gate_proj.weight"].shape[0],
                   norm_eps=norm_eps, caption_slots=caption_slots)


class _Prefixed:
    """A context with the caption slots before every key: LANTERN's drafter gives those slots a RoPE of
    zeros, so their keys (and queries) are zero vectors: every query reads each slot with a logit of 0,
    whatever the mask says of the cells, and only their values are needed."""

    def __init__(self, ctx, values: torch.Tensor):
        self.ctx, self.values = ctx, values                    # values (B, h, P', d)

    def keys(self, layer, k, v):
        k_all, v_all, mask = self.ctx.keys(layer, k, v)
        B, h, P, d = self.values.shape
        if mask is None:                                       # the causal training path
            T = k_all.shape[2]
            mask = torch.full((T, T), float("-inf"), dtype=k_all.dtype, device=k_all.device).triu(1)[None, None]
        open_ = torch.zeros(*mask.shape[:-1], P, dtype=mask.dtype, device=mask.device)
        zeros = torch.zeros(k_all.shape[0], h, P, d, dtype=k_all.dtype, device=k_all.device)
        values = self.values.to(v_all.dtype).expand(v_all.shape[0], -1, -1, -1)
        return torch.cat([zeros, k_all], 2), torch.cat([values, v_all], 2), torch.cat([open_, mask], -1)


class _Attention(nn.Module):
    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.head_dim
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = (nn.Linear(cfg.dim, cfg.dim, bias=False) for _ in range(4))

    def forward(self, x, rope, ctx):
        B, T, _ = x.shape
        q = apply_rope(self.q_proj(x).view(B, T, self.n_head, self.head_dim), rope).transpose(1, 2)
        k = apply_rope(self.k_proj(x).view(B, T, self.n_head, self.head_dim), rope).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k_all, v_all, mask = ctx.keys(0, k, v)
        y = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask, is_causal=mask is None)
        return self.o_proj(y.transpose(1, 2).reshape(B, T, -1))


class _MLP(nn.Module):
    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.gate_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.up_proj = nn.Linear(cfg.dim, cfg.ffn_dim, bias=False)
        self.down_proj = nn.Linear(cfg.ffn_dim, cfg.dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _Layer(nn.Module):
    """EAGLE's first decoder layer: no norm before attention, one before the MLP."""

    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.self_attn, self.mlp = _Attention(cfg), _MLP(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x, rope, ctx):
        h = x + self.self_attn(x, rope, ctx)
        return h + self.mlp(self.post_attention_layernorm(h))


class DraftHead(nn.Module):
    def __init__(self, cfg: HeadConfig):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.embed_tokens.weight.requires_grad_(False)     # the target's table, copied and frozen
        self.fc = nn.Linear(2 * cfg.dim, cfg.dim, bias=True)
        self.layers = nn.ModuleList([_Layer(cfg)])
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    @classmethod
    def for_target(cls, target) -> "DraftHead":
        head = cls(HeadConfig.for_target(target.cfg))
        with torch.no_grad():
            head.embed_tokens.weight.copy_(target.tok_embeddings.weight.float())
        return head

    def _inputs(self, tokens, feats, cond=None):
        e = self.embed_tokens(tokens).to(feats.dtype)
        if cond is not None:   # what the target adds at this slot: the conditioning of the cell it predicts
            e = e + cond.to(feats.dtype)
        return self.fc(torch.cat([e, feats], dim=-1))

    def caption_values(self, feats: torch.Tensor) -> torch.Tensor:
        """LANTERN's caption slots: token 0 read with the target's feature at each caption slot but the last
        (whose feature cell 0 reads), feats (B, P', D) -> their attention values (B, h, P', d)."""
        B, P, _ = feats.shape
        x = self._inputs(torch.zeros(B, P, dtype=torch.long, device=feats.device), feats)
        attn = self.layers[0].self_attn
        return attn.v_proj(x).view(B, P, attn.n_head, attn.head_dim).transpose(1, 2)

    def forward(self, tokens: torch.Tensor, feats: torch.Tensor, rope: torch.Tensor, cond=None,
                captions: torch.Tensor | None = None) -> torch.Tensor:
        """Training path, causal over one sequence: tokens (B, T), feats (B, T, D), rope (T, d/2, 2) of
        the cells the tokens sit at -> (B, T, D) predicted features. captions (B, h, P', d): the caption
        slots' values (caption_values), read by every token."""
        x = self._inputs(tokens, feats, cond)
        ctx = _Causal() if captions is None else _Prefixed(_Causal(), captions)
        return self.layers[0](x, rope_parts(rope), ctx)

    def new_cache(self, batch: int, n_cells: int, device, dtype=torch.float32) -> KVCache:
        return KVCache(1, batch, self.cfg.n_head, 0, n_cells, self.cfg.head_dim, device, dtype)

    @torch.no_grad()
    def forward_cells(self, cache: KVCache, tokens: torch.Tensor, feats: torch.Tensor, cells: torch.Tensor,
                      rope: torch.Tensor, write: torch.Tensor | None = None, tree: torch.Tensor | None = None,
                      cond=None, captions: torch.Tensor | None = None) -> torch.Tensor:
        """The cached forward, as GPT.forward_cells: tokens (B, T) at cells (T,), feats (B, T, D) the
        feature each reads, rope (T, d/2, 2) of those cells; -> (B, T, D) predicted features.
        captions: as forward's."""
        slots, key_ok, sees, reach = cell_attention(cache, cells, 0, write, None, tree)
        write = torch.ones(cells.shape[0], dtype=torch.bool, device=cells.device) if write is None else write
        x = self._inputs(tokens, feats.to(cache.k.dtype), cond)
        ctx = _CachedContext(cache, slots, write, key_ok, sees, reach)
        return self.layers[0](x, rope_parts(rope), ctx if captions is None else _Prefixed(ctx, captions))


class _Causal:
    def keys(self, layer, k, v):
        return k, v, None


def load_lantern(folder) -> DraftHead:
    """A LANTERN-format drafter folder: config.json (num_attention_heads, rms_norm_eps; caption_slots, true
    unless it says false: LANTERN's drafters read the caption slots) and pytorch_model.bin or
    model.safetensors with the KEYS above. FileNotFoundError names what is missing."""
    import json
    from pathlib import Path
    folder = Path(folder)
    weights = next((folder / f for f in ("model.safetensors", "pytorch_model.bin") if (folder / f).exists()), None)
    if weights is None or not (folder / "config.json").exists():
        raise FileNotFoundError(f"no LANTERN drafter in {folder}: it needs config.json and pytorch_model.bin "
                                "(or model.safetensors), as LANTERN's training saves them")
    conf = json.loads((folder / "config.json").read_text())
    if weights.suffix == ".safetensors":
        from safetensors.torch import load_file
        state = load_file(str(weights))
    else:
        state = torch.load(weights, map_location="cpu", weights_only=True)
    head = DraftHead(HeadConfig.from_state(state, int(conf["num_attention_heads"]), float(conf.get("rms_norm_eps", 1e-6)),
                                           caption_slots=bool(conf.get("caption_slots", True))))
    head.load_state_dict({k: v.float() for k, v in state.items()}, strict=True)
    return head.eval()
