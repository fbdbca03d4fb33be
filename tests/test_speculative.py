import dataclasses

import numpy as np
import pytest
import torch

from core import engine
from core.acceptance import exact_accept_prob, relaxed_target, residual
from core.config import RunConfig, SamplingConfig
from core.embedded import family
from core.methods import sd

PROMPT = "a large red circle center on a striped blue background"


def test_accept_mass_plus_rejection_mass_times_residual_is_exactly_p():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        p = torch.rand(7, generator=g).double() ** 3
        q = torch.rand(7, generator=g).double() ** 3
        p, q = p / p.sum(), q / q.sum()
        accept = q * exact_accept_prob(p, q)                  # P(draft = x and accepted)
        rejection_mass = 1 - accept.sum()
        assert torch.allclose(accept + rejection_mass * residual(p, q), p, atol=1e-12, rtol=0)


def test_relaxation_moves_the_longest_neighbour_prefix_within_delta():
    p = torch.tensor([[0.1, 0.3, 0.05, 0.15, 0.4]])
    neighbours = torch.tensor([[2, 3, 1, 4]] * 5)             # token 0's neighbours: 2, 3, 1, 4
    out = relaxed_target(p, torch.tensor([0]), neighbours, k=4, delta=0.25)
    # 0.05 (n1) + 0.15 (n2) = 0.20 <= 0.25; + 0.3 (n3) would exceed: stop there
    assert torch.allclose(out, torch.tensor([[0.30, 0.3, 0.0, 0.0, 0.4]]))
    assert torch.allclose(relaxed_target(p, torch.tensor([0]), neighbours, 4, 0.0), p)


@pytest.fixture(scope="module")
def pair8(tiny_pair):
    return dataclasses.replace(tiny_pair, grid=(8, 8))


@pytest.mark.parametrize("method, params", [("sd", {}), ("sd", dict(gamma=7)), ("sjd", {}),
                                            ("sjd", dict(sjd_init="repeat", sjd_window=5))])
def test_at_temperature_zero_speculative_methods_give_ar_tokens(pair8, method, params):
    greedy = SamplingConfig(temperature=0.0)
    ar = engine.run(RunConfig(method="ar", prompt=PROMPT, seed=1, sampling=greedy), pair8)
    other = engine.run(RunConfig(method=method, prompt=PROMPT, seed=1, sampling=greedy).with_params(**params), pair8)
    assert other.tokens == ar.tokens


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_lantern_with_delta_zero_gives_sd_tokens(pair8, temperature):
    s = SamplingConfig(temperature=temperature)
    a = engine.run(RunConfig(method="sd", prompt=PROMPT, seed=4, sampling=s), pair8)
    b = engine.run(RunConfig(method="lantern", prompt=PROMPT, seed=4, sampling=s).with_params(delta=0.0), pair8)
    assert a.tokens == b.tokens


def test_lantern_relaxation_raises_acceptance(pair8):
    s = SamplingConfig(temperature=1.0, top_k=16)
    a = engine.run(RunConfig(method="sd", prompt=PROMPT, seed=4, sampling=s), pair8)
    b = engine.run(RunConfig(method="lantern", prompt=PROMPT, seed=4, sampling=s).with_params(delta=0.5), pair8)
    assert b.totals["passed_fraction"] > a.totals["passed_fraction"]


def test_speculative_traces_record_judged_cells_and_probabilities(pair8):
    t = engine.run(RunConfig(method="sd", prompt=PROMPT, seed=0), pair8)
    v = [s for s in t.steps if s["phase"] == "verify"]
    assert v and all(len(s["prob"]) == len(s["accepted"]) <= len(s["judged"]) for s in v)
    assert sum(len(s["cells"]) for s in v) == 64
    assert t.totals["target_nfe"] == sum(s["nfe"] for s in v)


# ---- statistical: sd samples from p ---------------------------------------------------------

N_RUNS = 1000
GRID = (1, 3)   # the first three cells of a row, from the shipped target and drafter


def _first_cells(pair, method_run, seed0: int) -> np.ndarray:
    from core.decoding import MethodContext
    cfg = RunConfig(method="ar", prompt=PROMPT, sampling=SamplingConfig(top_k=4))
    out = []
    for n in range(N_RUNS):
        ctx = engine.context(dataclasses.replace(cfg, seed=seed0 + n), pair)
        ctx = dataclasses.replace(ctx, drafter=pair.small)
        gen = method_run(ctx)
        try:
            while True:
                next(gen)
        except StopIteration as stop:
            out.append(stop.value.tokens.reshape(-1))
    return np.array(out)                                      # (N_RUNS, 3)


def _tv(a: np.ndarray, b: np.ndarray) -> float:
    """Largest total-variation distance between per-cell empirical marginals."""
    worst = 0.0
    for c in range(a.shape[1]):
        va, ca = np.unique(a[:, c], return_counts=True)
        vb, cb = np.unique(b[:, c], return_counts=True)
        pa, pb = dict(zip(va, ca / len(a))), dict(zip(vb, cb / len(b)))
        worst = max(worst, 0.5 * sum(abs(pa.get(v, 0) - pb.get(v, 0)) for v in set(pa) | set(pb)))
    return worst


@pytest.fixture(scope="module")
def embedded_row():
    pair = engine.load_pair("embedded")
    if pair.small is None:
        pytest.fail("the shipped same-resolution drafter is missing from assets/")
    return dataclasses.replace(pair, grid=GRID, caption=lambda prompt, grid: family.caption(prompt, (32, 32)))


@pytest.fixture(scope="module")
def ar_samples(embedded_row):
    from core.methods import ar
    return _first_cells(embedded_row, ar.run, 10_000)


def test_sd_samples_the_target_distribution(embedded_row, ar_samples):
    assert _tv(_first_cells(embedded_row, sd.run, 20_000), ar_samples) < 0.15


def test_an_always_accept_rule_fails_the_same_test(embedded_row, ar_samples):
    def always_accept(ctx):  # negative control: p~ so large on the draft that every draft passes
        return sd.speculate(ctx, lambda p, drafts: p + 1e9 * torch.nn.functional.one_hot(drafts, p.shape[-1]))
    assert _tv(_first_cells(embedded_row, always_accept, 20_000), ar_samples) > 0.15
