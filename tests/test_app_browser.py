"""The app in a real browser (Debian's chromium through Playwright), as a workshop uses it: a preset,
Generate, every view, the cell card from the proposal and from the heatmap, the scrubber; the
previous run marked stale while a new one streams; Stop in every situation; a made link opened in
a fresh page; out-of-range values named, never clamped; no text overlapping other text at two
screen sizes. Leaves screenshots in the test's tmp_path."""
import logging
import re
from dataclasses import replace

import pytest

from app import comparison, inputs
from appserver import running_app
from core import engine
from chromium import BROKEN_WORDS_JS, LONG, MISSING, RAN_TO_DONE, RECORD_STATUS, generate_and_wait, launch, open_page, present

pytestmark = pytest.mark.skipif(not present(), reason=MISSING)


@pytest.fixture(scope="module")
def app_url():
    with running_app() as url:
        yield url


@pytest.fixture(scope="module")
def browser(app_url):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


@pytest.fixture(scope="module")
def page(browser, app_url):
    pg = open_page(browser, app_url)
    yield pg
    pg.close()


def image_src(page, elem_id):
    return page.locator(f"#{elem_id} img").first.get_attribute("src")


# the heatmap drawn with its pinned cell (i, j) framed, and the page's click handler on that drawing
PINNED_AT_JS = """([i, j]) => { const p = document.querySelector('#heatmap .js-plotly-plot');
  const s = ((p && p.layout && p.layout.shapes) || []).filter((s) => s.name === 'pinned cell');
  return s.length === 2 && s[0].x0 === j - 0.5 && s[0].y0 === i - 0.5 && !!p.dataset.muloClick; }"""


def test_a_preset_then_generate_shows_every_view_and_both_clicks_show_the_cell_card(page, tmp_path):
    from playwright.sync_api import expect
    page.locator("#preset input").click()
    page.get_by_role("option", name="A few rejection islands").click()
    expect(page.locator("#tau input[type=number]")).to_have_value("0.01")
    # the preset shows its shipped run first (test_app_browser_class.py): let it land before the live run
    expect(page.locator("#status")).to_contain_text("a run shipped with the app")
    page.wait_for_timeout(1500)   # and the views' follow-ups (the card, the pinned frame) after it

    generate_and_wait(page)
    for elem_id in ("draft", "proposal", "final", "baseline", "islands", "canvas"):
        img = page.locator(f"#{elem_id} img").first
        img.scroll_into_view_if_needed()   # images load lazily
        expect(img).to_be_visible()
        page.wait_for_function("el => el.complete && el.naturalWidth > 0", arg=img.element_handle())
    expect(page.locator("#heatmap .js-plotly-plot")).to_be_visible()
    expect(page.locator("#heatmap .gtitle")).to_contain_text("passed τ")
    expect(page.locator("#timeline .js-plotly-plot")).to_be_visible()
    expect(page.locator("#speedup")).to_contain_text("sequential passes than ar (target + drafter)")
    expect(page.locator("#speedup")).to_contain_text("Target passes alone")
    expect(page.locator("#islands-key")).to_contain_text("island 1:")
    expect(page.locator("#canvas-key")).to_contain_text("swept into an island")

    page.locator("#proposal img").first.click(position={"x": 40, "y": 40})
    expect(page.locator("#cell")).to_contain_text("pooled mass", timeout=20_000)
    card = lambda: (lambda t: t[t.index("The cell card"):])(page.locator("#cell").inner_text())  # noqa: E731  (no timer)
    from_proposal = card()
    cell = re.search(r"Cell \((\d+), (\d+)\)", from_proposal).groups()

    i, j = map(int, cell)
    # a clicked cell is framed on the heatmap, which is drawn again for it: wait for that drawing (with
    # its click handler) before the next click, or the click lands on the figure being replaced
    page.wait_for_function(PINNED_AT_JS, arg=[i, j])
    drag = page.locator("#heatmap .nsewdrag").first
    drag.scroll_into_view_if_needed()

    def click_heatmap(i, j):
        page.wait_for_timeout(600)   # two clicks closer than Plotly's 300 ms make a double click
        box = drag.bounding_box()
        page.mouse.click(box["x"] + (j + 0.5) * box["width"] / 32, box["y"] + (i + 0.5) * box["height"] / 32)
        expect(page.locator("#cell")).to_contain_text(f"Cell ({i}, {j})", timeout=20_000)
        page.wait_for_function(PINNED_AT_JS, arg=[i, j])

    click_heatmap((i + 10) % 32, (j + 10) % 32)
    click_heatmap(i, j)
    assert card() == from_proposal   # the same card, whichever view was clicked

    before = image_src(page, "canvas")
    box = page.locator("#scrubber input[type=number]")
    box.fill("40")
    box.press("Enter")
    expect(page.locator("#step")).to_contain_text("Step 40 of")
    page.wait_for_function(f"() => document.querySelector('#canvas img').src !== {before!r}")

    page.screenshot(path=str(tmp_path / "explorer.png"), full_page=True)
    assert (tmp_path / "explorer.png").stat().st_size > 10_000


def test_while_a_run_streams_the_previous_views_are_marked_stale_and_the_status_counts_steps(page):
    # Every change of the status is recorded in the page itself, so a run faster than the test's
    # polling still shows what the page said while it streamed.
    from playwright.sync_api import expect
    if page.locator("#final img").count() == 0:     # run alone: make a previous run first
        generate_and_wait(page)
    final_before = image_src(page, "final")
    page.evaluate(RECORD_STATUS)
    page.get_by_role("button", name="Run it live", exact=True).click()   # Generate would answer from the cache
    page.wait_for_function(RAN_TO_DONE, timeout=LONG)
    seen = page.evaluate("window.__seen")
    streaming = [s for s in seen if re.search(r"step \d+ of about \d+", s["text"])]
    assert streaming, sorted({" ".join(s["text"].split()) for s in seen})
    assert all(s["stale"] and s["final"] == final_before for s in streaming)  # the previous run stays whole
    assert any(s["live"] for s in streaming)
    expect(page.locator("#results")).not_to_have_class(re.compile(r"\bstale\b"))
    expect(page.locator("#live")).to_be_hidden()


def test_stop_leaves_the_previous_run_whole_and_says_what_it_did(page):
    from playwright.sync_api import expect
    status = page.locator("#status")
    page.get_by_role("button", name="Stop", exact=True).click()
    expect(status).to_contain_text("Nothing is running")

    final_before, stats_before = image_src(page, "final"), page.locator("#speedup").inner_text()
    page.locator("#tau input[type=number]").fill("0.3")
    page.locator("#tau input[type=number]").press("Enter")
    page.locator("#seed input").fill("1")          # a seed whose ar baseline is not remembered: a longer run
    page.locator("#seed input").blur()
    page.get_by_role("button", name="Generate", exact=True).click()
    page.get_by_role("button", name="Generate", exact=True).click()     # a second press while it runs
    expect(status).to_contain_text("Running", timeout=60_000)
    page.get_by_role("button", name="Stop", exact=True).click()
    expect(status).to_contain_text("Stopped", timeout=30_000)
    page.wait_for_timeout(2000)
    expect(status).to_contain_text("Stopped")                          # no late update, no frozen status
    expect(page.locator("#results")).not_to_have_class(re.compile(r"\bstale\b"))
    expect(page.locator("#live")).to_be_hidden()
    assert image_src(page, "final") == final_before and page.locator("#speedup").inner_text() == stats_before

    generate_and_wait(page)                                            # the app stays usable
    assert "τ = 0.3" in page.locator("#heatmap .gtitle").text_content()


@pytest.mark.parametrize("tab, button, status", [("Compare", "#compare-run", "#compare-status"),
                                                 ("Sweep", "#sweep-run", "#sweep-status")])
def test_stop_also_ends_compare_and_sweep(page, tab, button, status):
    from playwright.sync_api import expect
    page.get_by_role("tab", name=tab).click()
    page.locator(button).click()
    expect(page.locator(status)).to_contain_text("Running", timeout=60_000)
    page.get_by_role("button", name="Stop", exact=True).click()
    expect(page.locator(status)).to_contain_text("Stopped after", timeout=60_000)
    page.get_by_role("tab", name="Run").click()


def test_a_made_link_opens_the_page_with_its_knobs_and_its_preset(page, browser):
    from playwright.sync_api import expect
    page.locator("#preset input").click()
    page.get_by_role("option", name="Raster rejection").click()
    expect(page.locator("#preset-info")).to_contain_text("Raster rejection")
    page.locator("#k input[type=number]").fill("24")
    page.locator("#k input[type=number]").press("Enter")
    page.get_by_text("Share these settings").click()
    page.locator("#make-link").click()
    link_box = page.locator("#link textarea, #link input").first
    expect(link_box).to_have_value(re.compile(r"preset="), timeout=20_000)
    link = link_box.input_value()
    assert "gradio_api" not in link and link.startswith("http")

    opened = open_page(browser, link)
    try:
        expect(opened.locator("#k input[type=number]")).to_have_value("24")
        expect(opened.locator("#preset input")).to_have_value("Raster rejection")
        expect(opened.locator("#preset-info")).to_contain_text("The classic rule")
        opened.get_by_text("More MuLo-SD knobs").click()
        expect(opened.get_by_label("raster", exact=True)).to_be_checked()
    finally:
        opened.close()


class Records(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def app_log():
    records = Records()
    logger = logging.getLogger("mulo.app")
    logger.addHandler(records)
    yield records.lines
    logger.removeHandler(records)


def test_a_typed_value_out_of_range_is_named_once_and_never_clamped(page, app_log):
    from playwright.sync_api import expect
    tau = page.locator("#tau input[type=number]")
    tau.fill("1.7")
    tau.press("Enter")
    tau.blur()
    expect(tau).to_have_value("1.7")                                    # not clamped to 1
    final_before = image_src(page, "final") if page.locator("#final img").count() else None
    page.get_by_role("button", name="Generate", exact=True).click()
    toast = page.locator(".toast-body", has_text="must be in")
    expect(toast).to_contain_text("τ (tau) must be in [0, 1]; got 1.7")
    assert toast.count() == 1 and "'" not in toast.inner_text()         # once, no stray quotes
    for elem_id in ("draft", "proposal", "final", "baseline", "heatmap", "islands", "canvas"):
        assert page.locator(f"#{elem_id} .error").count() == 0, elem_id  # no red badge over old images
    assert (image_src(page, "final") if final_before else None) == final_before
    assert app_log == ["user input refused: τ (tau) must be in [0, 1]; got 1.7"]   # one line, no traceback
    tau.fill("0.01")
    tau.press("Enter")

    seed = page.locator("#seed input")
    seed.fill("2.5")
    seed.blur()
    page.get_by_role("button", name="Generate", exact=True).click()
    expect(page.locator(".toast-body", has_text="seed")).to_contain_text("seed must be an integer; got 2.5")
    expect(seed).to_have_value("2.5")
    seed.fill("0")
    seed.blur()


def test_a_link_with_values_out_of_range_names_them_and_loads_nothing_silently(browser, app_url, app_log):
    from playwright.sync_api import expect
    pg = open_page(browser, f"{app_url.rstrip('/')}/?tau=5&k=999&radius=9")
    try:
        toast = pg.locator(".toast-body")
        expect(toast).to_contain_text("ignored tau=5 from the link: τ (tau) must be in [0, 1]")
        expect(toast).to_contain_text("ignored k=999 from the link: k must be in [0, 511]")
        from app.inputs import DEFAULTS        # the refused values leave the defaults in place
        expect(pg.locator("#tau input[type=number]")).to_have_value(f"{DEFAULTS['tau']:g}")
        expect(pg.locator("#k input[type=number]")).to_have_value(str(DEFAULTS["k"]))
        expect(pg.locator("#radius input[type=number]")).to_have_value("9")   # valid, beyond the slider: kept
        assert len([line for line in app_log if line.startswith("link refused")]) == 2
    finally:
        pg.close()


def test_a_link_loads_a_draft_method_and_refuses_a_bad_one_by_name(browser, app_url, app_log):
    """Through the page as a user opens it: a link's drafter, resampling and redraft knobs load; a
    drafter spec the engine refuses is named in a warning and leaves the drafter at ar."""
    from playwright.sync_api import expect
    base = app_url.rstrip("/")
    pg = open_page(browser, f"{base}/?draft_method=zipar%2Fwindow%3D2&redraft=coupled&resample=jacobi")
    try:
        pg.get_by_text("More MuLo-SD knobs").click()
        expect(pg.locator("#draft_method textarea, #draft_method input").first).to_have_value("zipar/window=2")
        expect(pg.get_by_role("radio", name="jacobi")).to_be_checked()
        expect(pg.get_by_role("radio", name="coupled")).to_be_checked()
    finally:
        pg.close()
    before = len(app_log)
    for bad in ("zipar/scale=2", "bogus"):
        pg = open_page(browser, f"{base}/?draft_method={bad.replace('/', '%2F').replace('=', '%3D')}")
        try:
            expect(pg.locator(".toast-body")).to_contain_text(f"ignored draft_method={bad} from the link: draft_method")
            pg.get_by_text("More MuLo-SD knobs").click()
            expect(pg.locator("#draft_method textarea, #draft_method input").first).to_have_value("ar")
        finally:
            pg.close()
    refused = [line for line in app_log[before:] if line.startswith("link refused")]
    assert len(refused) == 2 and all(": draft_method " in line for line in refused), refused


LINK_PAYLOAD = "<a id=pwn href=https://x.example>pwn</a>"     # 40 characters: shown whole, never clipped


def toast_texts(pg) -> str:
    return "\n".join(pg.locator(".toast-body").all_inner_texts())


def test_a_link_s_markup_shows_as_text_and_a_value_past_every_range_keeps_no_other_knob_out(browser, app_url,
                                                                                             app_log):
    """seed=1e400 once failed the page-load handler, so tau=0.2 was lost too; markup in a value, a
    parameter name or a preset name was rendered by the toast, a live link."""
    from urllib.parse import quote
    from playwright.sync_api import expect
    payload = quote(LINK_PAYLOAD, safe="")
    pg = open_page(browser, f"{app_url.rstrip('/')}/?seed=1e400&tau=0.2&method={payload}&{payload}=1"
                            f"&preset={payload}")
    try:
        expect(pg.locator("#tau input[type=number]")).to_have_value("0.2")
        expect(pg.locator(".toast-body").first).to_contain_text("ignored seed=1e400 from the link: seed must be "
                                                                "an integer")
        pg.wait_for_function("() => document.querySelectorAll('.toast-body').length >= 1 && "
                             "[...document.querySelectorAll('.toast-body')].map(t => t.innerText).join(' ')"
                             ".includes('unknown link parameter')")
        text = toast_texts(pg)
        assert f"ignored method={LINK_PAYLOAD} from the link: method must be one of" in text, text
        assert f"ignored preset={LINK_PAYLOAD} from the link" in text and \
            f"ignored unknown link parameter {LINK_PAYLOAD}" in text, text
        assert "&lt;" not in text and "&amp;" not in text                  # escaped once: the text as sent
        assert pg.locator("#pwn").count() == 0 and pg.locator(".toast-body a").count() == 0
        assert len([line for line in app_log if line.startswith("link refused")]) == 4
    finally:
        pg.close()


K_PAYLOAD = "[pwn](https://x.example/k)<b id=pwb>b</b>"   # a short word an uploaded trace's knobs may hold


def test_a_replayed_cascade_shows_markup_in_its_knobs_as_plain_text_in_the_level_title(browser, app_url, tmp_path):
    import json
    from playwright.sync_api import expect
    from app.inputs import DEFAULTS
    from core import engine
    from core.config import RunConfig
    run = RunConfig(prompt=DEFAULTS["prompt"]).with_params(tau=0.0, draft_method="mulo/scale=2")
    d = json.loads(engine.run(run, engine.load_pair("embedded")).to_json())
    d["params"]["k"] = K_PAYLOAD
    path = tmp_path / "cascade.json"
    path.write_text(json.dumps(d))
    pg = open_page(browser, app_url)
    try:
        pg.get_by_role("tab", name="Trace files").click()
        pg.locator("#upload input[type=file]").set_input_files(str(path))
        pg.wait_for_timeout(1500)
        pg.locator("#replay").click()
        expect(pg.locator("#status")).to_contain_text("Replayed an uploaded", timeout=60_000)
        pg.get_by_role("tab", name="Run").click()
        title = pg.locator("#level1-title")
        expect(title).to_contain_text("Level 1 (16×16, verified by the drafter)")
        expect(title).to_contain_text(f"k = {K_PAYLOAD}")                  # the knob as written, escaped once
        assert title.locator("a").count() == 0 and pg.locator("#pwb").count() == 0
        pg.screenshot(path=str(tmp_path / "level-title.png"), full_page=True)
    finally:
        pg.close()


def test_the_prompt_builder_offers_the_domain_s_places_and_writes_its_defaults(browser, app_url):
    from playwright.sync_api import expect
    from core.embedded.domain import PLACES
    pg = open_page(browser, app_url)
    try:
        prompt = pg.locator("#prompt textarea")
        prompt.fill("a small pink cross top left on a noisy red background")
        pg.get_by_text("Prompts: examples and builder").click()
        pg.get_by_text("Prompt builder", exact=True).click()
        pg.get_by_role("button", name="Use this prompt").click()
        expect(prompt).to_have_value("a large red circle center on a striped blue background")   # the defaults
        pg.get_by_label("Place 1").click()
        assert [o.replace("✓", "").strip() for o in pg.get_by_role("option").all_inner_texts()] == list(PLACES)
        pg.get_by_role("option", name="bottom right", exact=True).click()
        pg.get_by_role("button", name="Use this prompt").click()
        expect(prompt).to_have_value("a large red circle bottom right on a striped blue background")
        assert pg.locator(".toast-body").count() == 0
    finally:
        pg.close()


OVERLAPS_JS = """() => {
  // an element is shown when no ancestor hides it; a box is shown when no clipping ancestor
  // (overflow other than visible) leaves its centre outside (hidden measuring copies, scrolled-out cells)
  const shown = (el) => {
    for (let e = el; e && e !== document.body; e = e.parentElement) {
      const cs = getComputedStyle(e);
      if (cs.display === 'none' || cs.visibility === 'hidden' || parseFloat(cs.opacity) === 0) return false;
    }
    return true;
  };
  const unclipped = (el, r) => {
    const cx = r.x + r.width / 2, cy = r.y + r.height / 2;
    for (let e = el.parentElement || el.parentNode; e && e !== document.body; e = e.parentElement) {
      const cs = getComputedStyle(e);
      if (cs.overflowX === 'visible' && cs.overflowY === 'visible' && cs.clipPath === 'none') continue;
      const c = e.getBoundingClientRect();
      if (cx < c.left || cx > c.right || cy < c.top || cy > c.bottom) return false;
    }
    return true;
  };
  // (.sr-only: the page's announcements to screen readers, e.g. "complete" for a second after an event,
  // clipped to nothing and never drawn)
  const boxes = [];
  const add = (name, el, r) => {
    const host = el.nodeType === 3 ? el.parentElement : el;
    if (r.width > 2 && r.height > 2 && unclipped(host, r)) boxes.push({name, el, x: r.x, y: r.y, w: r.width, h: r.height});
  };
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const n = walker.currentNode, el = n.parentElement;
    if (!n.textContent.trim() || !el || el.closest('svg, script, style, textarea, .toast-wrap, [role=listbox], .sr-only')) continue;
    if (!shown(el)) continue;
    const range = document.createRange();
    range.selectNodeContents(n);
    for (const r of range.getClientRects()) add(n.textContent.trim().slice(0, 30), n, r);
  }
  document.querySelectorAll('svg text').forEach((t) => {
    if (t.textContent.trim() && shown(t)) add('svg:' + t.textContent.trim().slice(0, 30), t, t.getBoundingClientRect());
  });
  document.querySelectorAll('.icon-button-wrapper button, button.icon-button').forEach((b) => {
    if (shown(b)) add('button:' + (b.getAttribute('aria-label') || b.title || 'icon'), b, b.getBoundingClientRect());
  });
  const out = [];
  for (let a = 0; a < boxes.length; a++) for (let b = a + 1; b < boxes.length; b++) {
    const p = boxes[a], q = boxes[b];
    if (p.el === q.el || p.el.contains(q.el) || q.el.contains(p.el)) continue;
    const dx = Math.min(p.x + p.w, q.x + q.w) - Math.max(p.x, q.x);
    const dy = Math.min(p.y + p.h, q.y + q.h) - Math.max(p.y, q.y);
    if (dx > 2 && dy > 2) out.push(`${p.name} | ${q.name}`);
  }
  return out;
}"""


@pytest.mark.long("lays out every tab after real results: one Compare of every method and a three-run Sweep")
@pytest.mark.parametrize("width, height", [(1440, 900), (1024, 768)])
def test_no_text_overlaps_another_at_two_screen_sizes(page, width, height, tmp_path):
    """Every tab after real results: image labels clear of their buttons, plot titles, legends and
    axis titles clear of each other, sweep labels apart (bounding boxes measured in the page)."""
    from playwright.sync_api import expect
    page.set_viewport_size({"width": width, "height": height})
    if not page.locator("#final img").count():
        generate_and_wait(page)
    for tab, button, status, done in (("Compare", "#compare-run", "#compare-status", "Compared"),
                                      ("Sweep", "#sweep-run", "#sweep-status", "Swept")):
        page.get_by_role("tab", name=tab).click()
        if done not in page.locator(status).inner_text():
            if tab == "Sweep":   # three runs are enough to lay out points, lines and legend
                page.locator("#sweep-taus textarea, #sweep-taus input").first.fill("0, 0.3")
                page.locator("#sweep-windows textarea, #sweep-windows input").first.fill("16")
            page.locator(button).click()
            expect(page.locator(status)).to_contain_text(done, timeout=LONG)
    problems = {}
    for tab in ("Run", "Compare", "Sweep"):
        page.get_by_role("tab", name=tab).click()
        page.wait_for_timeout(1200)   # Plotly re-lays out on resize
        page.screenshot(path=str(tmp_path / f"{tab}-{width}.png"), full_page=True)
        found = page.evaluate(OVERLAPS_JS)
        if found:
            problems[tab] = found
    page.get_by_role("tab", name="Run").click()
    assert not problems, problems
    # negative control: two labels placed on top of each other are found
    page.evaluate("""() => { for (const t of ['probe A', 'probe B']) { const d = document.createElement('div');
        d.className = 'overlap-probe'; d.textContent = t; d.style = 'position:fixed;top:40px;left:40px';
        document.body.appendChild(d); } }""")
    assert "probe A | probe B" in page.evaluate(OVERLAPS_JS)
    page.evaluate("() => document.querySelectorAll('.overlap-probe').forEach((d) => d.remove())")


# the Compare table against its scroll box: widths, the box's overflow-x, heights
SIDEWAYS_JS = """() => { const t = document.querySelector('#compare-table table');
    const s = t.closest('.virtual-table-viewport') || t.parentElement;
    return [t.scrollWidth, s.clientWidth, getComputedStyle(s).overflowX, t.scrollHeight, s.clientHeight]; }"""


def test_the_compare_tab_shows_every_image_and_every_column_at_1024_wide(page):
    """On the page the overlap test left (its Compare done, once for both tests: a Compare runs every
    method), at 1024 x 768: every image inside the gallery, the table as wide as its box, and at 1024 and
    1440 wide no header broken inside a word (measured from the DOM)."""
    from playwright.sync_api import expect
    page.set_viewport_size({"width": 1024, "height": 768})
    page.get_by_role("tab", name="Compare").click()
    if "Compared" not in page.locator("#compare-status").inner_text():
        page.locator("#compare-run").click()
        expect(page.locator("#compare-status")).to_contain_text("Compared", timeout=LONG)
    page.wait_for_timeout(1500)
    gallery = page.locator(".gallery-container, [data-testid=gallery]").first
    imgs = page.locator("#compare-run").locator("xpath=ancestor::div[contains(@class,'tabitem')]").locator(
        "button img, .thumbnail-item img")
    n = imgs.count()
    assert n >= 12, n
    g = gallery.bounding_box()
    for i in range(n):
        b = imgs.nth(i).bounding_box()
        assert b["y"] >= g["y"] - 1 and b["y"] + b["height"] <= g["y"] + g["height"] + 1, (i, b, g)
    # no header wraps inside a word (the table once broke "passes" letter by letter to fit 1024 wide): here
    # the box scrolls sideways with the method column pinned; at 1440 x 900 the whole table fits its box
    # without any inner scroll
    assert page.evaluate(BROKEN_WORDS_JS, "#compare-table th") == []
    assert page.evaluate(SIDEWAYS_JS)[2] in ("auto", "scroll")
    page.set_viewport_size({"width": 1440, "height": 900})
    page.wait_for_timeout(500)
    assert page.evaluate(BROKEN_WORDS_JS, "#compare-table th, #compare-table .body-cell:not(:first-child)") == []
    # a method's name is never broken; a long spec (`mulo:k=24:tau=0.01:…`, no space in it) wraps where it must
    names = page.evaluate(BROKEN_WORDS_JS, "#compare-table .body-cell:first-child")
    assert [w for w in names if ":" not in w] == [], names
    wide, box, _, tall, box_h = page.evaluate(SIDEWAYS_JS)
    assert wide <= box + 2 and tall <= box_h + 2, (wide, box, tall, box_h)
    # negative control: a header squeezed to 12 px with wrapping anywhere is found
    page.evaluate("""() => { const d = document.createElement('div'); d.className = 'broken-probe';
        d.style = 'width:12px;overflow-wrap:anywhere'; d.textContent = 'speedup'; document.body.appendChild(d); }""")
    assert page.evaluate(BROKEN_WORDS_JS, ".broken-probe") == ["speedup"]
    page.evaluate("() => document.querySelectorAll('.broken-probe').forEach((d) => d.remove())")
    page.get_by_role("tab", name="Run").click()


def _knobs_of(run) -> list:
    """The KNOBS-order values of a run config (what a client sends for it)."""
    fields = {"method": run.method, "prompt": run.prompt, "seed": run.seed, "model": run.model}
    return [fields[k] if k in fields else getattr(run.sampling, k) if k in inputs.SAMPLING_FIELDS
            else getattr(run.params, k) for k in inputs.KNOBS]


def test_compare_through_gradio_client_gives_every_method_and_says_it_is_remembered(page, app_url):
    """The /compare endpoint, on the knobs of the comparison the page made above (the overlap test's):
    the same server answers from its remembered comparison and says so; the figures are checked against
    the engine's own runs."""
    from gradio_client import Client
    from playwright.sync_api import expect

    from core import likelihood
    from core.config import MethodParams, spec_label
    done = [k for k in comparison.REMEMBERED.keys() if k[1] is False]
    if not done:   # run alone: the page's comparison first
        page.get_by_role("tab", name="Compare").click()
        page.locator("#compare-run").click()
        expect(page.locator("#compare-status")).to_contain_text("Compared", timeout=LONG)
        done = [k for k in comparison.REMEMBERED.keys() if k[1] is False]
    run = done[-1][2]
    gallery, table, plot, status = Client(app_url, verbose=False).predict(*_knobs_of(run), api_name="/compare")
    assert "Remembered: this comparison of these knobs finished" in status
    col = {name: n for n, name in enumerate(comparison.COMPARE_COLUMNS)}
    assert table["headers"] == comparison.COMPARE_COLUMNS
    # each row named as the bench names its run: the method and the knobs it reads that differ from the defaults
    rows = {row[0].split(":")[0]: row for row in table["data"]}
    assert {"ar", "zipar", "mulo"} <= set(rows) and table["data"][0][0] == "ar"   # ar timed first
    assert [row[0] for row in table["data"]][1:] == [spec_label(m, run.params) for m in rows if m != "ar"]
    mulo, cells = rows["mulo"], rows["ar"][col["target NFE"]]
    assert rows["ar"][col["passes speedup"]] == 1 and cells == 1024
    assert mulo[col["passes speedup"]] == round(cells / mulo[col["passes (target + drafter)"]], 2)
    assert mulo[col["passes (target + drafter)"]] == mulo[col["target NFE"]] + mulo[col["drafter NFE"]]
    assert mulo[col["target NFE speedup (detail)"]] == round(cells / mulo[col["target NFE"]], 2)
    adherence = col["prompt adherence (embedded pair)"]
    assert all(0 <= row[adherence] <= 1 for row in rows.values() if row[adherence] is not None)
    assert len(gallery) >= 3 and "Compared" in status and "`python -m core bench`" in status
    # quality against ar's image: ar is the reference; mulo's from likelihood.against_ar of the engine's runs
    assert (rows["ar"][col["sharpness ÷ ar"]], rows["ar"][col["log-lik gap (nats/token)"]]) == (1.0, 0.0)
    pair = engine.load_pair(run.model)
    mine = engine.run(replace(run, method="mulo"), pair)
    ar = engine.run(replace(run, method="ar", params=MethodParams()), pair)
    want = likelihood.against_ar(pair, mine, ar)
    assert mulo[col["target NFE"]] == mine.totals["target_nfe"]
    assert mulo[col["sharpness ÷ ar"]] == pytest.approx(want["sharpness"], abs=0.0051)
    assert mulo[col["log-lik gap (nats/token)"]] == pytest.approx(want["loglik_gap"], abs=5.1e-4)


def test_the_explanations_follow_the_chosen_method(page):
    from playwright.sync_api import expect
    page.locator("#method input").click()
    page.get_by_role("option", name="sd", exact=True).click()
    expect(page.get_by_text("Each tested position's probability of acceptance, min(1, p/q)")).to_be_visible()
    page.locator("#method input").click()
    page.get_by_role("option", name="mulo", exact=True).click()
    expect(page.get_by_text("For every proposed token the target adds up")).to_be_visible()


def test_generate_preset_prompt_and_the_four_knobs_sit_within_one_screen(page):
    page.set_viewport_size({"width": 1440, "height": 900})
    ids = ["preset", "prompt", "generate", "k", "tau", "scale", "radius"]
    tops = [page.locator(f"#{i}").bounding_box()["y"] for i in ids]
    bottoms = [b["y"] + b["height"] for b in (page.locator(f"#{i}").bounding_box() for i in ids)]
    assert max(bottoms) - min(tops) <= 900, dict(zip(ids, tops))
    assert not page.locator("#window").is_visible()     # the rest is folded


def test_the_report_page_draws_the_frontier_and_the_sweep_tab_opens_its_summary(page, bench_folder, tmp_path):
    """The page `python -m core report` writes, opened from disk; then the same run's summary in the app."""
    import subprocess
    import sys
    from playwright.sync_api import expect
    html = tmp_path / "report.html"
    subprocess.run([sys.executable, "-m", "core", "report", str(bench_folder), "--html", str(html)], check=True,
                   timeout=120)
    context = page.context.browser.new_context(viewport={"width": 1400, "height": 1000})
    report = context.new_page()
    report.goto(html.as_uri())
    frontier = report.locator("#frontier.js-plotly-plot")
    expect(frontier).to_be_visible()
    expect(frontier.locator(".scatterlayer .trace")).to_have_count(3 * 5 * 2)  # ar, mulo, zipar: five yardsticks x (passes, wall)
    expect(report.locator("#figures tbody tr")).to_have_count(3)
    report.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    context.close()

    page.get_by_role("tab", name="Sweep").click()
    page.locator("#summary-file input[type=file]").set_input_files(str(bench_folder / "summary.json"))
    expect(page.get_by_text("Opened a precomputed sweep")).to_be_visible(timeout=30_000)
    expect(page.locator("#sweep-plot .js-plotly-plot")).to_be_visible()


@pytest.mark.long("two Generates with their ar baselines in the browser, a cascade and a plain run")
def test_the_cascade_preset_shows_a_row_for_the_16x16_level_and_a_plain_run_hides_it(page, tmp_path):
    from playwright.sync_api import expect
    page.set_viewport_size({"width": 1440, "height": 900})
    page.get_by_role("tab", name="Run").click()
    page.locator("#preset input").click()
    page.get_by_role("option", name="Cascade of scales (8×8 → 16×16 → 32×32)").click()
    expect(page.locator("#preset-info")).to_contain_text("No published method has a cascade")
    page.get_by_text("More MuLo-SD knobs").click()
    expect(page.locator("#draft_method textarea, #draft_method input").first).to_have_value("mulo/scale=2")

    generate_and_wait(page)
    expect(page.locator("#level1")).to_be_visible()
    expect(page.locator("#level1-title")).to_contain_text("Level 1 (16×16, verified by the drafter)")
    expect(page.locator("#level1-title")).to_contain_text("No published method has a cascade")
    for elem_id in ("level1-draft", "level1-proposal", "level1-islands"):
        img = page.locator(f"#{elem_id} img").first
        img.scroll_into_view_if_needed()   # images load lazily
        expect(img).to_be_visible()
        page.wait_for_function("el => el.complete && el.naturalWidth > 0", arg=img.element_handle())
    page.locator("#level1-heatmap").scroll_into_view_if_needed()
    expect(page.locator("#level1-heatmap .gtitle")).to_contain_text("of 256 passed τ")
    expect(page.locator("#level2")).to_be_hidden()
    expect(page.locator("#timeline .gtitle")).to_contain_text("no published method has one")
    for width, height in ((1440, 900), (1024, 768)):
        page.set_viewport_size({"width": width, "height": height})
        page.wait_for_timeout(1200)   # Plotly re-lays out on resize
        page.screenshot(path=str(tmp_path / f"cascade-{width}.png"), full_page=True)
        assert not page.evaluate(OVERLAPS_JS), width

    page.set_viewport_size({"width": 1440, "height": 900})
    page.locator("#preset input").click()
    page.get_by_role("option", name="Default operating point").click()
    expect(page.locator("#draft_method textarea, #draft_method input").first).to_have_value("ar")
    generate_and_wait(page)
    expect(page.locator("#level1")).to_be_hidden()
