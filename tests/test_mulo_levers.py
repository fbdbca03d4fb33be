"""mulo's commit and accept rules against an exact distribution: a toy target over a 2 x 4 grid of three
codes (tests/toy_ar.py: each cell's conditional, given the two cells before it, is a fixed table), drafted
by a toy over the 1 x 2 grid, many seeded runs.

- commit=target: a kept cell's token lies in B_k and is distributed as the target's p restricted to B_k
  (renormalised), p read in the context the verify pass judged the cell in (the proposal before it);
  committing the proposal's token, or drawing from the whole of p, fails the same test.
- accept=exact at radius 0: every cell's token is distributed as the target's p given the proposal before
  it; redrawing a rejected cell from p instead of the residual, or testing a proposal drawn from the
  learned up-sampler's q as if it were one-hot (min(1, p)), fails the same test.

The test is Pearson's over bins (cell, the two proposal tokens before it, token): observed counts against
the sum over runs of the exact probability (outcomes expected fewer than 5 times pooled). A correct rule
fails it with probability P_MIN; the controls land below 1e-9.
"""
import numpy as np
import pytest
import torch

from core import engine
from core.acceptance import restricted
from core.config import MethodParams, ParameterError, RunConfig, SamplingConfig
from core.decoding import MethodContext
from core.methods import mulo
from core.models.upsamplers import TokenUpsampler, TokenUpsamplerConfig
from toy_ar import MISSING, ToyAR

V, GRID, RUNS = 3, (2, 4), 800     # p-values at 800 runs: 0.05-0.9 correct, < 1e-190 every control
P_MIN, P_CONTROL = 1e-3, 1e-9
NEIGHBOURS = torch.tensor([[1, 2], [2, 0], [0, 1]])    # code v's nearest codes: B_1(v) = {v, v + 1 mod 3}
TARGET, DRAFTER = ToyAR(V, GRID[0] * GRID[1], seed=3, sharpness=1.0), ToyAR(V, GRID[0] * GRID[1] // 4, seed=4)
torch.manual_seed(5)
LEARNED = TokenUpsampler(TokenUpsamplerConfig(scale=2, vocab_size=V, embed=4, width=8, depth=1, cell=4)).eval()


class ToyCodes(torch.nn.Module):
    """The toys' tokenizer: a code is its own grey level (decode), a grey level rounds to a code (encode);
    the raster rule's down-sampling goes through it."""
    vocab_size = V

    def __init__(self):
        super().__init__()
        self.anchor = torch.nn.Parameter(torch.zeros(1), requires_grad=False)   # its device

    def decode(self, tokens):
        return tokens[:, None].float()

    def encode(self, img):
        return img[:, 0].round().clamp(0, V - 1).long()


CODES = ToyCodes()


def runs(seed0: int = 0, **params) -> list:
    """RUNS results of mulo on the toys, (proposal, tokens, steps) each."""
    out = []
    for n in range(RUNS):
        ctx = MethodContext(target=TARGET, drafter=DRAFTER, tokenizer=CODES, grid=GRID,
                            caption=lambda g: (torch.zeros(1, dtype=torch.long), torch.ones(1, dtype=torch.bool)),
                            sampling=SamplingConfig(cfg=1.0), params=MethodParams(scale=2, **params),
                            gen=torch.Generator().manual_seed(seed0 + n), neighbours=NEIGHBOURS,
                            upsampler_net=lambda name, r: LEARNED)
        steps, gen = [], mulo.run(ctx)
        try:
            while True:
                steps.append(next(gen))
        except StopIteration as stop:
            out.append((stop.value.proposal.reshape(-1), stop.value.tokens.reshape(-1), steps))
    return out


def test_raster_rejection_with_the_exact_test_gives_every_cell_the_target_s_p_given_the_committed_cells():
    """rejection=raster, accept=exact: the first rejected cell takes the residual, the rest is drafted again;
    every cell's context is then the committed cells before it, so the runs are the target's joint (each
    conditional given the two final tokens before it)."""
    results = runs(accept="exact", rejection="raster", draft_rows=1, upsampler="nearest")
    assert sum(len([s for s in steps if s.phase == "verify"]) > 2 for _, _, steps in results) > RUNS // 4
    as_judged = [(final, final, steps) for _, final, steps in results]   # the context: the committed tokens
    assert tally(as_judged, lambda p, x: p, every_cell) > P_MIN
    with pytest.MonkeyPatch.context() as m:   # control: the first rejected cell drawn from p, not the residual
        m.setattr(mulo, "residual", lambda p, q: p)
        bad = [(final, final, steps) for _, final, steps in
               runs(accept="exact", rejection="raster", draft_rows=1, upsampler="nearest")]
        assert tally(bad, lambda p, x: p, every_cell) < P_CONTROL


def judged(proposal: np.ndarray, c: int) -> tuple[tuple, torch.Tensor]:
    """The context the verify pass judged cell c in (the two proposal tokens before it) and the target's
    exact p there."""
    before = (int(proposal[c - 2]) if c >= 2 else MISSING, int(proposal[c - 1]) if c >= 1 else MISSING)
    return before, TARGET.conditional(c, *before)


def pearson(observed: dict, expected: dict, min_expected: float = 5.0) -> float:
    """p-value of observed counts against expected ones over the same bins (key[:-1] a group whose counts
    are fixed by the runs); an observed outcome the oracle gives probability 0 gives 0."""
    if any(expected.get(key, 0.0) == 0.0 for key in observed):
        return 0.0
    bins, po, pe = [], 0, 0.0
    for key, e in expected.items():
        if e >= min_expected:
            bins.append((observed.get(key, 0), e))
        else:
            po, pe = po + observed.get(key, 0), pe + e
    if pe > 0:
        bins.append((po, pe))
    stat = sum((o - e) ** 2 / e for o, e in bins)
    dof = max(len(bins) - len({key[:-1] for key in expected}), 1)
    return float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def tally(results, law, cells_of) -> float:
    """Pearson's p-value of the tokens at cells_of(steps) against law(proposal, c) per run."""
    observed, expected = {}, {}
    for proposal, tokens, steps in results:
        for c in cells_of(steps):
            before, p = judged(proposal, c)
            dist = law(p, int(proposal[c]))
            key = (c, *before)
            observed[(*key, int(tokens[c]))] = observed.get((*key, int(tokens[c])), 0) + 1
            for y in range(V):
                if dist[y] > 0:
                    expected[(*key, y)] = expected.get((*key, y), 0.0) + float(dist[y])
    return pearson(observed, expected)


def kept_cells(steps) -> list[int]:
    verify = next(s for s in steps if s.phase == "verify")
    return np.flatnonzero(~np.asarray(verify.extra["resample"], bool).reshape(-1)).tolist()


def restricted_law(p, x):
    return restricted(p[None], torch.tensor([x]), NEIGHBOURS, 1)[0]


LEVER1 = dict(commit="target", tau=0.5, k=1, radius=0, upsampler="nearest")


def test_a_kept_cell_commits_a_token_of_its_neighbourhood_drawn_from_the_target_s_p_there():
    results = runs(**LEVER1)
    n_kept = 0
    for proposal, tokens, steps in results:
        kept = kept_cells(steps)
        n_kept += len(kept)
        assert all(tokens[c] in (proposal[c], NEIGHBOURS[proposal[c], 0]) for c in kept)    # in B_1
        drawn = [s for s in steps if s.extra.get("rule") == "B_k"]
        assert len(drawn) == (len(kept) > 0)          # one event of no pass, naming every kept cell
        assert all(s.nfe == 0 and s.model == "target" for s in drawn)
        assert sorted(c for s in drawn for c in s.cells) == sorted([[c // GRID[1], c % GRID[1]] for c in kept])
    assert RUNS * 2 < n_kept < RUNS * 7                # both verdicts exercised
    assert sum(np.any(t != p) for p, t, _ in results) > RUNS // 4
    assert tally(results, restricted_law, kept_cells) > P_MIN


def test_committing_the_proposal_s_token_or_a_draw_from_all_of_p_fails_the_same_test(monkeypatch):
    assert tally(runs(**dict(LEVER1, commit="proposal")), restricted_law, kept_cells) < P_CONTROL
    monkeypatch.setattr(mulo, "restricted", lambda p, x, nb, k: p)
    assert tally(runs(**LEVER1), restricted_law, kept_cells) < P_CONTROL


def every_cell(steps) -> range:
    return range(GRID[0] * GRID[1])


@pytest.mark.parametrize("upsampler", ["nearest", "learned", "distilled"])
def test_the_exact_test_gives_every_cell_the_target_s_p_given_the_context_it_was_judged_in(upsampler):
    results = runs(accept="exact", radius=0, upsampler=upsampler)
    verify = [next(s for s in steps if s.phase == "verify") for _, _, steps in results]
    verdicts = np.concatenate([np.asarray(s.extra["accepted"], bool).reshape(-1) for s in verify])
    assert 0.15 < verdicts.mean() < 0.85               # both verdicts are exercised
    assert all(len([s for s in steps if s.model == "target" and s.nfe]) == 1 for _, _, steps in results)  # no island
    if upsampler != "nearest":                        # the proposal is drawn from q, not its argmax
        assert len({tuple(p.tolist()) for p, _, _ in results}) > 20
    assert tally(results, lambda p, x: p, every_cell) > P_MIN


def test_redrawing_from_p_or_testing_a_drawn_proposal_as_one_hot_fails_the_same_test(monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(mulo, "residual", lambda p, q: p)
        assert tally(runs(accept="exact", radius=0, upsampler="nearest"), lambda p, x: p, every_cell) < P_CONTROL
    real = mulo.exact_accept_prob      # min(1, p(x)): the test of a one-hot proposal, on one drawn from q
    monkeypatch.setattr(mulo, "exact_accept_prob", lambda p_x, q_x: real(p_x, torch.ones_like(q_x)))
    assert tally(runs(accept="exact", radius=0, upsampler="learned"), lambda p, x: p, every_cell) < P_CONTROL


@pytest.mark.parametrize("params, name", [(dict(accept="strict"), "accept"), (dict(commit="draft"), "commit"),
                                          (dict(accept="exact", commit="target"), "commit")])
def test_the_new_knobs_are_refused_by_name_outside_their_range(params, name):
    with pytest.raises(ParameterError, match=rf"^{name} must be one of"):
        engine.run(RunConfig(method="mulo").with_params(**params))


# ---- what the cell card says of each rule, on the shipped pair ----------------------------------------

def test_the_card_says_what_a_kept_or_repaired_cell_committed_and_from_which_distribution():
    from app import render
    from core import cell_view
    pair = engine.load_pair("embedded")
    kept = engine.run(RunConfig(method="mulo", seed=0).with_params(scale=4, commit="target", tau=0.3, k=16,
                                                                     radius=0), pair)
    v = render.verdict(kept)
    i, j = map(int, np.argwhere(~v.resample)[0])
    words = render.cell_details(kept, v, i, j)
    assert "drawn from the target's p restricted to B_k" in words
    view = cell_view.cell_view(kept, i, j, pair)
    members = {t for t, _, _ in view.members}
    assert view.role == "resample" and "restricted to B_k" in view.resampled["from"]
    assert {t for t, _, _ in view.resampled["top"]} <= members and view.resampled["token"]["token"] in members
    exact = engine.run(RunConfig(method="mulo", seed=0).with_params(scale=4, accept="exact", radius=0), pair)
    v = render.verdict(exact)
    assert v.prob is not None and exact.totals["target_nfe"] == 2
    i, j = map(int, np.argwhere(v.rejected)[0])
    words = render.cell_details(exact, v, i, j)
    assert "exact test: accepted with probability min(1, p/q)" in words and "**rejected**" in words
    assert "drawn from the residual" in words
    view = cell_view.cell_view(exact, i, j, pair)
    assert "residual" in view.resampled["from"]
    proposal = int(exact.proposal[i][j])   # q one-hot on the proposal: the residual gives it no mass
    assert all(t != proposal for t, _, _ in view.resampled["top"]) and view.resampled["token"]["p"] > 0
