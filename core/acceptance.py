"""Acceptance rules: pure functions of distributions, draft tokens and (where random) a generator.

- pooled threshold (MuLo-SD): accept iff the target mass on the proposal token and its k nearest
  codebook neighbours reaches tau. Deterministic.
- restricted (MuLo-SD commit=target): a cell that passed the pooled test commits a token drawn from p
  restricted to B_k and renormalised, instead of the proposal's token.
- exact (speculative sampling): accept with min(1, p/q); residual normalize(max(0, p - q)).
- relaxed (LANTERN): p moved from the draft token's nearest neighbours (within a total-variation
  budget delta) onto the draft token, then the exact test; LANTERN++ bounds the move by
  (lambda - 1) p(x) instead.
- annealed (COOL-SD): min(1, w p/q) with a weight w per draft position; residual
  normalize(max(0, p - min(q, w p))), which is the exact residual where w >= 1.
- grouped (GSD): min(1, sum_C p / sum_C q) over a cluster C of the draft token (rank window of p,
  filtered by probability gap and embedding distance); the residual stays the exact one.
- maximal coupling (SCD): a new draft from p that keeps the old draft x ~ q with probability
  min(1, p(x)/q(x)), else draws from the exact residual; its marginal is p.
All probabilities are float32 rows of the processed distribution; pooled mass is summed in float64.
"""
from __future__ import annotations

import torch


def pooled_mass(p: torch.Tensor, proposal: torch.Tensor, neighbours: torch.Tensor, k: int) -> torch.Tensor:
    """p (T, V), proposal (T,), neighbours (V, K>=k) -> (T,) float64 share of p's mass on B_k = the
    proposal and its k nearest codes. Computed as 1 - (mass outside B_k) / (total mass) in float64, so
    that a B_k holding all of p's support gives exactly 1 (tau = 1 then passes)."""
    idx = neighbourhood(proposal, neighbours, k)
    p64 = p.double()
    inside = torch.zeros_like(p64, dtype=torch.bool).scatter_(1, idx, True)
    return 1.0 - p64.masked_fill(inside, 0.0).sum(1) / p64.sum(1)


def neighbourhood(proposal: torch.Tensor, neighbours: torch.Tensor, k: int) -> torch.Tensor:
    """(T,) proposal tokens -> (T, k + 1) ids of B_k: the proposal, then its k nearest codes."""
    return proposal[:, None] if k == 0 else torch.cat([proposal[:, None], neighbours[proposal, :k]], dim=1)


def restricted(p: torch.Tensor, proposal: torch.Tensor, neighbours: torch.Tensor, k: int) -> torch.Tensor:
    """p (T, V) restricted to each row's B_k and renormalised -> (T, V). A row whose B_k holds no mass of p
    (a pooled mass of 0, which no tau > 0 passes) falls back to the one-hot of the proposal."""
    inside = torch.zeros_like(p, dtype=torch.bool).scatter_(1, neighbourhood(proposal, neighbours, k), True)
    r = p.double().masked_fill(~inside, 0.0)
    z = r.sum(1, keepdim=True)
    onehot = torch.zeros_like(r).scatter_(1, proposal[:, None], 1.0)
    return torch.where(z > 0, r / z.clamp_min(1e-300), onehot).float()


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
    budget = torch.as_tensor(delta, dtype=out.dtype).reshape(-1, 1)   # one budget, or one per row
    if k == 0 or bool((budget <= 0.0).all()):
        return out
    nb = neighbours[draft, :k]                              # (T, k)
    mass = out.gather(1, nb)                                # (T, k)
    keep = mass.cumsum(1) <= budget                         # prefix property: cumsum is monotone
    moved = (mass * keep).sum(1)                            # (T,)
    out.scatter_(1, nb, torch.where(keep, torch.zeros_like(mass), mass))
    out[torch.arange(len(draft)), draft] += moved
    return out


def bounded_target(p: torch.Tensor, draft: torch.Tensor, neighbours: torch.Tensor, k: int,
                   lam: float) -> torch.Tensor:
    """LANTERN++'s multiplicative bound: as relaxed_target with the budget (lam - 1) p(x) of each
    row's draft token x, so that p~(x) <= lam p(x). lam = 1 moves nothing."""
    budget = (lam - 1.0) * p.float()[torch.arange(len(draft)), draft]
    return relaxed_target(p, draft, neighbours, k, budget)


def annealed_weights(n: int, delta: float, nu: float, mu: float) -> torch.Tensor:
    """COOL-SD's schedule w_i = delta * exp(-nu * i - mu) for draft positions i = 1..n -> (n,)."""
    i = torch.arange(1, n + 1, dtype=torch.float32)
    return delta * torch.exp(-nu * i - mu)


def annealed_accept_prob(p_x: torch.Tensor, q_x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """min(1, w p(x) / q(x)) per drafted token x; (T,) each."""
    return torch.clamp(w * p_x / q_x.clamp_min(1e-20), max=1.0)


def annealed_residual(p: torch.Tensor, q: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """normalize(max(0, p - min(q, w p))) per row; p, q (T, V), w (T,). Falls back to p where empty."""
    r = (p - torch.minimum(q, w[:, None] * p)).clamp_min(0.0)
    z = r.sum(-1, keepdim=True)
    return torch.where(z > 0, r / z.clamp_min(1e-20), p)


def rank_cluster(p: torch.Tensor, x: int, group: int, gap: float, close: torch.Tensor) -> torch.Tensor:
    """GSD's cluster of draft token x under p (V,): the `group` tokens of the rank window around x
    ((group - 1) // 2 ranked above, the rest below, cut at either end, never shifted), kept where |p(y) - p(x)| < gap
    and close[y] (embedding distance to x under the threshold); x itself always. -> (|C|,) token ids."""
    order = torch.sort(p, descending=True, stable=True).indices
    rank = int((order == x).nonzero()[0, 0])
    above = (group - 1) // 2
    window = order[max(0, rank - above):rank + group - above]
    keep = ((p[window] - p[x]).abs() < gap) & close[window]
    keep |= window == x
    return window[keep]


def grouped_accept_prob(p: torch.Tensor, q: torch.Tensor, cluster: torch.Tensor) -> torch.Tensor:
    """min(1, sum_C p / sum_C q) for one slot; p, q (V,), cluster (|C|,) ids holding the draft token."""
    return torch.clamp(p[cluster].sum() / q[cluster].sum().clamp_min(1e-20), max=1.0)


def accepts(a: float, gen: torch.Generator) -> bool:
    """One verdict drawn with probability exactly a: u ~ U[0, 1) from gen, accepted iff u < a. (u <= a
    would accept a draft of probability 0 whenever u comes out exactly 0: once in 2^24 draws.)"""
    return torch.rand(1, generator=gen).item() < a


def maximal_coupling(p: torch.Tensor, q: torch.Tensor, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """New draft per row from p coupled with the old draft x ~ q: keep x with probability
    min(1, p(x)/q(x)), else sample normalize(max(0, p - q)). p, q (T, V), x (T,) -> (T,) ids."""
    rows = torch.arange(len(x))
    keep = torch.rand(len(x), generator=gen) < exact_accept_prob(p[rows, x], q[rows, x])   # as accepts
    fresh = torch.multinomial(residual(p, q), 1, generator=gen).squeeze(1)
    return torch.where(keep, x, fresh)
