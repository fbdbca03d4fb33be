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
    with pytest.raises(ValueError, match="cfg_interval"):
        processed(torch.randn(2, 5), SamplingConfig(cfg_interval=3))
