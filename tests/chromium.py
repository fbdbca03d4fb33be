"""Debian's chromium driven through Playwright, as the browser test and scripts/screenshot.py use it:
headless, with no sandbox, GPU, background networking, component updates or sync, and never a
browser downloaded by a tool. Owns how a page is opened and how a Generate is waited for; knows
nothing of what a test then checks."""
import os

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"]
LONG = 300_000   # ms: a run with its ar baseline, or a Compare, on a loaded two-core machine
MISSING = f"{CHROMIUM} is absent (apt-get install chromium); the browser test never downloads a browser"


def present() -> bool:
    return os.path.exists(CHROMIUM)


EXPECT = 30_000  # ms: what an expect() waits for; a plot drawn after "Done" on a loaded machine takes seconds


def launch(playwright):
    """The headless chromium of this machine (Playwright's own browsers are never used)."""
    from playwright.sync_api import expect
    expect.set_options(timeout=EXPECT)
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)


def open_page(browser, url, width=1440, height=900):
    pg = browser.new_page(viewport={"width": width, "height": height})
    pg.set_default_timeout(60_000)
    pg.goto(url, wait_until="domcontentloaded")
    pg.locator("#generate").wait_for()
    pg.wait_for_timeout(800)   # the page's load event sets the knobs from the link
    return pg


RECORD_STATUS = """() => {
    window.__seen = [];
    const note = () => window.__seen.push({
        text: document.querySelector('#status').textContent,
        stale: document.querySelector('#results').classList.contains('stale'),
        live: !!document.querySelector('#live img') && document.querySelector('#live img').offsetParent !== null,
        final: (document.querySelector('#final img') || {}).src || null});
    new MutationObserver(note).observe(document.body, {subtree: true, childList: true, characterData: true,
                                                       attributes: true});
}"""

RAN_TO_DONE = """() => { const t = window.__seen.map(s => s.text);
    const i = t.findIndex(x => x.includes('Running'));
    return i >= 0 && t.slice(i).some(x => x.includes('Done')); }"""


def generate_and_wait(page):
    """Press Run it live (Generate that runs the model even where the settings ran before or ship with the
    app) and wait for this run's "Done" (not a "Done" left by the run before)."""
    page.evaluate(RECORD_STATUS)
    page.get_by_role("button", name="Run it live", exact=True).click()
    page.wait_for_function(RAN_TO_DONE, timeout=LONG)


# the words of the elements matching a selector that the layout breaks across two lines (a Range per
# word: its boxes on more than one line top)
BROKEN_WORDS_JS = """(sel) => { const out = [];
    for (const el of document.querySelectorAll(sel)) {
        const w = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
        for (let n = w.nextNode(); n; n = w.nextNode()) {
            const re = /\\S+/g; let m;
            while ((m = re.exec(n.data))) {
                const r = document.createRange(); r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
                const tops = new Set([...r.getClientRects()].filter((b) => b.width > 0).map((b) => Math.round(b.top)));
                if (tops.size > 1) out.push(m[0]);
            } } }
    return out; }"""
