"""The target's view of one cell of a stored run: what the target's processed distribution said there.

For mulo and the sd family (sd, cool, eagle, lantern, lantern_pp, vvs, the Jacobi methods sjd, scd,
gsd, pjd) the cell card shows the target's top tokens at the cell under the processed distribution it
was judged with, the rank and probability of the token it judged (mulo's proposal, a drafter's draft),
mulo's B_k with each member's share of the pooled mass, a drafter's p, q and min(1, p/q), and for a
resampled cell the distribution it was drawn from. The trace is read where it holds the numbers (the
pooled mass, the acceptance probability, a tree's per-node p and q); the distribution itself needs
ONE cache-free forward of the target (GPT.forward_visible, cut after the cell) on the cell's context, the tokens the
verdict (or the resample) read, rebuilt from the trace's steps:

- mulo verify: the tokens committed before the verify step's first judged cell, then the proposal up
  to the cell (draft_rows = 0: the proposal tokens before the cell), as the verify pass read them.
- mulo resample: the tokens committed before the resample step (the passed cells and the cells
  resampled earlier), the cell's raster predecessor fed as its stand-in (the proposal) if pending.
- sd family: the final tokens before the cell (every draft before a judged cell in its cycle passed,
  so the committed tokens and the drafts before it are the final tokens); pjd reads only the cells
  committed before the step and its own row's window before the cell.

Views are cached per (run, cell); `forward_ms` says what the forward cost. Nothing here knows Gradio.
"""
from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
import torch

from .config import TREE_METHODS
from .likelihood import sampling_of
from .sampling import processed
from .upsampling import TOKEN_SPACE

UNKNOWN = -1
TOP = 8                                   # target tokens listed per card
SD_FAMILY = ("sd", "cool", "lantern", "sjd", "scd", "gsd", "pjd") + TREE_METHODS
JACOBI = ("sjd", "scd", "gsd", "pjd")
_CACHE: OrderedDict = OrderedDict()
_CACHE_SIZE = 256


@dataclass
class Context:
    step: int                  # index of the step whose verdict (or sample) this is
    tokens: np.ndarray         # (N,) the tokens read (meaningful where visible)
    visible: np.ndarray        # (N,) bool: the cells the query reads (all before the cell)
    words: str                 # the context, in words, for the card


@dataclass
class CellView:
    cell: tuple[int, int]
    index: int
    method: str
    role: str                             # "verify" (judged), "resample", "bonus", "none"
    context: Context | None = None
    top: list = field(default_factory=list)          # [(token, p, rank)] of the processed distribution
    judged: dict | None = None            # {"label", "token", "p", "rank"}: the token the cell was judged on
    final: dict | None = None             # {"token", "p", "rank"} of the final token under the same p
    members: list = field(default_factory=list)      # mulo B_k: [(token, p, share of pooled mass)]
    pooled: float | None = None           # mulo: the trace's pooled mass
    pooled_forward: float | None = None   # mulo: the pooled mass of this forward
    tau: float | None = None
    test: dict | None = None              # drafter: {"p", "q", "ratio", "trace"}
    nodes: list = field(default_factory=list)        # tree methods: the siblings tried at the cell
    resampled: dict | None = None         # {"from": words, "top": [(token, p, rank)], "token"}
    forward_ms: float = 0.0
    forwards: int = 0                     # cache-free forwards this view cost (the target's, and sd's drafter)
    notes: list = field(default_factory=list)
    probs: torch.Tensor | None = None     # (V,) the target's processed distribution at the cell


def target_row(pair, trace, tokens: np.ndarray, visible: np.ndarray, c: int, gpt=None) -> torch.Tensor:
    """(V,) processed distribution of cell c under `gpt` (the target by default) reading `tokens` at the
    `visible` cells before c, from ONE forward without any cache (cell 0: the caption prefix alone)."""
    gpt = gpt or pair.target
    s = sampling_of(trace)
    ids, mask = pair.caption(trace.prompt, tuple(trace.grid["target"]))
    B = 1 if s.cfg == 1.0 else 2
    captions = ids[None].expand(B, *ids.shape).to(pair.device)
    masks = mask[None].expand(B, -1).to(pair.device)
    drop = torch.tensor([False, True][:B], device=pair.device)
    grid = tuple(trace.grid["target"])
    N = grid[0] * grid[1]
    with torch.inference_mode():
        if c == 0:
            cache = gpt.new_cache(B, grid, pair.device)
            logits = gpt.prefill(cache, captions, masks, grid, drop=drop)
            return processed(logits, s, cells=0)[0].float().cpu()
        tok = torch.as_tensor(np.where(visible, tokens, 0), dtype=torch.long, device=pair.device)
        vis = torch.as_tensor(np.asarray(visible, bool) & (np.arange(N) < c), device=pair.device)
        logits = gpt.forward_visible(captions, masks, tok[None].expand(B, N), grid, vis, drop=drop, upto=c + 1)
        return processed(logits[:, c - 1], s, cells=c)[0].float().cpu()


def rank_of(probs: torch.Tensor, token: int) -> int:
    """1-based rank of token under probs (ties: the tokens strictly more likely, plus one)."""
    return int((probs > probs[token]).sum()) + 1


def top_tokens(probs: torch.Tensor, n: int = TOP) -> list:
    vals, idx = probs.topk(min(n, probs.numel()))
    return [(int(t), float(v), rank_of(probs, int(t))) for v, t in zip(vals, idx) if v > 0]


# ---- contexts, rebuilt from the trace's steps ---------------------------------------------------
def mulo_contexts(trace, c: int) -> tuple[Context | None, Context | None]:
    """(the last verify that judged cell c, the step that resampled it): their contexts, replayed."""
    H, W = trace.grid["target"]
    N = H * W
    committed = np.full(N, UNKNOWN, np.int64)
    proposal = np.full(N, UNKNOWN, np.int64)
    ver = res = None
    for n, s in enumerate(trace.steps):
        if s.get("level", 0):
            continue
        cells = [i * W + j for i, j in s["cells"]]
        if s["phase"] == "upsample":
            proposal[cells] = s["tokens"]
        elif s["phase"] == "verify" and "band" in s:
            r0, r1 = s["band"]
            pooled = np.asarray(s["pooled"], dtype=np.float64).reshape(-1)
            judged = ~np.isnan(pooled)
            keep = judged & ~np.asarray(s["resample"], bool).reshape(-1)
            band = np.arange(r0 * W, r1 * W)
            if r0 * W <= c < r1 * W and judged[c - r0 * W]:
                start = int(band[judged][0])
                tokens = committed.copy()
                tokens[start:c] = proposal[start:c]
                words = ("read with the proposal tokens before this cell, as the verify pass read them"
                         if start == 0 else
                         f"read with the tokens committed before cell {start} (the earlier bands) and the proposal "
                         "tokens from there up to this cell, as the verify pass read them")
                ver = Context(n, tokens, np.arange(N) < c, words)
            committed[band[keep]] = proposal[band[keep]]
        elif s["phase"] in ("resample", "decode") and s.get("tokens") is not None:
            if c in cells:
                tokens = committed.copy()
                visible = (tokens != UNKNOWN) & (np.arange(N) < c)
                stand = ""
                if c > 0 and tokens[c - 1] == UNKNOWN:
                    tokens[c - 1] = proposal[c - 1]
                    visible[c - 1] = True
                    stand = "; its raster predecessor, still pending, fed as its proposal token (a stand-in)"
                res = Context(n, tokens, visible, "read with the tokens committed when it was resampled (the cells that "
                              f"passed τ and those resampled before step {n + 1}){stand}")
            committed[cells] = s["tokens"]
    return ver, res


def sd_judgement(trace, c: int):
    """(step index, position among the step's tests) of the last test of cell c, or (None, None); and the
    index of the step that wrote c."""
    W = trace.grid["target"][1]
    last, pos, wrote = None, None, None
    for n, s in enumerate(trace.steps):
        if s.get("level", 0):
            continue
        if s["phase"] == "verify" and "judged" in s and "prob" in s:
            for k, (i, j) in enumerate(s["judged"][:len(s["accepted"])]):
                if i * W + j == c:
                    last, pos = n, k
        if s["phase"] != "draft" and s.get("tokens") is not None and any(i * W + j == c for i, j in s["cells"]):
            wrote = n
    return last, pos, wrote


def sd_context(trace, c: int, n: int) -> Context:
    H, W = trace.grid["target"]
    N = H * W
    final = np.asarray(trace.tokens, np.int64).reshape(-1)
    visible = np.arange(N) < c
    words = ("read with the final tokens before this cell: the tokens committed before the cycle and the drafts "
             "before it in the cycle, which all passed, as the verify pass read them")
    if trace.method == "pjd":
        committed = np.zeros(N, bool)
        for s in trace.steps[:n]:
            if not s.get("level", 0) and s["phase"] != "draft" and s.get("tokens") is not None:
                committed[[i * W + j for i, j in s["cells"]]] = True
        row = np.zeros(N, bool)
        row[(c // W) * W:c] = True
        visible = visible & (committed | row)
        words = ("read with the tokens committed before this iteration and this row's accepted guesses before the "
                 "cell (pjd's row-causal pass reads no other row's guesses)")
    elif trace.method in JACOBI:
        words = ("read with the final tokens before this cell: the tokens committed before this Jacobi iteration and "
                 "the window's guesses before it, which all passed")
    return Context(n, final, visible, words)


def _draft_token(trace, c: int, n: int) -> int | None:
    """sd / cool: the drafter's token at cell c in the cycle verified by step n."""
    W = trace.grid["target"][1]
    for s in reversed(trace.steps[:n]):
        if s["phase"] == "verify":
            break
        if s["phase"] == "draft" and s["cells"] and [list(x) for x in s["cells"]] == [[c // W, c % W]]:
            return int(s["tokens"][0])
    return None


# ---- the view ---------------------------------------------------------------------------------
def run_key(trace) -> str:
    h = hashlib.sha1()
    for part in (trace.method, trace.model, trace.seed, trace.prompt, sorted(trace.params.items()),
                 len(trace.steps), trace.tokens, trace.proposal):
        h.update(repr(part).encode())
    return h.hexdigest()


def cell_view(trace, i: int, j: int, pair=None) -> CellView:
    """The target's view of cell (i, j), cached per (run, cell)."""
    key = (run_key(trace), i, j)
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    if pair is None:
        from . import engine
        pair = engine.load_pair(trace.model)
    view = _build(trace, i, j, pair)
    _CACHE[key] = view
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return view


def _timed_row(view: CellView, pair, trace, ctx: Context, c: int, gpt=None) -> torch.Tensor:
    t0 = time.perf_counter()
    out = target_row(pair, trace, ctx.tokens, ctx.visible, c, gpt)
    view.forward_ms += (time.perf_counter() - t0) * 1000.0
    view.forwards += 1
    return out


def _entry(probs, token: int, **kw) -> dict:
    return dict(kw, token=int(token), p=float(probs[token]), rank=rank_of(probs, int(token)))


def _build(trace, i: int, j: int, pair) -> CellView:
    H, W = trace.grid["target"]
    c = i * W + j
    view = CellView((i, j), c, trace.method, "none")
    final_tok = int(trace.tokens[i][j])
    if trace.method == "mulo":
        return _mulo(view, trace, c, final_tok, pair)
    if trace.method in SD_FAMILY:
        return _sd(view, trace, c, final_tok, pair)
    view.notes.append(f"{trace.method} judges no token: every token is drawn from the target's p.")
    return view


def _mulo(view, trace, c, final_tok, pair) -> CellView:
    W = trace.grid["target"][1]
    ver, res = mulo_contexts(trace, c)
    k, tau = int(trace.params.get("k", 0)), float(trace.params.get("tau", 0.0))
    if ver is not None:
        view.role, view.context = "verify", ver
        probs = _timed_row(view, pair, trace, ver, c)
        view.probs = probs
        s = trace.steps[ver.step]
        r0 = s["band"][0]
        prop = _proposal_at(trace, c, ver.step)
        view.top = top_tokens(probs)
        view.judged = _entry(probs, prop, label="proposal")
        view.final = _entry(probs, final_tok)
        row, col = divmod(c - r0 * W, W)
        view.pooled = float(s["pooled"][row][col])
        view.tau = tau
        nb = pair.neighbours.cpu()
        members = [prop] + ([int(t) for t in nb[prop, :k]] if k else [])
        total = float(probs.double().sum())
        view.members = [(t, float(probs[t]), float(probs[t]) / total) for t in members]
        view.pooled_forward = sum(share for _, _, share in view.members)
    if res is not None:
        view.role = "resample" if ver is None or res.step > ver.step else view.role
        s = trace.steps[res.step]
        if s["phase"] == "resample" and s.get("rule") == "B_k" and ver is not None:   # commit=target
            from .acceptance import restricted
            prop = view.judged["token"]
            probs = restricted(view.probs[None], torch.tensor([prop]), pair.neighbours.cpu(), k)[0]
            src = ("the verify pass's p restricted to B_k and renormalised (commit = target: a kept cell takes the "
                   "target's choice among the proposal and its neighbours)")
        elif s["phase"] == "resample" and s.get("rule") == "residual" and ver is not None:   # accept=exact
            from .acceptance import residual
            prop = view.judged["token"]
            if trace.params.get("upsampler") in TOKEN_SPACE:
                q = None
                src = (f"the residual normalize(max(0, p − q)) of the verify pass, q the {trace.params['upsampler']} "
                       "up-sampler's (not in the trace: the target's p shown)")
            else:
                q = torch.nn.functional.one_hot(torch.tensor(prop), view.probs.numel()).float()
                src = "the residual normalize(max(0, p − q)) of the verify pass, q one-hot on the proposal"
            probs = view.probs if q is None else residual(view.probs[None], q[None])[0]
        elif s["phase"] == "resample" and s.get("nfe", 1) == 0 and ver is not None:   # raster: from the verify pass
            probs = view.probs
            src = "the verify pass's distribution (raster rejection: the first cell below τ is sampled from it)"
        else:
            probs = _timed_row(view, pair, trace, res, c)
            src = "the target's processed distribution, " + res.words
        view.resampled = dict(**{"from": src}, top=top_tokens(probs), token=_entry(probs, final_tok))
        if trace.params.get("context") == "verify":
            view.notes.append("context = verify: the run's resampling read the passed cells' keys and values from the "
                              "verify pass (computed beside proposal tokens since withdrawn); this forward reads the "
                              "committed tokens exactly, so its numbers may differ a little from the run's own.")
        if trace.params.get("resample") == "jacobi":
            view.notes.append("resample = jacobi: the run read the island's Jacobi guesses too; this forward reads only "
                              "the committed tokens.")
        if view.context is None:
            view.context = res
    return view


def _proposal_at(trace, c: int, upto: int) -> int:
    """The proposal token at cell c as the verify step `upto` judged it (the last upsample before it)."""
    W = trace.grid["target"][1]
    for s in reversed(trace.steps[:upto]):
        if s["phase"] == "upsample" and not s.get("level", 0):
            cells = [a * W + b for a, b in s["cells"]]
            if c in cells:
                return int(s["tokens"][cells.index(c)])
    return int(np.asarray(trace.proposal).reshape(-1)[c])


def _sd(view, trace, c, final_tok, pair) -> CellView:
    n, pos, wrote = sd_judgement(trace, c)
    step_n = n if n is not None else wrote
    if step_n is None:
        view.notes.append("no step of the target wrote this cell.")
        return view
    ctx = sd_context(trace, c, step_n)
    view.context = ctx
    probs = _timed_row(view, pair, trace, ctx, c)
    view.probs = probs
    view.top = top_tokens(probs)
    view.final = _entry(probs, final_tok)
    s = trace.steps[step_n]
    if n is None:
        view.role = "bonus"
        unverified = s.get("verified") is False
        view.resampled = dict(**{"from": "a path of the head's drafted tree (committed unverified)" if unverified else
                                 "the target's p directly (never tested: a bonus token, or the first cell)"},
                              top=top_tokens(probs), token=_entry(probs, final_tok))
        return view
    view.role = "verify"
    ok, a = bool(s["accepted"][pos]), float(s["prob"][pos])
    if trace.method in TREE_METHODS and s.get("tree"):
        t = s["tree"]
        W = trace.grid["target"][1]
        # the tried siblings at the cell: the nodes whose depth puts them at c and that were tried
        first_judged = s["judged"][0]
        root = first_judged[0] * W + first_judged[1] - 1
        view.nodes = [dict(token=int(t["token"][m]), p=float(t["p"][m]), q=float(t["q"][m]), verdict=int(t["verdict"][m]))
                      for m in range(len(t["token"])) if root + int(t["depth"][m]) == c and t["verdict"][m] >= 0]
        x = next((nd["token"] for nd in view.nodes if nd["verdict"] == 1), view.nodes[-1]["token"] if view.nodes else None)
        if x is not None:
            view.judged = _entry(probs, x, label="draft (the last sibling tried)")
            q_x = next(nd["q"] for nd in view.nodes if nd["token"] == x)
            # eagle, lantern and vvs test a chosen draft with q = 1: the head's q drew the tree only;
            # lantern_pp's test divides by it
            view.test = dict(p=float(probs[x]), trace=a, **({"q": q_x} if trace.method == "lantern_pp" else {"head_q": q_x}))
        if not ok and trace.method in ("eagle", "vvs") and view.nodes:   # point rule: rejected siblings leave p
            r = probs.clone()
            r[[nd["token"] for nd in view.nodes]] = 0.0
            r = r / r.sum().clamp_min(1e-20)
            view.resampled = dict(**{"from": "p with every rejected sibling removed, renormalised (q = 1)"},
                                  top=top_tokens(r), token=_entry(r, final_tok))
    elif trace.method in ("sd", "cool"):
        x = _draft_token(trace, c, n)
        if x is not None and pair.small is not None:
            view.judged = _entry(probs, x, label="draft")
            q = _timed_row(view, pair, trace, ctx, c, pair.small)
            p_x, q_x = float(probs[x]), float(q[x])
            view.test = dict(p=p_x, q=q_x, ratio=min(1.0, p_x / max(q_x, 1e-20)), trace=a, q_rank=rank_of(q, x))
            if trace.method == "cool":
                from .acceptance import annealed_accept_prob, annealed_weights
                from .methods.cool import offset
                g, pr = int(trace.params["gamma"]), trace.params
                w = annealed_weights(g, pr["cool_delta"], pr["cool_nu"], offset(g, pr["cool_nu"], pr["cool_norm"]))
                view.test["weight"] = float(w[pos])
                view.test["annealed"] = float(annealed_accept_prob(probs[x], q[x], w[pos]))
            if not ok:
                from .acceptance import residual
                r = residual(probs[None], q[None])[0] if trace.method == "sd" else None
                if trace.method == "cool":
                    from .acceptance import annealed_residual
                    r = annealed_residual(probs[None], q[None], w[pos:pos + 1])[0]
                view.resampled = dict(**{"from": "the residual normalize(max(0, p − q))" if trace.method == "sd" else
                                         "cool's residual normalize(max(0, p − min(q, w·p)))"},
                                      top=top_tokens(r), token=_entry(r, final_tok))
    else:   # Jacobi family, lantern's relaxed test: the guess is the final token where it passed
        view.test = dict(trace=a)
        if ok:
            view.judged = _entry(probs, final_tok, label="guess" if trace.method in JACOBI else "draft")
            view.test["p"] = float(probs[final_tok])
    view.test = dict(view.test or {}, passed=ok)
    if not ok and view.resampled is None:
        view.resampled = dict(**{"from": "the residual of the test (its q is not in the trace); the target's p shown"},
                              top=top_tokens(probs), token=_entry(probs, final_tok))
    return view
