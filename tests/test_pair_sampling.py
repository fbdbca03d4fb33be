"""A run's sampling defaults are its model pair's on every path: a RunConfig that gives no sampling runs
with the pair's (LlamaGen t2i: CFG 7.5, top-k 1000; c2i: CFG 4, top-k 2000; the embedded pair: CFG 3,
top-k 0) from Python (engine.run, engine.stream, engine.context), the CLI, the bench and the app, and its
trace records the values that ran; sampling given explicitly is never overridden, whatever its values.
Tiny LlamaGen-layout pairs with random weights stand in for the real ones (no files from anywhere)."""
import dataclasses
from collections import OrderedDict

import pytest
import torch

from core import bench, cli, engine, likelihood
from core.config import ParameterError, RunConfig, SamplingConfig, validate
from core.methods import registry
from core.models import llamagen as lg
from core.models import tar
from core.models.gpt import GPT
from core.models.vq import VQModel
from core.trace import Trace

torch.set_num_threads(1)
V = 2048                      # a codebook that holds c2i's top-k of 2000
T2I, C2I = "llamagen-t2i", "llamagen-c2i-B-256"
SAMPLING_KEYS = [f.name for f in dataclasses.fields(SamplingConfig)]


def _features(prompt: str):
    g = torch.Generator().manual_seed(len(prompt))
    return lg.left_pad(torch.randn(len(prompt.split()), 32, generator=g), length=16)


def tiny_llamagen(name: str, kind: str):
    """A pair named as the real one, with LlamaGen's layout at toy size: a 4x4 target that also serves
    mulo's 2x2 drafter grid (as the real pairs, r = 2)."""
    torch.manual_seed(0)
    extra = dict(prefix_len=16, caption_dim=32) if kind == "t2i" else dict(num_classes=10)
    gpt = GPT(dataclasses.replace(lg.gpt_config("B", kind), dim=64, n_layer=2, n_head=4, vocab_size=V, **extra)).eval()
    for p in gpt.parameters():
        torch.nn.init.normal_(p, std=0.2)
    vq = VQModel(dataclasses.replace(lg.VQ16, codebook_size=V, ch=32, ch_mult=(1, 2), num_res_blocks=1,
                                     z_channels=32, attn_levels=(1,))).eval()
    caption = lg.text_caption(_features) if kind == "t2i" else lg.class_caption
    return lg.assemble(name, gpt, vq, (4, 4), caption, scales=(2,), dtype=torch.float32)


@pytest.fixture(scope="module")
def t2i():
    return tiny_llamagen(T2I, "t2i")


@pytest.fixture(scope="module")
def c2i():
    return tiny_llamagen(C2I, "c2i")


@pytest.fixture
def loads(monkeypatch):
    """engine.load_pair(name) gives the tiny pair of that name (what a machine with the weights loads)."""
    pairs = {}
    monkeypatch.setattr(engine, "load_pair", lambda name="embedded": pairs[name])
    return pairs


def sampling_in(trace) -> SamplingConfig:
    return SamplingConfig(**{k: trace.params[k] for k in SAMPLING_KEYS})


# ---- the defaults, by pair name (pair_facts needs no weights) ---------------------------------------
@pytest.mark.parametrize("name, cfg, top_k", [(T2I, 7.5, 1000), (C2I, 4.0, 2000), ("embedded", 3.0, 0),
                                              ("tar-1024-512", 4.0, 0)])
def test_a_run_config_without_sampling_takes_its_pairs_defaults(name, cfg, top_k):
    assert RunConfig(model=name).sampling is None          # "the pair's", not SamplingConfig's
    s = engine.resolved(RunConfig(model=name)).sampling
    assert s == engine.pair_facts(name)["sampling"] and (s.cfg, s.top_k, s.temperature, s.top_p) == (cfg, top_k, 1, 1)


def test_the_embedded_pair_keeps_cfg_3_and_every_pair_keeps_its_facts():
    assert engine.resolved(RunConfig()).sampling == SamplingConfig() == engine.pair_facts("embedded")["sampling"]
    assert (SamplingConfig().cfg, SamplingConfig().top_k) == (3.0, 0)
    assert lg.SAMPLING["t2i"] == SamplingConfig(cfg=7.5, top_k=1000) and lg.SAMPLING["c2i"] == SamplingConfig(cfg=4.0,
                                                                                                          top_k=2000)
    assert tar.SAMPLING == SamplingConfig(cfg=4.0)


@pytest.mark.parametrize("given", [SamplingConfig(), SamplingConfig(cfg=2.0, top_k=5, temperature=0.5),
                                   SamplingConfig(cfg=7.5, top_k=1000, cfg_interval=3)])
@pytest.mark.parametrize("name", [T2I, C2I, "embedded"])
def test_explicit_sampling_is_never_overridden(name, given):
    """Even values equal to SamplingConfig's defaults (CFG 3, top-k 0) stay what the caller gave."""
    cfg = RunConfig(model=name, sampling=given)
    assert engine.resolved(cfg) is cfg and engine.resolved(cfg).sampling == given


def test_validation_names_an_unresolved_sampling_instead_of_failing_on_it():
    with pytest.raises(ParameterError, match="sampling must be"):
        validate(RunConfig(method="ar"), 512, (32, 32), registry())


# ---- Python: engine.run, engine.stream, engine.context ---------------------------------------------
def test_engine_run_of_a_bare_run_config_samples_with_the_pairs_defaults(t2i, loads):
    loads[T2I] = t2i
    bare = engine.run(RunConfig(method="ar", prompt="a photo of a cat", seed=1, model=T2I))
    assert bare.model == T2I and sampling_in(bare) == lg.SAMPLING["t2i"]
    assert (bare.params["cfg"], bare.params["top_k"]) == (7.5, 1000)
    official = engine.run(RunConfig(method="ar", prompt="a photo of a cat", seed=1, model=T2I,
                                    sampling=lg.SAMPLING["t2i"]))
    generic = engine.run(RunConfig(method="ar", prompt="a photo of a cat", seed=1, model=T2I,
                                   sampling=SamplingConfig()))
    assert bare.tokens == official.tokens          # the method drew from the pair's distribution, not only the record
    assert generic.tokens != bare.tokens and (generic.params["cfg"], generic.params["top_k"]) == (3.0, 0)


def test_the_trace_json_says_what_ran(t2i, loads):
    loads[T2I] = t2i
    trace = engine.run(RunConfig(method="zipar", prompt="a dog", model=T2I).with_params(window=2))
    again = Trace.from_json(trace.to_json())
    assert sampling_in(again) == lg.SAMPLING["t2i"] and likelihood.sampling_of(again) == lg.SAMPLING["t2i"]


def test_a_pair_given_to_the_engine_decides_the_defaults(c2i):
    """engine.run(RunConfig(), pair): the pair that runs (the trace's model) is the one whose defaults apply."""
    trace = engine.run(RunConfig(method="ar", prompt="7"), c2i)
    assert trace.model == C2I and sampling_in(trace) == lg.SAMPLING["c2i"]
    assert (trace.params["cfg"], trace.params["top_k"]) == (4.0, 2000)
    assert engine.context(RunConfig(method="ar", prompt="7"), c2i).sampling == lg.SAMPLING["c2i"]


def test_engine_stream_of_a_bare_run_config(c2i, loads):
    loads[C2I] = c2i
    out = list(engine.stream(RunConfig(method="ar", prompt="3", model=C2I)))
    assert isinstance(out[-1], Trace) and sampling_in(out[-1]) == lg.SAMPLING["c2i"]


def test_the_embedded_family_and_toy_pairs_keep_cfg_3(tiny_pair):
    trace = engine.run(RunConfig(method="ar", seed=2), tiny_pair)       # a toy pair no family names
    assert sampling_in(trace) == SamplingConfig() and (trace.params["cfg"], trace.params["top_k"]) == (3.0, 0)


def test_explicit_sampling_reaches_the_method_on_a_llamagen_pair(c2i):
    trace = engine.run(RunConfig(method="ar", prompt="7", sampling=SamplingConfig(cfg=2.0, top_k=5)), c2i)
    assert (trace.params["cfg"], trace.params["top_k"]) == (2.0, 5)


# ---- the CLI and the bench -------------------------------------------------------------------------
def _cli_config(argv):
    parser = cli.build_parser()
    cli._extend(parser, cli._chosen_model(argv))
    args = parser.parse_args(argv)
    return cli.run_config(args, args.method)


@pytest.mark.parametrize("name, kind", [(T2I, "t2i"), (C2I, "c2i")])
def test_the_cli_defaults_are_the_pairs(name, kind):
    assert _cli_config(["generate", "--model", name, "--method", "ar"]).sampling == lg.SAMPLING[kind]
    given = _cli_config(["generate", "--model", name, "--method", "ar", "--cfg", "3", "--top-k", "0"]).sampling
    assert (given.cfg, given.top_k) == (3.0, 0)                         # explicit flags win
    assert _cli_config(["generate", "--method", "ar"]).sampling == SamplingConfig()


def test_bench_specs_on_a_bare_base_take_the_pairs_defaults():
    _, cfg = bench.parse_spec("zipar:window=2", RunConfig(model=T2I))
    assert cfg.sampling == lg.SAMPLING["t2i"]
    _, cfg = bench.parse_spec("ar:cfg=2", RunConfig(model=C2I))
    assert (cfg.sampling.cfg, cfg.sampling.top_k) == (2.0, 2000)       # a spec's knob over the pair's defaults
    _, cfg = bench.parse_spec("ar", RunConfig(model=C2I, sampling=SamplingConfig()))
    assert cfg.sampling == SamplingConfig()                            # an explicit base is kept
    configs = bench.configs_of(["zipar"], RunConfig(model=T2I))
    assert bench.run_config(configs, 3, 0)["base"]["sampling"] == dataclasses.asdict(lg.SAMPLING["t2i"])
    assert bench.parse_spec("ar", RunConfig())[1].sampling == SamplingConfig()


def test_a_bench_record_of_a_bare_run_config_measures_with_the_pairs_defaults(t2i):
    """bench.measure runs, and judges the log-likelihood, at the pair's sampling (not at a missing one)."""
    r = bench.measure("ar", RunConfig(method="ar", prompt="a photo of a cat", seed=1), 0, None, t2i, None, "test")
    tokens = engine.run(RunConfig(method="ar", prompt="a photo of a cat", seed=1, sampling=lg.SAMPLING["t2i"]),
                        t2i).tokens
    assert r["tokens"] == tokens
    want = likelihood.loglik(t2i, "a photo of a cat", tokens, lg.SAMPLING["t2i"])["loglik"]
    assert r["loglik"] == pytest.approx(want, abs=1e-6)
    assert r["blur"]["loglik"] != pytest.approx(want, abs=1e-6)      # the blurred control is judged too


# ---- the app ---------------------------------------------------------------------------------------
def test_the_lesson_on_a_llamagen_pair_runs_with_its_defaults(t2i, loads, monkeypatch):
    from app import control, lesson
    loads[T2I] = t2i
    monkeypatch.setattr(engine, "found_pairs", lambda: {"embedded": "", T2I: "tiny"})
    monkeypatch.setattr(control, "_baselines", OrderedDict())
    traces, stream = [], engine.stream

    def recorded(run, pair=None):
        for out in stream(run, pair):
            if isinstance(out, Trace):
                traces.append(out)
            yield out
    monkeypatch.setattr(engine, "stream", recorded)
    for _ in lesson.run_step(None, 1, "a photo of a cat", 0, T2I):
        pass
    assert traces and all(sampling_in(t) == lg.SAMPLING["t2i"] for t in traces)
    key, = control._baselines                                           # remembered under what ran
    assert key == (T2I, "a photo of a cat", 0, lg.SAMPLING["t2i"])


def test_the_ar_baseline_of_a_replayed_trace_samples_as_the_trace_did():
    """Every sampling knob of the trace (cfg_interval too), not only some of them over SamplingConfig's."""
    from app import generation
    given = SamplingConfig(cfg=2.0, top_k=40, cfg_interval=3)
    trace = engine.run(RunConfig(method="zipar", seed=3, sampling=given))
    new = list(generation.add_baseline(None, {"trace": trace, "baseline": None}))[-1][0]
    assert sampling_in(new["baseline"]) == given
