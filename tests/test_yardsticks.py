"""The quality yardsticks against their definitions: image statistics, the target's log-likelihood
against a cache-free forward, noise floors and bounds on numbers whose answer is known."""
import math

import numpy as np
import pytest
import torch

from core import likelihood, yardsticks
from core.config import SamplingConfig
from core.embedded.evaluation import frechet_distance
from core.sampling import processed


def _image(seed: int, size: int = 64) -> np.ndarray:
    """A scene-like image: a few flat rectangles with sharp edges on a two-colour background."""
    g = np.random.default_rng(seed)
    img = np.zeros((size, size, 3), dtype=np.uint8)
    img[:] = g.integers(0, 256, 3)
    img[:, size // 2:] = g.integers(0, 256, 3)
    for _ in range(4):
        r, c = g.integers(0, size - 12, 2)
        h, w = g.integers(6, 12, 2)
        img[r:r + h, c:c + w] = g.integers(0, 256, 3)
    return img


def test_laplacian_energy_is_the_mean_squared_five_point_laplacian_of_the_luminance():
    img = _image(0)
    y = (img.astype(np.float64) / 255.0) @ np.array([0.299, 0.587, 0.114])
    total, count = 0.0, 0
    for i in range(1, 63):                                     # the definition, cell by cell
        for j in range(1, 63):
            lap = y[i - 1, j] + y[i + 1, j] + y[i, j - 1] + y[i, j + 1] - 4 * y[i, j]
            total, count = total + lap ** 2, count + 1
    assert yardsticks.laplacian_energy(img) == pytest.approx(total / count, rel=1e-12)
    assert yardsticks.laplacian_energy(np.full((64, 64, 3), 77, dtype=np.uint8)) == 0.0


def test_blur_is_a_normalised_gaussian_that_removes_high_frequency_energy():
    img = _image(1)
    flat = np.full((64, 64, 3), 120, dtype=np.uint8)
    assert np.array_equal(yardsticks.blur(flat), flat)          # a flat image is left as it is
    k = yardsticks._gauss_kernel(1.0)
    assert k.sum() == pytest.approx(1.0) and len(k) == 7 and k[3] == k.max()
    assert k[2] / k[3] == pytest.approx(math.exp(-0.5))         # exp(-x^2 / 2 sigma^2) at x = 1, sigma = 1
    assert yardsticks.laplacian_energy(yardsticks.blur(img)) < 0.2 * yardsticks.laplacian_energy(img)


def test_the_laplacian_bands_of_a_pyramid_sum_back_to_the_image():
    x = np.random.default_rng(2).random((1, 32, 32))
    fine = yardsticks._laplacian_bands(x, 1)[0]
    low = yardsticks._smooth(x, yardsticks._BINOMIAL)
    assert np.allclose(fine + low, x)
    assert np.allclose(yardsticks._smooth(np.ones((1, 8, 8)), yardsticks._BINOMIAL), 1.0)


def test_detail_features_fall_when_a_scene_blurs():
    from core.embedded import data
    img = ((data.image_batch(data.scenes(data.HELDOUT_SEED, 1), 64)[0] + 1) * 127.5).round().byte()
    img = img.permute(1, 2, 0).numpy()                          # a ground-truth render of the domain
    f, fb = yardsticks.detail_features(img), yardsticks.detail_features(yardsticks.blur(img))
    assert f.shape == (18,) and np.isfinite(f).all()
    assert (fb[:9] < f[:9]).all()                # every band energy of every channel drops under blur
    assert (fb[9:11] < f[9:11]).all()            # smaller mean gradients along rows and columns
    assert fb[13] < 0.5 * f[13]                  # far fewer strong gradients (blur widens weak ones)
    assert fb[16] < f[16]                        # the busiest 4x4 blocks flatten (quiet ones gain a little)
    assert np.array_equal(yardsticks.detail_features(img), f)   # a function of the image alone


def test_fd_to_reference_is_zero_for_the_same_set_and_grows_with_a_shift():
    g = np.random.default_rng(4)
    ref = g.normal(size=(40, 5))
    assert yardsticks.fd_to_reference(ref, ref) == pytest.approx(0.0, abs=1e-6)
    near, far = ref + 0.1 * ref.std(0), ref + 1.0 * ref.std(0)
    assert yardsticks.fd_to_reference(near, ref) < yardsticks.fd_to_reference(far, ref)
    # the definition: FD of the features scaled by the reference's mean and spread
    mu, sd = ref.mean(0), ref.std(0) + 1e-6
    assert yardsticks.fd_to_reference(far, ref) == pytest.approx(frechet_distance((far - mu) / sd, (ref - mu) / sd))
    assert yardsticks.fd_to_reference(ref[:2], ref) is None


def test_sharpness_is_the_median_ratio_to_ar_image_by_image():
    assert yardsticks.sharpness_ratio(np.array([1.0, 4.0, 9.0]), np.array([2.0, 2.0, 3.0])) == 2.0
    assert yardsticks.sharpness_ratio(np.array([2.0, 2.0]), np.array([1.0, 4.0])) == pytest.approx(1.25)


def _sets(n: int, seed: int = 0, shift: float = 0.0):
    """Synthetic ar and reference sets of n prompts: ar and ref drawn alike (ref optionally shifted)."""
    g = np.random.default_rng(seed)
    def one(s):
        return dict(detail=g.normal(size=(n, 4)) + s, energy=np.exp(g.normal(0, 0.2, n) + s),
                    loglik=-1.0 + 0.1 * g.normal(size=n) + s, adherence=0.9 + 0.01 * g.normal(size=n))
    return one(0.0), one(shift)


def test_the_floors_are_the_reference_measured_against_ar_with_their_spreads():
    ar, ref = _sets(60)
    f = yardsticks.floors(ar, ref)
    d = ref["loglik"] - ar["loglik"]
    se = d.std(ddof=1) / math.sqrt(60)
    assert f["loglik_gap"] == dict(value=pytest.approx(d.mean()), spread=pytest.approx(se),
                                   low=pytest.approx(-3 * se), high=pytest.approx(3 * se))
    ratio = np.median(ref["energy"] / ar["energy"])
    assert f["sharpness"]["value"] == pytest.approx(ratio)
    s = f["sharpness"]["spread"]
    log_ratio = np.log(ref["energy"] / ar["energy"])
    assert s == pytest.approx(math.sqrt(math.pi / 2) * log_ratio.std(ddof=1) / math.sqrt(60))
    assert f["sharpness"]["low"] == pytest.approx(math.exp(-3 * s)) and f["sharpness"]["high"] == pytest.approx(math.exp(3 * s))
    assert f["fd_ar"]["value"] == pytest.approx(yardsticks.fd_to_reference(ar["detail"], ref["detail"]))
    assert f["fd_ar"]["high"] == pytest.approx(f["fd_ar"]["value"] + 3 * f["fd_ar"]["spread"])
    a = ref["adherence"] - ar["adherence"]
    assert f["adherence"]["low"] == pytest.approx(ar["adherence"].mean() - 3 * a.std(ddof=1) / math.sqrt(60))
    assert yardsticks.floors(*_sets(2)) == {}                  # two prompts have no spread


def test_inside_means_within_every_known_bound_and_a_far_set_falls_outside():
    ar, ref = _sets(60)
    f = yardsticks.floors(ar, ref)
    same, _ = _sets(60, seed=1)                                # a third set drawn like ar: inside
    figs = lambda s: dict(fd_ar=yardsticks.fd_to_reference(s["detail"], ref["detail"]),  # noqa: E731
                          sharpness=yardsticks.sharpness_ratio(s["energy"], ar["energy"]),
                          loglik_gap=float(np.mean(s["loglik"] - ar["loglik"])),
                          adherence=float(np.mean(s["adherence"])))
    assert yardsticks.inside(figs(same), f)["all"] is True
    for name, change in (("fd_ar", lambda s: s["detail"].__iadd__(1.5)), ("sharpness", lambda s: s["energy"].__imul__(0.5)),
                         ("loglik_gap", lambda s: s["loglik"].__isub__(0.2)), ("adherence", lambda s: s["adherence"].__isub__(0.05))):
        bad, _ = _sets(60, seed=1)
        change(bad)
        verdict = yardsticks.inside(figs(bad), f)
        assert verdict[name] is False and verdict["all"] is False, name
        assert all(v for k, v in verdict.items() if k not in (name, "all")), name   # only that one moved
    assert yardsticks.inside(dict(fd_ar=None), dict(fd_ar=dict(high=1.0))) == dict(fd_ar=None, all=None)


def test_the_log_likelihood_is_a_cache_free_forward_of_the_target_under_the_processed_distribution(tiny_pair):
    """Oracle: GPT.forward_visible (the engine's cache-free reference, every cell visible) gives the
    distribution of cell t + 1 at row t; the prefill gives cell 0's."""
    g = torch.Generator().manual_seed(0)
    N = 16 * 16
    tokens = torch.randint(0, tiny_pair.vocab_size, (N,), generator=g)
    prompt = "a large red circle center on a striped blue background"
    s = SamplingConfig(cfg=2.0, temperature=0.8)
    ids, mask = tiny_pair.caption(prompt, tiny_pair.grid)
    caps, masks, drop = ids[None].expand(2, -1), mask[None].expand(2, -1), torch.tensor([False, True])
    with torch.inference_mode():
        rows = processed(tiny_pair.target.forward_visible(caps, masks, tokens[None].expand(2, -1), tiny_pair.grid,
                                                          torch.ones(N, dtype=torch.bool), drop=drop), s)[0]
        cache = tiny_pair.target.new_cache(2, tiny_pair.grid, "cpu")
        first = processed(tiny_pair.target.prefill(cache, caps, masks, tiny_pair.grid, drop=drop), s, cells=0)[0]
    want = [math.log(first[tokens[0]])] + [math.log(rows[t - 1, tokens[t]]) for t in range(1, N)]
    got = likelihood.token_logprobs(tiny_pair, prompt, tokens.view(16, 16).numpy(), s)
    assert np.allclose(got, want, atol=1e-4)
    assert likelihood.loglik(tiny_pair, prompt, tokens.view(16, 16).numpy(), s)["loglik"] == pytest.approx(np.mean(want), abs=1e-4)
    # negative control: another prompt is another distribution
    other = likelihood.token_logprobs(tiny_pair, "a small green square top left on a noisy yellow background",
                                      tokens.view(16, 16).numpy(), s)
    assert not np.allclose(other, want, atol=1e-2)


def test_a_token_the_processed_distribution_rules_out_counts_at_the_floor(tiny_pair):
    s = SamplingConfig(top_k=1)
    prompt = "a large red circle center on a striped blue background"
    tokens = np.zeros((16, 16), dtype=np.int64)
    lp = likelihood.token_logprobs(tiny_pair, prompt, tokens, s)
    ruled_out = lp <= math.log(likelihood.IMPOSSIBLE) + 1e-9
    assert ruled_out.any() and (lp[~ruled_out] == 0.0).all()   # top-1: the kept token has probability 1
    assert likelihood.loglik(tiny_pair, prompt, tokens, s)["impossible"] == int(ruled_out.sum())
    with pytest.raises(ValueError, match="scores 256 tokens; got 64"):
        likelihood.token_logprobs(tiny_pair, prompt, tokens[:8, :8], s)
