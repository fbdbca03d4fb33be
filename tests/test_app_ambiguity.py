"""The ambiguity view (core.ambiguity, app.ambiguity_view) and the codebook-neighbours view
(app.codebook_view) against independent oracles.

Oracles: the target's distribution at a cell from GPT.forward_visible (the cache-free reference with
every cell visible, a different attention path from GPT.forward, which core.likelihood uses),
processed by core.sampling.processed and reduced here with numpy (entropy, max); the tested values
read from the trace's verify steps cell by cell (mulo's pooled bands, sd's judged / prob lists)
without app.render; the sentence's numbers recomputed with numpy; the neighbours from the pair's
table and each patch from the tokenizer's own decode, up-scaled by repetition. Negative control: a
different temperature changes the entropies and breaks the oracle's agreement. End to end: a
Generate through gradio_client fills both views, and the public /codebook endpoint redraws.
"""
import base64
import dataclasses
import math
import re

import gradio as gr
import numpy as np
import pytest
import torch
from PIL import Image

from app import ambiguity_view, codebook_view, inputs, panels
from core import ambiguity, engine
from core.config import RunConfig, SamplingConfig
from core.likelihood import sampling_of
from core.sampling import processed

PROMPT = "a large red circle center and a small blue square top left on a striped green background"


def run(pair, method: str, **params):
    t = engine.run(RunConfig(method=method, prompt=PROMPT, seed=2).with_params(**params), pair)
    return dataclasses.replace(t, model="embedded")   # the tiny pair shares the embedded tokenizer


@pytest.fixture(scope="module")
def mulo_trace(tiny_pair):
    return run(tiny_pair, "mulo", k=4, tau=0.007, radius=0, draft_rows=2)


@pytest.fixture(scope="module")
def sd_trace(tiny_pair):
    return run(tiny_pair, "sd")


def oracle(pair, trace, sampling: SamplingConfig) -> np.ndarray:
    """(N, V) float64: p at every cell 1.. from forward_visible (slot t predicts cell t + 1); row 0 NaN."""
    ids, mask = pair.caption(trace.prompt, pair.grid)
    B = 1 if sampling.cfg == 1.0 else 2
    x = torch.as_tensor(np.asarray(trace.tokens), dtype=torch.long).reshape(1, -1)
    N = x.shape[1]
    with torch.inference_mode():
        logits = pair.target.forward_visible(ids[None].expand(B, *ids.shape), mask[None].expand(B, -1),
                                             x.expand(B, -1), pair.grid, torch.ones(N, dtype=torch.bool),
                                             drop=torch.tensor([False, True][:B]))
        p = processed(logits[:, :-1], sampling, cells=torch.arange(1, N))[0].double().numpy()
    return np.concatenate([np.full((1, p.shape[1]), np.nan), p])


def entropy_np(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return -np.where(p > 0, p * np.log(p), 0.0).sum(-1)


CELLS = [(0, 1), (0, 15), (3, 7), (9, 0), (15, 15)]


def test_each_cell_s_entropy_and_top1_share_are_those_of_a_cache_free_forward(tiny_pair, mulo_trace):
    amb = ambiguity.measure(tiny_pair, mulo_trace)
    W = tiny_pair.grid[1]
    p = oracle(tiny_pair, mulo_trace, sampling_of(mulo_trace))
    for i, j in CELLS:
        row = p[i * W + j]
        assert amb.entropy[i, j] == pytest.approx(entropy_np(row), abs=2e-4)
        assert amb.top1[i, j] == pytest.approx(row.max(), abs=1e-5)
        assert amb.top1_token[i, j] == int(row.argmax())
        assert amb.p_final[i, j] == pytest.approx(row[mulo_trace.tokens[i][j]], abs=1e-5)
    assert amb.vocab_size == tiny_pair.vocab_size and amb.seconds > 0
    assert np.all(amb.entropy >= -1e-9) and np.all(amb.entropy <= math.log(amb.vocab_size) + 1e-6)
    assert amb.sampling["cfg"] == mulo_trace.params["cfg"]


def test_the_entropy_is_the_run_s_processed_distribution_not_any_other(tiny_pair, mulo_trace):
    """Negative control: another temperature (or no guidance) changes the entropies measurably, and the
    oracle at the run's own sampling no longer agrees with them."""
    amb = ambiguity.measure(tiny_pair, mulo_trace)
    hot = ambiguity.measure(tiny_pair, dataclasses.replace(mulo_trace, params=dict(mulo_trace.params, temperature=0.5)))
    assert np.abs(hot.entropy - amb.entropy).mean() > 0.05
    assert hot.entropy.mean() < amb.entropy.mean()          # a colder distribution is surer
    p = oracle(tiny_pair, mulo_trace, sampling_of(mulo_trace))
    W = tiny_pair.grid[1]
    off = [abs(hot.entropy[i, j] - entropy_np(p[i * W + j])) for i, j in CELLS]
    assert max(off) > 1e-2
    plain = ambiguity.measure(tiny_pair, dataclasses.replace(mulo_trace, params=dict(mulo_trace.params, cfg=1.0)))
    assert np.abs(plain.entropy - amb.entropy).max() > 1e-3
    greedy = ambiguity.measure(tiny_pair, dataclasses.replace(mulo_trace, params=dict(mulo_trace.params,
                                                                                       temperature=0.0)))
    assert np.allclose(greedy.entropy, 0.0) and np.allclose(greedy.top1, 1.0)


def pooled_of_steps(trace) -> dict[tuple[int, int], float]:
    """(i, j) -> pooled mass of the last verify pass that judged the cell, read from the bands."""
    W = trace.grid["target"][1]
    out = {}
    for s in trace.steps:
        if s["phase"] != "verify" or s.get("level", 0):
            continue
        r0 = s["band"][0]
        for n, p in enumerate(sum(s["pooled"], [])):
            if p is not None:
                out[(r0 + n // W, n % W)] = p
    return out


def prob_of_steps(trace) -> dict[tuple[int, int], float]:
    """(i, j) -> acceptance probability of the last test at the cell (judged / prob of the verify steps)."""
    out = {}
    for s in trace.steps:
        if s["phase"] == "verify" and "judged" in s and not s.get("level", 0):
            for (i, j), p in zip(s["judged"], s["prob"]):
                out[(i, j)] = p
    return out


def scatter_points(fig) -> dict[tuple[int, int], tuple[float, float]]:
    pts = {}
    for d in fig.data:
        for x, y, c in zip(d.x, d.y, d.customdata):
            assert (int(c[0]), int(c[1])) not in pts
            pts[(int(c[0]), int(c[1]))] = (float(x), float(y))
    return pts


@pytest.mark.parametrize("which, read", [("mulo_trace", pooled_of_steps), ("sd_trace", prob_of_steps)])
def test_the_scatter_s_points_are_the_trace_s_tested_values_against_entropy(request, tiny_pair, which, read):
    trace = request.getfixturevalue(which)
    amb = ambiguity.measure(tiny_pair, trace)
    want = read(trace)
    assert len(want) > 10
    pts = scatter_points(ambiguity_view.scatter(trace, amb))
    assert set(pts) == set(want)
    for (i, j), (x, y) in pts.items():
        assert x == pytest.approx(amb.entropy[i, j], abs=1e-12)
        assert y == pytest.approx(want[(i, j)], abs=1e-12)
    # the scatter is not the transpose: a cell off the diagonal carries its own entropy
    off = next((i, j) for (i, j) in pts if i != j and abs(amb.entropy[i, j] - amb.entropy[j, i]) > 1e-3)
    assert pts[off][0] != pytest.approx(amb.entropy[off[::-1]], abs=1e-6)


def said(text: str) -> dict:
    return dict(median=float(re.search(r"Median entropy \*\*([\d.]+) nats", text).group(1)),
                share=float(re.search(r"\*\*([\d.]+)%\*\* of the (\d+) cells", text).group(1)),
                r=float(m.group(1)) if (m := re.search(r"r = \*\*([+-][\d.]+)\*\*", text)) else None)


@pytest.mark.parametrize("which, read", [("mulo_trace", pooled_of_steps), ("sd_trace", prob_of_steps)])
def test_the_sentence_says_this_run_s_numbers(request, tiny_pair, which, read):
    trace = request.getfixturevalue(which)
    amb = ambiguity.measure(tiny_pair, trace)
    text = ambiguity_view.sentence(trace, amb)
    got = said(text)
    want = read(trace)
    cells = list(want)
    e = np.array([amb.entropy[c] for c in cells])
    t = np.array([want[c] for c in cells])
    assert got["median"] == pytest.approx(np.median(amb.entropy), abs=5e-4)
    assert got["share"] == pytest.approx(100 * np.mean(amb.top1 < 0.5), abs=0.05)
    assert got["r"] == pytest.approx(np.corrcoef(e, t)[0, 1], abs=5e-4)
    assert f"over the {len(cells)} tested cells" in text and "final tokens before it" in text
    # another run's numbers give another sentence (nothing in it is written in advance)
    hot = ambiguity.measure(tiny_pair, dataclasses.replace(trace, params=dict(trace.params, temperature=0.5)))
    assert said(ambiguity_view.sentence(trace, hot))["median"] != got["median"]


def test_a_method_that_tests_nothing_and_a_replay_not_measured_say_so(tiny_pair):
    ar = run(tiny_pair, "ar")
    amb = ambiguity.measure(tiny_pair, ar)
    assert "tests nothing" in ambiguity_view.scatter(ar, amb).layout.annotations[0].text
    text = ambiguity_view.sentence(ar, amb)
    assert said(text)["r"] is None and "Median entropy" in text
    heat, scat, note = ambiguity_view.views(dict(trace=ar, baseline=None))   # a replay: no model ran
    assert note == ambiguity_view.NOT_MEASURED
    assert heat.layout.annotations[0].text == ambiguity_view.NOT_MEASURED


def test_the_heatmaps_hold_entropy_and_top1_share_at_their_own_cells(tiny_pair, mulo_trace):
    amb = ambiguity.measure(tiny_pair, mulo_trace)
    ent, top = ambiguity_view.heatmaps(mulo_trace, amb).data
    assert np.array_equal(np.asarray(ent.z), amb.entropy) and np.array_equal(np.asarray(top.z), amb.top1)
    custom = np.asarray(ent.customdata, dtype=object)
    assert custom[3, 7][3] == mulo_trace.tokens[3][7] and custom[3, 7][2] == amb.top1_token[3, 7]


def test_the_stored_run_s_views_read_the_measurement_kept_on_the_state(tiny_pair, mulo_trace, monkeypatch):
    state = dict(trace=mulo_trace, baseline=None, ambiguity=ambiguity.measure(tiny_pair, mulo_trace))
    monkeypatch.setattr(ambiguity, "measure", lambda *_: pytest.fail("a re-render ran the target"))
    v = dict(zip(panels.VIEWS, panels.views(state)))
    assert np.array_equal(np.asarray(v["ambiguity"].data[0].z), state["ambiguity"].entropy)
    assert "Median entropy" in v["ambiguity_note"]


# ------------------------------------------------------------------------------ codebook neighbours

def decoded(tokenizer, code: int) -> np.ndarray:
    """The tokenizer's decode of a TILE x TILE grid of one code, as uint8, up-scaled by repetition."""
    with torch.inference_mode():
        img = tokenizer.decode(torch.full((1, codebook_view.TILE, codebook_view.TILE), code, dtype=torch.long))[0]
    img = ((img.float().clamp(-1, 1) + 1) * 127.5).round().byte().permute(1, 2, 0).numpy()
    f = codebook_view.PATCH // img.shape[0]
    assert f * img.shape[0] == codebook_view.PATCH
    return img.repeat(f, 0).repeat(f, 1)


@pytest.mark.parametrize("code, k", [(0, 16), (137, 5), (511, 0)])
def test_the_neighbours_view_shows_the_table_s_codes_as_the_tokenizer_decodes_them(code, k):
    pair = engine.load_pair("embedded")
    items = codebook_view.shown("embedded", code, k)
    want = [code] + pair.neighbours[code, :k].tolist()
    assert [c for c, _, _ in items] == want
    vec = pair.tokenizer.quantize.codes().detach().float()
    dist = [d for _, d, _ in items]
    assert dist == pytest.approx([float((vec[c] - vec[code]).norm()) for c in want], abs=1e-6)
    assert dist[0] == 0 and dist == sorted(dist)                          # the code itself, then nearest first
    strip = codebook_view.figure("embedded", code, k)
    P = codebook_view.PATCH
    for n, ((_, _, img), c) in enumerate(zip(items, want)):
        assert np.array_equal(img, decoded(pair.tokenizer, c))
        top, left = codebook_view.slot(n)
        assert np.array_equal(strip[top:top + P, left:left + P], img)        # the strip shows it in its slot
    assert not np.array_equal(items[0][2], decoded(pair.tokenizer, (code + 1) % pair.vocab_size))   # control
    rows = -(-(k + 1) // codebook_view.PER_ROW)
    assert strip.shape[0] == rows * (P + codebook_view.LABEL + codebook_view.GAP) - codebook_view.GAP
    assert codebook_view.label(3, 0.31849) == "#3 · d 0.318"


def test_the_code_comes_from_a_clicked_cell_and_k_from_the_knob(tiny_pair, mulo_trace, sd_trace):
    state = dict(trace=mulo_trace)
    code, shown = codebook_view.at_heatmap_click(state, "3,7,1234", 6)
    assert code == mulo_trace.proposal[3][7]
    assert np.array_equal(shown, codebook_view.figure("embedded", code, 6))
    assert np.array_equal(codebook_view.redraw(state, code, 2), codebook_view.figure("embedded", code, 2))
    assert codebook_view.redraw(state, code, 2).shape[1] == 3 * (codebook_view.PATCH + codebook_view.GAP) - \
        codebook_view.GAP                                                # k moved: k + 1 patches
    skipped = codebook_view.at_heatmap_click(dict(trace=sd_trace), "3,7,1", 6)   # no proposal: nothing chosen
    assert skipped == (gr.skip(), gr.skip())
    box, shown = codebook_view.views(state)                            # a new run: code 0, the run's own k
    assert box.value == 0
    assert np.array_equal(shown, codebook_view.figure("embedded", 0, mulo_trace.params["k"]))
    for bad in (512, -1, "x", 1.5):
        with pytest.raises(Exception, match="code is a whole number from 0 to 511"):
            codebook_view.redraw(state, bad, 4)


# ------------------------------------------------------------------------------ end to end

def values(a) -> np.ndarray:
    """A Plotly JSON array: a list, or a typed array ({dtype, bdata, shape})."""
    if isinstance(a, dict):
        out = np.frombuffer(base64.b64decode(a["bdata"]), dtype=a["dtype"])
        return out.reshape([int(n) for n in str(a["shape"]).split(",")]) if "shape" in a else out
    return np.asarray(a)


def test_generate_fills_both_views_and_the_codebook_endpoint_redraws():
    import json

    from gradio_client import Client

    from appserver import running_app
    with running_app() as url:
        client = Client(url, verbose=False)
        knobs = [{**inputs.DEFAULTS, "k": 8}[k] for k in inputs.KNOBS]
        out = client.predict(False, *knobs, api_name="/generate")
        v = dict(zip(panels.VIEWS, out[-len(panels.VIEWS):]))
        heat = json.loads(v["ambiguity"]["plot"])
        assert [d["type"] for d in heat["data"]] == ["heatmap", "heatmap"]
        assert values(heat["data"][0]["z"]).shape == (32, 32)
        scat = json.loads(v["ambiguity_scatter"]["plot"])
        assert sum(values(d["x"]).size for d in scat["data"] if d["type"] == "scatter") == 32 * 32
        assert "Median entropy" in v["ambiguity_note"] and "Pearson r" in v["ambiguity_note"]
        assert v["codebook_code"]["value"] == 0 and v["codebook_code"]["maximum"] == 511
        png = lambda path: np.asarray(Image.open(path).convert("RGB"))  # noqa: E731
        assert np.array_equal(png(v["codebook"]), codebook_view.figure("embedded", 0, 8))   # code 0, the run's k
        shown = client.predict(42, 3, api_name="/codebook")                                 # typed code, k knob
        assert np.array_equal(png(shown), codebook_view.figure("embedded", 42, 3))


def test_the_ambiguity_and_codebook_views_read_in_the_browser():
    """Generate, then read the views as a person would: the sentence quotes this run's median entropy
    (recomputed here from the same run), and moving k redraws the neighbours strip."""
    import pytest as _pytest
    from chromium import MISSING, generate_and_wait, launch, open_page, present
    if not present():
        _pytest.skip(MISSING)
    from playwright.sync_api import expect, sync_playwright

    from appserver import running_app
    from core import ambiguity, engine
    from core.config import RunConfig
    amb = ambiguity.measure(engine.load_pair(), engine.run(RunConfig()))
    median = f"{ambiguity.summary(amb.entropy, amb.top1)['median_entropy']:.3f} nats"
    with running_app() as url, sync_playwright() as p:
        browser = launch(p)
        try:
            page = open_page(browser, url)
            generate_and_wait(page)
            view = page.locator("#ambiguity-view")
            view.scroll_into_view_if_needed()
            expect(page.locator("#ambiguity .js-plotly-plot")).to_be_visible()
            expect(page.locator("#ambiguity-scatter .js-plotly-plot")).to_be_visible()
            expect(page.locator("#ambiguity-note")).to_contain_text(f"Median entropy {median}")
            strip = page.locator("#codebook img").first
            expect(strip).to_be_visible()
            before = strip.get_attribute("src")
            page.locator("#k input[type=number]").fill("4")
            page.locator("#k input[type=number]").press("Enter")
            expect(page.locator("#codebook img").first).not_to_have_attribute("src", before, timeout=30_000)
        finally:
            browser.close()


def test_the_log_lik_gap_read_from_the_ambiguity_pass_equals_its_own_forward():
    """Generate runs the target over the run's tokens once: the log-lik gap built from the ambiguity
    view's p_final is the one likelihood's own forward gives."""
    from core import ambiguity, engine, likelihood
    from core.config import RunConfig
    pair = engine.load_pair()
    run, ar = engine.run(RunConfig(seed=2)), engine.run(RunConfig(method="ar", seed=2))
    shared = likelihood.against_ar(pair, run, ar, probs=ambiguity.measure(pair, run).p_final)
    own = likelihood.against_ar(pair, run, ar)
    assert shared["loglik"] == pytest.approx(own["loglik"], abs=1e-9) and shared["impossible"] == own["impossible"]
    assert shared["loglik_gap"] == pytest.approx(own["loglik_gap"], abs=1e-9)
