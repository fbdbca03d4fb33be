"""Every float knob's allowed range keeps the processed distribution finite on the shipped target's
real logits; just outside the ranges it is not (the negative control that the check can fail)."""
import dataclasses

import pytest
import torch

from core import config
from core.embedded import data, family
from core.config import ParameterError, RunConfig, SamplingConfig, validate
from core.methods import registry
from core.sampling import processed

PROMPT = "a large red circle center on a striped blue background"


@pytest.fixture(scope="module")
def logits():
    """(2, N, V): conditional and unconditional logits of the shipped target on a random 8x8 grid."""
    target = family.load_gpt("target")
    cap, mask = data.caption_ids(PROMPT, 8)
    tokens = torch.randint(0, target.cfg.vocab_size, (2, 64), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        return target(torch.stack([cap, cap]), torch.stack([mask, mask]), tokens, (8, 8),
                      drop=torch.tensor([False, True]))


def finite_distribution(p: torch.Tensor) -> bool:
    return bool(torch.isfinite(p).all()) and torch.allclose(p.sum(-1), torch.ones(p.shape[:-1]), atol=1e-4)


@pytest.mark.parametrize("cfg", [1.0, config.CFG_MAX])
@pytest.mark.parametrize("temperature", [config.TEMPERATURE_MIN, 1.0, config.TEMPERATURE_MAX])
@pytest.mark.parametrize("top_p", [1e-6, 1.0])
def test_the_ends_of_every_float_range_give_a_distribution(logits, cfg, temperature, top_p):
    s = SamplingConfig(cfg=cfg, temperature=temperature, top_p=top_p)
    validate(RunConfig(sampling=s), 512, (32, 32), registry())
    assert finite_distribution(processed(logits, s))


@pytest.mark.parametrize("field, value", [("temperature", 1e-40), ("temperature", 1e-300), ("cfg", 1e308),
                                          ("cfg", float("inf"))])
def test_just_outside_the_ranges_sampling_breaks_and_validation_refuses(logits, field, value):
    s = dataclasses.replace(SamplingConfig(), **{field: value})
    assert not finite_distribution(processed(logits, s))     # negative control: what the range prevents
    with pytest.raises(ParameterError, match=f"^{field} must be"):
        validate(RunConfig(sampling=s), 512, (32, 32), registry())


INT_KNOBS = ("seed", "top_k", "cfg_interval", "k", "scale", "radius", "window", "draft_window", "draft_rows", "gamma",
             "lantern_k", "sjd_window", "gsd_group", "pjd_c")


def _with(knob: str, value) -> RunConfig:
    if knob == "seed":
        return RunConfig(seed=value, sampling=SamplingConfig())
    if knob in {f.name for f in dataclasses.fields(SamplingConfig)}:
        return RunConfig(sampling=dataclasses.replace(SamplingConfig(), **{knob: value}))
    return RunConfig(sampling=SamplingConfig()).with_params(**{knob: value})


@pytest.mark.parametrize("knob", INT_KNOBS)
@pytest.mark.parametrize("value", [2 ** 64, 10 ** 30, -2 ** 64, "7"])
def test_every_integer_knob_is_bounded_and_its_refusal_names_it(knob, value):
    with pytest.raises(ParameterError, match=f"^{knob} must be"):
        validate(_with(knob, value), 512, (32, 32), registry())


def test_cfg_interval_past_int64_breaks_sampling_and_validation_refuses_it(logits):
    cells = torch.arange(64)
    s = SamplingConfig(cfg_interval=2 ** 64)
    with pytest.raises(OverflowError):                      # negative control: what the bound prevents
        processed(logits, s, cells)
    with pytest.raises(ParameterError, match=r"^cfg_interval must be an integer in \[-1, 65536\] \(-1 = every cell\)"):
        validate(RunConfig(sampling=s), 512, (32, 32), registry())
    top = SamplingConfig(cfg_interval=config.CFG_INTERVAL_MAX)   # the end of the range: every cell guided
    validate(RunConfig(sampling=top), 512, (32, 32), registry())
    assert torch.equal(processed(logits, top, cells), processed(logits, SamplingConfig(), cells))
