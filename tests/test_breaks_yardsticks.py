"""Oracles for three ways the yardsticks can be wrong and still look plausible, each checked against its
definition recomputed here on small synthetic inputs (or a tiny model), never against the code's own output:

1. the detail FD to ar's samples is standardised by the *reference* set's features (ar at other seeds),
   not by the spec's own, nor by ar's;
2. every noise floor's spread, and the bound FLOOR_SPREADS spreads from it, is the spread of the
   reference measured against ar (paired over prompts) for that yardstick, not another set's or another
   yardstick's;
3. the log-likelihood (and so the log-lik gap) is read under the sampling the run itself sampled from
   (cfg, temperature, top-k, top-p), not the pair's defaults, nor the baseline's.
Inputs are built so that each wrong choice gives a figure far from the right one (asserted too).
"""
import copy
import dataclasses
import math

import numpy as np
import pytest
import torch

from core import bench, engine, likelihood, yardsticks
from core.config import RunConfig, SamplingConfig
from core.trace import PHASES

EPS = 1e-6   # the documented guard added to a standard deviation before dividing by it


# ---- independent definitions -----------------------------------------------------------------------
def fd_definition(a: np.ndarray, b: np.ndarray) -> float:
    """Fréchet distance of Gaussians fitted to a (n, F) and b (m, F), unbiased covariances:
    |mu_a - mu_b|^2 + Tr(Ca + Cb - 2 (Ca Cb)^(1/2)), the trace of the root being the sum of the square
    roots of the eigenvalues of Ca Cb (real and non-negative for two covariances)."""
    def cov(x):
        d = x - x.mean(0)
        return d.T @ d / (len(x) - 1)
    ca, cb = cov(a), cov(b)
    root = np.sqrt(np.clip(np.linalg.eigvals(ca @ cb).real, 0, None)).sum()
    return float(((a.mean(0) - b.mean(0)) ** 2).sum() + np.trace(ca) + np.trace(cb) - 2 * root)


def standardised_fd(x: np.ndarray, ref: np.ndarray, by: np.ndarray) -> float:
    """FD of x to ref after every feature is standardised by the mean and (population) spread of `by`."""
    mu, sd = by.mean(0), by.std(0) + EPS
    return fd_definition((x - mu) / sd, (ref - mu) / sd)


def bootstrap_indices(n: int) -> list[np.ndarray]:
    """The documented resampling: BOOTSTRAP draws of n prompts with replacement, rng seeded BOOTSTRAP_SEED."""
    g = np.random.default_rng(yardsticks.BOOTSTRAP_SEED)
    return [g.integers(0, n, n) for _ in range(yardsticks.BOOTSTRAP)]


def far(right: float, wrong: float, margin: float = 0.2) -> bool:
    """The wrong choice moves the figure by more than `margin` of it: a test on these inputs can tell."""
    return abs(wrong - right) > margin * abs(right)


# ---- synthetic sets whose spreads differ on purpose -------------------------------------------------
F = 4


def _detail(g, n, scale, shift):
    """Correlated features with per-feature spreads `scale` about `shift`."""
    mix = np.eye(F) + 0.3 * np.ones((F, F))
    return (g.normal(size=(n, F)) @ mix) * np.asarray(scale) + np.asarray(shift)


def _sets(n: int = 24, seed: int = 0):
    """ar, the reference and a spec on n prompts. As on real prompts, ar and the reference share each
    prompt's content (a common term), so ref - ar spreads far less than either set; the detail features'
    spreads differ set by set (ar's all wider than the reference's, the spec's unlike both)."""
    g = np.random.default_rng(seed)
    common = g.normal(size=n)
    ar = dict(detail=_detail(g, n, [2.0, 6.0, 4.0, 3.0], [0.0, 0.0, 0.0, 0.0]),
              energy=np.exp(0.5 * common), loglik=-1.0 + 0.3 * common, adherence=0.9 + 0.03 * common)
    ref = dict(detail=_detail(g, n, [0.2, 3.0, 1.0, 0.5], [0.5, -1.0, 2.0, 0.0]),
               energy=ar["energy"] * np.exp(g.normal(0.0, 0.1, n)), loglik=ar["loglik"] + 0.05 * g.normal(size=n),
               adherence=ar["adherence"] + 0.005 * g.normal(size=n))
    spec = dict(detail=_detail(g, n, [3.0, 0.1, 0.5, 6.0], [1.0, 1.0, -1.0, 3.0]),
                energy=ar["energy"] * 0.8, loglik=ar["loglik"] - 0.1, adherence=ar["adherence"] - 0.01)
    return ar, ref, spec


# ---- 1. the detail FD is standardised by the reference set ------------------------------------------
def test_the_detail_fd_to_ar_samples_is_standardised_by_the_reference_set_alone():
    ar, ref, spec = _sets()
    x, r = spec["detail"], ref["detail"]
    want = standardised_fd(x, r, by=r)
    assert yardsticks.fd_to_reference(x, r) == pytest.approx(want, rel=1e-6)
    for wrong in (x, ar["detail"]):                                   # the spec's own, ar's
        assert far(want, standardised_fd(x, r, by=wrong))
    # a resample keeps the whole reference set's scale when it is given one
    ix = bootstrap_indices(len(x))[0]
    scale = (r.mean(0), r.std(0) + EPS)
    got = yardsticks.fd_to_reference(x[ix], r[ix], scale)
    assert got == pytest.approx(fd_definition((x[ix] - scale[0]) / scale[1], (r[ix] - scale[0]) / scale[1]), rel=1e-6)


def _record(spec: str, i: int, s: dict, *, blur: dict | None = None) -> dict:
    """A bench record carrying the yardstick inputs of prompt i of a synthetic set."""
    looks = dict(detail=s["detail"][i].tolist(), energy=float(s["energy"][i]), loglik=float(s["loglik"][i]),
                 impossible=0)
    r = dict(spec=spec, prompt_index=i, worker="w", target_nfe=1024, target_fed=1024, drafter_nfe=0, wall_ms=100.0,
             passed=None, kept=None, phase_ms=dict.fromkeys(PHASES, 1.0), adherence=None, features=None,
             level_nfe=[1024], level_ms=[100.0], **looks)
    if blur is not None:
        r["blur"] = dict(detail=blur["detail"][i].tolist(), energy=float(blur["energy"][i]),
                         loglik=float(blur["loglik"][i]), impossible=0)
    return r


def test_the_merged_detail_fds_of_a_spec_the_floor_and_the_control_are_standardised_by_the_reference():
    """Through bench.merge: the spec's fd_ar, the floor's and the blurred control's, each the FD to the
    reference standardised by the reference's features (not by the set being judged, nor by ar's)."""
    ar, ref, spec = _sets()
    _, _, blurred = _sets(seed=1)
    n = len(ar["energy"])
    configs = bench.configs_of(["zipar"], RunConfig())
    by_spec = {"ar": [_record("ar", i, ar, blur=blurred) for i in range(n)],
               "zipar": [_record("zipar", i, spec) for i in range(n)],
               bench.REFERENCE: [_record(bench.REFERENCE, i, ref) for i in range(n)]}
    result = bench.merge(configs, by_spec, scenes=[None] * n, seed=0, clf=None)
    r = ref["detail"]
    for got, x in ((result["summary"]["zipar"]["fd_ar"], spec["detail"]),
                   (result["floors"]["fd_ar"]["value"], ar["detail"]),
                   (result["summary"]["ar"]["fd_ar"], ar["detail"]),
                   (result["controls"]["blur"]["fd_ar"], blurred["detail"])):
        want = standardised_fd(x, r, by=r)
        assert got == pytest.approx(want, rel=1e-6)
        assert far(want, standardised_fd(x, r, by=x)) and far(want, standardised_fd(x, r, by=ar["detail"]))


# ---- 2. floors and bounds from the right spread ------------------------------------------------------
def test_every_floor_spread_and_bound_is_the_reference_against_ar_computed_by_hand():
    ar, ref, _ = _sets(30)
    n, k = 30, yardsticks.FLOOR_SPREADS
    g = np.random.default_rng(7)
    data_stat = g.normal(5.0, 2.0, n)                              # what ar's FD to the data reads, per prompt
    ar = dict(ar, data_fd=lambda ix: float(np.mean(data_stat[ix]) ** 2))
    f = yardsticks.floors(ar, ref)
    idx = bootstrap_indices(n)

    # detail FD: the bootstrap over prompts (paired) of ar's FD to the reference, every resample on the
    # whole reference's scale; bound = value + k spreads
    r = ref["detail"]
    mu, sd = r.mean(0), r.std(0) + EPS
    fd_spread = float(np.std([fd_definition((ar["detail"][ix] - mu) / sd, (r[ix] - mu) / sd) for ix in idx]))
    fd_value = standardised_fd(ar["detail"], r, by=r)
    assert f["fd_ar"]["value"] == pytest.approx(fd_value, rel=1e-6)
    assert f["fd_ar"]["spread"] == pytest.approx(fd_spread, rel=1e-6)
    assert f["fd_ar"]["high"] == pytest.approx(fd_value + k * fd_spread, rel=1e-6)
    own_scale = float(np.std([standardised_fd(ar["detail"][ix], r[ix], by=r[ix]) for ix in idx]))
    assert far(fd_spread, own_scale, 0.05)                          # each resample on its own scale: another spread

    # sharpness: the standard error of a median, sqrt(pi/2) sd / sqrt(n), of log(ref / ar)
    log_ratio = np.log(ref["energy"] / ar["energy"])
    sh = math.sqrt(math.pi / 2) * log_ratio.std(ddof=1) / math.sqrt(n)
    assert f["sharpness"]["spread"] == pytest.approx(sh, rel=1e-9)
    assert f["sharpness"]["low"] == pytest.approx(math.exp(-k * sh)) and f["sharpness"]["high"] == pytest.approx(
        math.exp(k * sh))
    assert far(sh, math.sqrt(math.pi / 2) * np.log(ar["energy"]).std(ddof=1) / math.sqrt(n))   # ar's own spread

    # log-lik gap and adherence: the standard error of the mean of ref - ar
    for name in ("loglik_gap", "adherence"):
        key = "loglik" if name == "loglik_gap" else name
        d = ref[key] - ar[key]
        se = d.std(ddof=1) / math.sqrt(n)
        assert f[name]["value"] == pytest.approx(d.mean(), abs=1e-12)
        assert f[name]["spread"] == pytest.approx(se, rel=1e-9), name
        for wrong in (ar[key], ref[key]):                         # one set's own spread instead of the pair's
            assert far(se, wrong.std(ddof=1) / math.sqrt(n)), name
    se = (ref["loglik"] - ar["loglik"]).std(ddof=1) / math.sqrt(n)
    assert (f["loglik_gap"]["low"], f["loglik_gap"]["high"]) == (pytest.approx(-k * se), pytest.approx(k * se))
    se = (ref["adherence"] - ar["adherence"]).std(ddof=1) / math.sqrt(n)
    assert f["adherence"]["low"] == pytest.approx(ar["adherence"].mean() - k * se, rel=1e-9)
    assert "high" not in f["adherence"]

    # FD to the data: ar's own, with the bootstrap spread of that same statistic (not the detail FD's)
    base = float(np.mean(data_stat) ** 2)
    spread = float(np.std([np.mean(data_stat[ix]) ** 2 for ix in idx]))
    assert f["frechet"]["value"] == pytest.approx(base) and f["frechet"]["spread"] == pytest.approx(spread, rel=1e-9)
    assert f["frechet"]["high"] == pytest.approx(base + k * spread, rel=1e-9)
    assert far(spread, fd_spread)

    # every other spread is also far from each one, so a bound built on the wrong one is caught above
    spreads = [fd_spread, sh, (ref["loglik"] - ar["loglik"]).std(ddof=1) / math.sqrt(n), se, spread]
    assert all(far(a, b) for i, a in enumerate(spreads) for b in spreads[i + 1:])


# ---- 3. the log-likelihood under the run's own sampling ---------------------------------------------
def loglik_definition(pair, prompt: str, tokens, s: SamplingConfig) -> float:
    """Mean over cells of log p(x_t), p written out here: the target's raw logits of every cell (one
    teacher-forced forward; cell t read at row t), u + cfg (c - u) on the guided cells (all, or cells
    0 .. cfg_interval + 1), / temperature, the top_k largest kept, the nucleus kept (a token goes when
    the probability of the tokens sorted before it exceeds top_p), softmax, floored at IMPOSSIBLE."""
    x = torch.as_tensor(np.asarray(tokens), dtype=torch.long).reshape(1, -1)
    N = x.shape[1]
    ids, mask = pair.caption(prompt, pair.grid)
    B = 1 if s.cfg == 1.0 else 2
    with torch.inference_mode():
        raw = pair.target(ids[None].expand(B, *ids.shape), mask[None].expand(B, -1), x.expand(B, -1), pair.grid,
                          drop=torch.tensor([False, True][:B])).float()
    z = raw[0]
    if B == 2:
        guided = torch.ones(N, dtype=torch.bool) if s.cfg_interval < 0 else torch.arange(N) <= s.cfg_interval + 1
        z = torch.where(guided[:, None], raw[1] + s.cfg * (raw[0] - raw[1]), raw[0])
    assert s.temperature > 0
    z = z / s.temperature
    if 0 < s.top_k < z.shape[-1]:
        kth = z.sort(dim=-1, descending=True).values[:, s.top_k - 1:s.top_k]
        z = torch.where(z >= kth, z, torch.tensor(-math.inf))
    if s.top_p < 1.0:
        srt, order = z.sort(dim=-1, descending=True)
        cum = srt.softmax(-1).cumsum(-1)
        before = torch.cat([torch.zeros(N, 1), cum[:, :-1]], dim=1)
        drop = torch.zeros_like(before, dtype=torch.bool).scatter(-1, order, before > s.top_p)
        z = z.masked_fill(drop, -math.inf)
    p = z.softmax(-1).gather(-1, x[0][:, None])[:, 0].double().numpy()
    return float(np.log(np.maximum(p, likelihood.IMPOSSIBLE)).mean())


PROMPT = "a large red circle center on a striped blue background"
# two samplings far apart, neither the embedded pair's defaults
SAMPLINGS = {"guided-cool": "ar:cfg=2:temperature=0.8",
             "unguided-hot-nucleus": "ar:cfg=1:temperature=1.3:top_k=400:top_p=0.95"}


@pytest.fixture(scope="module")
def sharp_pair(tiny_pair):
    """The tiny pair with its target's logits scaled up 15 times (a spread of about 2.4 nats instead of
    0.16), so that guidance, temperature, top-k and top-p move a log-likelihood by tenths of a nat."""
    target = copy.deepcopy(tiny_pair.target)
    with torch.no_grad():
        target.output.weight.mul_(15.0)
    return dataclasses.replace(tiny_pair, name="tiny-sharp", target=target, multiscale=target)


@pytest.fixture(scope="module")
def measured(sharp_pair):
    """bench.measure of ar under each spec's sampling on the sharp tiny pair (its blurred control included)."""
    out = {}
    for name, spec in SAMPLINGS.items():
        label, c = bench.parse_spec(spec, RunConfig())
        c = dataclasses.replace(c, prompt=PROMPT, seed=11)
        out[name] = (c, bench.measure(label, c, 0, None, sharp_pair, None, "test"))
    return out


def test_the_bench_reads_a_runs_log_likelihood_under_that_runs_sampling(sharp_pair, measured):
    defaults = engine.resolved(RunConfig()).sampling
    others = {name: c.sampling for name, (c, _) in measured.items()}
    for name, (c, rec) in measured.items():
        s = c.sampling
        # the spec's knobs over the base's defaults: what the run sampled from, written out
        knobs = dict(kv.split("=") for kv in SAMPLINGS[name].split(":")[1:])
        assert s == dataclasses.replace(defaults, **{k: type(getattr(defaults, k))(float(v)) for k, v in knobs.items()})
        blurred = bench.encode_image(yardsticks.blur(engine.decode_image(rec["tokens"], sharp_pair.tokenizer)),
                                     sharp_pair.tokenizer)
        for got, tokens in ((rec["loglik"], rec["tokens"]), (rec["blur"]["loglik"], blurred)):
            want = loglik_definition(sharp_pair, PROMPT, tokens, s)
            assert got == pytest.approx(want, abs=1e-4), name
            # the figure under the pair's defaults or the other run's sampling is another figure
            for wrong in [defaults] + [o for n, o in others.items() if n != name]:
                assert abs(loglik_definition(sharp_pair, PROMPT, tokens, wrong) - want) > 0.05, (name, wrong)


def test_the_log_lik_gap_against_ar_is_read_under_the_runs_sampling_not_the_baselines(sharp_pair, measured):
    """likelihood.against_ar (the app's per-image gap): both grids under the run's sampling; changing the
    run's sampling changes the gap exactly as the definition under the new sampling says."""
    base_cfg = measured["guided-cool"][0]
    baseline = engine.run(dataclasses.replace(base_cfg, seed=12), sharp_pair)
    for name, (c, _) in measured.items():
        trace = engine.run(c, sharp_pair)
        q = likelihood.against_ar(sharp_pair, trace, baseline)
        want_run = loglik_definition(sharp_pair, PROMPT, trace.tokens, c.sampling)
        want_ar = loglik_definition(sharp_pair, PROMPT, baseline.tokens, c.sampling)
        assert q["loglik"] == pytest.approx(want_run, abs=1e-4) and q["ar_loglik"] == pytest.approx(want_ar, abs=1e-4)
        assert q["loglik_gap"] == pytest.approx(want_run - want_ar, abs=2e-4), name
    # the run under the other sampling: the baseline's sampling would give another ar log-likelihood
    c = measured["unguided-hot-nucleus"][0]
    assert abs(loglik_definition(sharp_pair, PROMPT, baseline.tokens, base_cfg.sampling)
               - loglik_definition(sharp_pair, PROMPT, baseline.tokens, c.sampling)) > 0.05
