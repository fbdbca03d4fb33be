"""The runs shipped for a class (app.shipped, assets/shipped_runs.jsonl.gz): the file holds exactly the
presets' and the Lesson's runs on the default prompt and seed, each equal to a fresh run of its settings
(tokens and passes; a file gone stale fails here: run `python scripts/ship_runs.py`), and a preset or a
Lesson step on those settings answers without running the model, saying so; the controls: a changed
token fails the comparison, and a prompt of the user's own is never answered from the file."""
import dataclasses

import pytest

from app import generation, inputs, lesson, links, panels, shipped
from core import engine


def same_run(a, b) -> bool:
    return a.tokens == b.tokens and all(a.totals[k] == b.totals[k] for k in ("target_nfe", "drafter_nfe"))


def test_the_file_ships_every_preset_and_lesson_run_and_nothing_else():
    assert set(shipped._table()) == set(shipped.configs())
    assert shipped.PATH.stat().st_size < 2 * 2 ** 20


@pytest.mark.parametrize("cfg", shipped.configs(), ids=[f"{n}-{c.method}" for n, c in enumerate(shipped.configs())])
def test_each_shipped_trace_is_what_a_fresh_run_of_its_settings_makes(cfg):
    kept, fresh = shipped.trace_for(cfg), engine.run(cfg, engine.load_pair(cfg.model))
    assert same_run(kept, fresh), f"{cfg.method} {cfg.params}: run `python scripts/ship_runs.py` again"
    changed = dataclasses.replace(kept, tokens=[[(t + 1) % 512 for t in row] for row in kept.tokens])
    assert not same_run(changed, fresh)   # the control: the comparison sees one grid changed


def knob_values(**overrides) -> list:
    return [{**inputs.DEFAULTS, **overrides}[k] for k in inputs.KNOBS]


def no_engine_runs(monkeypatch) -> list:
    started = []

    def stream(run, pair):
        started.append(run.method)
        raise AssertionError("the model ran")
    monkeypatch.setattr(generation.engine, "stream", stream)
    return started


def test_a_preset_on_the_default_prompt_answers_from_its_shipped_run(monkeypatch):
    name = "No pooling (k = 0)"
    values = {**inputs.DEFAULTS, **links.PRESETS[name][1]}
    started = no_engine_runs(monkeypatch)
    out = generation.shipped_answer(None, False, *(values[k] for k in inputs.KNOBS))
    state, status = out[0], out[1]
    assert started == [] and "a run shipped with the app" in status
    assert same_run(state["trace"], shipped.trace_for(inputs.run_config(*(values[k] for k in inputs.KNOBS))))
    assert "**A shipped run**" in dict(zip(panels.VIEWS, out[-len(panels.VIEWS):]))["stats"]
    # the control: the same preset on a prompt of the user's own changes nothing
    other = dict(values, prompt="a small green square top left on a checkered yellow background")
    skipped = generation.shipped_answer(None, False, *(other[k] for k in inputs.KNOBS))
    assert all(isinstance(v, type(generation.gr.skip())) for v in skipped)


def test_every_lesson_step_on_the_default_prompt_answers_without_the_model(monkeypatch):
    started = no_engine_runs(monkeypatch)
    for n in range(1, len(lesson.STEPS) + 1):
        lesson.REMEMBERED.clear()
        out = list(lesson.run_step(None, n, inputs.DEFAULTS["prompt"], inputs.DEFAULTS["seed"]))
        assert len(out) == 1 and "from the runs shipped with the app" in out[-1][-1], out[-1][-1]
    assert started == []


def test_a_lesson_step_from_the_file_reads_as_the_same_step_run_live(monkeypatch):
    """Step 5 from the shipped runs against the step run live (the file hidden): the same table but for
    the wall ms, the same words to look at and the same answer."""
    lesson.REMEMBERED.clear()
    kept = list(lesson.run_step(None, 5, inputs.DEFAULTS["prompt"], inputs.DEFAULTS["seed"]))[-1]
    lesson.REMEMBERED.clear()
    monkeypatch.setattr(shipped, "trace_for", lambda cfg: None)
    live = list(lesson.run_step(None, 5, inputs.DEFAULTS["prompt"], inputs.DEFAULTS["seed"]))[-1]
    wall = lesson.COLUMNS.index(next(c for c in lesson.COLUMNS if "wall" in c))
    strip = lambda table: [[v for i, v in enumerate(r) if i != wall] for r in table]  # noqa: E731
    assert strip(kept[1]) == strip(live[1]) and kept[2:5] == live[2:5]
    assert "from the runs shipped" in kept[-1] and "shipped" not in live[-1]


def test_a_knob_moved_after_a_preset_is_never_answered_from_the_file():
    """The shipped run answers the preset's own knobs only: τ moved by 0.01 changes nothing on screen."""
    values = {**inputs.DEFAULTS, **links.PRESETS["No pooling (k = 0)"][1]}
    values["tau"] = round(values["tau"] + 0.01, 2)
    skipped = generation.shipped_answer(None, False, *(values[k] for k in inputs.KNOBS))
    assert all(isinstance(v, type(generation.gr.skip())) for v in skipped)


def test_a_lesson_step_ticked_live_runs_the_model_even_where_it_is_shipped(monkeypatch):
    """The Lesson's "Run the steps live": the same default prompt and seed runs each of the step's runs here
    (counted), and says the numbers are this run's; unticked, the same press runs nothing (the control)."""
    ran, real = [], lesson.run_stoppable
    monkeypatch.setattr(lesson, "run_stoppable", lambda cfg, pair, session: ran.append(cfg.method) or real(cfg, pair, session))
    lesson.REMEMBERED.clear()
    quiet = list(lesson.run_step(None, 6, inputs.DEFAULTS["prompt"], inputs.DEFAULTS["seed"]))[-1]
    assert ran == [] and "shipped" in quiet[-1]
    live = list(lesson.run_step(None, 6, inputs.DEFAULTS["prompt"], inputs.DEFAULTS["seed"], "embedded", True))[-1]
    assert ran == ["mulo", "mulo"] and "this run's" in live[-1]
