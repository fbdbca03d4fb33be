"""How responsive the explorer is: `python -m app.bench [--threads N] [--repeat R]`.

Measures, through the same handlers the buttons call:
- click to first complete result for the default preset (the run, its ar baseline, every view),
  cold (ar baseline not yet run) and warm (ar baseline remembered, another tau);
- time to the first streamed canvas;
- re-rendering every view from a stored Trace, and replaying a Trace JSON (target <= 0.3 s);
- a cell card with the target's view of the cell (one cache-free forward; target <= 0.3 s), a cell
  below tau (its verify and its resample context) and the same card again (cached per run and cell).
- the ambiguity and codebook-neighbours views redrawn from a stored run (target <= 0.3 s).
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import torch

from core import engine
from core.cli import UsageError, check_threads

from . import card_view, generation, inputs, panels, render, replays
from . import ambiguity_view, codebook_view


def _knobs(**overrides) -> list:
    return [{**inputs.DEFAULTS, **overrides}[k] for k in inputs.KNOBS]


def _click(knobs: list) -> tuple[float, float, dict]:
    """(seconds to the first streamed canvas, seconds to the complete result, state)."""
    t0 = time.perf_counter()
    first = None
    for out in generation.generate_live(None, False, *knobs):   # a live run: Generate answers shipped settings at once
        live = out[3]   # (state, status, trace file, live canvas, ...): the live panel's update
        if first is None and isinstance(live, dict) and live.get("value") is not None:   # gr.update(value=canvas)
            first = time.perf_counter() - t0
    return first, time.perf_counter() - t0, out[0]


def _median_s(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _card_s(trace) -> tuple[float, float]:
    """(seconds to the first cell card of a cell below tau, or of cell (0, 1), seconds to it again)."""
    v = render.verdict(trace)
    below = [] if v is None else list(zip(*(a.tolist() for a in v.rejected.nonzero())))
    i, j = below[len(below) // 2] if below else (0, 1)
    t0 = time.perf_counter()
    render.cell_details(trace, v, i, j) + card_view.card(trace, i, j)
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    render.cell_details(trace, v, i, j) + card_view.card(trace, i, j)
    return first, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1; 0 = torch's default)")
    ap.add_argument("--repeat", type=int, default=5, help="repetitions of the re-render timings")
    args = ap.parse_args()
    try:
        check_threads(args.threads)
    except UsageError as e:
        ap.exit(2, f"error: {e}\n")
    if args.threads:
        torch.set_num_threads(args.threads)
    engine.load_pair()

    first, cold, state = _click(_knobs())
    _, warm, _ = _click(_knobs(tau=0.05))   # another tau: mulo runs again, its ar baseline is remembered
    rerender = _median_s(lambda: panels.views(state), args.repeat)
    path = os.path.join(tempfile.mkdtemp(prefix="mulo-bench-"), "trace.json")
    with open(path, "w") as f:
        f.write(state["trace"].to_json())
    replay = _median_s(lambda: replays.replay(path), args.repeat)
    n = len(state["trace"].steps)
    scrub = _median_s(lambda: panels.scrub(state, n // 2), args.repeat)
    codes = iter(range(10**9))   # another code each redraw (its neighbours' patches mostly cached), figures redrawn
    ambiguity_redraw = _median_s(lambda: (ambiguity_view.views(state),
                                          codebook_view.redraw(state, next(codes) % 64, inputs.DEFAULTS["k"])),
                                 args.repeat)
    card_first, card_cached = _card_s(state["trace"])

    print(f"explorer bench: {os.cpu_count()} CPU cores, {torch.get_num_threads()} torch thread(s), default preset (mulo)")
    print(f"  click -> first streamed canvas        {first:6.2f} s")
    print(f"  click -> complete result, cold         {cold:6.2f} s   (mulo + ar baseline + every view)")
    print(f"  click -> complete result, warm         {warm:6.2f} s   (ar baseline remembered, tau 0.05)")
    print(f"  re-render every view from the Trace    {rerender:6.3f} s   (target <= 0.3 s)")
    print(f"  replay an uploaded Trace JSON          {replay:6.3f} s   (parse + every view)")
    print(f"  one scrubber move ({n} steps)          {scrub:6.3f} s")
    print(f"  ambiguity + codebook views, warm       {ambiguity_redraw:6.3f} s   (target <= 0.3 s; the target "
          f"pass they read, once per run: {state['ambiguity'].seconds:.3f} s)")
    print(f"  cell card, target's view, first        {card_first:6.3f} s   (cache-free forwards; target <= 0.3 s)")
    print(f"  cell card, target's view, again        {card_cached:6.3f} s   (cached per run and cell)")


if __name__ == "__main__":
    main()
