"""VQ image tokenizer in LlamaGen's layout: conv encoder, L2-normalized codebook, conv decoder.

Owns pixels <-> token grids at any resolution (it is fully convolutional, so one tokenizer serves
the 8x8, 16x16 and 32x32 grids), and the codebook geometry (normalized code vectors, neighbour
tables). Module names follow LlamaGen's VQModel so its checkpoints load into these classes.
Images are float tensors in [-1, 1], (B, 3, S, S); tokens are (B, h, w) int64.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class VQConfig:
    codebook_size: int = 512          # V
    codebook_embed_dim: int = 8       # code vector width
    codebook_l2_norm: bool = True
    ch: int = 16                      # base channel width
    ch_mult: tuple = (1, 2)           # one 2x down-sampling per level after the first
    num_res_blocks: int = 1
    z_channels: int = 32
    norm_groups: int = 8              # LlamaGen: 32
    mid_attn: bool = False            # LlamaGen: True
    attn_levels: tuple = ()           # ch_mult levels with an attention block after each res block (LlamaGen: the last)
    commit_loss_beta: float = 0.25

    @property
    def downsample(self) -> int:
        return 2 ** (len(self.ch_mult) - 1)

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["ch_mult"] = list(self.ch_mult)
        d["attn_levels"] = list(self.attn_levels)
        return d


def _norm(cfg: VQConfig, c: int) -> nn.GroupNorm:
    return nn.GroupNorm(cfg.norm_groups, c, eps=1e-6, affine=True)


class ResnetBlock(nn.Module):
    def __init__(self, cfg: VQConfig, c_in: int, c_out: int):
        super().__init__()
        self.norm1, self.conv1 = _norm(cfg, c_in), nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm2, self.conv2 = _norm(cfg, c_out), nn.Conv2d(c_out, c_out, 3, padding=1)
        self.nin_shortcut = nn.Conv2d(c_in, c_out, 1) if c_in != c_out else None

    def forward(self, x):
        h = self.conv1(F.silu(self.norm1(x)))
        h = self.conv2(F.silu(self.norm2(h)))
        return (x if self.nin_shortcut is None else self.nin_shortcut(x)) + h


class AttnBlock(nn.Module):
    def __init__(self, cfg: VQConfig, c: int):
        super().__init__()
        self.norm = _norm(cfg, c)
        self.q, self.k, self.v, self.proj_out = (nn.Conv2d(c, c, 1) for _ in range(4))

    def forward(self, x):
        B, C, H, W = x.shape
        h = self.norm(x)
        q, k, v = (m(h).flatten(2).transpose(1, 2) for m in (self.q, self.k, self.v))  # (B, HW, C)
        y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(B, C, H, W)
        return x + self.proj_out(y)


class Downsample(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, stride=2)

    def forward(self, x):
        return self.conv(F.pad(x, (0, 1, 0, 1)))


class Upsample(nn.Module):
    def __init__(self, c: int):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return self.conv(F.interpolate(x, scale_factor=2.0, mode="nearest"))


class _Level(nn.Module):
    def __init__(self):
        super().__init__()
        self.res = nn.ModuleList()
        self.attn = nn.ModuleList()


def _run_level(level: _Level, h: torch.Tensor) -> torch.Tensor:
    """Res blocks in order, each followed by its attention block where the level has them."""
    for n, block in enumerate(level.res):
        h = block(h)
        if len(level.attn):
            h = level.attn[n](h)
    return h


def _mid(cfg: VQConfig, c: int) -> nn.ModuleList:
    blocks = [ResnetBlock(cfg, c, c)] + ([AttnBlock(cfg, c)] if cfg.mid_attn else []) + [ResnetBlock(cfg, c, c)]
    return nn.ModuleList(blocks)


class Encoder(nn.Module):
    def __init__(self, cfg: VQConfig):
        super().__init__()
        self.conv_in = nn.Conv2d(3, cfg.ch, 3, padding=1)
        self.conv_blocks = nn.ModuleList()
        c_in = cfg.ch
        for i, mult in enumerate(cfg.ch_mult):
            level, c_out = _Level(), cfg.ch * mult
            for _ in range(cfg.num_res_blocks):
                level.res.append(ResnetBlock(cfg, c_in, c_out))
                c_in = c_out
                if i in cfg.attn_levels:
                    level.attn.append(AttnBlock(cfg, c_in))
            if i != len(cfg.ch_mult) - 1:
                level.downsample = Downsample(c_in)
            self.conv_blocks.append(level)
        self.mid = _mid(cfg, c_in)
        self.norm_out = _norm(cfg, c_in)
        self.conv_out = nn.Conv2d(c_in, cfg.z_channels, 3, padding=1)

    def forward(self, x):
        h = self.conv_in(x)
        for level in self.conv_blocks:
            h = _run_level(level, h)
            if hasattr(level, "downsample"):
                h = level.downsample(h)
        for block in self.mid:
            h = block(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class Decoder(nn.Module):
    def __init__(self, cfg: VQConfig):
        super().__init__()
        c_in = cfg.ch * cfg.ch_mult[-1]
        self.conv_in = nn.Conv2d(cfg.z_channels, c_in, 3, padding=1)
        self.mid = _mid(cfg, c_in)
        self.conv_blocks = nn.ModuleList()
        for i, mult in enumerate(reversed(cfg.ch_mult)):
            level, c_out = _Level(), cfg.ch * mult
            for _ in range(cfg.num_res_blocks + 1):
                level.res.append(ResnetBlock(cfg, c_in, c_out))
                c_in = c_out
                if len(cfg.ch_mult) - 1 - i in cfg.attn_levels:  # the same resolution as encoder level
                    level.attn.append(AttnBlock(cfg, c_in))
            if i != len(cfg.ch_mult) - 1:
                level.upsample = Upsample(c_in)
            self.conv_blocks.append(level)
        self.norm_out = _norm(cfg, c_in)
        self.conv_out = nn.Conv2d(c_in, 3, 3, padding=1)

    def forward(self, z):
        h = self.conv_in(z)
        for block in self.mid:
            h = block(h)
        for level in self.conv_blocks:
            h = _run_level(level, h)
            if hasattr(level, "upsample"):
                h = level.upsample(h)
        return self.conv_out(F.silu(self.norm_out(h)))


class VectorQuantizer(nn.Module):
    def __init__(self, cfg: VQConfig):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.codebook_size, cfg.codebook_embed_dim)
        nn.init.uniform_(self.embedding.weight, -1.0 / cfg.codebook_size, 1.0 / cfg.codebook_size)

    def codes(self) -> torch.Tensor:
        """(V, d) code vectors as used for lookup (L2-normalized when the config says so)."""
        w = self.embedding.weight
        return F.normalize(w, dim=-1) if self.cfg.codebook_l2_norm else w

    def forward(self, z):
        # z (B, d, h, w) -> z_q (B, d, h, w), indices (B, h, w), loss
        z = z.permute(0, 2, 3, 1)
        if self.cfg.codebook_l2_norm:
            z = F.normalize(z, dim=-1)
        codes = self.codes()
        flat = z.reshape(-1, z.shape[-1])
        d = flat.pow(2).sum(1, keepdim=True) - 2 * flat @ codes.t() + codes.pow(2).sum(1)[None]
        idx = d.argmin(dim=1)
        z_q = codes[idx].view_as(z)
        loss = F.mse_loss(z_q, z.detach()) + self.cfg.commit_loss_beta * F.mse_loss(z_q.detach(), z)
        z_q = z + (z_q - z).detach()  # straight-through
        return z_q.permute(0, 3, 1, 2), idx.view(z.shape[:-1]), loss, z.reshape(-1, z.shape[-1])


class VQModel(nn.Module):
    def __init__(self, cfg: VQConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder, self.decoder = Encoder(cfg), Decoder(cfg)
        self.quant_conv = nn.Conv2d(cfg.z_channels, cfg.codebook_embed_dim, 1)
        self.post_quant_conv = nn.Conv2d(cfg.codebook_embed_dim, cfg.z_channels, 1)
        self.quantize = VectorQuantizer(cfg)

    @property
    def vocab_size(self) -> int:
        return self.cfg.codebook_size

    def forward(self, img):
        """Training pass: (reconstruction, indices, vq loss, normalized latents)."""
        z_q, idx, loss, flat = self.quantize(self.quant_conv(self.encoder(img)))
        return self.decoder(self.post_quant_conv(z_q)), idx, loss, flat

    @torch.no_grad()
    def encode(self, img: torch.Tensor) -> torch.Tensor:
        """(B, 3, S, S) in [-1, 1] -> (B, S/f, S/f) token ids."""
        return self.quantize(self.quant_conv(self.encoder(img)))[1]

    @torch.no_grad()
    def decode(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, h, w) token ids -> (B, 3, h*f, w*f) in [-1, 1]."""
        z = self.quantize.codes()[tokens].permute(0, 3, 1, 2)
        return self.decoder(self.post_quant_conv(z)).clamp(-1, 1)

    @torch.no_grad()
    def neighbours(self, k: int, raw: bool = False) -> torch.Tensor:
        """(V, k) nearest other codes of each code (L2 on the code vectors as looked up, or with raw on the
        stored embedding weights before any normalisation: LANTERN's table), nearest first."""
        codes = (self.quantize.embedding.weight if raw else self.quantize.codes()).float()
        k = min(k, codes.shape[0] - 1)
        out = []
        for start in range(0, codes.shape[0], 4096):  # rows in chunks: a 16384-code table stays small
            d = torch.cdist(codes[start:start + 4096], codes)
            d[torch.arange(d.shape[0]), torch.arange(start, start + d.shape[0])] = float("inf")
            out.append(d.topk(k, dim=1, largest=False).indices)
        return torch.cat(out)
