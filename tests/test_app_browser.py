"""The app in a real browser (Debian's chromium through Playwright): a preset, Generate, the views
render, a click on the proposal explains a cell, the scrubber moves the canvas, Stop stops. Leaves a
screenshot in the test's tmp_path."""
import os

import pytest

from appserver import running_app

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]

pytestmark = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                reason=f"{CHROMIUM} is absent (apt-get install chromium); the browser test "
                                       "never downloads a browser")


@pytest.fixture(scope="module")
def page():
    from playwright.sync_api import sync_playwright
    with running_app() as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        pg = browser.new_page(viewport={"width": 1600, "height": 1000})
        pg.set_default_timeout(60_000)
        pg.goto(url, wait_until="domcontentloaded")
        yield pg
        browser.close()


def image_src(page, elem_id):
    return page.locator(f"#{elem_id} img").first.get_attribute("src")


def test_a_preset_then_generate_shows_every_view_and_the_scrubber_replays(page, tmp_path):
    from playwright.sync_api import expect
    page.locator("#preset input").click()
    page.get_by_role("option", name="A few rejection islands").click()
    expect(page.locator("#tau input[type=number]")).to_have_value("0.01")

    page.get_by_role("button", name="Generate", exact=True).click()
    expect(page.locator("#status")).to_contain_text("Done", timeout=120_000)
    for elem_id in ("draft", "proposal", "final", "baseline", "islands", "canvas"):
        img = page.locator(f"#{elem_id} img").first
        expect(img).to_be_visible()
        page.wait_for_function("el => el.complete && el.naturalWidth > 0", arg=img.element_handle())
    expect(page.locator("#heatmap .js-plotly-plot")).to_be_visible()
    expect(page.locator("#timeline .js-plotly-plot")).to_be_visible()
    expect(page.locator("#speedup")).to_contain_text("fewer target passes than ar")

    page.locator("#proposal img").first.click(position={"x": 40, "y": 40})
    expect(page.locator("#cell")).to_contain_text("pooled mass", timeout=20_000)

    before = image_src(page, "canvas")
    box = page.locator("#scrubber input[type=number]")
    box.fill("40")
    box.press("Enter")
    expect(page.locator("#step")).to_contain_text("Step 40 of")
    page.wait_for_function(f"() => document.querySelector('#canvas img').src !== {before!r}")
    assert image_src(page, "canvas") != before

    page.screenshot(path=str(tmp_path / "explorer.png"), full_page=True)
    assert (tmp_path / "explorer.png").stat().st_size > 10_000


def test_stop_cancels_a_running_generation_and_the_app_stays_usable(page):
    from playwright.sync_api import expect
    page.get_by_role("button", name="Generate", exact=True).click()
    expect(page.locator("#status")).to_contain_text("Running", timeout=30_000)
    page.get_by_role("button", name="Stop", exact=True).click()
    expect(page.locator("#status")).to_contain_text("Stopped")
    page.wait_for_timeout(1500)
    expect(page.locator("#status")).to_contain_text("Stopped")   # no late update from the cancelled run
    page.get_by_role("button", name="Generate", exact=True).click()
    expect(page.locator("#status")).to_contain_text("Done", timeout=120_000)


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
    expect(frontier.locator(".scatterlayer .trace")).to_have_count(3 * 4)  # ar, mulo, zipar in four panels
    expect(report.locator("#figures tbody tr")).to_have_count(3)
    report.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    context.close()

    page.get_by_role("tab", name="Sweep").click()
    page.locator("#summary-file input[type=file]").set_input_files(str(bench_folder / "summary.json"))
    expect(page.get_by_text("Opened a precomputed sweep")).to_be_visible(timeout=30_000)
    expect(page.locator("#sweep-plot .js-plotly-plot")).to_be_visible()
