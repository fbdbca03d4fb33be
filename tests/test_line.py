"""The model's line (app.line, app.control.waited) and the remembered Generate runs (app.generation.RUNS):
places and estimates against hand-counted cases, the bounds refused in words, Stop and a twin's
result leaving the line, one computation for identical requests at once, and a knob changed missing
the cache (the control)."""
import threading
import time

import pytest

from app import control, generation, inputs, line, panels
from app.line import Full, Line


def knobs(**overrides) -> list:
    return [{**inputs.DEFAULTS, "scale": 4, "tau": 0.0, **overrides}[k] for k in inputs.KNOBS]


def test_each_waiting_ticket_is_told_its_place_and_the_work_ahead():
    """Three tickets: the first runs (10 s expected, started 4 s ago: 6 s left), the second expects 3 s,
    the third is told "2nd in line" and about 6 + 3 = 9 s; once the first leaves, the second's turn
    comes and the third is 1st with 3 s ahead. A ticket with no estimate makes the words of those behind it say so."""
    ln = Line()
    a, b, c = ln.join("s1", "Generate", 10.0), ln.join("s2", "Lesson", 3.0), ln.join("s3", "Compare", 5.0)
    a.started -= 4.0
    assert [ln.place(t) for t in (a, b, c)] == [0, 1, 2]
    assert ln.words(a) is None
    said = ln.words(c)
    assert said.startswith("Waiting for the model: 2nd in line (Generate, Lesson ahead), about 9 s"), said
    assert not ln.wait(b, 0.01)
    ln.leave(a)
    assert ln.wait(b, 0.01) and ln.place(c) == 1 and b.started is not None
    assert "1st in line (Lesson ahead), about 3 s" in ln.words(c)
    ln.join("s4", "Sweep", None)
    behind = ln.join("s5", "Generate", 1.0)
    assert "no estimate yet" in ln.words(behind) and "about" not in ln.words(behind)
    assert [line.ordinal(n) for n in (1, 2, 3, 4, 11, 12, 13, 21, 22, 101, 111)] == \
        ["1st", "2nd", "3rd", "4th", "11th", "12th", "13th", "21st", "22nd", "101st", "111th"]


def test_a_full_line_and_a_tab_with_its_share_are_refused_in_words():
    ln = Line(most=3, per_session=2)
    first = ln.join("a", "Generate", 20.0)
    ln.join("a", "Lesson", 5.0)
    with pytest.raises(Full, match=r"this tab already has 2 runs in the model's line \(Generate, Lesson\)"):
        ln.join("a", "Compare", 1.0)
    ln.join(None, "Generate", 5.0)            # a direct call (no session) counts only against the line
    with pytest.raises(Full, match=r"line is full \(3 runs waiting or running, about 30 s of work\): try again in about 30 s"):
        ln.join("b", "Generate", 1.0)
    ln.leave(first)
    ln.join("b", "Generate", 1.0)              # room again


def test_waiting_ends_at_the_turn_at_a_twin_s_result_or_at_stop_and_leaves_the_line():
    """waited against a line whose first ticket is held by another thread: it yields words while it
    waits; it returns the ready value the moment there is one (its ticket gone); Stop raises Stopped
    (its ticket gone); once the holder leaves, the turn comes and the ticket is returned."""
    ln, saved = Line(), control.LINE
    control.LINE = ln
    try:
        holder = ln.join("h", "Generate", 2.0)
        result = {}
        waits = control.waited("w", "Generate", 2.0, lambda: result.get("twin"))
        assert next(waits).startswith("Waiting for the model: 1st in line")
        result["twin"] = "the twin's result"
        with pytest.raises(StopIteration) as done:
            while True:
                next(waits)
        assert done.value.value == "the twin's result" and len(ln) == 1

        waits = control.waited("w", "Generate", 2.0)
        next(waits)
        control._stop_requests["w"] = time.time()
        with pytest.raises(control.Stopped):
            next(waits)
        control._stop_requests.pop("w")
        assert len(ln) == 1

        waits = control.waited("w", "Generate", 2.0)
        next(waits)
        threading.Timer(0.2, ln.leave, [holder]).start()
        with pytest.raises(StopIteration) as done:
            while True:
                next(waits)
        assert isinstance(done.value.value, line.Ticket) and ln.place(done.value.value) == 0
    finally:
        control.LINE = saved


def counting_runs(monkeypatch) -> list:
    """Each engine run Generate starts, counted (the ar baseline is app.control's, not counted)."""
    started, real = [], generation.engine.stream

    def stream(run, pair):
        if run.method != "ar":   # the ar baseline is remembered by app.control on its own
            started.append(run.method)
        return real(run, pair)
    monkeypatch.setattr(generation.engine, "stream", stream)
    return started


def test_a_repeated_generate_is_answered_from_the_cache_and_says_so(monkeypatch):
    """The second Generate of the same knobs runs nothing, shows the first run's tokens and passes, and its
    status and headline say it came from the cache; one knob changed (τ) is not a hit (the control)."""
    started = counting_runs(monkeypatch)
    first = list(generation.generate(None, False, *knobs(seed=11)))[-1]
    again = list(generation.generate(None, False, *knobs(seed=11)))
    assert started == ["mulo"] and len(again) == 1
    state, status = again[0][0], again[0][1]
    assert "from the cache" in status
    assert state["trace"].tokens == first[0]["trace"].tokens and state["trace"].totals == first[0]["trace"].totals
    stats = dict(zip(panels.VIEWS, again[0][-len(panels.VIEWS):]))["stats"]
    assert "**From the cache**" in stats and "not a new measurement" in stats
    assert "From the cache" not in dict(zip(panels.VIEWS, first[-len(panels.VIEWS):]))["stats"]
    list(generation.generate(None, False, *knobs(seed=11, tau=0.3)))
    assert started == ["mulo", "mulo"]


def test_identical_requests_at_once_compute_once(monkeypatch):
    """Four identical Generates at once from four sessions: one engine run; the other three wait in the
    line and take its result. The control: four different seeds at once run four times."""
    started = counting_runs(monkeypatch)

    def at_once(seeds):
        outs = [None] * len(seeds)

        def one(n, seed):
            req = type("R", (), {"session_hash": f"s{n}"})()
            outs[n] = list(generation.generate(req, False, *knobs(seed=seed)))[-1]
        threads = [threading.Thread(target=one, args=(n, s)) for n, s in enumerate(seeds)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        return outs
    outs = at_once([12] * 4)
    assert started == ["mulo"]
    assert sum("from the cache" in o[1] for o in outs) == 3
    assert all(o[0]["trace"].tokens == outs[0][0]["trace"].tokens for o in outs)
    at_once([13, 14, 15, 16])
    assert len(started) == 5
    assert len(control.LINE) == 0


def test_the_cache_is_bounded_by_bytes():
    """RUNS keeps runs while their bytes fit; one more pushes the oldest out, never the newest."""
    r = generation.Remembered(100, lambda kept: kept[1])
    r.keep("a", ("A", 60))
    r.keep("b", ("B", 30))
    assert r.keys() == ["a", "b"]
    r.keep("c", ("C", 30))
    assert r.keys() == ["b", "c"]
    r.keep("d", ("D", 500))
    assert r.keys() == ["d"]
