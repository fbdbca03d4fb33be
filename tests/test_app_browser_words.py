"""The page as a person sees it, in Debian's chromium at 1440×900 and 1024×768: the
preset menu names its preset on a fresh page and a preset's words keep r and l on the first screen;
example prompts shown whole; the live canvas without a label over the draft; a Jacobi run's own words,
rule and canvas key, with the heatmap's title clear of Plotly's toolbar; a knob moved after a run marks
the results out of date; a replayed trace's knobs in the sidebar; the Compare tab's images and table
whole at 1024 wide."""
import json

import pytest

from chromium import LONG, MISSING, generate_and_wait, open_page, present
from test_app_browser import app_url, browser  # noqa: F401 (the same app and browser fixtures, one per module)

pytestmark = pytest.mark.skipif(not present(), reason=MISSING)


def box(page, sel):
    return page.locator(sel).first.bounding_box()


def overlap(a, b):
    return not (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
                or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


@pytest.mark.parametrize("width, height", [(1440, 900), (1024, 768)])
def test_a_fresh_page_names_its_preset_and_a_preset_s_words_keep_r_and_l_on_the_first_screen(browser, app_url,
                                                                                             width, height):
    page = open_page(browser, app_url, width, height)
    assert page.locator("#preset input").input_value() == "Default operating point"
    before = {k: box(page, f"#{k}") for k in ("scale", "radius")}
    page.locator("#preset input").click()
    page.get_by_role("option", name="Default operating point").click()
    page.locator("#preset-info").get_by_text("MuLo-SD at its default").wait_for()
    page.evaluate("() => window.scrollTo(0, 0)")
    for knob in ("scale", "radius"):
        b = box(page, f"#{knob}")
        assert abs(b["y"] - before[knob]["y"]) < 2, knob      # the preset's words open under the knobs
        if height >= 900:
            assert b["y"] + b["height"] <= height, (knob, b)
    page.close()


def test_example_prompts_are_shown_whole(browser, app_url):
    from app.ui import EXAMPLES
    page = open_page(browser, app_url)
    page.get_by_text("Prompts: examples and builder").click()
    for text in EXAMPLES:
        button = page.get_by_role("button", name=text, exact=True)
        button.wait_for()
        assert page.evaluate("b => b.scrollWidth <= b.clientWidth + 1", button.element_handle())   # not cut
    page.get_by_role("button", name=EXAMPLES[3], exact=True).click()
    from playwright.sync_api import expect
    expect(page.locator("#prompt textarea")).to_have_value(EXAMPLES[3])
    page.close()


@pytest.mark.long("a Jacobi-resampling Generate with its ar baseline in the browser, at each screen size")
@pytest.mark.parametrize("width, height", [(1440, 900), (1024, 768)])
def test_a_jacobi_run_says_its_own_words_and_its_heatmap_title_is_clear_of_the_toolbar(browser, app_url, width,
                                                                                       height, tmp_path):
    from playwright.sync_api import expect
    page = open_page(browser, app_url + "?method=pjd", width, height)
    expect(page.locator("#canvas-key")).not_to_contain_text("τ")
    page.evaluate("""() => { window.__label = false; new MutationObserver(() => {
        const live = document.querySelector('#live');
        if (live && live.offsetParent !== null && live.querySelector('img')) {
            const l = live.querySelector('label, [data-testid=block-label]');
            if (l && l.offsetParent !== null) window.__label = true; } })
        .observe(document.body, {subtree: true, childList: true, attributes: true}); }""")
    generate_and_wait(page)
    assert not page.evaluate("() => window.__label")     # no label over the streamed draft
    expect(page.get_by_text("pjd drafts with the target itself")).to_be_visible()
    expect(page.locator("#heatmap .gtitle")).to_contain_text("row's Jacobi iterate")
    expect(page.locator("#heatmap")).to_contain_text("counts every test")
    expect(page.locator("#speedup")).to_contain_text("of every test; the heatmap: each position's last")
    expect(page.locator("#step")).to_contain_text("Passes so far")
    page.locator("#heatmap .nsewdrag").first.hover()
    page.wait_for_timeout(500)
    bar = page.locator("#heatmap .modebar")
    page.screenshot(path=str(tmp_path / "pjd.png"), full_page=True)
    if bar.count() and bar.first.is_visible():
        for title in page.locator("#heatmap .gtitle, #heatmap .gtitle tspan").all():
            assert not overlap(title.bounding_box(), bar.first.bounding_box()), (title.bounding_box(),
                                                                                 bar.first.bounding_box())
    # a knob moved by hand marks the results out of date; a new run clears the mark
    results = page.locator("#results")
    assert "outdated" not in results.get_attribute("class")
    page.locator("#seed input").fill("3")
    page.locator("#seed input").press("Tab")
    expect(results).to_have_class(__import__("re").compile(r"\boutdated\b"))
    note = page.evaluate("() => getComputedStyle(document.querySelector('#results'), '::before').content")
    assert "knobs have changed" in note
    generate_and_wait(page)
    expect(results).not_to_have_class(__import__("re").compile(r"\boutdated\b"))
    page.close()


def test_a_replayed_trace_puts_its_knobs_in_the_sidebar(browser, app_url, tmp_path):
    from playwright.sync_api import expect

    from app import files, inputs
    from core import engine
    kn = {**inputs.DEFAULTS, "method": "zipar", "radius": 1, "window": 8}
    trace = engine.run(inputs.run_config(*[kn[k] for k in inputs.KNOBS]))
    path = files.trace_file(trace)
    assert json.load(open(path))["params"]["radius"] == 1
    page = open_page(browser, app_url)
    page.get_by_role("tab", name="Trace files").click()
    page.locator("#upload input[type=file]").set_input_files(path)
    page.wait_for_timeout(1500)
    page.locator("#replay").click()
    expect(page.locator("#status")).to_contain_text("Replayed", timeout=LONG)
    expect(page.locator("#radius input[type=number]")).to_have_value("1")
    expect(page.locator("#preset input")).to_have_value("")       # the trace's own knobs, no preset named
    expect(page.locator("#method input")).to_have_value("zipar")
    page.close()


def test_a_knob_the_chosen_method_does_not_read_is_disabled_with_a_word(browser, app_url):
    """Every method knob, for three methods, enabled exactly when core.config.knobs_read says the method
    reads it (itself checked against runs, tests/test_knobs_read.py), the others disabled with a word."""
    from app import inputs
    from core.config import MethodParams, knobs_read
    page = open_page(browser, app_url)
    for folded in ("More MuLo-SD knobs", "SD, tree (EAGLE-2, LANTERN, LANTERN++, VVS) and SJD knobs",
                   "scd, gsd, pjd and cool knobs", "ZipAR and sampling"):   # a closed accordion draws nothing
        page.get_by_text(folded, exact=True).click()
    page.locator("#cool_norm").wait_for()

    def states():
        return {k: page.locator(f"#{k}").locator("input, textarea").first.is_disabled() for k in inputs.PARAM_KNOBS}

    def choose(method):
        page.locator("#method input").click()
        page.get_by_role("option", name=method, exact=True).click()

    for method, params in (("mulo", MethodParams()), ("zipar", MethodParams()), ("lantern", MethodParams()),
                           ("mulo", MethodParams(draft_method="pjd"))):
        if page.locator("#method input").input_value() != method:
            choose(method)
        if params.draft_method != "ar":
            page.locator("#draft_method textarea, #draft_method input").first.fill(params.draft_method)
            page.locator("#draft_method textarea, #draft_method input").first.press("Enter")
        read = set(knobs_read(method, params))
        want = {k: k not in read for k in inputs.PARAM_KNOBS}
        for _ in range(40):   # the update arrives from the server
            if states() == want:
                break
            page.wait_for_timeout(250)
        assert states() == want, method
        unread = sorted(k for k in want if want[k])
        assert unread and all(inputs.unread_word(method) in page.locator(f"#{k}").inner_text() for k in unread)
        assert all(inputs.unread_word(method) not in page.locator(f"#{k}").inner_text()
                   for k in inputs.PARAM_KNOBS if not want[k])


# the pinned cell as the page draws it: the heatmap's frames (Plotly's layout) and the proposal's pixels
# (the image read back through a canvas) just inside and just outside the cell's top edge
PINNED_JS = """async ([i, j, H, W]) => {
    const plot = document.querySelector('#heatmap .js-plotly-plot');
    const shapes = ((plot && plot.layout && plot.layout.shapes) || []).filter((s) => s.name === 'pinned cell')
        .map((s) => [s.x0, s.x1, s.y0, s.y1]);
    const img = document.querySelector('#proposal img');
    // the image is replaced when the marked proposal arrives: one still decoding is read on the next try
    try { await img.decode(); } catch (e) { return {shapes, inside: null, outside: null}; }
    const c = document.createElement('canvas'); c.width = img.naturalWidth; c.height = img.naturalHeight;
    const g = c.getContext('2d'); g.drawImage(img, 0, 0);
    const ch = c.height / H, cw = c.width / W, x = Math.floor((j + 0.5) * cw), y = Math.floor(i * ch);
    const px = (yy) => Array.from(g.getImageData(x, yy, 1, 1).data.slice(0, 3));
    return {shapes, inside: px(y), outside: y > 0 ? px(y - 1) : [255, 255, 255]}; }"""


def assert_pinned(page, i: int, j: int, H: int = 32, W: int = 32):
    for _ in range(40):   # the marked views arrive after the card
        got = page.evaluate(PINNED_JS, [i, j, H, W])
        if got["shapes"] and got["inside"] == [0, 0, 0]:
            break
        page.wait_for_timeout(250)
    assert got["shapes"] == [[j - 0.5, j + 0.5, i - 0.5, i + 0.5]] * 2, got
    assert got["inside"] == [0, 0, 0] and got["outside"] == [255, 255, 255], got


@pytest.mark.long("four Generates in the browser (mulo at two τ, zipar, mulo), each waited for")
def test_the_cell_card_follows_its_cell_into_every_new_run_and_never_shows_an_earlier_one(browser, app_url):
    """Click a cell, change τ, Generate: the card is the new run's (its τ, its name), for the same cell;
    after a zipar run, zipar's card; a typed cell shows its card. The control is the old page, whose card
    kept "τ 0.5" after a τ 0.2 run."""
    import re
    from playwright.sync_api import expect
    page = open_page(browser, app_url)
    generate_and_wait(page)
    page.locator("#proposal img").first.click(position={"x": 40, "y": 40})
    expect(page.locator("#cell")).to_contain_text("pooled mass", timeout=20_000)
    picked = page.locator("#cell-pick input, #cell-pick textarea").first.input_value()
    i, j = re.fullmatch(r"(\d+), (\d+)", picked).groups()
    first = page.locator("#cell").inner_text()
    assert f"Cell ({i}, {j})" in first and "τ 0.5" in first and "this run: mulo, seed 0" in first

    assert_pinned(page, int(i), int(j))

    page.locator("#tau input[type=number]").fill("0.2")
    page.locator("#tau input[type=number]").press("Enter")
    generate_and_wait(page)
    expect(page.locator("#cell")).to_contain_text("this run: mulo:tau=0.2, seed 0", timeout=20_000)
    card = page.locator("#cell").inner_text()
    assert f"Cell ({i}, {j})" in card and "τ 0.2" in card and "τ 0.5" not in card
    assert_pinned(page, int(i), int(j))      # the new run's heatmap and proposal mark the same cell

    page.locator("#method input").click()
    page.get_by_role("option", name="zipar", exact=True).click()
    generate_and_wait(page)
    expect(page.locator("#cell")).to_contain_text("this run: zipar, seed 0", timeout=20_000)
    card = page.locator("#cell").inner_text()
    assert f"Cell ({i}, {j})" in card and "pooled mass" not in card and "τ" not in card

    box = page.locator("#cell-pick input, #cell-pick textarea").first
    box.fill("3, 7")
    box.press("Enter")
    expect(page.locator("#cell")).to_contain_text("Cell (3, 7)", timeout=20_000)
    # zipar has no proposal and no heatmap of verdicts: the views stay unmarked, nothing breaks
    page.locator("#method input").click()
    page.get_by_role("option", name="mulo", exact=True).click()
    generate_and_wait(page)
    assert_pinned(page, 3, 7)

