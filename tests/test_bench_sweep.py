"""The benchmark as a sweep is run: `python -m core bench` and `torchrun -m core bench` as processes on a
run folder, killed and resumed, plus the pure pieces (sharding, record files, wall pairing, summaries)."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from core import bench
from core.distributed import Ranks, shard
from core.runfolder import RunFolder, RunFolderError
from test_cli_safety import as_from_a_terminal
from core.trace import PHASES
from conftest import BENCH_ARGS

ROOT = Path(__file__).resolve().parent.parent
ARGS = BENCH_ARGS
ENV = dict(os.environ, OMP_NUM_THREADS="1")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
WALL = ("wall_ms", "wall_speedup", "phase_ms", "level_ms", "model_ms", "pass_ms")  # measured: they differ run to run


def bench_cmd(out: Path, ranks: int = 1, *extra) -> list[str]:
    launcher = TORCHRUN if ranks == 2 else [sys.executable]
    return [*launcher, "-m", "core", "bench", *ARGS, "--out", str(out), *extra]


def run(cmd) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)


def lines(out: Path) -> dict[str, list[str]]:
    return {f.name: f.read_text().splitlines() for f in sorted(out.glob("records-*.jsonl"))}


def records(out: Path) -> dict[tuple, dict]:
    return {(r["spec"], r["prompt_index"]): r for ls in lines(out).values() for r in map(json.loads, ls)}


def without_wall(summary: dict) -> dict:
    return {label: {k: v for k, v in s.items() if k not in WALL} for label, s in summary["summary"].items()}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    """`python -m core bench BENCH_ARGS --json` as one process on this machine: the run the torchrun and
    resume tests must give. It is made here, not taken from the shipped folder (conftest.SHIPPED_BENCH),
    because mulo's pixel up-sampler (VQ decode, bicubic, VQ encode, nearest code) meets float ties whose
    side depends on the CPU: the same engine gave the shipped mulo tokens on one machine and 427 other
    cells of prompt 0 on an AMD EPYC (docs/testing.md, "Runs that differ by CPU")."""
    out = tmp_path_factory.mktemp("bench-here") / "one"
    done = run(bench_cmd(out, 1, "--json", str(out.parent / "one.json")))
    assert done.returncode == 0, done.stderr
    assert "pass x" in done.stdout
    return out


def test_the_plain_command_prints_the_table_and_writes_json_and_the_run_folder(one_process, bench_folder):
    # 3 prompts x (3 specs + the reference, ar at other seeds), the same json beside the folder
    result = json.loads((one_process.parent / "one.json").read_text())
    assert result == json.loads((one_process / "summary.json").read_text())
    assert result["specs"] == ["ar", "mulo:scale=4:context=verify", "zipar:window=4"] and result["records"] == 12
    assert result["summary"]["ar"]["passes"] == 1024 and result["summary"]["mulo:scale=4:context=verify"]["drafter_nfe"] == 64
    fresh = records(one_process)
    assert len(fresh) == 12 and {key[1] for key in fresh} == {0, 1, 2}
    # the shipped folder is the same command's run: ar, zipar and the reference token for token and pass
    # for pass (a different engine makes other tokens or passes); mulo by its fields and its drafter's
    # passes only, since its up-sampler's float ties differ by CPU (its tokens are guarded by
    # test_drafting.py's goldens and the controls' freshness test)
    shipped = json.loads(bench_folder.with_name("one.json").read_text())
    assert shipped == json.loads((bench_folder / "summary.json").read_text())
    assert shipped["specs"] == result["specs"] and shipped["records"] == 12
    kept = records(bench_folder)
    assert kept.keys() == fresh.keys()
    for key, r in fresh.items():
        assert r.keys() == kept[key].keys(), key
        if key[0].startswith("mulo"):
            assert (r["drafter_nfe"], len(r["tokens"])) == (kept[key]["drafter_nfe"], len(kept[key]["tokens"])), key
            continue
        assert (r["tokens"], r["target_nfe"], r["drafter_nfe"]) == \
            (kept[key]["tokens"], kept[key]["target_nfe"], kept[key]["drafter_nfe"]), \
            f"{key}: the engine no longer makes the shipped run; remake it (tests/conftest.py, SHIPPED_BENCH)"


@pytest.mark.long("a torchrun bench of two ranks killed mid-run, resumed by a second one, beside one process")
def test_two_ranks_killed_by_sigterm_resume_to_the_records_and_summary_of_one_process(one_process, tmp_path):
    """torchrun with two ranks, killed as a scheduler pre-empts a job, then the same command again: the
    finished records stay as they were, none is measured twice, and the records and merged summary are
    those of one process on the same machine (each prompt's specs on one rank)."""
    out = tmp_path / "two"
    launcher = subprocess.Popen(bench_cmd(out, 2), cwd=ROOT, env=ENV, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 240
    while sum(map(len, lines(out).values())) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    launcher.send_signal(signal.SIGTERM)  # what a scheduler sends a pre-empted job
    _, err = launcher.communicate(timeout=120)
    assert launcher.returncode != 0
    assert "records are kept in" in err and "run the same command again to continue" in err
    before = lines(out)
    kept = sum(map(len, before.values()))
    assert 2 <= kept < 12 and not (out / "summary.json").exists()

    done = run(bench_cmd(out, 2))
    assert done.returncode == 0, done.stderr
    assert "pass x" in done.stdout and "bench, all ranks" in done.stderr and "bench, rank 1" in done.stderr
    after = lines(out)
    assert sorted(after) == ["records-0.jsonl", "records-1.jsonl"]
    for name, ls in before.items():
        assert after[name][:len(ls)] == ls          # finished records stay as they were
    assert sum(map(len, after.values())) == 12      # and none is measured twice
    two, one = records(out), records(one_process)
    assert two.keys() == one.keys()
    for key, r in one.items():
        assert (two[key]["tokens"], two[key]["target_nfe"], two[key]["drafter_nfe"]) == \
            (r["tokens"], r["target_nfe"], r["drafter_nfe"]), key
    # prompts 0 and 2 on rank 0, prompt 1 on rank 1: every spec of a prompt on one rank
    assert {(r["prompt_index"], r["worker"].rsplit(":", 1)[1]) for r in two.values()} == \
        {(0, "rank0/2"), (1, "rank1/2"), (2, "rank0/2")}
    merged = json.loads((out / "summary.json").read_text())
    assert without_wall(merged) == without_wall(json.loads((one_process / "summary.json").read_text()))
    assert len(merged["workers"]) == 2


def test_ctrl_c_stops_a_single_process_and_keeps_its_finished_records(tmp_path):
    out = tmp_path / "ctrl-c"
    proc = subprocess.Popen(bench_cmd(out, 1), cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=as_from_a_terminal)
    deadline = time.monotonic() + 240
    while sum(map(len, lines(out).values())) < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    kept = sum(map(len, lines(out).values()))
    assert proc.returncode == 130 and f"interrupted: {kept} records are kept in {out}" in err
    assert all(json.loads(line)["schema"] == bench.RECORD_SCHEMA for ls in lines(out).values() for line in ls)


def test_a_changed_configuration_in_the_same_folder_is_refused(one_process):
    before = lines(one_process)
    done = run([sys.executable, "-m", "core", "bench", *ARGS[:1], "4", *ARGS[2:], "--tau", "0.2",
                "--out", str(one_process)])
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith(f"error: {one_process} holds a run of another configuration")
    assert "prompts: 3 there, 4 now" in done.stderr and "params.tau: 0.5 there, 0.2 now" in done.stderr
    assert lines(one_process) == before


def test_sharding_gives_every_prompt_to_exactly_one_rank_the_same_way_every_time():
    shards = [shard(10, Ranks(r, 3)) for r in range(3)]
    assert shards == [[0, 3, 6, 9], [1, 4, 7], [2, 5, 8]]
    assert sorted(i for s in shards for i in s) == list(range(10))
    assert shard(10, Ranks()) == list(range(10))


def test_a_record_line_cut_short_by_a_kill_is_ignored_then_trimmed(tmp_path):
    folder = RunFolder(tmp_path)
    rec = dict(spec="ar", prompt="p", seed=0, model="embedded", schema=bench.RECORD_SCHEMA)
    (tmp_path / "records-0.jsonl").write_text(json.dumps(rec) + "\n" + '{"spec": "mulo", "pro')
    assert list(folder.records()) == [("ar", "p", 0, "embedded", bench.RECORD_SCHEMA)]
    folder.append(dict(rec, spec="zipar"), rank=0)
    folder.close()
    assert [json.loads(x)["spec"] for x in (tmp_path / "records-0.jsonl").read_text().splitlines()] == ["ar", "zipar"]
    assert len(RunFolder(tmp_path).records()) == 2


def test_a_folder_of_another_configuration_names_what_changed(tmp_path):
    RunFolder(tmp_path).claim(dict(prompts=3, base=dict(params=dict(tau=0.05))))
    with pytest.raises(RunFolderError, match=r"base\.params\.tau: 0\.05 there, 0\.1 now"):
        RunFolder(tmp_path).claim(dict(prompts=3, base=dict(params=dict(tau=0.1))))


def test_a_folder_written_before_a_knob_existed_resumes_when_the_knob_is_at_its_old_value(tmp_path):
    old = dict(prompts=3, base=dict(params=dict(tau=0.05)))          # written before accept and commit
    RunFolder(tmp_path).claim(old)
    since = bench.ADDED_KNOBS["base"]["params"]                      # accept, commit and every knob added later
    today = dict(prompts=3, base=dict(params=dict(tau=0.05, **since)))
    RunFolder(tmp_path).claim(today, added=bench.ADDED_KNOBS)          # the same run: resumes
    with pytest.raises(RunFolderError, match=r"base\.params\.accept: 'pooled' there, 'exact' now"):
        RunFolder(tmp_path).claim(dict(prompts=3, base=dict(params=dict(tau=0.05, **{**since, "accept": "exact"}))),
                                  added=bench.ADDED_KNOBS)
    with pytest.raises(RunFolderError, match=r"base\.params\.accept: None there, 'pooled' now"):
        RunFolder(tmp_path).claim(today)                                 # control: without what was added


def test_wall_ratios_pair_records_of_one_worker_only():
    def rec(i, worker, ms):
        return dict(prompt_index=i, worker=worker, wall_ms=ms)
    ar = [rec(0, "a", 100.0), rec(1, "b", 400.0), rec(2, "a", 300.0)]
    spec = [rec(0, "a", 50.0), rec(1, "b", 100.0), rec(2, "c", 1.0)]   # prompt 2 was measured elsewhere
    # worker a: 100 / 50 = 2 on one prompt; worker b: 400 / 100 = 4 on one prompt; prompt 2 is not paired
    assert bench.wall_speedup(ar, spec) == pytest.approx(3.0)


@pytest.mark.parametrize("text, fragment", [
    ("{", "not valid JSON"), ('{"schema": "mulo-trace/2"}', "not a benchmark summary"),
    ('{"schema": "mulo-bench/2", "summary": {}}', "no per-method figures"),
    ('{"schema": "mulo-bench/2", "summary": {"ar": {"method": "ar"}}}', "'ar' lack passes"),
    ('{"schema": "mulo-bench/2", "summary": ' + "[" * 100_000 + "]" * 100_000 + "}", "nests deeper than 6 levels"),
    ('{"schema": "mulo-bench/2", "x": [[[[[[0]]]]]]}', "nests deeper than 6 levels"),
    (b"\x1f\x8b\x08\x00" + bytes(range(256)), "gzip-compressed: unpack it"),
    (b"\xff\xfe{", "not valid JSON"),
])
def test_a_malformed_summary_is_refused_with_what_is_wrong(text, fragment):
    with pytest.raises(bench.SummaryError, match=fragment):
        bench.read_summary(text)


ROW = dict(method="ar", passes=1024.0, passes_speedup=1.0, wall_ms=900.0, wall_speedup=1.0, target_nfe=1024.0,
           drafter_nfe=0.0, adherence=0.9, frechet=None, fd_ar=None, sharpness=1.0, loglik_gap=0.0,
           phase_ms=dict.fromkeys(PHASES, 1.0))
WHOLE = dict(schema="mulo-bench/2", model="embedded", prompts=2, seed=0, specs=["ar"], records=4, summary={"ar": ROW})


@pytest.mark.parametrize("damage, fragment", [
    (dict(prompts=None), "the summary lacks the field 'prompts'"),
    (dict(prompts="[x](https://example.com)"), "the summary's prompts must be an integer >= 1; got '[x](https://"),
    (dict(seed=2 ** 63), "the summary's seed must be an integer in [0, 2^63)"),
    (dict(specs=["ar", "mulo"]), "the summary's specs must be a list of the labels of 'summary'"),
    (dict(model="<b>pair</b>"), "the summary's model must be a model pair name"),
    (dict(records="many"), "the summary's records must be an integer >= 0"),
    (dict(floors=dict(fd_ar=dict(value=1.0, spread="wide", high=2.0))), "the summary's floors must be"),
    (dict(controls=dict(blur=dict(sigma_px=1.0))), "the summary's controls must be"),
    (dict(summary={"ar <script>": ROW}), "the summary names a spec 'ar <script>'"),
    (dict(summary={"ar": dict(ROW, method="<i>ar</i>")}), "the figures of 'ar': method must be a method name"),
    (dict(summary={"ar": dict(ROW, phase_ms="fast")}), "the figures of 'ar' are not numbers: phase_ms"),
    (dict(summary={"ar": dict(ROW, inside=dict(all="yes"))}), "the figures of 'ar': inside must map yardsticks to true, false"),
    (dict(summary={"x" * 5000: ROW}), "the summary names a spec '" + "x" * 36 + "...;"),
])
def test_every_field_a_figure_or_a_page_reads_is_checked_by_name(damage, fragment):
    assert bench.read_summary(json.dumps(WHOLE)) == WHOLE
    d = {k: v for k, v in {**WHOLE, **damage}.items() if v is not None}
    with pytest.raises(bench.SummaryError) as refused:
        bench.read_summary(json.dumps(d))
    assert str(refused.value).startswith(fragment) and len(str(refused.value)) < 300, str(refused.value)


def test_evaluate_ar_under_two_ranks_gives_the_figures_of_one_process():
    args = ["-m", "core", "evaluate", "--what", "ar", "--prompts", "3", "--grids", "8"]
    one = run([sys.executable, *args, "--threads", "1"])
    two = run([*TORCHRUN, *args])
    assert one.returncode == 0 and two.returncode == 0, two.stderr
    a, b = json.loads(one.stdout), json.loads(two.stdout)     # rank 1 prints nothing: one JSON object
    for figs in (a, b):
        figs["8x8"].pop("mean_wall_s")
    assert a == b and a["8x8"]["prompts"] == 3


def test_a_bad_spec_value_stops_before_the_folder_is_claimed(tmp_path):
    done = run([sys.executable, "-m", "core", "bench", "--prompts", "1", "--methods", "mulo:tau=2",
                "--out", str(tmp_path / "run")])
    assert done.returncode == 2 and done.stderr.startswith("error: tau must be")
    assert not (tmp_path / "run").exists()        # so the corrected command starts afresh


def test_a_pair_without_the_domain_classifier_merges_speed_with_quality_left_empty():
    """adherence and the FD to the data need the domain's classifier; the yardsticks against ar's own
    samples (detail FD, sharpness, log-lik gap) need only images and the target, so they stay."""
    from core.config import RunConfig
    configs = bench.configs_of(["zipar"], RunConfig(model="llamagen-t2i"))
    g = np.random.default_rng(0)

    def rec(spec, i, nfe):
        looks = dict(detail=g.normal(size=18).tolist(), energy=1.0 + g.random(), loglik=-1.0 + 0.01 * g.normal(),
                     impossible=0)
        return dict(spec=spec, prompt_index=i, worker="w", target_nfe=nfe, target_fed=nfe, drafter_nfe=0,
                    wall_ms=float(nfe), passed=None, kept=None, phase_ms=dict.fromkeys(PHASES, 1.0), adherence=None,
                    features=None, level_nfe=[nfe], level_ms=[float(nfe)], **looks, blur=dict(looks))
    by_spec = {"ar": [rec("ar", i, 1024) for i in range(3)], "zipar": [rec("zipar", i, 256) for i in range(3)],
               bench.REFERENCE: [rec(bench.REFERENCE, i, 1024) for i in range(3)]}
    result = bench.merge(configs, by_spec, scenes=[None] * 3, seed=0, clf=None)
    z = result["summary"]["zipar"]
    assert (z["passes_speedup"], z["adherence"], z["frechet"], result["model"]) == (4.0, None, None, "llamagen-t2i")
    gap = np.mean([r["loglik"] for r in by_spec["zipar"]]) - np.mean([r["loglik"] for r in by_spec["ar"]])
    assert z["loglik_gap"] == pytest.approx(gap) and z["fd_ar"] is not None and z["sharpness"] > 0
    assert "adherence" not in result["floors"] and "frechet" not in result["floors"] and "fd_ar" in result["floors"]
    assert bench.read_summary(json.dumps(result)) == result
    row = next(line for line in bench.table(result).splitlines() if line.startswith("zipar"))
    assert row.split()[11:13] == ["-", "-"]
