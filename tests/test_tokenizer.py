import torch

from core.embedded import data
from core.embedded.evaluate import heldout


def test_images_round_trip_through_the_tokenizer(tokenizer):
    img = data.image_batch(heldout(16), 64)
    with torch.inference_mode():
        tokens = tokenizer.encode(img)
        rec = tokenizer.decode(tokens)
    assert tokens.shape == (16, 32, 32)
    mse = ((rec - img) / 2).pow(2).mean()
    assert 10 * torch.log10(1 / mse) > 28.0


def test_decoded_tokens_encode_back_to_themselves(tokenizer):
    with torch.inference_mode():
        tokens = tokenizer.encode(data.image_batch(heldout(8), 32))
        again = tokenizer.encode(tokenizer.decode(tokens))
        img_a, img_b = tokenizer.decode(tokens), tokenizer.decode(again)
    assert (again == tokens).float().mean() > 0.75          # measured 0.85: many codes are near twins
    assert 10 * torch.log10(4 / (img_a - img_b).pow(2).mean()) > 30  # and the twins look alike


def test_codes_are_unit_vectors_and_neighbours_exclude_the_code_itself(tokenizer):
    codes = tokenizer.quantize.codes()
    assert torch.allclose(codes.norm(dim=1), torch.ones(len(codes)), atol=1e-5)
    nb = tokenizer.neighbours(8)
    assert not (nb == torch.arange(len(codes))[:, None]).any()
    d = torch.cdist(codes, codes)
    assert (d.gather(1, nb).diff(dim=1) >= -1e-6).all()  # nearest first
