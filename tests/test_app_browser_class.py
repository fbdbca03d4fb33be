"""A class in the browser (Debian's chromium): a run waiting behind another says its place in the model's
line and then runs; pressing Generate again shows the same run from the cache, said on the status and
the headline; picking a preset on the default prompt and seed shows its shipped run without pressing
anything. Leaves screenshots of the line and of a cached headline in the test's tmp_path (and, with
MULO_SHOTS=DIR, in DIR)."""
import os
from pathlib import Path

import pytest

from app import inputs, links, shipped
from appserver import running_app
from chromium import LONG, MISSING, RAN_TO_DONE, RECORD_STATUS, launch, open_page, present

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


def shot(page, tmp_path, name, selector):
    paths = [tmp_path / name] + ([Path(os.environ["MULO_SHOTS"]) / name] if os.environ.get("MULO_SHOTS") else [])
    for path in paths:
        page.locator(selector).screenshot(path=str(path))


def set_seed(page, seed):
    box = page.locator("#seed input")
    box.fill(str(seed))
    box.blur()


def test_a_run_behind_another_is_told_its_place_then_runs_and_a_repeat_comes_from_the_cache(browser, app_url, tmp_path):
    from playwright.sync_api import expect
    first, second = open_page(browser, app_url), open_page(browser, app_url)
    try:
        # a long run holds the model: raster rejection, one low-res row per cycle, a seed of its own
        first.locator("#preset input").click()
        first.get_by_role("option", name="Raster rejection").click()
        set_seed(first, 41)
        first.get_by_role("button", name="Generate", exact=True).click()
        expect(first.locator("#status")).to_contain_text("Running", timeout=60_000)
        set_seed(second, 42)
        second.evaluate(RECORD_STATUS)
        second.get_by_role("button", name="Generate", exact=True).click()
        expect(second.locator("#status")).to_contain_text("1st in line (Generate ahead)", timeout=30_000)
        shot(second, tmp_path, "line.png", "#status")
        second.wait_for_function(RAN_TO_DONE, timeout=LONG)
        expect(second.locator("#speedup")).not_to_contain_text("From the cache")
        expect(first.locator("#status")).to_contain_text("Done", timeout=LONG)

        second.evaluate(RECORD_STATUS)
        second.get_by_role("button", name="Generate", exact=True).click()
        expect(second.locator("#status")).to_contain_text("from the cache", timeout=30_000)
        expect(second.locator("#speedup")).to_contain_text("From the cache")
        assert not any("Running" in s["text"] for s in second.evaluate("window.__seen"))   # nothing ran
        shot(second, tmp_path, "cached.png", "#speedup")
        assert (tmp_path / "line.png").stat().st_size > 2_000 and (tmp_path / "cached.png").stat().st_size > 2_000
    finally:
        first.close()
        second.close()


def test_a_preset_picked_on_the_default_prompt_shows_its_shipped_run_at_once(browser, app_url):
    from playwright.sync_api import expect
    page = open_page(browser, app_url)
    try:
        page.evaluate(RECORD_STATUS)
        page.locator("#preset input").click()
        page.get_by_role("option", name="No pooling (k = 0)").click()
        expect(page.locator("#status")).to_contain_text("a run shipped with the app", timeout=30_000)
        expect(page.locator("#speedup")).to_contain_text("A shipped run")
        values = {**inputs.DEFAULTS, **links.PRESETS["No pooling (k = 0)"][1]}
        kept = shipped.trace_for(inputs.run_config(*(values[k] for k in inputs.KNOBS)))
        passed = round(kept.totals["passed_fraction"] * 1024)   # the shipped run's own count, on screen
        expect(page.locator("#heatmap .gtitle")).to_contain_text(f"{passed} of 1024 passed τ")
        assert not any("Running" in s["text"] for s in page.evaluate("window.__seen"))
    finally:
        page.close()
