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
