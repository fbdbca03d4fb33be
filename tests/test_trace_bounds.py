"""The trace reader's bounds, each at its edge: a hand-written trace of a 2x3 grid (no model pair, so
its own grid bounds it) is read with a value exactly at a documented bound and refused one past it,
with the message that names the bound. Against the definitions in core/trace.py (MAX_* and the
per-cell budgets), not against what the engine happens to write."""
import copy
import json
import random

import pytest

from core.trace import (CELLS_PER_CELL, HEAD_VALUES, MAX_BYTES, MAX_DEPTH, MAX_DIGITS, MAX_FIELDS, MAX_LEVELS,
                        MAX_SIDE, STEP_FIELDS, STEPS_PER_CELL, VALUES_PER_CELL, Limits, Step, Steps, Trace, TraceError,
                        totals)

H, W = 2, 3
CELLS = H * W
ALL = [[i, j] for i in range(H) for j in range(W)]


def step(**kw) -> dict:
    return dict(dict(phase="decode", model="target", nfe=1, wall_ms=0.5, cells=[[0, 0]], tokens=[0]), **kw)


def trace(**kw) -> dict:
    d = dict(schema="mulo-trace/3", method="ar", params={}, seed=0, prompt="a cat", model="toy",
             grid=dict(target=[H, W], draft=None, levels=[[H, W]]), tokens=[[0, 1, 2], [3, 4, 5]],
             proposal=None, draft=None, steps=[step()],
             totals=dict(target_nfe=1, drafter_nfe=0, wall_ms=0.5, passed_fraction=None, kept_fraction=None,
                         level_nfe=[1]))
    d.update(kw)
    levels = d["grid"].get("levels") if isinstance(d["grid"], dict) else None
    if "totals" not in kw and isinstance(levels, list) and levels:
        d["totals"]["level_nfe"] = [1] + [0] * (len(levels) - 1)
    return d


def ok(d, limits_for=None) -> Trace:
    t = Trace.from_json(json.dumps(d), limits_for)
    assert t.to_dict() == d
    return t


def refused(d, match: str, limits_for=None):
    text = d if isinstance(d, (str, bytes)) else json.dumps(d)
    with pytest.raises(TraceError, match=match):
        Trace.from_json(text, limits_for)


def test_the_hand_written_trace_reads_back_as_written():
    t = ok(trace())
    assert (t.schema, t.method, t.grid["levels"], t.levels) == ("mulo-trace/3", "ar", [[H, W]], None)


def test_the_file_size_bound_is_max_bytes():
    refused(" " * MAX_BYTES, "not valid JSON")
    refused(" " * (MAX_BYTES + 1), rf"the file is {MAX_BYTES + 1} bytes; at most {MAX_BYTES} are read")


def test_nesting_is_bounded_at_max_depth_and_strings_do_not_count():
    deep = lambda n: "[" * n + "]" * n  # noqa: E731
    refused(deep(MAX_DEPTH), "must be a JSON object")
    refused(deep(MAX_DEPTH + 1), rf"^it nests deeper than {MAX_DEPTH} levels$")
    refused('["' + "[{" * 20 + '", "\\"' + "[" * 20 + '"]', "must be a JSON object")
    nested = []
    for _ in range(MAX_DEPTH - 1):
        nested = [nested]
    with pytest.raises(TraceError, match="must be a JSON object"):
        Trace.from_dict(nested)
    with pytest.raises(TraceError, match=rf"^it nests deeper than {MAX_DEPTH} levels$"):
        Trace.from_dict([nested])
    with pytest.raises(TraceError, match="nests deeper"):
        Trace.from_dict({"a": [nested]})


def test_integers_are_read_up_to_max_digits():
    big = "9" * MAX_DIGITS
    refused(json.dumps(trace()).replace('"seed": 0', f'"seed": {big}'), r"seed must be an integer in \[0, 2\^63\)")
    refused(json.dumps(trace()).replace('"seed": 0', f'"seed": -{big}'), r"seed must be an integer")
    refused(json.dumps(trace()).replace('"seed": 0', f'"seed": -{big}9'),
            rf"^it holds an integer of {MAX_DIGITS + 1} digits; at most {MAX_DIGITS} are read$")
    ok(trace(seed=2 ** 63 - 1))
    refused(trace(seed=2 ** 63), r"^seed must be an integer in \[0, 2\^63\); got 9223372036854775808$")
    refused(trace(seed=True), "seed must be an integer")


def test_numbers_must_be_finite():
    ok(trace(totals=dict(trace()["totals"], wall_ms=1e308)))
    text = json.dumps(trace())
    refused(text.replace('"wall_ms": 0.5', '"wall_ms": 1e309', 1), r"^it holds the number 1e309, too large to be finite$")
    refused(text.replace('"wall_ms": 0.5', '"wall_ms": NaN', 1), r"^it holds NaN; every number in a trace is finite$")


def test_names_prompt_and_params_are_bounded():
    ok(trace(method="a" * 64, model="b.c_d-e", prompt="p" * 2000))
    refused(trace(method="a" * 65), r"^method must be a method name \(letters, digits, '.', '_', '-'\); got 'aaa")
    refused(trace(method="a" * 65), r"got '" + "a" * 36 + r"\.\.\.$")   # a value is shown in 40 characters
    refused(trace(model="-x"), r"^model must be a model pair name; got '-x'$")
    refused(trace(model=None), "model must be a model pair name")
    refused(trace(prompt="p" * 2001), r"^prompt must be a string of at most 2000 characters$")
    refused(trace(prompt=None), "prompt must be a string")
    knobs = {f"k{i}": i for i in range(64)}
    ok(trace(params=dict(knobs)))
    refused(trace(params=dict(knobs, extra=1)), r"^params must be an object of at most 64 knobs$")
    ok(trace(params=dict(a=None, b=True, c=1.5, d="w" * 64, tau=0.0)))
    ok(trace(params=dict(tau=1.0)))
    refused(trace(params=dict(d="w" * 65)), r"^params: 'd' must name a knob whose value is a number, a word or null$")
    refused(trace(params=dict(d=[1])), "params: 'd' must name a knob")
    refused(trace(params={"../x": 1}), r"params: '\.\./x' must name a knob")
    refused(trace(params=dict(tau=1.001)), r"^params.tau must be a number in \[0, 1\]; got 1.001$")
    refused(trace(params=dict(tau=-0.001)), r"params.tau must be a number in \[0, 1\]")


def test_grids_sides_are_in_1_to_max_side_and_levels_at_most_max_levels():
    side = MAX_SIDE + 1
    refused(trace(grid=dict(target=[side, 1], draft=None, levels=[[side, 1]])),
            rf'^grid must be {{"target": \[H, W\], "draft": \[h, w\] or null}} with sides in \[1, {MAX_SIDE}\]$')
    refused(trace(grid=dict(target=[H, W], draft=[0, 1], levels=[[H, W], [0, 1]])), "grid must be")
    refused(trace(grid=dict(target=[H, W], draft=[1, side], levels=[[H, W], [1, side]])), "grid must be")
    refused(trace(grid=[H, W]), "grid must be")
    lv = [[H, W], [1, 1], [1, 1], [1, 1]]
    draft_grid = dict(target=[H, W], draft=[1, 1], levels=lv)
    ok(trace(grid=draft_grid, draft=[[0]]))
    refused(trace(grid=dict(draft_grid, levels=lv + [[1, 1]]), draft=[[0]]),
            rf"^grid.levels must list the grids of the run \(\[H, W\] of the target, then grid.draft, then any "
            rf"deeper drafter grid the pair serves\), at most {MAX_LEVELS}$")
    refused(trace(grid=dict(target=[H, W], draft=None, levels=[])), "grid.levels must list")
    refused(trace(grid=dict(target=[H, W], draft=None, levels=[[H, W], [1, 1]])), "grid.levels must list")
    refused(trace(grid=dict(target=[H, W], draft=[1, 1], levels=[[H, W]]), draft=[[0]]),
            r"grid.draft is \[1, 1\]; the toy pair drafts on no smaller grid")
    refused(trace(grid=dict(target=[H, W], draft=[1, 1], levels=[[H, W], [1, 2], [1, 1]]), draft=[[0]]),
            "grid.levels must list")
    pair = lambda name: Limits((H, W), ((1, 1), (1, 2)), 6)  # noqa: E731
    ok(trace(grid=dict(target=[H, W], draft=[1, 1], levels=[[H, W], [1, 1], [1, 2]]), draft=[[0]]), pair)
    refused(trace(grid=dict(target=[H, W], draft=[1, 1], levels=[[H, W], [1, 1], [2, 2]]), draft=[[0]]),
            "grid.levels must list", pair)
    refused(trace(grid=dict(target=[H, W], draft=[1, 1], levels=[[H, W]]), draft=[[0]]), "grid.levels must list",
            pair)
    refused(trace(grid=dict(target=[H, W], draft=None, levels=[[W, H]])), "grid.levels must list")


def test_grids_are_checked_against_the_pair_limits():
    pair = lambda name: Limits((H, W), ((1, 1),), 6)  # noqa: E731
    ok(trace(), pair)
    refused(trace(grid=dict(target=[W, H], draft=None, levels=[[W, H]]), tokens=[[0, 1], [2, 3], [4, 5]]),
            r"^grid.target is \[3, 2\]; the toy pair draws 2x3$", pair)
    refused(trace(grid=dict(target=[H, W], draft=[2, 2], levels=[[H, W], [2, 2]]), draft=[[0, 0], [0, 0]]),
            r"^grid.draft is \[2, 2\]; the toy pair drafts on 1x1$", pair)
    none = lambda name: Limits((H, W), (), 6)  # noqa: E731
    refused(trace(grid=dict(target=[H, W], draft=[1, 1], levels=[[H, W], [1, 1]]), draft=[[0]]),
            "the toy pair drafts on no smaller grid", none)

    def absent(name):
        raise ValueError(f"no pair {name}")
    refused(trace(), r"^no pair toy$", absent)


def test_tokens_are_codebook_entries_on_their_grid():
    pair = lambda name: Limits((H, W), ((1, 1),), 6)  # noqa: E731
    ok(trace(tokens=[[5] * W] * H, proposal=[[5] * W] * H), pair)
    refused(trace(tokens=[[6] * W] * H), r"^tokens must be a 2x3 grid of codebook tokens in \[0, 6\)$", pair)
    refused(trace(tokens=[[-1] * W] * H), "tokens must be", pair)
    refused(trace(proposal=[[6] * W] * H), r"^proposal must be null or a 2x3 grid of codebook tokens in \[0, 6\)$",
            pair)
    refused(trace(draft=[[0]]), r"^draft must be null or null when grid.draft is null$")
    refused(trace(tokens=[[0] * W]), "tokens must be a 2x3 grid")
    refused(trace(tokens=[[0] * (W + 1)] * H), "tokens must be a 2x3 grid")
    refused(trace(tokens=None), "tokens must be a 2x3 grid")
    ok(trace(tokens=[[2 ** 31 - 1] * W] * H))          # no pair: any 32-bit token
    refused(trace(tokens=[[2 ** 31] * W] * H), r"codebook tokens in \[0, 2147483648\)")
    ok(trace(steps=[step(tokens=[5])]), pair)
    refused(trace(steps=[step(tokens=[6])]), r"^step 0: tokens must be null or one codebook token in \[0, 6\) per cell$",
            pair)
    refused(trace(steps=[step(tokens=[0, 0])]), "step 0: tokens must be null")


def test_the_deeper_levels_hold_their_own_grids():
    grid = dict(target=[H, W], draft=[2, 2], levels=[[H, W], [2, 2], [1, 1]])
    lv = dict(method="sd", grid=[2, 2], tokens=[[1, 1], [1, 1]], proposal=[[0, 0], [0, 0]], draft=[[3]])
    ok(trace(grid=grid, draft=[[1, 1], [1, 1]], levels=[lv]))
    ok(trace(grid=grid, draft=[[1, 1], [1, 1]], levels=[dict(lv, proposal=None, draft=None)]))
    for bad in (dict(lv, method="<b>"), dict(lv, grid=[1, 1]), dict(lv, tokens=[[1]]),
                dict(lv, proposal=[[0]]), dict(lv, draft=[[3, 3]]), "sd"):
        refused(trace(grid=grid, draft=[[1, 1], [1, 1]], levels=[bad]),
                r"^levels\[0\] must give method, grid \[2, 2\], tokens on it, and proposal \(same grid\) and draft "
                r"\(the next level's grid\) or null$")
    below = dict(method="ar", grid=[1, 1], tokens=[[3]], proposal=None, draft=None)
    ok(trace(grid=grid, draft=[[1, 1], [1, 1]], levels=[lv, below]))                  # one per level below the target
    refused(trace(grid=grid, draft=[[1, 1], [1, 1]], levels=[lv, dict(below, draft=[[0]])]), r"^levels\[1\] must give")
    pair = lambda name: Limits((H, W), ((2, 2), (1, 1)), 6)  # noqa: E731
    ok(trace(grid=grid, draft=[[1, 1], [1, 1]], levels=[dict(lv, tokens=[[5, 5], [5, 5]])]), pair)
    for key, v in (("tokens", [[6, 1], [1, 1]]), ("proposal", [[0, 0], [0, 6]]), ("draft", [[6]])):
        refused(trace(grid=grid, draft=[[1, 1], [1, 1]], levels=[dict(lv, **{key: v})]), r"levels\[0\] must give",
                pair)   # a deeper level's tokens are codebook tokens of the pair too
    two = dict(target=[H, W], draft=[2, 2], levels=[[H, W], [2, 2]])
    refused(trace(grid=two, draft=[[1, 1], [1, 1]], levels=[dict(lv, draft=[[3]])]), r"levels\[0\] must give")
    refused(trace(grid=two, draft=[[1, 1], [1, 1]], levels=[lv, lv]),
            r"^levels must be null or a list of at most 1 levels below the target$")
    refused(trace(grid=two, draft=[[1, 1], [1, 1]], levels=[]), "levels must be null or a list")


def test_step_counts_are_bounded_per_cell_of_the_grids():
    most = STEPS_PER_CELL * CELLS
    ok(trace(steps=[step()] * most))
    refused(trace(steps=[step()] * (most + 1)),
            rf"^steps must be a list of at most {most} steps \({STEPS_PER_CELL} per cell of the grids\)$")
    refused(trace(steps={}), "steps must be a list")
    budget = CELLS_PER_CELL * CELLS
    whole = step(cells=ALL, tokens=None, judged=ALL)            # a step writes and judges each cell at most once
    ok(trace(steps=[whole] * (budget // (2 * CELLS))))
    refused(trace(steps=[whole] * (budget // (2 * CELLS)) + [step()]),
            rf"^the steps write or judge more than {budget} cells \({CELLS_PER_CELL} per cell of the grids\)$")


def test_no_step_lists_more_cells_than_its_grid_holds():
    ok(trace(steps=[step(cells=ALL, tokens=[0] * CELLS, judged=ALL)]))
    for key in ("cells", "judged"):
        refused(trace(steps=[step(**{key: ALL + [[0, 0]]}, tokens=None)]),
                rf"^step 0: cells and judged may each list at most the {CELLS} cells of its 2x3 grid$")


def test_a_step_is_parsed_only_once_its_values_fit_the_grid():
    most = VALUES_PER_CELL * CELLS + 4 * STEP_FIELDS
    ok(trace(steps=[step(), step(judged=ALL, prob=[0.5] * CELLS)]))
    text = json.dumps(trace(steps=[step(), step(prob="@")]))   # the list is refused unread: it would not fit
    refused(text.replace('"@"', "[" + ", ".join(["0.5"] * most) + "]"),
            rf"^step 1 holds more than {most} values; a step of this run holds at most that many "
            rf"\({VALUES_PER_CELL} per cell of its largest grid\)$")
    refused(trace(steps=[dict(step(), **{f"x{i}": i for i in range(STEP_FIELDS)})]),
            rf"^step 0 has {STEP_FIELDS + 6} fields; a step has at most {STEP_FIELDS}$")


def test_each_step_field_is_bounded():
    lv = [[H, W], [1, 1]]
    two = dict(target=[H, W], draft=[1, 1], levels=lv)
    ok(trace(steps=[step(nfe=CELLS + 1, wall_ms=0.0, phase="draft", model="drafter", level=1, cells=[[0, 0]])],
             grid=two, draft=[[0]]))
    refused(trace(steps=[step(nfe=CELLS + 2)], grid=two, draft=[[0]]),
            rf"^step 0 needs an integer nfe in \[0, {CELLS + 1}\] and a number wall_ms >= 0$")
    refused(trace(steps=[step(nfe=-1)]), "step 0 needs an integer nfe")
    refused(trace(steps=[step(wall_ms=-0.001)]), "step 0 needs an integer nfe")
    refused(trace(steps=[step(), step(phase="think")]),
            r"^step 1 needs a phase in \('draft', 'upsample', 'verify', 'resample', 'decode', 'refresh'\) and a "
            r"model in \('target', 'drafter', None\)$")
    refused(trace(steps=[step(model="oracle")]), "step 0 needs a phase")
    refused(trace(steps=[3]), "step 0 needs a phase")
    ok(trace(steps=[step(grid="draft")]))
    refused(trace(steps=[step(grid="side")]), r"^step 0: grid must be 'target' or 'draft'$")
    refused(trace(steps=[step(level=1)]), r"^step 0: level must be an integer in \[0, 0\] \(one per grid.levels\)$")
    refused(trace(steps=[step(level=1, cells=[[0, 1]])], grid=two, draft=[[0]]),
            r"^step 0: cells and judged must be \[i, j\] inside the 1x1 grid$")
    ok(trace(steps=[step(cells=[[1, 2]], judged=[[1, 0]])]))
    for c in ([2, 0], [0, 3], [-1, 0], [0], [0, 0, 0]):
        refused(trace(steps=[step(cells=[c])]), r"^step 0: cells and judged must be \[i, j\] inside the 2x3 grid$")
        refused(trace(steps=[step(judged=[c])]), "cells and judged must be")
    refused(trace(steps=[step(cells=None)]), r"^step 0: cells \(and judged\) must be lists of \[i, j\]$")
    refused(trace(steps=[step(judged=3)]), r"cells \(and judged\) must be lists")
    for key in ("resampled", "bonus"):
        ok(trace(steps=[step(**{key: [1, 2]})]))
        ok(trace(steps=[step(**{key: None})]))
        refused(trace(steps=[step(**{key: [2, 2]})]),
                rf"^step 0: {key} must be null or a cell \[i, j\] inside the 2x3 grid$")
    for key, most in (("wave", CELLS), ("rejected", CELLS), ("n_islands", CELLS), ("refreshed", CELLS),
                      ("fed", 4 * CELLS)):
        ok(trace(steps=[step(**{key: most})]))
        ok(trace(steps=[step(**{key: 0})]))
        refused(trace(steps=[step(**{key: most + 1})]), rf"^step 0: {key} must be an integer in \[0, {most}\]$")
    three = [[0, 0], [0, 1], [0, 2]]
    ok(trace(steps=[step(judged=three, prob=[0.5, -2, 3])]))
    refused(trace(steps=[step(judged=three, prob=[0.5, "x"])]),
            r"^step 0: prob must be a list of numbers, at most one per judged cell \(3\)$")
    refused(trace(steps=[step(judged=three, prob=[0.5] * 4)]), r"at most one per judged cell \(3\)$")
    refused(trace(steps=[step(prob=[0.5, 0.5])]), r"at most one per judged cell \(1\)$")   # none judged: per cell
    refused(trace(steps=[step(prob=0.5)]), "prob must be a list")
    ok(trace(steps=[step(rows=[0, 1])]))
    refused(trace(steps=[step(rows=[0, 1, 1])]), r"^step 0: rows must be a list of at most 2 row indices in \[0, 2\)$")
    refused(trace(steps=[step(rows=[2])]), "rows must be a list")
    refused(trace(steps=[step(rows=1)]), "rows must be a list")
    ok(trace(steps=[step(note="w" * 64, flag=True, x=None, y=1.5)]))
    for v in ("w" * 65, [1], {"a": 1}):
        refused(trace(steps=[step(note=v)]),
                r"^step 0: 'note' is not a step field this reader knows; such fields may hold a number, a short "
                r"word or null only$")
    ok(trace(steps=[step(judged=ALL, accepted=[True, False] * 3)]))
    refused(trace(steps=[step(judged=ALL, accepted=[True] * (CELLS + 1))]),
            rf"^step 0: accepted must be a list of true / false, at most one per judged cell \({CELLS}\)$")
    refused(trace(steps=[step(accepted=[1])]), "accepted must be a list")
    refused(trace(steps=[step(accepted=True)]), "accepted must be a list")


def verify(**kw) -> dict:
    d = dict(phase="verify", model="target", nfe=1, wall_ms=1.0, cells=[], band=[0, 2],
             pooled=[[0.0, 1.0 + 1e-3, None]] * 2, accepted=[[True, False, None]] * 2,
             resample=[[False, True, False]] * 2, islands=[[0, CELLS, 1]] * 2)
    d.update(kw)
    return d


def test_a_verify_band_is_a_band_of_rows_with_a_grid_of_each_verdict():
    ok(trace(steps=[verify()]))
    ok(trace(steps=[verify(band=[1, 2], pooled=[[0.5] * W], accepted=[[True] * W], resample=[[False] * W],
                           islands=[[0] * W])]))
    for band in ([0, 3], [1, 1], [-1, 1], [2, 1]):
        refused(trace(steps=[verify(band=band)]),
                r"^step 0: band must be rows \[r0, r1\) of a verify step, 0 <= r0 < r1 <= 2$")
    refused(trace(steps=[verify(phase="resample")]), "band must be rows")
    refused(trace(steps=[verify(pooled=[[0.0, 1.0 + 2e-3, None]] * 2)]),
            r"^step 0: pooled must be a 2x3 grid of numbers in \[0, 1\] \(null: not judged\) over its band$")
    refused(trace(steps=[verify(pooled=[[-0.1, 1.0, None]] * 2)]), "pooled must be")
    refused(trace(steps=[verify(accepted=[[1, 0, None]] * 2)]),
            r"^step 0: accepted must be a 2x3 grid of true / false \(null: not judged\) over its band$")
    refused(trace(steps=[verify(resample=[[None, True, False]] * 2)]),
            r"^step 0: resample must be a 2x3 grid of true / false over its band$")
    refused(trace(steps=[verify(islands=[[0, CELLS + 1, 1]] * 2)]),
            rf"^step 0: islands must be a 2x3 grid of island ids in \[0, {CELLS}\] over its band$")
    refused(trace(steps=[verify(islands=[[0, 0, 0]])]), "islands must be a 2x3 grid")


def test_totals_are_counts_times_and_fractions():
    t = trace()["totals"]
    ok(trace(totals=dict(t, passed_fraction=0.0, kept_fraction=1.0, wall_ms=0.0)))
    ok(trace(totals={k: v for k, v in t.items() if k != "level_nfe"}))
    message = (r"^totals: NFE counts must be integers >= 0, wall_ms a number >= 0 and the fractions null or "
               r"in \[0, 1\]$")
    for bad in (dict(target_nfe=-1), dict(drafter_nfe=1.5), dict(wall_ms=-0.1), dict(passed_fraction=1.01),
                dict(kept_fraction=-0.01), dict(kept_fraction="all")):
        refused(trace(totals=dict(t, **bad)), message)
    refused(trace(totals={k: v for k, v in t.items() if k != "kept_fraction"}),
            r"^totals must give target_nfe, drafter_nfe, wall_ms, passed_fraction, kept_fraction$")
    refused(trace(totals=[1]), "totals must give")
    for bad in ([1, 2], [-1], 1):
        refused(trace(totals=dict(t, level_nfe=bad)),
                r"^totals: level_nfe must hold one integer >= 0 per level of grid.levels$")


def test_a_file_that_is_not_a_trace_says_so():
    refused("[1]", r"^the trace must be a JSON object$")
    refused("{", r"^it is not valid JSON: ")
    refused(b"\xff\xfe{}", "it is not valid JSON")
    refused(trace(schema="mulo-trace/9"),
            r"^unsupported trace schema 'mulo-trace/9'; this reader knows 'mulo-trace/3', 'mulo-trace/2', "
            r"'mulo-trace/1'$")
    d = trace()
    del d["prompt"], d["totals"]
    refused(d, r"^the trace lacks the field\(s\) prompt, totals$")


def test_a_schema_2_file_puts_its_draft_and_refresh_steps_at_level_1():
    v2_totals = {k: v for k, v in trace()["totals"].items() if k != "level_nfe"}   # /2 had no level_nfe
    d = trace(schema="mulo-trace/2", grid=dict(target=[H, W], draft=[1, 1]), draft=[[0]],
              steps=[step(phase="draft", model="drafter"), step(phase="refresh", grid="draft", model="drafter"),
                     step(cells=[[1, 2]])], totals=v2_totals)
    t = Trace.from_json(json.dumps(d))
    assert t.schema == "mulo-trace/3" and t.grid["levels"] == [[H, W], [1, 1]]
    assert [s.get("level", 0) for s in t.steps] == [1, 1, 0]
    flat = trace(schema="mulo-trace/2", grid=dict(target=[H, W], draft=None), steps=[step(phase="draft")],
                 totals=v2_totals)
    t = Trace.from_json(json.dumps(flat))
    assert t.grid["levels"] == [[H, W]] and [s.get("level", 0) for s in t.steps] == [0]


def test_a_schema_1_file_recounts_the_fraction_it_lacks():
    base = {k: v for k, v in trace().items()}
    base["totals"] = {k: v for k, v in base["totals"].items() if k not in ("passed_fraction", "kept_fraction",
                                                                              "level_nfe")}
    judged = [step(), step(phase="resample", judged=[[0, 0], [0, 1]], accepted=[False, False]),   # verify steps only
              dict(verify(), accepted=[[True, False, None], [True, True, True]])]
    v1 = lambda method, frac: dict(copy.deepcopy(base), schema="mulo-trace/1", method=method,  # noqa: E731
                                   grid=dict(target=[H, W], draft=None), steps=judged,
                                   totals=dict(base["totals"], accepted_fraction=frac))
    t = Trace.from_json(json.dumps(v1("mulo", 0.25))).totals
    assert (t["passed_fraction"], t["kept_fraction"]) == (4 / 6, 0.25) and "accepted_fraction" not in t
    t = Trace.from_json(json.dumps(v1("sd", 0.25))).totals
    assert (t["passed_fraction"], t["kept_fraction"]) == (0.25, 4 / CELLS)
    t = Trace.from_json(json.dumps(v1("sd", None))).totals
    assert (t["passed_fraction"], t["kept_fraction"]) == (None, None)
    t = Trace.from_json(json.dumps(dict(v1("sd", 0.5), steps=[step()]))).totals
    assert (t["passed_fraction"], t["kept_fraction"]) == (None, 0.5)


def test_totals_count_the_passes_of_each_model_and_level():
    steps = [dict(model="target", nfe=2), dict(model="drafter", nfe=3, level=1), dict(model="drafter", nfe=5, level=2),
             dict(model=None, nfe=7), dict(model="target", nfe=11, level=0)]
    assert totals(steps, 12.34567, 0.5, None, n_levels=3) == dict(
        target_nfe=13, drafter_nfe=8, wall_ms=12.346, passed_fraction=0.5, kept_fraction=None, level_nfe=[20, 3, 5])
    assert totals(steps, 1.0, None, 0.25)["level_nfe"] == [20]


def test_a_schema_1_or_2_file_that_is_malformed_is_refused_not_crashed_on():
    v1_totals = dict(target_nfe=1, drafter_nfe=0, wall_ms=0.5, accepted_fraction=0.5)
    v1 = dict(trace(schema="mulo-trace/1", grid=dict(target=[H, W], draft=None)), totals=v1_totals)
    for bad, match in ((dict(steps=3), "steps must be a list"), (dict(totals=[1]), "totals must give"),
                       (dict(totals=dict(target_nfe=1)), "totals must give"),
                       (dict(tokens=None), "tokens must be"), (dict(tokens=[]), "tokens must be"),
                       (dict(steps=[step(phase="verify", accepted=None)]), "accepted must be a list")):
        refused(dict(v1, **bad), match)
    refused(dict(v1, schema="mulo-trace/2", grid=[H, W]), "grid must be")
    one = dict(v1, method="sd", grid=dict(target=[1, 1], draft=None), tokens=[[0]],
               steps=[step(phase="verify", accepted=[True], tokens=None)])
    assert Trace.from_json(json.dumps(one)).totals["kept_fraction"] == 1.0   # one kept cell of one


def test_a_step_writes_what_it_did_and_only_that():
    s = Step("verify", "target", 2, 1.23456, [[0, 1]], extra=dict(band=[0, 1]))
    assert s.to_dict() == dict(phase="verify", model="target", nfe=2, wall_ms=1.235, cells=[[0, 1]], band=[0, 1])
    assert Step("draft", "drafter", 1, 0.5, [[0, 0]], tokens=[7], level=2).to_dict() == dict(
        phase="draft", model="drafter", nfe=1, wall_ms=0.5, cells=[[0, 0]], level=2, tokens=[7])


def test_a_value_is_shown_in_at_most_40_characters():
    refused(trace(seed="s" * 38), r"got '" + "s" * 38 + "'$")                 # repr of 40 characters: whole
    refused(trace(seed="s" * 39), r"got '" + "s" * 36 + r"\.\.\.$")           # of 41: cut to 37 and "..."


def test_from_dict_applies_the_pair_limits_too():
    pair = lambda name: Limits((H, W), (), 6)  # noqa: E731
    assert Trace.from_dict(trace(), pair).tokens == trace()["tokens"]
    with pytest.raises(TraceError, match=r"tokens must be a 2x3 grid of codebook tokens in \[0, 6\)"):
        Trace.from_dict(trace(tokens=[[6] * W] * H), pair)


def test_a_cell_is_inside_its_grid_on_both_axes_up_to_the_last_row_and_column():
    ok(trace(steps=[step(cells=[[H - 1, W - 1]])]))
    refused(trace(steps=[step(cells=[[0, W]])]), r"^step 0: cells and judged must be \[i, j\] inside the 2x3 grid")
    refused(trace(steps=[step(cells=[[H, 0]])]), r"^step 0: cells and judged must be \[i, j\] inside the 2x3 grid")
    tall = dict(grid=dict(target=[W, H], draft=None, levels=[[W, H]]), tokens=[[0, 1], [2, 3], [4, 5]])
    ok(trace(steps=[step(cells=[[W - 1, H - 1]])], **tall))         # 3x2: a column index within the longer side
    refused(trace(steps=[step(cells=[[0, H]])], **tall), r"^step 0: cells and judged must be \[i, j\] inside the 3x2 grid")


def test_a_number_too_large_to_be_finite_is_named_by_its_first_40_characters():
    digits = "1" + "0" * 400 + ".5"
    refused(json.dumps(trace()).replace('"wall_ms": 0.5', f'"wall_ms": {digits}', 1),
            rf"^it holds the number {digits[:40]}, too large to be finite$")


def test_a_file_is_read_piece_by_piece_and_must_still_be_valid_json():
    text = json.dumps(trace())
    seed = text.index('"seed": 0')
    refused(text.replace('"seed": 0', '"seed": 0 0'), rf"^it is not valid JSON: Extra data: line 1 column {seed + 11} "
                                                      rf"\(char {seed + 10}\)$")   # placed in the whole file
    for bad in (text[:-1] + ", }", text.replace('"steps": [', '"steps": [1: 2, '), '{"a" 1}', '{"a": 1}{"b": 2}',
                text.replace('"steps": [{', '"steps": [{} {'), text.replace('"seed": 0', '"seed": 0: 1'),
                '{1: 2}', text.replace('"tokens": [[0', '"tokens": [[0 1'), text[:-1], text[:-1] + "]",
                text.replace('"steps": [', '"steps": {', 1)):
        refused(bad, "^it is not valid JSON: ")
    ok(trace(prompt='a "quoted" [prompt], {with} \\ a backslash\\" and: commas, \\\\'))   # strings hold anything
    assert Trace.from_json(" \n" + text + "\t\r\n").to_dict() == trace()
    assert Trace.from_json(b"\xef\xbb\xbf" + text.encode()).to_dict() == trace()          # a UTF-8 byte order mark
    assert Trace.from_json(json.dumps(trace(), indent=2)).to_dict() == trace()


def test_fields_other_than_the_grids_and_steps_hold_few_values():
    refused(dict(trace(), **{f"f{i}": 0 for i in range(MAX_FIELDS)}),
            rf"^the file has more than {MAX_FIELDS} top-level fields; a trace has 13$")
    Trace.from_json(json.dumps(dict(trace(), note=[0] * HEAD_VALUES)))          # read, then dropped
    refused(dict(trace(), note=[0] * (HEAD_VALUES + 1)),
            rf"^the field 'note' holds more than {HEAD_VALUES} values; only a trace's grids and steps hold that many$")
    refused(trace(prompt=["p"] * (HEAD_VALUES + 1)), "the field 'prompt' holds more than")
    refused(trace(tokens=[[0] * W] * H + [[0]]), r"^tokens must be a 2x3 grid")      # refused unread: too many values
    ok(trace(totals=dict(trace()["totals"], note="w", more=1.5)))
    refused(trace(totals=dict(trace()["totals"], note=[1])), r"^totals: at most 16 fields, those other than the counts")
    refused(trace(totals=dict(trace()["totals"], **{f"x{i}": 0 for i in range(11)})), "totals: at most 16 fields")
    ok(trace(grid=dict(trace()["grid"], note="w")))
    refused(trace(grid=dict(trace()["grid"], note=[0] * 100)), r"^grid: a field other than target, draft and levels")
    grid = dict(target=[H, W], draft=[1, 1], levels=[[H, W], [1, 1]])
    lv = dict(method="ar", grid=[1, 1], tokens=[[0]], proposal=None, draft=None)
    ok(trace(grid=grid, draft=[[0]], levels=[dict(lv, note="w")]))
    refused(trace(grid=grid, draft=[[0]], levels=[dict(lv, note=[0])]), r"^levels\[0\] must give")


def test_a_read_trace_keeps_its_steps_as_text_and_writes_them_back_unchanged():
    d = trace(steps=[step(), step(cells=ALL, tokens=[1] * CELLS), step(phase="upsample", model=None, cells=[], tokens=None)])
    t = Trace.from_json(json.dumps(d))
    assert isinstance(t.steps, Steps) and len(t.steps) == 3 and t.steps == d["steps"]
    assert t.steps[1] == d["steps"][1] and t.steps[1:] == d["steps"][1:] and list(t.steps) == d["steps"]
    assert t.to_json() == json.dumps(d) and Trace.from_dict(d).to_json() == json.dumps(d)
    assert t.steps.nbytes() < len(json.dumps(d["steps"]))
    t.steps[0]["cells"].append([1, 1])                # a step read is a fresh dict: the trace is unchanged
    assert t.steps[0] == d["steps"][0]


def _whole_file(text: str):
    """The reference: the file parsed whole by json (the reader's number hooks), then checked as a dict."""
    from core.trace import _no_constant, _parse_float, _parse_int
    try:
        d = json.loads(text, parse_int=_parse_int, parse_float=_parse_float, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        return "refused", f"not JSON: {e}"
    except TraceError as e:   # a number a hook refused
        return "refused", str(e)
    try:
        return "read", Trace.from_dict(d).to_dict()
    except TraceError as e:
        return "refused", str(e)


def test_reading_piece_by_piece_agrees_with_parsing_the_whole_file():
    """Against the reference of json.loads on the whole text: random edits of a small trace (a character
    dropped, doubled or replaced by a bracket, comma, colon, quote or backslash) are read, or refused,
    alike, and the reader calls no JSON file invalid (a piece of a broken file may be refused for its
    count of values before its syntax is read)."""
    rng = random.Random(0)
    text = json.dumps(trace(steps=[step(), verify(), step(prob=[0.5], note="a,b:[c]")],
                            prompt='say "hi", [then] {go}: \\ end'))
    outcomes = set()
    for _ in range(600):
        i = rng.randrange(len(text))
        edit = rng.choice(["drop", "double", "put"])
        new = (text[:i] + text[i + 1:] if edit == "drop" else text[:i] + text[i] + text[i:] if edit == "double"
               else text[:i] + rng.choice('[]{},:"\\ 0') + text[i + 1:])
        want, what = _whole_file(new)
        try:
            got = "read", Trace.from_json(new).to_dict()
        except TraceError as e:
            got = "refused", str(e)
        assert got[0] == want, (new, got, what)
        if want == "read":
            assert got[1] == what, new
        elif got[1].startswith("it is not valid JSON"):
            assert what.startswith("not JSON"), (new, got, what)
        outcomes.add(want if want == "read" else got[1][:20])
    assert len(outcomes) > 10   # the edits reach many different refusals, and some files still read
