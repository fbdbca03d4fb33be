"""U_r and D_r against their definitions: nearest repeats each token r x r; pixel goes through the
tokenizer's pixels (decode, bicubic x r clamped to [-1, 1], encode); D_r area-resizes by 1 / r."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from core.upsampling import nearest_upsample, pixel_downsample, pixel_upsample


@pytest.mark.parametrize("r", [2, 4])
def test_nearest_repeats_every_token_r_by_r(r):
    tokens = torch.arange(12).reshape(3, 4)
    out = nearest_upsample(tokens, r)
    assert out.shape == (3 * r, 4 * r)
    for i in range(3 * r):
        for j in range(4 * r):
            assert out[i, j] == tokens[i // r, j // r]


@pytest.mark.parametrize("r", [2, 4])
def test_pixel_upsampling_is_decode_bicubic_clamp_encode(tokenizer, r):
    tokens = torch.from_numpy(np.random.default_rng(r).integers(0, tokenizer.vocab_size, (4, 4)))
    with torch.no_grad():
        img = tokenizer.decode(tokens[None])
        expected = tokenizer.encode(F.interpolate(img, scale_factor=r, mode="bicubic").clamp(-1, 1))[0]
        got = pixel_upsample(tokens, r, tokenizer)
    assert got.shape == (4 * r, 4 * r) and torch.equal(got, expected)
    assert not torch.equal(got, nearest_upsample(tokens, r))            # pixel space is not repetition


@pytest.mark.parametrize("r", [2, 4])
def test_pixel_downsampling_is_decode_area_encode(tokenizer, r):
    tokens = torch.from_numpy(np.random.default_rng(10 + r).integers(0, tokenizer.vocab_size, (8, 8)))
    with torch.no_grad():
        expected = tokenizer.encode(F.interpolate(tokenizer.decode(tokens[None]), scale_factor=1 / r, mode="area"))[0]
        got = pixel_downsample(tokens, r, tokenizer)
    assert got.shape == (8 // r, 8 // r) and torch.equal(got, expected)


@pytest.mark.parametrize("n", [0, 4])
def test_pixel_upsampling_clamps_the_bicubic_overshoot_of_a_drawn_scene(tokenizer, n):
    """Hard edges of a real scene overshoot [-1, 1] under bicubic resizing (random tokens rarely do):
    the clamp, both ends, decides some tokens here."""
    from core.embedded import data
    with torch.no_grad():
        tokens = tokenizer.encode(data.image_batch(data.scenes(5, n + 1)[n:], 16))[0]      # an 8 x 8 draft
        big = F.interpolate(tokenizer.decode(tokens[None]), scale_factor=2, mode="bicubic")
        assert big.max() > 1.05 and big.min() < -1.02
        expected = tokenizer.encode(big.clamp(-1, 1))[0]
        assert not torch.equal(expected, tokenizer.encode(big.clamp(-1, None))[0])
        assert not torch.equal(expected, tokenizer.encode(big.clamp(None, 1))[0])
        assert torch.equal(pixel_upsample(tokens, 2, tokenizer), expected)


# --- trained up-samplers (sr, learned): definitions, refusals, and what training bought ---------------

from core.models.upsamplers import SRConfig, SRNet, TokenUpsampler, TokenUpsamplerConfig  # noqa: E402
from core.upsampling import UPSAMPLERS, learned_logits, learned_upsample, sr_upsample  # noqa: E402


def _random_tokens(tokenizer, side: int, seed: int) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).integers(0, tokenizer.vocab_size, (side, side)))


@pytest.mark.parametrize("r", [2, 4])
def test_sr_is_decode_network_encode_and_starts_as_bicubic(tokenizer, r):
    torch.manual_seed(r)
    net = SRNet(SRConfig(scale=r)).eval()
    tokens = _random_tokens(tokenizer, 4, 20 + r)
    # untrained, the residual branch is zero: exactly bicubic (clamped), so exactly pixel
    assert torch.equal(sr_upsample(tokens, r, tokenizer, net), pixel_upsample(tokens, r, tokenizer))
    torch.nn.init.normal_(net.tail.weight, std=0.05)   # a residual of its own: the definition still holds
    with torch.no_grad():
        img = tokenizer.decode(tokens[None])
        big = (F.interpolate(img, scale_factor=r, mode="bicubic") + F.pixel_shuffle(
            net.tail(net.body(F.gelu(net.head(img))) + F.gelu(net.head(img))), r)).clamp(-1, 1)
        expected = tokenizer.encode(big)[0]
    got = sr_upsample(tokens, r, tokenizer, net)
    assert got.shape == (4 * r, 4 * r) and torch.equal(got, expected)
    assert not torch.equal(got, pixel_upsample(tokens, r, tokenizer))


@pytest.mark.parametrize("r", [2, 4])
def test_learned_is_the_argmax_of_its_distribution_at_every_cell(tokenizer, r):
    torch.manual_seed(r)
    net = TokenUpsampler(TokenUpsamplerConfig(scale=r, vocab_size=tokenizer.vocab_size)).eval()
    tokens = _random_tokens(tokenizer, 3, 30 + r)
    logits = learned_logits(tokens, r, net)
    assert logits.shape == (tokenizer.vocab_size, 3 * r, 3 * r)
    got = learned_upsample(tokens, r, tokenizer, net)
    for i in range(3 * r):
        for j in range(3 * r):
            assert got[i, j] == int(torch.argmax(logits[:, i, j]))


@pytest.mark.parametrize("name, make", [("sr", lambda r: SRNet(SRConfig(scale=r))),
                                        ("learned", lambda r: TokenUpsampler(TokenUpsamplerConfig(scale=r))),
                                        ("distilled", lambda r: TokenUpsampler(TokenUpsamplerConfig(scale=r)))])
def test_a_trained_up_sampler_refuses_a_missing_or_mismatched_network(tokenizer, name, make):
    tokens = _random_tokens(tokenizer, 4, 1)
    with pytest.raises(ValueError, match=rf"upsampler={name} at scale=2 needs its trained network for x2$"):
        UPSAMPLERS[name](tokens, 2, tokenizer, None)
    with pytest.raises(ValueError, match=rf"upsampler={name} at scale=2 .* got one trained for x4"):
        UPSAMPLERS[name](tokens, 2, tokenizer, make(4).eval())


def test_the_knob_offers_every_up_sampler_the_engine_defines():
    from core import config
    assert config.UPSAMPLERS == tuple(UPSAMPLERS)
