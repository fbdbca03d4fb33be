"""app.trees_view against the trace: the tree view of a tree method (eagle, lantern, lantern_pp, vvs).

The oracles are the trace's own records, read here without app.trees_view's helpers: a verify step's
`tree` (per node its parent, depth, token, the head's q, the target's p, the verdict) and its
judged / accepted / prob lists (one entry per child tried, in the order tried). Nodes are numbered
level by level, so the order tried is the tried nodes sorted by (depth, node). The accepted-length
map is the sum of each verify step's `accepted` flags painted on the step's `cells`. Negative
controls: one verdict flipped in a copy of the trace changes the figure's colour counts, and the
map's count. The end-to-end test runs the "EAGLE-2 tree" preset through the app's public API.
"""
import copy
import dataclasses
import json
import time

import numpy as np
import pytest

from app import inputs, panels, theme, trees_view
from core import engine
from core.config import RunConfig
from core.trace import Trace
from test_trees import _pair

PROMPT = "a large red circle center and a small blue square top left on a striped green background"
COLOURS = {theme.ACCEPTED: 1, theme.REJECTED: 0, trees_view.NOT_TRIED: -1}   # what each node colour means


@pytest.fixture(scope="module")
def tree_pair(tokenizer):
    """The tiny 16 x 16 target with a random EAGLE head (tests/test_trees.py): a second a run."""
    return _pair(tokenizer, (16, 16))


def run(pair, method: str, **params) -> Trace:
    t = engine.run(RunConfig(method=method, prompt=PROMPT, seed=1).with_params(**params), pair)
    return dataclasses.replace(t, model="embedded")   # the tiny pair shares the embedded tokenizer (views decode)


@pytest.fixture(scope="module")
def lantern_trace(tree_pair):
    """lantern on the random head: cycles with accepted, rejected and untried nodes, resampled and bonus cells."""
    t = run(tree_pair, "lantern")
    verifies = [s for s in t.steps if s["phase"] == "verify"]
    assert sum({0, 1, -1} <= set(s["tree"]["verdict"]) for s in verifies) > 10
    assert any(s["resampled"] for s in verifies) and any(s["bonus"] for s in verifies)
    return t


def verify_steps(trace) -> list[dict]:
    return [s for s in trace.steps if s["phase"] == "verify"]


def node_markers(fig) -> list:
    """The figure's node traces: the marker traces whose customdata names nodes."""
    return [d for d in fig.data if d.mode == "markers" and d.customdata is not None and len(d.customdata)
            and len(d.customdata[0]) == 7]


def colour_counts(fig) -> dict[int, int]:
    out = {1: 0, 0: 0, -1: 0}
    for d in node_markers(fig):
        out[COLOURS[d.marker.color]] += len(d.x)
    return out


def raster(cell, W) -> int:
    return cell[0] * W + cell[1]


def check_tree_figure(fig, step: dict, W: int) -> None:
    """Every node of the step's tree drawn once, at x = its depth, coloured by its verdict, its hover its
    token, p, q, depth, cell and (where tried) the acceptance probability the step recorded."""
    t = step["tree"]
    root = raster(step["cells"][0], W) - 1
    tried = sorted((n for n, v in enumerate(t["verdict"]) if v != -1), key=lambda n: (t["depth"][n], n))
    assert [bool(t["verdict"][n]) for n in tried] == step["accepted"]
    assert [raster(c, W) for c in step["judged"]] == [root + t["depth"][n] for n in tried]
    prob = {n: p for n, p in zip(tried, step["prob"])}
    seen, y = set(), {}
    for d in node_markers(fig):
        assert "target p %{customdata[2]}" in d.hovertemplate and "head q %{customdata[3]}" in d.hovertemplate
        assert "acceptance probability %{customdata[6]}" in d.hovertemplate
        for x, yy, (n, token, p, q, depth, cell, a) in zip(d.x, d.y, d.customdata):
            assert n not in seen
            seen.add(n)
            y[n] = yy
            assert COLOURS[d.marker.color] == t["verdict"][n]
            assert (token, p, q, depth, x) == (t["token"][n], t["p"][n], t["q"][n], t["depth"][n], t["depth"][n])
            c = root + t["depth"][n]
            assert cell == f"({c // W}, {c % W})"
            assert a == (f"{prob[n]:.4g}" if n in prob else "not tried")
    assert seen == set(range(len(t["token"])))
    # edges: one per node, from its parent (the root at depth 0) to it; siblings top to bottom in node order
    root_y = [d for d in fig.data if d.name == "root (committed)"][0].y[0]
    edges = [d for d in fig.data if d.name == "parent → child"][0]
    pairs = {(edges.x[k], edges.y[k], edges.x[k + 1], edges.y[k + 1]) for k in range(0, len(edges.x), 3)}
    assert len(edges.x) == 3 * len(t["token"])
    for n, par in enumerate(t["parent"]):
        assert ((t["depth"][par] if par >= 0 else 0), y[par] if par >= 0 else root_y, t["depth"][n], y[n]) in pairs
        later = [m for m in range(n + 1, len(t["token"])) if t["parent"][m] == par]
        assert all(y[m] > y[n] for m in later)
    drawn = [d for d in fig.data if (d.name or "").startswith("drawn: ")]
    cell = step["resampled"] or step["bonus"]
    if cell is None:
        assert not drawn
    else:
        (d,) = drawn
        assert d.name == ("drawn: resampled" if step["resampled"] else "drawn: bonus")
        assert d.x[0] == sum(step["accepted"]) + 1 and raster(cell, W) == root + sum(step["accepted"]) + 1
        assert f"token {step['tokens'][-1]} at cell {tuple(cell)}" in d.hovertemplate


def test_the_tree_figure_draws_each_cycle_s_recorded_tree(lantern_trace):
    W = lantern_trace.grid["target"][1]
    steps = verify_steps(lantern_trace)
    kinds = set()
    for n in range(1, len(steps) + 1, 7):
        fig = trees_view.tree_figure(lantern_trace, n)
        step = steps[n - 1]
        check_tree_figure(fig, step, W)
        counts = colour_counts(fig)
        assert counts == {v: step["tree"]["verdict"].count(v) for v in (1, 0, -1)}
        assert fig.layout.title.text.startswith(f"Cycle {n} of {len(steps)}: {len(step['tree']['token'])} nodes")
        kinds |= {v for v, c in counts.items() if c} | {"resampled" if step["resampled"] else "bonus"}
    assert kinds == {1, 0, -1, "resampled", "bonus"}


def test_the_tree_view_opens_on_the_cycle_with_the_longest_accepted_path(lantern_trace):
    steps = verify_steps(lantern_trace)
    lengths = [sum(s["accepted"]) for s in steps]
    best = lengths.index(max(lengths)) + 1                     # the first of ties
    assert max(lengths) > 1 and lengths.count(0) > 0
    slider, fig, heat = panels.tree_views(lantern_trace)
    assert (slider.value, slider.minimum, slider.maximum) == (best, 1, len(steps))
    assert fig.layout.title.text.startswith(f"Cycle {best} of {len(steps)}")
    check_tree_figure(fig, steps[best - 1], lantern_trace.grid["target"][1])
    assert panels.tree_column(dict(trace=lantern_trace)).visible is True
    # the cycle chooser: any cycle, clamped into range; a value that is no whole number is named
    state = dict(trace=lantern_trace)
    assert panels.tree_at(state, 3).layout.title.text.startswith(f"Cycle 3 of {len(steps)}")
    assert panels.tree_at(state, "10").layout.title.text.startswith(f"Cycle 10 of {len(steps)}")
    assert panels.tree_at(state, 10 ** 9).layout.title.text.startswith(f"Cycle {len(steps)} of")
    assert panels.tree_at(state, -4).layout.title.text.startswith("Cycle 1 of")
    with pytest.raises(Exception, match="cycle must be a whole number"):
        panels.tree_at(state, "many")


def accepted_map(trace) -> np.ndarray:
    H, W = trace.grid["target"]
    z = np.full((H, W), np.nan)
    for s in verify_steps(trace):
        for i, j in s["cells"]:
            z[i, j] = sum(s["accepted"])
    return z


@pytest.mark.parametrize("method", ["lantern", "vvs"])
def test_the_accepted_length_map_is_each_verify_step_s_count_on_the_cells_it_committed(tree_pair, lantern_trace,
                                                                                       method):
    trace = lantern_trace if method == "lantern" else run(tree_pair, "vvs", vvs_interval=2)
    fig = trees_view.lengths_figure(trace)
    heat = [d for d in fig.data if d.type == "heatmap"][0]
    want = accepted_map(trace)
    np.testing.assert_array_equal(np.asarray(heat.z, dtype=float), want)
    assert np.nanmax(want) >= 1 and np.isnan(want[0, 0])       # cell 0: drawn by the target before any tree
    custom = np.asarray(heat.customdata, dtype=object)
    for (i, j), v in np.ndenumerate(want):
        assert custom[i, j][0] == (-1 if np.isnan(v) else int(v))
    skipped = [d for d in fig.data if d.name == "committed unverified (vvs)"]
    if method == "vvs":   # the unverified cycles' cells: crossed, never painted
        cells = {tuple(c) for s in trace.steps if s.get("verified") is False for c in s["cells"]}
        assert cells and {(int(i), int(j)) for j, i in zip(skipped[0].x, skipped[0].y)} == cells
        assert all(np.isnan(want[c]) for c in cells)
        assert "committed unverified" in json.dumps(panels.views(dict(trace=trace))[panels.VIEWS.index("heatmap")]
                                                     .data[0].customdata.tolist())
    else:
        assert not skipped


def flipped(trace, cycle: int, node: int, verdict: int) -> Trace:
    """A copy of the trace whose cycle's node has another verdict."""
    steps = [copy.deepcopy(s) for s in trace.steps]
    verifies = [s for s in steps if s["phase"] == "verify"]
    verifies[cycle - 1]["tree"]["verdict"][node] = verdict
    return dataclasses.replace(trace, steps=steps)


def test_negative_control_one_verdict_flipped_changes_the_colours_and_the_map(lantern_trace):
    steps = verify_steps(lantern_trace)
    n = next(k for k, s in enumerate(steps, 1) if {0, 1, -1} <= set(s["tree"]["verdict"]))
    untried = steps[n - 1]["tree"]["verdict"].index(-1)
    fig = trees_view.tree_figure(lantern_trace, n)
    bad = trees_view.tree_figure(flipped(lantern_trace, n, untried, 1), n)
    before, after = colour_counts(fig), colour_counts(bad)
    assert after[1] == before[1] + 1 and after[-1] == before[-1] - 1 and after != before
    with pytest.raises(AssertionError):   # the oracle sees the flip
        check_tree_figure(bad, steps[n - 1], lantern_trace.grid["target"][1])
    z = [d for d in trees_view.lengths_figure(flipped(lantern_trace, n, untried, 1)).data if d.type == "heatmap"][0].z
    assert not np.array_equal(np.asarray(z, dtype=float), accepted_map(lantern_trace), equal_nan=True)


def test_a_replayed_tree_trace_draws_the_same_views_and_other_methods_hide_them(tree_pair, lantern_trace):
    replayed = Trace.from_json(lantern_trace.to_json())
    assert trees_view.tree_figure(replayed, 5) == trees_view.tree_figure(lantern_trace, 5)
    assert trees_view.lengths_figure(replayed) == trees_view.lengths_figure(lantern_trace)
    ar = dataclasses.replace(engine.run(RunConfig(method="ar", prompt=PROMPT, seed=1), tree_pair), model="embedded")
    v = dict(zip(panels.VIEWS, panels.views(dict(trace=ar))))
    assert v["tree"] is None and v["tree_lengths"] is None
    assert panels.tree_column(dict(trace=ar)).visible is False and panels.tree_column(None).visible is False
    assert "verifies no draft tree" in trees_view.tree_figure(ar).layout.annotations[0].text


def test_the_eagle_preset_runs_in_the_app_and_fills_the_tree_view():
    """Through the app's public API (gradio_client, an in-process server): the preset's knobs, a
    Generate with them, the tree view's figures, and another cycle chosen."""
    from gradio_client import Client

    from appserver import running_app
    start = time.perf_counter()
    with running_app() as url:
        client = Client(url, verbose=False)
        out = client.predict("EAGLE-2 tree", api_name="/preset")
        assert "EAGLE-2 tree" in out[-1]
        sent = [inputs.DEFAULTS[k] if isinstance(v, dict) else v for k, v in zip(inputs.KNOBS, out)]  # skips
        assert dict(zip(inputs.KNOBS, sent))["method"] == "eagle"
        status, _, *views = client.predict(False, *sent, api_name="/generate")
        v = dict(zip(panels.VIEWS, views[-len(panels.VIEWS):]))
        assert "Done: **eagle**" in status
        tree = json.loads(v["tree"]["plot"])
        nodes = [d for d in tree["data"] if d.get("mode") == "markers" and d.get("customdata")
                 and len(d["customdata"][0]) == 7]
        assert sum(len(d["x"]) for d in nodes) >= 2 and tree["layout"]["title"]["text"].startswith("Cycle ")
        cycles = v["tree_cycle"]["maximum"]
        assert cycles > 10 and 1 <= v["tree_cycle"]["value"] <= cycles
        heat = json.loads(v["tree_lengths"]["plot"])
        assert heat["data"][0]["type"] == "heatmap"
        assert f"{cycles} verified cycles ·" in heat["layout"]["title"]["text"]
        other = client.predict(2, api_name="/tree_cycle")
        assert json.loads(other["plot"])["layout"]["title"]["text"].startswith(f"Cycle 2 of {cycles}")
    assert time.perf_counter() - start < 90
