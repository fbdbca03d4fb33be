"""cool: COOL-SD (Li, Zhang, Du, Ji; AAAI 2026), sd with an annealed relaxation and its residual.

sd's two phases (draft gamma tokens with q, verify them in one target forward) with another test:
draft position i = 1..gamma is accepted with min(1, w_i p/q), w_i = delta * exp(-nu * i - mu), so the
early positions are relaxed most; on rejection the token comes from normalize(max(0, p - min(q, w_i p))),
the residual that minimises the bound on the output's distance to p (the exact residual where w_i >= 1).
delta = 1 and nu = 0 give sd. mu is not pinned down by the sources: cool_norm = mean makes the w_i
average delta over the gamma positions, first makes w_1 = delta.
"""
from __future__ import annotations

import math

import torch

from ..acceptance import annealed_accept_prob, annealed_residual, annealed_weights
from ..decoding import MethodContext
from .sd import speculate


def offset(gamma: int, nu: float, norm: str) -> float:
    """mu of the schedule: mean -> the weights average delta; first -> w_1 = delta."""
    if norm == "first":
        return -nu
    return math.log(sum(math.exp(-nu * i) for i in range(1, gamma + 1)) / gamma)


def run(ctx: MethodContext):
    p_ = ctx.params
    weights = annealed_weights(p_.gamma, p_.cool_delta, p_.cool_nu, offset(p_.gamma, p_.cool_nu, p_.cool_norm))

    def rule(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor):
        rows, w = torch.arange(len(drafts)), weights[:len(drafts)]
        return annealed_accept_prob(p[rows, drafts], q[rows, drafts], w), annealed_residual(p, q, w)
    return (yield from speculate(ctx, rule))
