"""LLaMA-style image-token decoder with a caption prefix (the LlamaGen GPT layout is one configuration).

Owns the transformer (RMSNorm, SwiGLU, fused qkv, 2D RoPE over (row, col)), the caption prefix
(projected caption features, a learned null caption for classifier-free guidance), the optional
layout-aligned conditioning (the embedded family: what the parsed caption puts at each cell's place,
added to the slot that predicts that cell) and the engine's primitive: a forward over an arbitrary
set of grid cells through the positional KV cache.

One file, although past 500 lines: the cache's slot layout, the RoPE positions and the masked
forward over arbitrary cells are one invariant (a query reads exactly the slots of its context);
split apart, each half would have to restate it.

Convention: the token of cell t is written at slot P + t; its output predicts cell t + 1. The last
prefix slot predicts cell 0. Module names follow LlamaGen's GPT so its state dicts load unchanged.
It does not know about sampling, CFG mixing or decoding methods.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from .cache import KVCache


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 512            # image codebook size V
    dim: int = 256                   # model width D
    n_layer: int = 6
    n_head: int = 8
    multiple_of: int = 64            # SwiGLU hidden width is rounded up to a multiple of this
    ffn_dim_multiplier: float | None = None
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    prefix_len: int = 28             # caption positions P (LlamaGen t2i: 120)
    caption_dim: int = 64            # caption feature width (LlamaGen t2i: 2048, FLAN-T5-XL)
    caption_vocab: int = 0           # > 0: captions arrive as word ids, embedded by a learned table
    caption_bias: bool = True        # biases in the caption projection MLP (LlamaGen: False)
    num_classes: int = 0             # > 0: class-conditional prefix of class ids, null class = num_classes
    prefix_rope: str = "identity"    # "zero": LlamaGen's all-zero rotation on prefix positions
    rope_ref_grid: int = 0           # > 0: cells placed in one physical frame of this grid side
    layout_places: int = 0           # > 0: layout conditioning over a side x side grid of places (9: 3x3)
    layout_factors: tuple = ()       # attribute counts per place, e.g. (5, 8, 3): shape, colour, size
    layout_template: tuple = ()      # factors (e.g. shape, size) that jointly pick a learned template
    abs_positions: int = 0           # > 0: a learned absolute position per slot (table abs_pe of this many
    #                                  rows, added to the input) and no RoPE in attention (Tar's AR-DTok)
    caption_proj: str = "mlp"        # "linear": one biased Linear from caption features, and the null
    #                                  caption of CFG is all-zero features (Tar's AR-DTok)

    def __post_init__(self):
        object.__setattr__(self, "layout_factors", tuple(self.layout_factors))  # JSON gives a list
        object.__setattr__(self, "layout_template", tuple(self.layout_template))
        if self.layout_places and (math.isqrt(self.layout_places) ** 2 != self.layout_places
                                   or not self.layout_factors or self.rope_ref_grid <= 0):
            raise ValueError("layout conditioning needs a square layout_places, layout_factors and rope_ref_grid")
        if self.caption_proj not in ("mlp", "linear"):
            raise ValueError(f"caption_proj must be mlp or linear; got {self.caption_proj!r}")

    @property
    def layout_len(self) -> int:
        """Caption columns after the P word ids that carry the layout (place-major, factor-minor)."""
        return self.layout_places * len(self.layout_factors)

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_head

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class FeedForward(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        hidden = int(2 * 4 * cfg.dim / 3)
        if cfg.ffn_dim_multiplier is not None:
            hidden = int(cfg.ffn_dim_multiplier * hidden)
        hidden = cfg.multiple_of * math.ceil(hidden / cfg.multiple_of)
        self.w1 = nn.Linear(cfg.dim, hidden, bias=False)
        self.w3 = nn.Linear(cfg.dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, cfg.dim, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


def apply_rope(x: torch.Tensor, rope) -> torch.Tensor:
    # x (B, T, h, d); rope (T, d/2, 2) = (cos, sin) per adjacent pair of channels, or rope_parts(rope)
    cos, sin = rope_parts(rope) if isinstance(rope, torch.Tensor) else rope
    xs = x.float().reshape(*x.shape[:-1], -1, 2)
    x0, x1 = xs.unbind(-1)
    out = torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1)
    return out.flatten(3).type_as(x)


def rope_parts(rope: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(T, d/2, 2) rotation -> (cos, sin), each (1, T, 1, d/2): sliced once per forward, not per layer."""
    cos, sin = rope[None, :, None].unbind(-1)
    return cos, sin


class Attention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head, self.head_dim = cfg.n_head, cfg.head_dim
        self.wqkv = nn.Linear(cfg.dim, 3 * cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)

    def forward(self, x, rope, ctx, layer: int):
        B, T, D = x.shape
        qk, v = self.wqkv(x).split([2 * D, D], dim=-1)
        # q and k rotated in one call (the same elementwise arithmetic as one call each); rope None:
        # positions are absolute, added to the input (abs_positions)
        qk = qk.view(B, T, 2 * self.n_head, self.head_dim)
        qk = (qk if rope is None else apply_rope(qk, rope)).transpose(1, 2)                   # (B, 2h, T, d)
        q, k = qk.split(self.n_head, dim=1)                                                    # (B, h, T, d)
        v = v.view(B, T, self.n_head, self.head_dim).transpose(1, 2)
        k_all, v_all, mask = ctx.keys(layer, k, v)  # (B, h, S, d), mask (B, 1, T, S)
        y = F.scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask, is_causal=mask is None)
        return self.wo(y.transpose(1, 2).reshape(B, T, -1))


class TransformerBlock(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.attention = Attention(cfg)
        self.feed_forward = FeedForward(cfg)
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)

    def forward(self, x, rope, ctx, layer):
        h = x + self.attention(self.attention_norm(x), rope, ctx, layer)
        return h + self.feed_forward(self.ffn_norm(h))


class MLP(nn.Module):
    def __init__(self, d_in: int, d_hidden: int, d_out: int, bias: bool = True):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden, bias=bias)
        self.act = nn.GELU(approximate="tanh")
        self.fc2 = nn.Linear(d_hidden, d_out, bias=bias)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class CaptionEmbedder(nn.Module):
    """Projects caption features to the model width; a null caption serves CFG: learned (the MLP
    projection, LlamaGen) or all-zero features (the linear projection, Tar's AR-DTok)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        if cfg.caption_proj == "linear":
            self.cap_proj = nn.Linear(cfg.caption_dim, cfg.dim)
            self.uncond_embedding = None
        else:
            self.cap_proj = MLP(cfg.caption_dim, cfg.dim, cfg.dim, bias=cfg.caption_bias)
            self.uncond_embedding = nn.Parameter(torch.randn(cfg.prefix_len, cfg.caption_dim) / cfg.caption_dim ** 0.5)

    def forward(self, feats: torch.Tensor, drop: torch.Tensor | None = None) -> torch.Tensor:
        # feats (B, P, C); drop (B,) bool rows replaced by the null caption
        if drop is not None:
            null = (torch.zeros_like(feats[:1]) if self.uncond_embedding is None
                    else self.uncond_embedding[None].to(feats.dtype))
            feats = torch.where(drop[:, None, None], null, feats)
        weight = self.cap_proj.weight if self.uncond_embedding is None else self.cap_proj.fc1.weight
        return self.cap_proj(feats.to(weight.dtype))


class LabelEmbedder(nn.Module):
    """Class-conditional prefix: one learned vector per class, row num_classes is the null class (CFG)."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.num_classes = cfg.num_classes
        self.embedding_table = nn.Embedding(cfg.num_classes + 1, cfg.dim)

    def forward(self, labels: torch.Tensor, drop: torch.Tensor | None = None) -> torch.Tensor:
        # labels (B, P) class ids; drop (B,) bool rows replaced by the null class
        if drop is not None:
            labels = torch.where(drop[:, None], torch.full_like(labels, self.num_classes), labels)
        return self.embedding_table(labels)


class LayoutEmbedder(nn.Module):
    """Layout-aligned conditioning for the cell a slot predicts: the embedding of what the caption puts
    at that cell's place (one table per attribute; row n: the place is empty, row n + 1: the null caption
    of CFG) plus the embedding of the cell's position in the reference frame; with layout_template, also
    a learned template: one vector per joint value of the template factors (shape and size) and per
    offset of the cell from its place's centre, in reference-frame cells."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.side, self.ref = math.isqrt(cfg.layout_places), cfg.rope_ref_grid
        self.factors = cfg.layout_factors
        self.tables = nn.ModuleList(nn.Embedding(n + 2, cfg.dim) for n in cfg.layout_factors)
        self.row = nn.Embedding(cfg.rope_ref_grid, cfg.dim)
        self.col = nn.Embedding(cfg.rope_ref_grid, cfg.dim)
        self.template_factors = cfg.layout_template
        self.reach = math.ceil(self.ref / self.side / 2) + 1  # offsets -reach..reach from a place's centre
        if cfg.layout_template:
            rows = math.prod(cfg.layout_factors[f] + 2 for f in cfg.layout_template) * (2 * self.reach + 1) ** 2
            self.template = nn.Embedding(rows, cfg.dim)

    def forward(self, layout: torch.Tensor, grid: tuple[int, int], drop: torch.Tensor | None = None):
        """layout (B, places, factors) ids -> (B, H*W, D) conditioning of every cell, raster order."""
        if drop is not None:
            null = torch.tensor(self.factors, device=layout.device) + 1
            layout = torch.where(drop[:, None, None], null, layout)
        place = sum(t(layout[..., f]) for f, t in enumerate(self.tables))             # (B, places, D)
        H, W = grid
        r, c = torch.arange(H, device=layout.device), torch.arange(W, device=layout.device)
        pr = ((2 * r + 1) * self.side // (2 * H)).clamp(max=self.side - 1)             # place row of each row
        pc = ((2 * c + 1) * self.side // (2 * W)).clamp(max=self.side - 1)
        of_cell = (pr[:, None] * self.side + pc[None, :]).flatten()                     # (N,)
        rr = ((2 * r + 1) * self.ref // (2 * H)).clamp(max=self.ref - 1)               # reference-frame row
        cc = ((2 * c + 1) * self.ref // (2 * W)).clamp(max=self.ref - 1)
        pos = (self.row(rr)[:, None] + self.col(cc)[None, :]).flatten(0, 1)            # (N, D)
        out = place[:, of_cell] + pos[None]
        if self.template_factors:
            span = 2 * self.reach + 1
            centre = lambda p: (p.float() + 0.5) * self.ref / self.side - 0.5           # noqa: E731
            oy = (rr - centre(pr)).round().long().clamp(-self.reach, self.reach) + self.reach
            ox = (cc - centre(pc)).round().long().clamp(-self.reach, self.reach) + self.reach
            offset = (oy[:, None] * span + ox[None, :]).flatten()                       # (N,)
            joint = torch.zeros_like(layout[..., 0])                                     # (B, places)
            for f in self.template_factors:
                joint = joint * (self.factors[f] + 2) + layout[..., f]
            out = out + self.template(joint[:, of_cell] * span * span + offset[None])
        return out


class _FullContext:
    """Attention among the tokens of one call only (training, prefill). out (dict, optional) receives
    the final normed hidden states ("hidden", (B, T, D)): the features a draft head reads."""

    def __init__(self, mask, cache: KVCache | None = None, slots: torch.Tensor | None = None,
                 out: dict | None = None):
        self.mask, self.cache, self.slots, self.out = mask, cache, slots, out

    def keys(self, layer, k, v):
        if self.cache is not None:
            self.cache.write(layer, self.slots, k, v)
        return k, v, self.mask


# Keys are read in blocks of this many by the CPU flash-attention kernel (its kv split): dropping
# key blocks no query can see leaves every output bit-identical, a cut inside a block does not.
KEY_BLOCK = 512


def additive_mask(see: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool mask -> 0 / -inf in dtype, as scaled_dot_product_attention converts it (once per forward,
    not once per layer)."""
    return torch.where(see, torch.zeros((), dtype=dtype, device=see.device),
                       torch.full((), float("-inf"), dtype=dtype, device=see.device))


class _CachedContext:
    """Attention to the cache plus the call's own tokens; written tokens go to their slots first.

    Which tokens are written is resolved once per forward (one host sync), not once per layer;
    write=None means all of them, with no host sync at all (the compilable single-token step).
    reach (host int, optional): one past the last slot any query can see; the key blocks wholly at
    or after it, before the call's stand-ins, are left out of the attention (they are all masked)."""

    def __init__(self, cache: KVCache, slots: torch.Tensor, write: torch.Tensor | None, key_ok: torch.Tensor,
                 query_sees: torch.Tensor, reach: int | None = None, out: dict | None = None):
        # key_ok (B, K) keys any query may read, query_sees (T, K) which keys each query may read; the
        # mask is their conjunction, K = the S slots plus the call's stand-ins. out (dict, optional)
        # receives "hidden" (B, T, D) and "kv", per layer the (k, v) (B, h, T_x, d) of the stand-ins
        self.cache, self.slots, self.out = cache, slots, out
        self.all_written = write is None or bool(write.all())
        if not self.all_written:
            self.written = torch.nonzero(write).squeeze(1)    # (T_w,) positions in the call
            self.extra = torch.nonzero(~write).squeeze(1)     # (T_x,) stand-ins, never cached
        S = cache.k.shape[3]
        self.cut = self.tail = S                              # keys read: slots [0, cut) and [tail, S)
        if reach is not None:
            cut = -(-reach // KEY_BLOCK) * KEY_BLOCK
            tail = S if self.all_written else S // KEY_BLOCK * KEY_BLOCK  # the stand-ins' block stays whole
            if cut < tail:
                self.cut, self.tail = cut, tail
                key_ok = torch.cat([key_ok[:, :cut], key_ok[:, tail:]], dim=1)
                query_sees = torch.cat([query_sees[:, :cut], query_sees[:, tail:]], dim=1)
        # 0 + 0 = 0 and -inf + x = -inf: the same 0 / -inf mask as where(key_ok & query_sees, 0, -inf),
        # with one (B, T, K) operation
        dtype = cache.k.dtype
        self.mask = additive_mask(key_ok, dtype)[:, None, None, :] + additive_mask(query_sees, dtype)[None, None]

    def _cached(self, kv: torch.Tensor) -> torch.Tensor:
        if self.cut == self.tail:
            return kv
        if self.tail == kv.shape[2]:
            return kv[:, :, :self.cut]
        return torch.cat([kv[:, :, :self.cut], kv[:, :, self.tail:]], dim=2)

    def keys(self, layer, k, v):
        if self.all_written:
            self.cache.write(layer, self.slots, k, v)
            return self._cached(self.cache.k[layer]), self._cached(self.cache.v[layer]), self.mask
        w, x = self.written, self.extra
        self.cache.write(layer, self.slots[w], k.index_select(2, w), v.index_select(2, w))
        k_x, v_x = k.index_select(2, x), v.index_select(2, x)
        if self.out is not None:  # kept for the caller to adopt into the cache (a draft tree's accepted path)
            self.out.setdefault("kv", []).append((k_x, v_x))
        k_all = torch.cat([self._cached(self.cache.k[layer]), k_x], dim=2)
        v_all = torch.cat([self._cached(self.cache.v[layer]), v_x], dim=2)
        return k_all, v_all, self.mask


def cell_attention(cache: KVCache, cells: torch.Tensor, prefix_len: int, write: torch.Tensor | None = None,
                   cell_mask: torch.Tensor | None = None, tree: torch.Tensor | None = None):
    """Who reads what in a cached forward over cells (T,) (see GPT.forward_cells): marks the written
    cells valid and returns (slots (T,), key_ok (B, K), sees (T, K), reach), K = the cache's S slots
    plus one key per unwritten token. Shared by the GPT and the draft head that reads its features."""
    P, dev = prefix_len, cells.device
    write = torch.ones(cells.shape[0], dtype=torch.bool, device=dev) if write is None else write
    slots = cells + P  # (T,)
    cache.valid[:, slots[write]] = True
    S = cache.valid.shape[1]
    s_idx = torch.arange(S, device=dev)
    key_ok = cache.valid                                                  # (B, S)
    sees = s_idx[None, :] <= slots[:, None]                               # (T, S)
    all_written = bool(write.all())
    if not all_written:
        sees = sees & ~((s_idx[None, :] == slots[:, None]) & ~write[:, None])  # an unwritten query's own slot
    if cell_mask is not None:
        own = s_idx[None, :] == slots[:, None]                                        # (T, S)
        allowed = torch.cat([torch.ones(cells.shape[0], P, dtype=torch.bool, device=dev), cell_mask], dim=1)
        sees = sees & (allowed | own)
    if not all_written:
        stand_ins = torch.nonzero(~write).squeeze(1)
        n_extra = int(stand_ins.shape[0])
        extra = torch.zeros(cells.shape[0], n_extra, dtype=torch.bool, device=dev)
        extra[stand_ins, torch.arange(n_extra, device=dev)] = True
        if tree is not None:
            extra = extra | tree.to(dev)[:, stand_ins]
        sees = torch.cat([sees, extra], dim=1)
        key_ok = torch.cat([key_ok, torch.ones(key_ok.shape[0], n_extra, dtype=torch.bool, device=dev)], dim=1)
    reach = int(slots.max()) + 1 if dev.type == "cpu" else None  # no query sees a slot after its own
    return slots, key_ok, sees, reach


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        if cfg.caption_vocab > 0:
            self.caption_words = nn.Embedding(cfg.caption_vocab, cfg.caption_dim)
        self.cls_embedding = LabelEmbedder(cfg) if cfg.num_classes > 0 else CaptionEmbedder(cfg)
        if cfg.layout_places > 0:
            self.layout = LayoutEmbedder(cfg)
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(TransformerBlock(cfg) for _ in range(cfg.n_layer))
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
        if cfg.abs_positions > 0:
            self.abs_pe = nn.Parameter(torch.randn(1, cfg.abs_positions, cfg.dim) * 0.02)
        self._rope: dict = {}
        self._step = None  # compiled decode_one, set by compile_step
        self.apply(self._init)

    @staticmethod
    def _init(m):
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)

    # ---- positions -------------------------------------------------------------------------
    def rope(self, grid: tuple[int, int], device) -> torch.Tensor:
        """(P + H*W, d/2, 2) rotation per slot: prefix slots first, then cells in raster order."""
        key = (grid, str(device))
        if key not in self._rope:
            self._rope[key] = self._build_rope(grid).to(device)
        return self._rope[key]

    def _build_rope(self, grid: tuple[int, int]) -> torch.Tensor:
        cfg, (H, W) = self.cfg, grid
        quarter = cfg.head_dim // 4  # pairs rotated by the row; as many by the column
        freqs = 1.0 / (cfg.rope_base ** (torch.arange(0, 2 * quarter, 2)[:quarter].float() / (2 * quarter)))
        rows, cols = torch.arange(H, dtype=torch.float32), torch.arange(W, dtype=torch.float32)
        if cfg.rope_ref_grid > 0:  # the centre of cell i sits at the same place on every grid
            rows = (rows + 0.5) * cfg.rope_ref_grid / H - 0.5
            cols = (cols + 0.5) * cfg.rope_ref_grid / W - 0.5
        ang_r = torch.outer(rows, freqs)[:, None, :].expand(H, W, quarter)
        ang_c = torch.outer(cols, freqs)[None, :, :].expand(H, W, quarter)
        ang = torch.cat([ang_r, ang_c], dim=-1).reshape(H * W, 2 * quarter)
        cells = torch.stack([torch.cos(ang), torch.sin(ang)], dim=-1)
        prefix = torch.zeros(cfg.prefix_len, 2 * quarter, 2)
        if cfg.prefix_rope == "identity":
            prefix[..., 0] = 1.0
        return torch.cat([prefix, cells], dim=0)

    # ---- caption prefix ----------------------------------------------------------------------
    def split_captions(self, captions: torch.Tensor):
        """(B, P [+ layout columns]) ids or (B, P, C) features -> prefix part, (B, places, factors) layout or None.

        A model without layout conditioning ignores layout columns, so one caption serves a whole pair."""
        P = self.cfg.prefix_len
        if captions.dim() == 3:
            return captions, None
        if self.cfg.layout_places == 0 or captions.shape[1] == P:
            if self.cfg.layout_places:
                raise ValueError(f"this model reads a caption of {P} word ids and {self.cfg.layout_len} layout ids")
            return captions[:, :P], None
        layout = captions[:, P:P + self.cfg.layout_len].reshape(captions.shape[0], self.cfg.layout_places, -1)
        return captions[:, :P], layout

    def cell_conditioning(self, captions, grid, drop=None) -> torch.Tensor | None:
        """(B, H*W, D) layout conditioning of each predicted cell, or None for a model without it."""
        _, layout = self.split_captions(captions)
        return None if layout is None else self.layout(layout, grid, drop)

    def prefix_embeddings(self, captions: torch.Tensor, drop: torch.Tensor | None = None) -> torch.Tensor:
        """captions: (B, P) word or class ids, or (B, P, C) features -> (B, P, D)."""
        captions, _ = self.split_captions(captions)
        if self.cfg.num_classes > 0:
            return self.cls_embedding(captions, drop)
        feats = self.caption_words(captions) if captions.dtype in (torch.int32, torch.int64) else captions
        return self.cls_embedding(feats, drop)

    def placed(self, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """x (B, T, D) at slots (T,) plus each slot's absolute position (abs_positions; x unchanged
        otherwise). The table holds one row fewer than the slots (nothing is fed after the last
        cell in the official sampler); the last cell's slot, whose output predicts no cell and whose
        keys no other query reads, takes the last row."""
        if self.cfg.abs_positions == 0:
            return x
        return x + self.abs_pe[0, slots.clamp(max=self.cfg.abs_positions - 1)].to(x.dtype)

    def check_grid(self, grid: tuple[int, int]) -> None:
        """A model with absolute positions serves grids up to the cells its table holds."""
        n = self.cfg.abs_positions - self.cfg.prefix_len + 1
        if self.cfg.abs_positions and grid[0] * grid[1] > n:
            raise ValueError(f"this model's position table holds {n} cells; a {grid[0]}x{grid[1]} grid has "
                             f"{grid[0] * grid[1]}")

    def _trunk(self, x, rope, ctx):
        rope = rope_parts(rope) if self.cfg.abs_positions == 0 else None
        for i, layer in enumerate(self.layers):
            x = layer(x, rope, ctx, i)
        h = self.norm(x)
        if getattr(ctx, "out", None) is not None:
            ctx.out["hidden"] = h
        return self.output(h).float()

    # ---- training / reference path -----------------------------------------------------------
    def forward(self, captions, prefix_mask, tokens, grid, drop=None, out: dict | None = None) -> torch.Tensor:
        """Teacher-forced logits for every cell. tokens (B, N) -> (B, N, V); logits[:, t] predict cell t.
        out (dict, optional) receives "hidden" (B, N, D), the normed features those logits are read from."""
        B, N = tokens.shape
        P = self.cfg.prefix_len
        x = torch.cat([self.prefix_embeddings(captions, drop), self.tok_embeddings(tokens[:, :-1])], dim=1)
        cond = self.cell_conditioning(captions, grid, drop)
        if cond is not None:  # slot P - 1 predicts cell 0, slot P + t cell t + 1
            x = torch.cat([x[:, :P - 1], x[:, P - 1:] + cond.to(x.dtype)], dim=1)
        L = P + N - 1
        x = self.placed(x, torch.arange(L, device=x.device))
        mask = None  # plain causal attention (the fast kernel) unless some prefix slots are padding
        if not bool(prefix_mask.all()):
            causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
            key_ok = torch.cat([prefix_mask, torch.ones(B, N - 1, dtype=torch.bool, device=x.device)], dim=1)
            mask = ((causal[None] & key_ok[:, None, :]) | torch.eye(L, dtype=torch.bool, device=x.device)[None])[:, None]
        ctx = _FullContext(mask, out=out)
        logits = self._trunk(x, self.rope(grid, x.device)[:L], ctx)
        if out is not None:
            out["hidden"] = out["hidden"][:, P - 1:]
        return logits[:, P - 1:]

    @torch.no_grad()
    def forward_visible(self, captions, prefix_mask, tokens: torch.Tensor, grid, visible: torch.Tensor,
                        drop=None, upto: int | None = None) -> torch.Tensor:
        """The cache-free reference of the engine's primitive. tokens (B, N) at every cell, visible (N,)
        bool: the query at cell t attends to the valid prefix, to the visible cells before it and to
        itself; a cell that is not visible is seen by no other query. -> (B, N, V), [:, t] predicting t + 1.
        upto (optional): only the queries of cells 0 .. upto - 1 (attention is causal: the same rows, for
        a fraction of the work when a cell early in the raster is asked about)."""
        if upto is not None:
            tokens, visible = tokens[:, :upto], visible[:upto]
        B, N = tokens.shape
        P = self.cfg.prefix_len
        x = torch.cat([self.prefix_embeddings(captions, drop), self.tok_embeddings(tokens)], dim=1)
        cond = self.cell_conditioning(captions, grid, drop)
        if cond is not None:  # slot P - 1 + n predicts cell n
            x = torch.cat([x[:, :P - 1], x[:, P - 1:P - 1 + N] + cond[:, :N].to(x.dtype), x[:, P - 1 + N:]], dim=1)
        L = P + N
        x = self.placed(x, torch.arange(L, device=x.device))
        key_ok = torch.cat([prefix_mask, visible[None].expand(B, -1)], dim=1)                  # (B, L)
        causal = torch.ones(L, L, dtype=torch.bool, device=x.device).tril()
        mask = (causal[None] & key_ok[:, None, :]) | torch.eye(L, dtype=torch.bool, device=x.device)[None]
        logits = self._trunk(x, self.rope(grid, x.device)[:L], _FullContext(mask[:, None]))
        return logits[:, P:]

    # ---- the engine's primitive --------------------------------------------------------------
    def new_cache(self, batch: int, grid: tuple[int, int], device, dtype: torch.dtype | None = None) -> KVCache:
        """A cache for one image; keys and values in the model's own dtype unless told otherwise."""
        c = self.cfg
        dtype = dtype or self.tok_embeddings.weight.dtype
        return KVCache(c.n_layer, batch, c.n_head, c.prefix_len, grid[0] * grid[1], c.head_dim, device, dtype)

    @torch.no_grad()
    def prefill(self, cache: KVCache, captions, prefix_mask, grid, drop=None, out: dict | None = None) -> torch.Tensor:
        """Write the caption prefix into the cache; returns (B, V) logits for cell 0.

        drop (B,) bool: rows that read the null caption (the unconditional half of CFG). out (dict,
        optional) receives "hidden" (B, D), the feature of the last prefix slot, and "prefix_hidden"
        (B, P, D), every prefix slot's."""
        P = self.cfg.prefix_len
        x = self.prefix_embeddings(captions, drop).to(cache.k.dtype)
        cond = self.cell_conditioning(captions, grid, drop)
        cache.cond = None if cond is None else cond.to(cache.k.dtype)
        if cond is not None:
            x = torch.cat([x[:, :P - 1], x[:, P - 1:] + cache.cond[:, :1]], dim=1)
        causal = torch.ones(P, P, dtype=torch.bool, device=x.device).tril()
        mask = (causal[None] & prefix_mask[:, None, :]) | torch.eye(P, dtype=torch.bool, device=x.device)[None]
        slots = torch.arange(P, device=x.device)
        self.check_grid(grid)
        x = self.placed(x, slots)
        logits = self._trunk(x, self.rope(grid, x.device)[:P], _FullContext(mask[:, None], cache, slots, out))
        cache.valid[:, :P] = prefix_mask
        if out is not None:
            out["prefix_hidden"] = out["hidden"]              # (B, P, D): every prefix slot's feature
            out["hidden"] = out["hidden"][:, -1]
        return logits[:, -1]

    @torch.no_grad()
    def forward_cells(self, cache: KVCache, tokens: torch.Tensor, cells: torch.Tensor, grid,
                      write: torch.Tensor | None = None, cell_mask: torch.Tensor | None = None,
                      tree: torch.Tensor | None = None, out: dict | None = None) -> torch.Tensor:
        """Feed tokens (B, T) at cells (T,) (raster indices); returns (B, T, V), [:, j] predicting cell cells[j]+1.

        Each query attends to the valid prefix and to every written cell whose raster index is not
        larger than its own (cells written in this call included). Tokens with write=False are seen
        by their own query only and leave the cache untouched (ZipAR's stand-in tokens).
        cell_mask (T, H*W) bool, optional: a further restriction, the cell slots each query may read
        (pjd's row-causal drafts); a query always reads its own token.
        tree (T, T) bool, optional: which of the call's unwritten tokens each query reads besides its
        own (a draft tree: a node reads its ancestors, several nodes may sit at one cell).
        out (dict, optional): receives "hidden" and the stand-ins' "kv" (see _CachedContext).
        """
        slots, key_ok, sees, reach = cell_attention(cache, cells, self.cfg.prefix_len, write, cell_mask, tree)
        write = torch.ones(cells.shape[0], dtype=torch.bool, device=tokens.device) if write is None else write
        x = self.tok_embeddings(tokens).to(cache.k.dtype)
        x = self.placed(self._add_cell_conditioning(x, cache, cells), slots)
        rope = self.rope(grid, tokens.device)[slots]
        return self._trunk(x, rope, _CachedContext(cache, slots, write, key_ok, sees, reach, out))

    @staticmethod
    def _add_cell_conditioning(x: torch.Tensor, cache: KVCache, cells: torch.Tensor) -> torch.Tensor:
        """x (B, T, D) of tokens at cells (T,) plus the layout conditioning of the cell each predicts
        (none past the last cell); x unchanged for a model without it."""
        if cache.cond is None:
            return x
        nxt = cells + 1
        inside = (nxt < cache.cond.shape[1]).to(x.dtype)[None, :, None]
        return x + cache.cond[:, nxt.clamp(max=cache.cond.shape[1] - 1)] * inside

    # ---- the single-token step, compilable ---------------------------------------------------------
    def decode_one(self, cache: KVCache, tokens: torch.Tensor, cell: torch.Tensor, rope: torch.Tensor,
                   reach: int | None = None) -> torch.Tensor:
        """forward_cells for one written token with static shapes and no host synchronisation, so that
        torch.compile can capture it whole (and CUDA graphs replay it). tokens (B, 1), cell (1,),
        rope = self.rope(grid, device) -> (B, 1, V). reach (host int, eager only): one past the
        cell's slot; the key blocks after it are left out."""
        slots = cell + self.cfg.prefix_len
        cache.valid[:, slots] = True
        s_idx = torch.arange(cache.valid.shape[1], device=tokens.device)
        sees = s_idx[None, :] <= slots[:, None]                                 # (1, S)
        x = self.placed(self._add_cell_conditioning(self.tok_embeddings(tokens).to(cache.k.dtype), cache, cell), slots)
        return self._trunk(x, rope[slots], _CachedContext(cache, slots, None, cache.valid, sees, reach))

    def compile_step(self, backend: str = "inductor", mode: str | None = None) -> None:
        """Route single-token steps (step_one) through torch.compile(decode_one), captured whole;
        mode "reduce-overhead" adds CUDA graphs on a GPU."""
        kw = {} if mode is None else {"mode": mode}
        self._step = torch.compile(self.decode_one, backend=backend, fullgraph=True, dynamic=False, **kw)

    @torch.no_grad()
    def step_one(self, cache: KVCache, tokens: torch.Tensor, cell: torch.Tensor, grid) -> torch.Tensor:
        """One written token at one cell: the compiled step when compile_step was called, else eager."""
        rope = self.rope(grid, tokens.device)
        if self._step is not None:
            return self._step(cache, tokens, cell, rope)
        reach = int(cell) + self.cfg.prefix_len + 1 if tokens.device.type == "cpu" else None
        return self.decode_one(cache, tokens, cell, rope, reach)
