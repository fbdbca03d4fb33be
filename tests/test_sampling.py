import pytest
import torch

from core.config import SamplingConfig
from core.sampling import processed


def test_cfg_interval_guides_cells_up_to_the_interval_plus_one_then_reads_the_conditional_row():
    cond, uncond = torch.randn(6, 5), torch.randn(6, 5)
    logits = torch.stack([cond, uncond])                       # (2, T, V): conditional row first
    s = SamplingConfig(cfg=4.0, top_k=0, cfg_interval=2)
    out = processed(logits, s, cells=list(range(6)))[0]
    guided = (uncond + 4.0 * (cond - uncond)).softmax(-1)
    assert torch.allclose(out[:4], guided[:4]) and torch.allclose(out[4:], cond[4:].softmax(-1))
    every = processed(logits, SamplingConfig(cfg=4.0, top_k=0), cells=list(range(6)))[0]
    assert torch.allclose(every, guided)                       # -1: every cell guided


def test_cfg_interval_without_the_predicted_cells_is_refused():
    for interval in (0, 3):
        with pytest.raises(ValueError, match="^cfg_interval needs the raster indices of the predicted cells$"):
            processed(torch.randn(2, 5), SamplingConfig(cfg_interval=interval))


def processed_by_definition(logits: torch.Tensor, s: SamplingConfig) -> torch.Tensor:
    """The processed distribution of one (2, V) row pair, written out token by token in float64."""
    cond, uncond = logits[0].double(), logits[1].double()
    z = uncond + s.cfg * (cond - uncond) if s.cfg != 1.0 else cond
    V = len(z)
    if s.temperature == 0.0:
        return torch.nn.functional.one_hot(z.argmax(), V).double()
    z = z / s.temperature
    rank = sorted(range(V), key=lambda v: -float(z[v]))
    keep = set(rank[:s.top_k]) if 0 < s.top_k < V else set(range(V))
    w = {v: float(torch.exp(z[v] - z.max())) for v in keep}
    total, before, nucleus = sum(w.values()), 0.0, set()
    for v in rank:                                  # a token stays while the mass before it <= top_p
        if v in keep:
            if before <= s.top_p:
                nucleus.add(v)
            before += w[v] / total
    out = torch.zeros(V, dtype=torch.float64)
    for v in nucleus:
        out[v] = w[v]
    return out / out.sum()


@pytest.mark.parametrize("s", [SamplingConfig(), SamplingConfig(cfg=1.0), SamplingConfig(top_k=1), SamplingConfig(top_k=3),
                               SamplingConfig(top_k=12), SamplingConfig(temperature=0.5, top_p=0.7),
                               SamplingConfig(temperature=2.0, top_k=5, top_p=0.9), SamplingConfig(temperature=0.0)],
                         ids=lambda s: f"cfg{s.cfg}-T{s.temperature}-k{s.top_k}-p{s.top_p}")
def test_the_processed_distribution_is_its_definition(s):
    g = torch.Generator().manual_seed(3)
    for _ in range(20):
        logits = torch.randn(2, 12, generator=g) * 2
        expected = processed_by_definition(logits, s)
        rows = logits if s.cfg != 1.0 else logits[:1]   # without guidance the decoder feeds one row
        assert torch.allclose(processed(rows, s)[0].double(), expected, atol=1e-5), s


def test_guidance_at_temperature_zero_takes_the_argmax_of_the_guided_logits():
    cond, uncond = torch.tensor([2.0, 1.0, 0.0]), torch.tensor([2.5, 0.0, 0.0])   # guided: [0.5, 4.0, 0.0]
    out = processed(torch.stack([cond, uncond]), SamplingConfig(cfg=4.0, temperature=0.0))
    assert out[0].tolist() == [0.0, 1.0, 0.0]


def test_cfg_interval_zero_guides_the_first_two_cells_only():
    cond, uncond = torch.randn(4, 5), torch.randn(4, 5)
    out = processed(torch.stack([cond, uncond]), SamplingConfig(cfg=2.0, cfg_interval=0), cells=list(range(4)))[0]
    guided = (uncond + 2.0 * (cond - uncond)).softmax(-1)
    assert torch.allclose(out[:2], guided[:2]) and torch.allclose(out[2:], cond[2:].softmax(-1))


@pytest.mark.parametrize("s", [SamplingConfig(top_k=3), SamplingConfig(top_k=6), SamplingConfig(top_p=0.6),
                               SamplingConfig(temperature=0.7, top_k=5, top_p=0.8)],
                         ids=["top_k3", "top_k6_more_than_T", "top_p", "both"])
def test_a_forward_s_rows_are_filtered_each_on_its_own(s):
    """(2, T, V) logits of T cells: row t of the result is the processed distribution of cell t alone."""
    logits = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(4)) * 2
    out = processed(logits, s)[0]                                             # (T, V)
    for t in range(5):
        assert torch.allclose(out[t], processed(logits[:, t], s)[0]), t
        assert torch.allclose(out[t].double(), processed_by_definition(logits[:, t], s), atol=1e-5), t
