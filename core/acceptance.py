"""Acceptance rules: pure functions of distributions, draft tokens and (where random) a generator.

- pooled threshold (MuLo-SD): accept iff the target mass on the proposal token and its k nearest
  codebook neighbours reaches tau. Deterministic.
- exact (speculative sampling): accept with min(1, p/q); residual normalize(max(0, p - q)).
- relaxed (LANTERN): p moved from the draft token's nearest neighbours (within a total-variation
  budget delta) onto the draft token, then the exact test.
All probabilities are float32 rows of the processed distribution; pooled mass is summed in float64.
"""
from __future__ import annotations

import torch


def pooled_mass(p: torch.Tensor, proposal: torch.Tensor, neighbours: torch.Tensor, k: int) -> torch.Tensor:
    """p (T, V), proposal (T,), neighbours (V, K>=k) -> (T,) float64 share of p's mass on B_k = the
    proposal and its k nearest codes. Computed as 1 - (mass outside B_k) / (total mass) in float64, so
    that a B_k holding all of p's support gives exactly 1 (tau = 1 then passes)."""
    idx = proposal[:, None] if k == 0 else torch.cat([proposal[:, None], neighbours[proposal, :k]], dim=1)
    p64 = p.double()
    inside = torch.zeros_like(p64, dtype=torch.bool).scatter_(1, idx, True)
    return 1.0 - p64.masked_fill(inside, 0.0).sum(1) / p64.sum(1)


def threshold_accept(pooled: torch.Tensor, tau: float) -> torch.Tensor:
    """(T,) bool: accepted iff pooled >= tau."""
    return pooled >= tau


def exact_accept_prob(p_x: torch.Tensor, q_x: torch.Tensor) -> torch.Tensor:
    """min(1, p(x) / q(x)) for the drafted tokens x; q(x) > 0 for a drafted token."""
    return torch.clamp(p_x / q_x.clamp_min(1e-20), max=1.0)


def residual(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalize(max(0, p - q)) per row; falls back to p where p <= q everywhere (then p == q)."""
    r = (p - q).clamp_min(0.0)
    z = r.sum(-1, keepdim=True)
    return torch.where(z > 0, r / z.clamp_min(1e-20), p)


def relaxed_target(p: torch.Tensor, draft: torch.Tensor, neighbours: torch.Tensor, k: int,
                   delta: float) -> torch.Tensor:
    """LANTERN's p~ per row: the longest prefix of the draft token's nearest neighbours (itself
    excluded) whose summed p stays <= delta has its mass moved onto the draft token.
    p (T, V), draft (T,), neighbours (V, K) -> (T, V)."""
    out = p.float().clone()
    if k == 0 or delta <= 0.0:
        return out
    nb = neighbours[draft, :k]                              # (T, k)
    mass = out.gather(1, nb)                                # (T, k)
    keep = mass.cumsum(1) <= delta                          # prefix property: cumsum is monotone
    moved = (mass * keep).sum(1)                            # (T,)
    out.scatter_(1, nb, torch.where(keep, torch.zeros_like(mass), mass))
    out[torch.arange(len(draft)), draft] += moved
    return out
