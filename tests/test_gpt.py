import pytest
import torch

from conftest import tiny_gpt

GRID = (8, 8)


def _setup(gpt, padded: bool):
    P, B, N = gpt.cfg.prefix_len, 2, GRID[0] * GRID[1]
    g = torch.Generator().manual_seed(0)
    caps = torch.randint(1, gpt.cfg.caption_vocab, (B, P), generator=g)
    if gpt.cfg.layout_places:  # layout columns: per place an id per attribute, its count meaning "empty"
        hi = torch.tensor(gpt.cfg.layout_factors).repeat(gpt.cfg.layout_places) + 1
        caps = torch.cat([caps, (torch.rand(B, len(hi), generator=g) * hi).long()], dim=1)
    mask = torch.ones(B, P, dtype=torch.bool)
    if padded:  # left padding, masked out (LlamaGen's captions)
        mask[0, :5] = False
        mask[1, :9] = False
    tokens = torch.randint(0, gpt.cfg.vocab_size, (B, N), generator=g)
    return caps, mask, tokens


@pytest.mark.parametrize("prefix_rope, padded", [("identity", False), ("zero", True)])
def test_kv_cache_decoding_equals_the_full_forward(prefix_rope, padded):
    gpt = tiny_gpt(prefix_rope=prefix_rope)
    caps, mask, tokens = _setup(gpt, padded)
    with torch.no_grad():
        full = gpt(caps, mask, tokens, GRID)                        # (B, N, V)
        cache = gpt.new_cache(2, GRID, "cpu")
        steps = [gpt.prefill(cache, caps, mask, GRID)]
        for t in range(tokens.shape[1] - 1):                       # one token per forward
            steps.append(gpt.forward_cells(cache, tokens[:, t:t + 1], torch.tensor([t]), GRID)[:, 0])
    assert torch.allclose(torch.stack(steps, 1), full, atol=1e-4)


def test_a_forward_over_scattered_cells_equals_the_raster_forward_there():
    gpt = tiny_gpt()
    caps, mask, tokens = _setup(gpt, False)
    N = tokens.shape[1]
    with torch.no_grad():
        full = gpt(caps, mask, tokens, GRID)
        cache = gpt.new_cache(2, GRID, "cpu")
        gpt.prefill(cache, caps, mask, GRID)
        t = 0
        for size in (3, 11, 1, 20, 28):                             # chunks of raster order
            cells = torch.arange(t, min(t + size, N))
            gpt.forward_cells(cache, tokens[:, cells], cells, GRID)
            t += size
        scattered = torch.tensor([40, 3, 17, 58, 9, 33])             # any order, any gaps
        out = gpt.forward_cells(cache, tokens[:, scattered], scattered, GRID)
    assert torch.allclose(out, full[:, scattered + 1], atol=1e-4)


def test_unwritten_slots_are_masked_not_read_as_zeros():
    gpt = tiny_gpt()
    caps, mask, tokens = _setup(gpt, False)
    cells = torch.tensor([0, 1, 2, 3, 4])
    outs = []
    for garbage in (0.0, 1e3):
        with torch.no_grad():
            cache = gpt.new_cache(2, GRID, "cpu")
            gpt.prefill(cache, caps, mask, GRID)
            cache.k[:, :, :, gpt.cfg.prefix_len + 5:] = garbage      # slots never written
            cache.v[:, :, :, gpt.cfg.prefix_len + 5:] = garbage
            outs.append(gpt.forward_cells(cache, tokens[:, cells], cells, GRID))
    assert torch.allclose(outs[0], outs[1], atol=1e-5)


def test_an_unwritten_stand_in_is_seen_by_its_own_query_only():
    gpt = tiny_gpt()
    caps, mask, tokens = _setup(gpt, False)
    with torch.no_grad():
        cache = gpt.new_cache(2, GRID, "cpu")
        gpt.prefill(cache, caps, mask, GRID)
        before = cache.valid.clone()
        cells = torch.tensor([0, 1])
        out = gpt.forward_cells(cache, tokens[:, :2], cells, GRID, write=torch.tensor([True, False]))
        ref_cache = gpt.new_cache(2, GRID, "cpu")
        gpt.prefill(ref_cache, caps, mask, GRID)
        ref = gpt.forward_cells(ref_cache, tokens[:, :2], cells, GRID)
    assert torch.allclose(out, ref, atol=1e-5)                      # same outputs...
    assert cache.valid[:, gpt.cfg.prefix_len + 1].logical_not().all()  # ...but slot 1 stays unwritten
    assert before[:, gpt.cfg.prefix_len].logical_not().all() and cache.valid[:, gpt.cfg.prefix_len].all()


def test_the_llamagen_layout_zeroes_prefix_queries_and_keys():
    gpt = tiny_gpt(prefix_rope="zero")
    rope = gpt.rope(GRID, "cpu")
    assert rope[:gpt.cfg.prefix_len].abs().sum() == 0
    assert set(k.split(".")[0] for k in gpt.state_dict()) >= {"tok_embeddings", "cls_embedding", "layers", "norm", "output"}
    assert "layers.0.attention.wqkv.weight" in gpt.state_dict() and "layers.0.feed_forward.w3.weight" in gpt.state_dict()


@pytest.mark.parametrize("compiled", [False, True])
def test_the_single_token_step_equals_forward_cells_and_compiles_as_one_graph(compiled):
    gpt = tiny_gpt()
    caps, mask, tokens = _setup(gpt, False)
    if compiled:  # fullgraph: any graph break (a host sync, a data-dependent branch) fails here
        torch._dynamo.reset()
        gpt.compile_step(backend="eager")
    with torch.no_grad():
        caches = [gpt.new_cache(2, GRID, "cpu") for _ in range(2)]
        for c in caches:
            gpt.prefill(c, caps, mask, GRID)
        for t in range(6):
            cell = torch.tensor([t])
            ref = gpt.forward_cells(caches[0], tokens[:, t:t + 1], cell, GRID)
            out = gpt.step_one(caches[1], tokens[:, t:t + 1], cell, GRID)
            assert torch.allclose(out, ref, atol=1e-5)
    assert torch.equal(caches[0].valid, caches[1].valid) and torch.allclose(caches[0].k, caches[1].k, atol=1e-6)
