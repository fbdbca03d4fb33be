"""core.config.knobs_read against runs: a knob outside a method's set never changes that method's run
(tokens, passes, steps), which is what lets the app disable it for that method with a word; a control
shows the comparison sees a knob that is read."""
import dataclasses

import pytest
import torch

from conftest import tiny_gpt
from core import engine
from core.config import METHODS, MethodParams, RunConfig, knobs_read, spec_label
from core.embedded import data
from core.models.eagle import DraftHead
from core.models.pair import ModelPair

PROMPT = "a small red circle top left on a striped blue background"
# another valid value of every method knob; two sets, since draft_window and draft_method exclude each other
OTHER = dict(k=4, tau=0.2, scale=4, radius=1, window=2, draft_window=2, draft_rows=2, upsampler="nearest",
             resample="serial", redraft="coupled", rejection="raster", context="exact", commit="target",
             gamma=2, tree_tokens=6, tree_depth=2, tree_top_k=2, delta=0.5, lantern_k=10, lantern_lambda=5.0,
             vvs_interval=2, vvs_schedule="dynamic", vvs_threshold=0.5, lantern_residual="official", static_tree="paper", sjd_window=8, sjd_init="repeat", gsd_group=4, gsd_gap=0.3,
             gsd_dist=0.8, pjd_c=3, cool_delta=1.5, cool_nu=0.3, cool_norm="first")
OTHER_B = dict(OTHER, draft_window=0, draft_method="zipar/window=2", accept="exact", radius=0, rejection="local",
               commit="proposal")


@pytest.fixture(scope="module")
def pair(tokenizer):
    target = tiny_gpt(0)
    torch.manual_seed(3)
    head = DraftHead.for_target(target).eval()
    return ModelPair("tiny", target, target, tiny_gpt(1, n_layer=1), tokenizer, (16, 16),
                     lambda prompt, g: data.caption_ids(prompt, 32), tokenizer.neighbours(tokenizer.vocab_size - 1),
                     scales=(2, 4), head_net=lambda: head)


def _run(pair, method, **knobs):
    t = engine.run(RunConfig(method=method, prompt=PROMPT, seed=5).with_params(**knobs), pair)
    return t.tokens, t.totals["target_nfe"], t.totals["drafter_nfe"], len(t.steps)


@pytest.mark.parametrize("method", METHODS)
def test_a_knob_the_method_does_not_read_leaves_its_run_as_it_is(pair, method):
    base = _run(pair, method)
    fields = {f.name for f in dataclasses.fields(MethodParams)}
    assert set(OTHER_B) | {"draft_method", "accept"} >= fields    # every knob has another value here
    for other in (OTHER, OTHER_B):
        unread = {k: v for k, v in other.items() if k not in knobs_read(method, MethodParams())}
        assert _run(pair, method, **unread) == base, f"{method}: one of {sorted(unread)} changed the run"


@pytest.mark.parametrize("method, knob, value", [("zipar", "window", 2), ("mulo", "tau", 0.0),
                                                 ("pjd", "sjd_window", 2), ("sd", "gamma", 2)])
def test_control_a_knob_the_method_reads_changes_its_run(pair, method, knob, value):
    """Without this the test above could pass by comparing nothing: a read knob moves the run."""
    assert knob in knobs_read(method)
    assert _run(pair, method, **{knob: value}) != _run(pair, method)


def test_mulo_reads_the_knobs_of_the_drafter_method_it_names():
    assert "pjd_c" not in knobs_read("mulo")
    assert {"pjd_c", "sjd_init"} <= set(knobs_read("mulo", MethodParams(draft_method="pjd")))
    assert {"sjd_init"} <= set(knobs_read("mulo", MethodParams(draft_method="mulo/scale=2/draft_method=sjd")))
    assert knobs_read("mulo", MethodParams(draft_method="nonsense")) == knobs_read("mulo")


def test_a_run_is_named_by_the_knobs_it_reads_that_differ_and_the_name_runs_in_the_bench():
    from core.bench import parse_spec
    p = MethodParams(window=16, tau=0.25, k=4)
    assert spec_label("zipar", p) == "zipar:window=16"         # tau and k are not zipar's
    assert spec_label("zipar") == "zipar" and spec_label("ar", p) == "ar"
    assert spec_label("mulo", p) == "mulo:k=4:tau=0.25:window=16"
    for method in ("zipar", "mulo"):                             # the name is a bench spec of the same run
        _, cfg = parse_spec(spec_label(method, p), RunConfig())
        assert all(getattr(cfg.params, k) == getattr(p, k) for k in knobs_read(method, p))
