"""The README's screenshot of the explorer, taken on a real run: `python scripts/screenshot.py`.

Starts the app in this process on a free local port (tests/appserver.py), opens it in Debian's
chromium with the browser test's own helpers (tests/chromium.py: headless, never a downloaded
browser), presses Generate at the default operating point, waits for the run and its ar baseline,
and saves the page from its top to the heatmap and the islands as a palette PNG (assets/figures/explorer.png, under
300 KB). Run it again after a change to the page; it takes about a minute on two cores.
"""
from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from PIL import Image  # noqa: E402

from appserver import running_app  # noqa: E402
from chromium import MISSING, generate_and_wait, launch, open_page, present  # noqa: E402

MOST_BYTES = 300_000
SHOWN = ("#heatmap", "#islands")   # the picture runs from the top of the page to the bottom of these


def shoot(url: str, width: int, height: int) -> bytes:
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = launch(p)
        try:
            page = open_page(browser, url, width, height)
            generate_and_wait(page)
            for img in page.locator("#results img").all():   # images load lazily
                img.scroll_into_view_if_needed()
                page.wait_for_function("el => el.complete && el.naturalWidth > 0", arg=img.element_handle())
            page.locator("#heatmap .js-plotly-plot").wait_for()
            page.evaluate("() => window.scrollTo(0, 0)")
            bottom = max(b["y"] + b["height"] for b in (page.locator(s).first.bounding_box() for s in SHOWN))
            return page.screenshot(full_page=True, clip=dict(x=0, y=0, width=width, height=bottom + 16))
        finally:
            browser.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(ROOT / "assets" / "figures" / "explorer.png"))
    ap.add_argument("--width", type=int, default=1280)
    args = ap.parse_args()
    if not present():
        print(MISSING, file=sys.stderr)
        return 2
    with running_app() as url:
        png = shoot(url, args.width, 900)
    img = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT)
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    if buf.tell() > MOST_BYTES:
        print(f"the screenshot is {buf.tell() // 1000} KB, over {MOST_BYTES // 1000} KB: not written", file=sys.stderr)
        return 1
    Path(args.out).write_bytes(buf.getvalue())
    print(f"wrote {args.out} ({img.width}×{img.height}, {buf.tell() // 1000} KB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
