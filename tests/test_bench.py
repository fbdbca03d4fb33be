import pytest

from core import bench
from core.config import RunConfig


def test_a_method_spec_sets_parameters_and_sampling():
    label, cfg = bench.parse_spec("mulo:scale=4:tau=0.2:upsampler=nearest:cfg=2", RunConfig())
    assert label == "mulo:scale=4:tau=0.2:upsampler=nearest:cfg=2"
    assert (cfg.method, cfg.params.scale, cfg.params.tau, cfg.params.upsampler, cfg.sampling.cfg) == \
        ("mulo", 4, 0.2, "nearest", 2.0)


@pytest.mark.parametrize("spec, fragment", [("mulo:tau", "not key=value"), ("mulo:speed=3", "unknown parameter")])
def test_a_bad_spec_is_refused(spec, fragment):
    with pytest.raises(ValueError, match=fragment):
        bench.parse_spec(spec, RunConfig())


def test_bench_reports_speed_beside_quality_against_ar():
    result = bench.run(["mulo:scale=4"], n_prompts=1, seed=0)
    assert result["specs"] == ["ar", "mulo:scale=4"]           # ar joins as the reference
    ar, mulo = result["summary"]["ar"], result["summary"]["mulo:scale=4"]
    assert ar["passes_speedup"] == 1.0 and ar["target_nfe"] == 1024 and ar["passes"] == 1024
    # the headline counts every sequential pass: mulo's drafter passes (64 at r = 4) are in it
    assert mulo["drafter_nfe"] == 64
    assert mulo["passes_speedup"] == pytest.approx(1024 / (mulo["target_nfe"] + mulo["drafter_nfe"]))
    assert mulo["target_nfe_speedup"] == pytest.approx(1024 / mulo["target_nfe"])
    for s in (ar, mulo):
        assert 0.0 <= s["adherence"] <= 1.0 and "frechet" in s and set(s["phase_ms"]) >= {"draft", "verify", "resample"}
    assert "pass x" in bench.table(result) and "wall x" in bench.table(result)


@pytest.mark.long("a bench of the tree methods, whose head passes are priced against target passes")
def test_the_bench_prices_a_drafter_pass_against_a_target_pass():
    """pass_ms: each model's timed ms over its passes, from the steps of the traces (the definition),
    and the drafter's share; None for a spec whose drafter made no pass."""
    result = bench.run(["eagle"], n_prompts=1, seed=0)
    s = result["summary"]["eagle"]["pass_ms"]
    assert s["target"] > 0 and s["drafter"] > 0 and s["drafter_share"] == pytest.approx(s["drafter"] / s["target"])
    assert result["summary"]["ar"]["pass_ms"]["drafter"] is None and result["summary"]["ar"]["pass_ms"]["target"] > 0
    assert result["summary"]["eagle"]["drafter_nfe"] > 0   # the head's passes: drafter passes, apart from the target's


def test_a_method_spec_sets_cfg_interval_as_an_integer():
    _, cfg = bench.parse_spec("ar:cfg_interval=10", RunConfig())
    assert cfg.sampling.cfg_interval == 10 and isinstance(cfg.sampling.cfg_interval, int)


def test_a_folder_from_before_a_knob_was_removed_resumes_unless_a_spec_runs_the_method_it_shaped(tmp_path):
    """The shipped folder still names vvs_skip (removed when vvs became the released VVS): its ar, mulo and
    zipar records resume as they are; adding a vvs spec is refused by name, before any work."""
    import shutil

    from conftest import SHIPPED_BENCH
    from core.runfolder import RunFolderError
    out = tmp_path / "old"
    shutil.copytree(SHIPPED_BENCH, out)
    assert "vvs_skip" in (out / "config.json").read_text()
    specs = ["mulo:scale=4:context=verify", "zipar:window=4"]
    assert bench.run(specs, 3, 5, out=out) is not None
    with pytest.raises(RunFolderError, match="vvs records of an earlier reading of it \\(vvs_skip"):
        bench.run([*specs, "vvs"], 3, 5, out=out)
    assert "vvs_skip" in (out / "config.json").read_text()          # the folder is left as it was


def test_a_default_no_spec_reads_may_change_and_the_folder_still_resumes_but_a_read_one_may_not(tmp_path):
    """The shipped folder ran at lantern_k 1000 (no spec of it reads lantern_k): it resumes at today's 31;
    a change of a knob its mulo spec reads (tau) is refused by name."""
    import json
    import shutil

    from conftest import SHIPPED_BENCH
    from core.runfolder import RunFolderError
    out = tmp_path / "old"
    shutil.copytree(SHIPPED_BENCH, out)
    assert json.loads((out / "config.json").read_text())["base"]["params"]["lantern_k"] == 1000
    specs = ["mulo:scale=4:context=verify", "zipar:window=4"]
    assert bench.run(specs, 3, 5, out=out) is not None
    with pytest.raises(RunFolderError, match="base.params.tau: 0.5 there, 0.3 now"):
        bench.run(specs, 3, 5, base=RunConfig().with_params(tau=0.3), out=out)
