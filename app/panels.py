"""The views of a stored run, in VIEWS order: the image row, heatmap, islands, timeline, the headline
(sequential passes and wall clock over ar, what the speed was bought with), the scrubber's canvas
and a tree method's tree view (app.trees_view); each panel a method cannot fill says why in words,
and each method's explanations. Also the events that only read the stored run: the grid toggle, the
scrubber, a click on a cell, the tree view's cycle chooser and its column's visibility.

Knows only a stored Trace and its baseline: no model runs here (the tokenizer decodes), and the
quality numbers are read from the state (app.quality measured them).
"""
from __future__ import annotations

import dataclasses
import math
import time

import gradio as gr

from core import engine
from core.config import MethodParams, spec_label
from core.trace import Trace

from . import ambiguity_view, codebook_view, plots, render, theme, trees_view
from . import quality as per_image
from . import card_view
from .inputs import whole_number
from .level_rows import CASCADE_ROWS, LEVEL_VIEWS, level_views
from .messages import markdown_text, short, user_error

# a tree method's views: the cycle chooser, the chosen cycle's tree and the accepted length per cell (their
# column is shown by tree_column after each change of the stored run: an API client receives no layout)
TREE_VIEWS = ("tree_cycle", "tree", "tree_lengths")
# the outputs every view refresh returns, in this order (ui.py maps them onto components)
VIEWS = ("draft", "proposal", "final", "baseline", "heatmap", "islands", "islands_key", "timeline", "stats",
         "scrubber", "canvas", "step") + TREE_VIEWS + tuple(f"level{n}{v}" for n in CASCADE_ROWS for v in LEVEL_VIEWS) \
    + ambiguity_view.VIEWS + codebook_view.VIEWS   # the target's ambiguity per cell, the codebook's neighbours

# why a panel is empty, by method (mulo fills every panel)
NO_DRAFT = {
    "ar": "ar has no drafter: the target writes every token itself, one per pass.",
    "zipar": "zipar has no drafter: the target writes several rows at once, each row starting w tokens "
             "behind the row above.",
    "sd": "sd's drafter works at the target's own resolution, γ tokens per cycle, so there is no "
          "low-resolution draft; the heatmap shows each draft's test.",
    "cool": "cool's drafter works at the target's own resolution, γ tokens per cycle, so there is no "
            "low-resolution draft; the heatmap shows each draft's annealed test.",
    "eagle": "eagle drafts with a head on the target's own features, a tree of candidates per cycle at the "
             "target's resolution, so there is no low-resolution draft; the tree view below shows each cycle's tree.",
    "lantern": "lantern drafts EAGLE-2's tree from a head on the target's own features, at the target's "
               "resolution, so there is no low-resolution draft; the heatmap shows each draft's relaxed test, "
               "the tree view below each cycle's tree.",
    "lantern_pp": "lantern_pp drafts a static tree from a head on the target's own features, at the target's "
                  "resolution, so there is no low-resolution draft; the tree view below shows each cycle's tree.",
    "vvs": "vvs drafts eagle's tree from a head on the target's own features, at the target's resolution, so "
           "there is no low-resolution draft; the tree view below shows each verified cycle's tree.",
    "sjd": "sjd has no drafter: the target guesses a window of L tokens and refines them by Jacobi "
           "iteration; the heatmap shows each position's test.",
    "scd": "scd has no drafter: the target refines a Jacobi window of L guesses, redrawing the rest from a "
           "coupling with the old guesses; the heatmap shows each position's test.",
    "gsd": "gsd has no drafter: the target refines a Jacobi window of L guesses and tests each on its "
           "cluster of near-equal tokens; the heatmap shows each position's test.",
    "pjd": "pjd has no drafter: the target refines a Jacobi window in every active row, each row c tokens "
           "behind the row above; the heatmap shows each position's test.",
}
NO_PROPOSAL = "No up-sampled proposal: only mulo drafts at low resolution and up-samples the draft."
NO_ISLANDS = "{m} rejects nothing: every token it samples is final, so there are no islands."
NO_BASELINE = ("No ar baseline for this trace (a replayed file carries only its own run). Press "
               "\"Run or re-time the ar baseline\" to time one now.")

_IMAGES_TAIL = ("the final image; and plain autoregressive decoding (ar) with the same prompt and seed, for "
                "reference. Each token decodes to a small square of pixels (2×2 on the embedded pair, 16×16 on "
                "LlamaGen); *Show token grid lines* outlines them.")
# the explanations above the image row, the heatmap and the islands panel, by method
METHOD_EXPLAIN = {
    "mulo": ("**Left to right:** what the drafter drew at low resolution; that draft up-sampled to the full "
             "grid (the *proposal*); " + _IMAGES_TAIL + " Click a cell of the proposal or the heatmap to inspect it.",
             "For every proposed token the target adds up its probability and that of its k nearest codebook "
             "neighbours (*pooled mass*, log scale). Green cells, at or above τ, **passed τ**; red cells fell below "
             "it. The black line is the τ contour, the border between the two: it rings the red patches. Hover "
             "for the numbers, click for the cell card.",
             "Red dots: cells below τ. A tinted patch is one *island*: the cells below τ grown by the radius l, "
             "all **resampled** by the target; every other cell is **kept** as proposed. Islands are coloured "
             "from eight tints, so past the eighth island a tint comes back (the key numbers each island). "
             "Islands are independent, so the target resamples them in parallel, a few passes instead of one "
             "per token."),
    "ar": ("**Left to right:** ar has no draft and no proposal (the panels say why); " + _IMAGES_TAIL,
           "ar tests nothing: every token is sampled from the target, one per pass.",
           "ar rejects nothing, so there are no islands."),
    "zipar": ("**Left to right:** zipar has no draft and no proposal (the panels say why); " + _IMAGES_TAIL,
              "zipar tests nothing: the target samples every token, several rows at once.",
              "zipar rejects nothing, so there are no islands."),
}
# the methods that test each drafted position on its own: who drafts, and the acceptance rule
_POSITION_RULES = (
    ("sd", "the pair's small drafter model, γ tokens per cycle at the full resolution", "min(1, p/q)"),
    ("cool", "the pair's small drafter model, γ tokens per cycle at the full resolution (sd's drafting)",
     "min(1, w_i·p/q), w_i = δ·exp(−ν i − μ) relaxing the early positions of a cycle most (annealed sd)"),
    ("sjd", "the target itself: a window of L guesses refined by Jacobi iteration",
     "min(1, p/q), q the previous Jacobi iterate the guess was drawn from"),
    ("scd", "the target itself: sjd's Jacobi window, the rest redrawn from a coupling with the old guesses",
     "min(1, p/q), q the previous Jacobi iterate the guess was drawn from"),
    ("gsd", "the target itself: sjd's Jacobi window",
     "min(1, Σ_C p / Σ_C q), summed over the guess's cluster C of near-equal, nearby tokens (not lossless)"),
    ("pjd", "the target itself: a Jacobi window in every active row, a row starting c tokens behind the row above",
     "min(1, p/q), q the previous Jacobi iterate the guess was drawn from"))
# what a heatmap of last tests and the table's share of every test count (they differ by design)
_TWO_SHARES = (" The heatmap shows each position's **last** test; the table's *passed* share counts "
               "**every** test, and a position is tested again each time it is drafted again, so the two "
               "shares differ.")
for _m, _who, _rule in _POSITION_RULES:
    METHOD_EXPLAIN[_m] = (
        f"**Left to right:** {_m} drafts with {_who}, so there is no low-resolution draft or "
        "proposal (the panels say why); " + _IMAGES_TAIL + " Click a cell of the heatmap to inspect it.",
        f"Each tested position's probability of acceptance, {_rule}; a random draw decides. Colour: that "
        "probability (red low, green high); a black cross: the draft failed and the target **resampled** "
        "that token from the residual; no cross: it **passed** and was kept; blank: never tested (drawn "
        "from p directly)." + _TWO_SHARES,
        "The final image with a red dot on every token whose draft failed its test and was resampled.")
_TREE_RULES = (("eagle", "p(x) with q = 1 (the head's drafts are chosen, not sampled); a rejected sibling "
                         "leaves p, renormalised, before the next is tried"),
               ("lantern", "p̃(x) with q = 1, p̃ the target's p with the mass of the draft token's codebook "
                           "neighbours (up to δ) moved onto it"),
               ("lantern_pp", "min(1, p̃/q), drafts sampled from the head's q, p̃ relaxed over neighbours but "
                              "never above λ·p"),
               ("vvs", "p̃(x) with q = 1, as lantern; on its schedule a cycle commits a random root-to-leaf "
                       "path of the tree it drafted, cut to the tree's mean path length, with no target pass"))
for _m, _rule in _TREE_RULES:
    METHOD_EXPLAIN[_m] = (
        f"**Left to right:** {_m} drafts a tree of candidate tokens at the full resolution, so there is no "
        "low-resolution draft or proposal (the panels say why); " + _IMAGES_TAIL + " Click a cell of the "
        "heatmap to inspect it; the tree view under it shows one cycle's whole tree.",
        f"Each tested position's last test in its cycle: siblings at one cell are tried in order, each "
        f"accepted with probability {_rule}; a random draw decides. Colour: that probability (red low, green "
        "high); a black cross: every sibling failed and the target **resampled** that token from the residual; "
        "no cross: a draft **passed** and was kept; blank: never tested (a bonus token drawn from p"
        + (", or committed unverified" if _m == "vvs" else "") + ")." + _TWO_SHARES,
        "The final image with a red dot on every token where every drafted sibling failed its test and the "
        "token was resampled.")


def explain_method(method: str) -> tuple[str, str, str]:
    """The explanations of the image row, the heatmap and the islands panel for the chosen method."""
    return METHOD_EXPLAIN.get(method if isinstance(method, str) else "mulo", METHOD_EXPLAIN["mulo"])


def canvas_key(method: str) -> str:
    """The step canvas's key (HTML) for the chosen method: mulo's verify colours only where mulo verifies."""
    return theme.key_html(theme.canvas_key(method if isinstance(method, str) else "mulo"))


def speedup(trace: Trace, baseline: Trace | None) -> tuple[float, float | None, float]:
    """(sequential passes ratio, wall-clock ratio, target NFE ratio) of ar over this run. The headline
    counts every sequential pass, the drafter's too (a drafter of the target's capacity costs as much
    per pass); target NFE alone is the detail. ar spends one target pass per cell, so the pass ratios
    need no baseline run; the wall ratio does."""
    H, W = trace.grid["target"]
    ar_passes = baseline.totals["target_nfe"] + baseline.totals["drafter_nfe"] if baseline is not None else H * W
    t = trace.totals
    passes = ar_passes / max(t["target_nfe"] + t["drafter_nfe"], 1)
    target = ar_passes / max(t["target_nfe"], 1)
    wall = None if baseline is None else baseline.totals["wall_ms"] / max(t["wall_ms"], 1e-9)
    return passes, wall, target


def run_name(trace: Trace) -> str:
    """The run as a bench spec: its method and the knobs it read that differ from the defaults."""
    fields = {f.name for f in dataclasses.fields(MethodParams)}
    try:
        return spec_label(trace.method, MethodParams(**{k: v for k, v in trace.params.items() if k in fields}))
    except (TypeError, ValueError):   # a replayed trace's knob of another type: the method alone
        return trace.method


def percent(x) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _clock(t: float | None) -> str:
    return time.strftime("%H:%M:%S", time.localtime(t)) if t else "an earlier session"


def stats_markdown(trace: Trace, baseline: Trace | None, timed: dict | None = None,
                   quality: dict | None = None) -> str:
    """The headline (sequential passes, target + drafter, and wall clock, each over ar), the image's
    quality against ar's (`quality`, per_image.against_ar's dict, measured when the run and its
    baseline completed; None: nothing said), what the speed was bought with (nothing kept: all
    resampled), when each wall figure was measured, and the totals side by side.
    `timed` = {"run": epoch s, "baseline": epoch s, "baseline_remembered": bool, and "cached": seconds since the
    run finished when the page took it from the cache}."""
    passes, wall, target = speedup(trace, baseline)
    t = trace.totals
    if trace.method == "ar":
        head = f"### ar is the reference: {t['target_nfe']} sequential passes, {t['wall_ms'] / 1000:.2f} s"
        notes = []
    else:
        name = markdown_text(run_name(trace))   # a replayed trace's knobs are a file's text
        head = (f"### {name}: {passes:.2f}× fewer sequential passes than ar (target + drafter)" if passes >= 1 else
                f"### {name}: {1 / passes:.2f}× more sequential passes than ar (target + drafter)")
        head += (" · wall clock: no ar run to compare" if wall is None else
                 f" · {wall:.2f}× faster than ar on the wall clock" if wall >= 1 else
                 f" · {1 / wall:.2f}× slower than ar on the wall clock")
        notes = [f"Target passes alone: {target:.2f}× fewer than ar (detail: drafter passes not counted)."]
        if t["drafter_nfe"]:
            notes.append(f"Every drafter pass ({t['drafter_nfe']} here) is counted like a target pass in the headline, "
                         "whatever it costs"
                         + (f"; {trace.method}'s drafter, the pair's small model, runs once per drafted token at the "
                            "full resolution, so a run that rejects often spends more passes than ar"
                            if trace.method in ("sd", "cool") else "")
                         + ". A drafter pass's measured cost beside a target pass's is in the bench's ms/pass "
                           "columns (`python -m core bench`: d/t ms).")
    kept = trace.totals.get("kept_fraction")
    if trace.method != "ar" and kept == 0:
        notes.insert(0, "**Nothing of the draft was kept: every cell was resampled by the target**, so this "
                        "speed comes from how the target resampled (islands in parallel), not from speculation.")
    if timed and timed.get("cached") is not None:
        notes.insert(0, f"**From the cache**: this pair, knobs, prompt and seed ran {timed['cached']:.0f} s before "
                        "this request, which took that run as it is (the same seed gives the same tokens and passes); "
                        "its wall clock, below, is that run's, not a new measurement.")
    if timed and timed.get("shipped"):
        notes.insert(0, "**A shipped run**: these knobs on the default prompt, seed and pair ship with the app "
                        "(assets/shipped_runs.jsonl.gz, written by `python scripts/ship_runs.py`; the tests check "
                        "that a fresh run makes the same tokens and passes), so it is shown without running the "
                        "model. Its wall clock, and its ar baseline's, were measured when the file was written, on "
                        "that machine: *Run it live* runs and times it here.")
    elif wall is not None and timed and timed.get("run") is None:
        notes.append(f"Wall clock: {trace.method} as recorded in the replayed trace (another time, perhaps another "
                     f"machine), ar timed here at {_clock(timed.get('baseline'))}: a rough ratio.")
    elif wall is not None and timed:
        how = "remembered from" if timed.get("baseline_remembered") else "timed right after it, at"
        notes.append(f"Wall clock: {trace.method} timed at {_clock(timed.get('run'))}, ar {how} "
                     f"{_clock(timed.get('baseline'))}, one run at a time in this process; other load on the "
                     f"machine moves both. *Run or re-time the ar baseline* times ar again now.")
    if wall is not None and trace.method != "ar":
        notes.append("**Sequential passes are the stable figure**: the same seed and knobs give the same passes on "
                     "every machine. Wall clock is not: it moves with whatever else the machine is running, so read "
                     "the wall ratio as rough (`python -m core bench --threads 1` measures it with nothing else "
                     "running).")
    cols = [(trace.method, trace)] + ([("ar", baseline)] if baseline is not None else [])
    rows = ["| | " + " | ".join(c for c, _ in cols) + " |", "|---|" + "---|" * len(cols)]
    for label, fmt in (("sequential passes (target + drafter)",
                        lambda t: str(t["target_nfe"] + t["drafter_nfe"])),
                       ("target NFE", lambda t: str(t["target_nfe"])),
                       ("drafter NFE", lambda t: str(t["drafter_nfe"])),
                       ("wall clock (ms)", lambda t: f"{t['wall_ms']:.0f}"),
                       ("passed τ (of judged cells)" if trace.method == "mulo" else
                        "passed the test (of every test; the heatmap: each position's last)",
                        lambda t: percent(t["passed_fraction"])),
                       ("kept (not resampled, of all cells)", lambda t: percent(t["kept_fraction"]))):
        rows.append(f"| {label} | " + " | ".join(fmt(t.totals) for _, t in cols) + " |")
    if quality:
        notes.insert(0, per_image.headline(quality))
        rows += [f"| {label} | {run} | {ar} |" for label, run, ar in per_image.table_rows(quality)]
    return head + "\n\n" + "\n\n".join(notes) + "\n\n" + "\n".join(rows)


def views(state: dict | None, show_grid: bool = False, cell: tuple[int, int] | None = None) -> tuple:
    """Every view of the stored run, in VIEWS order, with `cell` (i, j) framed on the proposal and the
    heatmap when given. No model runs here. A panel a method cannot fill says why in words."""
    if not state:
        raise user_error("nothing to show yet: generate an image or upload a trace first")
    trace, baseline = state["trace"], state.get("baseline")
    m = trace.method
    tok = engine.load_pair(trace.model).tokenizer
    proposal = render.grid_image(trace.proposal, tok, False)
    v = render.verdict(trace)
    t = render.tests(trace)
    final = render.grid_image(trace.tokens, tok, show_grid)
    if v is not None and proposal is not None:
        islands = render.islands_image(proposal, v, show_grid)
    elif t is not None:
        islands = render.failed_image(render.grid_image(trace.tokens, tok, False), t, show_grid)
    else:
        islands = render.message_image(NO_ISLANDS.format(m=m))
    shown, fig = _framed(trace, proposal, v, t, show_grid, cell)
    n = len(trace.steps)
    return (render.grid_image(trace.draft, tok, show_grid) if trace.draft is not None
            else render.message_image(NO_DRAFT.get(m, f"{m} has no low-resolution draft.")),
            render.message_image(NO_PROPOSAL) if shown is None else shown,
            final,
            render.message_image("This run is ar itself: it is the baseline." if m == "ar" else NO_BASELINE)
            if baseline is None else render.grid_image(baseline.tokens, tok, show_grid),
            fig,
            islands,
            render.islands_key(v, t),
            plots.timeline(trace, baseline),
            stats_markdown(trace, baseline, state.get("timed"), state.get("quality")),
            gr.Slider(minimum=0, maximum=n, value=n, step=1),
            render.canvas_image(render.replay(trace, n), tok, show_grid),
            render.step_caption(trace, n),
            *tree_views(trace),
            *(v for level in CASCADE_ROWS for v in level_views(trace, level, tok, show_grid)),
            *ambiguity_view.views(state), *codebook_view.views(state))


def tree_views(trace) -> tuple:
    """The tree view's outputs (TREE_VIEWS order): the cycle of the longest accepted path first for a run
    that verified draft trees, empty otherwise (tree_column hides them)."""
    if not trees_view.has_trees(trace):
        return gr.Slider(minimum=1, maximum=2, value=1, step=1), None, None
    best = trees_view.best_cycle(trace)
    # a slider's maximum must exceed its minimum: a one-cycle run offers 1 to 2 (tree_at clamps)
    return (gr.Slider(minimum=1, maximum=max(len(trees_view.cycles(trace)), 2), value=best, step=1),
            trees_view.tree_figure(trace, best), trees_view.lengths_figure(trace))


def tree_column(state) -> gr.Column:
    """The tree view's column: shown when the stored run verified draft trees (eagle, lantern,
    lantern_pp, vvs), hidden otherwise."""
    return gr.Column(visible=bool(state) and trees_view.has_trees(state["trace"]))


def tree_at(state, n):
    """The tree figure of cycle n (1-based) of the stored run."""
    if not state:
        return plots.message("Generate an image with a tree method (eagle, lantern, lantern_pp, vvs) first.")
    trace = state["trace"]
    total = len(trees_view.cycles(trace))
    try:
        n = whole_number(trees_view.best_cycle(trace) if n is None else n)
    except (TypeError, ValueError, OverflowError):
        raise user_error(f"cycle must be a whole number from 1 to {max(total, 1)}; got {short(n)}") from None
    return trees_view.tree_figure(trace, min(max(n, 1), max(total, 1)))


def regrid(state: dict | None, show_grid: bool, typed=None) -> tuple:
    """The grid-lines toggle: every view redrawn (the Cell box's cell framed), or nothing when there is no
    run yet."""
    return views(state, show_grid, _pinned_cell(state, typed)) if state else tuple(gr.skip() for _ in VIEWS)


def scrub(state, n, show_grid=False):
    """(canvas, caption) after the first n steps."""
    if not state:
        return None, "Generate an image first; then drag the slider to replay the run."
    trace = state["trace"]
    total = len(trace.steps)
    try:
        n = whole_number(0 if n is None else n)
    except (TypeError, ValueError, OverflowError):
        raise user_error(f"step must be a whole number from 0 to {total}; got {short(n)}") from None
    n = min(max(n, 0), total)
    tok = engine.load_pair(trace.model).tokenizer
    return render.canvas_image(render.replay(trace, n), tok, show_grid is True), render.step_caption(trace, n)


NO_CELL = "Click a cell of the proposal or of the heatmap, or type its (row, column), to see its numbers."


def _card(trace, i: int, j: int) -> tuple[str, str]:
    """(the cell card of (i, j) in this run, the cell as the Cell box shows it)."""
    head = f"*The cell card of this run: {markdown_text(run_name(trace))}, seed {trace.seed}.*\n\n"
    return head + render.cell_details(trace, render.verdict(trace), i, j) + card_view.card(trace, i, j), f"{i}, {j}"


def inspect_cell(state, evt: gr.SelectData):
    """(card, cell) of the proposal cell under a click (evt.index = pixel (x, y))."""
    if not state:
        return "Generate an image first, then click a cell of the proposal.", gr.skip()
    trace = state["trace"]
    try:
        x, y = (float(v) for v in evt.index[:2])
    except (TypeError, ValueError):
        raise user_error(f"a cell is picked by its pixel (x, y); got {short(evt.index)}") from None
    if not (math.isfinite(x) and math.isfinite(y)):
        raise user_error(f"a cell is picked by its pixel (x, y); got {short(evt.index)}")
    return _card(trace, *render.cell_at(x, y, tuple(trace.grid["target"])))


def inspect_heatmap(state, clicked: str):
    """The same (card, cell) for a heatmap click ("i,j,…" written by the page's click listener)."""
    if not state or not clicked:
        return gr.skip(), gr.skip()
    trace = state["trace"]
    H, W = trace.grid["target"]
    try:
        i, j = (int(x) for x in clicked.split(",")[:2])
    except ValueError:
        return gr.skip(), gr.skip()
    return _card(trace, min(max(i, 0), H - 1), min(max(j, 0), W - 1))


def typed_cell(typed, grid) -> tuple[int, int] | str | None:
    """The Cell box's text ("row, column", or "(row; column)") read in a grid (H, W): the cell (i, j), the
    reason it is not one (naming the box and its range), or None for an empty box."""
    text = "" if typed is None else str(typed).strip().strip("()")
    if not text:
        return None
    H, W = grid
    try:
        i, j = (whole_number(v) for v in text.replace(";", ",").split(","))
    except (TypeError, ValueError, OverflowError):
        return f"cell must be a row and a column, e.g. 3, 7; got {short(typed)}"
    if not (0 <= i < H and 0 <= j < W):
        return f"cell must have a row in [0, {H - 1}] and a column in [0, {W - 1}]; got {short(typed)}"
    return i, j


def _pinned_cell(state, typed) -> tuple[int, int] | None:
    """The cell of the Cell box inside the stored run's grid, or None (no run, an empty box, not a cell)."""
    cell = typed_cell(typed, state["trace"].grid["target"]) if state else None
    return cell if isinstance(cell, tuple) else None


def pinned(state, typed, show_grid=False) -> tuple:
    """(proposal, heatmap) of the stored run with the Cell box's cell framed on both, redrawn whenever the
    cell or the run changes; each is left as it is where the run has no such view (no proposal, nothing
    verified) or no cell is pinned."""
    cell = _pinned_cell(state, typed)
    if cell is None:
        return gr.skip(), gr.skip()
    trace = state["trace"]
    v, t = render.verdict(trace), render.tests(trace)
    proposal = render.grid_image(trace.proposal, engine.load_pair(trace.model).tokenizer, False)
    proposal, fig = _framed(trace, proposal, v, t, show_grid is True, cell)
    fig = fig if v is not None or t is not None else None
    return (gr.skip() if proposal is None else proposal), (gr.skip() if fig is None else fig)


def _framed(trace, proposal, v, t, show_grid: bool, cell):
    """(the proposal image as shown: grid lines when asked, the cell framed; the heatmap, the cell framed)
    of a run whose proposal image (None: it has none), verdict v and tests t are given; cell None: unframed."""
    H, W = trace.grid["target"]
    if proposal is not None and show_grid:
        proposal = render.with_grid(proposal, H, W)
    if proposal is not None and cell is not None:
        proposal = render.pin_image(proposal, *cell, H, W)
    fig = plots.heatmap(trace, v, t)
    return proposal, (fig if cell is None or (v is None and t is None) else plots.pin(fig, *cell))


def inspect_typed(state, typed) -> tuple[str, str]:
    """The (card, cell) of the cell in the Cell box ("row, column"), in the stored run: called when a
    cell is typed and after every new run, so that the card follows the cell and never shows an
    earlier run's numbers. An empty box: the card says how to pick one."""
    if typed is None or not str(typed).strip().strip("()"):
        return NO_CELL, ""
    if not state:
        return "Generate an image first; the card then shows this cell.", gr.skip()
    cell = typed_cell(typed, state["trace"].grid["target"])
    if isinstance(cell, str):
        raise user_error(cell)
    i, j = cell
    return _card(state["trace"], i, j)
