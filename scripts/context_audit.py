"""Audit what mulo's target reads: every resampled cell and every later band's verify pass against a
cache-free forward over the tokens committed at that moment.

    python scripts/context_audit.py --heldout 0 --seed 100 --spec mulo [--spec mulo:draft_rows=4] [--json audit.json]

For each resampled cell: does its query read a slot that is stale (a token nobody committed, another
token than the committed one, or K/V written before an earlier cell's committed token changed from
the token it held), and how far (total variation) is the distribution the engine sampled from from
the target's own distribution given the committed tokens (GPT.forward_visible, the oracle)? For each verify pass after the first
band: the largest gap in pooled mass and the verdicts that flip. The run is recorded by wrapping the
target model's forward entry points, so the audit depends on no engine internals.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core import bench, engine  # noqa: E402
from core.config import RunConfig  # noqa: E402
from core.embedded.evaluate import heldout  # noqa: E402
from core.sampling import processed as _processed  # noqa: E402


def processed(logits, sampling, cells):
    try:
        return _processed(logits, sampling, cells=cells)
    except TypeError:  # an engine without cfg_interval
        return _processed(logits, sampling)


def record_forwards(gpt, grid) -> list[dict]:
    """Wrap gpt's forward entry points (instance attributes); each call on `grid` appends one record
    (the embedded family's drafter is the same model on a smaller grid)."""
    calls: list[dict] = []

    def wrap(name):
        original = getattr(gpt, name)

        def recorded(cache, *a, **kw):
            P = cache.prefix_len
            valid_before = cache.valid[0, P:].cpu().numpy().copy()
            out = original(cache, *a, **kw)
            if tuple(a[2]) != tuple(grid):
                return out
            if name == "prefill":
                calls.append(dict(kind="prefill"))
            else:
                tokens, cells = a[0], a[1]
                write = kw.get("write", a[3] if len(a) > 3 else None)
                write = [True] * len(cells) if write is None else write.tolist()
                calls.append(dict(kind="cells", cells=cells.tolist(), tokens=tokens[0].tolist(), write=write,
                                  valid=valid_before, logits=out))
            return out
        setattr(gpt, name, recorded)
    for name in ("prefill", "forward_cells", "step_one"):
        wrap(name)
    return calls


def audit(pair, cfg: RunConfig) -> dict:
    gpt = pair.target
    calls = record_forwards(gpt, pair.grid)
    try:
        trace = engine.run(cfg, pair)
    finally:
        for name in ("prefill", "forward_cells", "step_one"):
            gpt.__dict__.pop(name, None)
    H, W = pair.grid
    N = H * W
    ids, mask = pair.caption(cfg.prompt, pair.grid)
    B = 1 if cfg.sampling.cfg == 1.0 else 2
    captions, masks = ids[None].expand(B, *ids.shape), mask[None].expand(B, -1)
    drop = torch.tensor([False, True][:B])

    def reference(tokens: np.ndarray, visible: np.ndarray) -> torch.Tensor:
        with torch.inference_mode():
            logits = gpt.forward_visible(captions, masks, torch.from_numpy(tokens)[None].expand(B, N), pair.grid,
                                         torch.from_numpy(visible), drop=drop)
        return processed(logits, cfg.sampling, cells=list(range(1, N + 1)))[0].double()

    # replay: which cells are committed (and with which token) before each step; slot contents per call
    committed = np.full(N, -1, dtype=np.int64)
    changed_at = np.full(N, -1, dtype=np.int64)   # call index of the last change of a cell's committed token
    slot_tok = np.full(N, -1, dtype=np.int64)
    slot_time = np.full(N, -1, dtype=np.int64)
    proposal = np.full(N, -1, dtype=np.int64)
    calls_iter = iter(enumerate(calls))
    stale_cells = resampled = 0
    tvs: list[float] = []
    pooled_gap, flips = 0.0, 0

    def take(n_calls: int) -> list[tuple[int, dict]]:
        out = []
        for _ in range(n_calls):
            n, c = next(calls_iter)
            if c["kind"] == "cells":
                for cell, tok, wr in zip(c["cells"], c["tokens"], c["write"]):
                    if wr:
                        slot_tok[cell], slot_time[cell] = tok, n
            out.append((n, c))
        return out

    for s in trace.steps:
        if s["model"] != "target":
            if s["phase"] == "upsample":
                for (i, j), x in zip(s["cells"], s["tokens"]):
                    proposal[i * W + j] = x
            continue
        got = take(s["nfe"])
        if s["phase"] == "verify":
            r0, r1 = s["band"]
            band = np.arange(r0 * W, r1 * W)
            if r0 > 0:  # a later band: pooled against the cache-free forward over commits + proposal
                tokens = np.where(committed >= 0, committed, 0)
                tokens[band] = proposal[band]
                visible = committed >= 0
                visible[band] = True
                p = reference(tokens, visible)
                nb = pair.neighbours.cpu()
                k, tau = cfg.params.k, cfg.params.tau
                for n, t in enumerate(band):
                    x = int(proposal[t])
                    b_k = [x] + nb[x, :k].tolist()
                    want = float(p[t - 1, b_k].sum() / p[t - 1].sum())
                    have = s["pooled"][n // W][n % W]
                    if have is None:
                        continue
                    pooled_gap = max(pooled_gap, abs(want - have))
                    flips += (want >= tau) != bool(s["accepted"][n // W][n % W])
            rx = np.asarray(s["resample"], dtype=bool).reshape(-1)
            committed[band[~rx]] = proposal[band[~rx]]
            continue
        if s["phase"] != "resample" or s["nfe"] == 0:
            if s["phase"] == "resample":  # raster rejection: t0 from the verify pass itself
                (i, j), = s["cells"]
                committed[i * W + j] = s["tokens"][0]
            continue
        n_call, call = got[-1]
        probs = processed(call["logits"], cfg.sampling, cells=[c + 1 for c in call["cells"]])[0].double()
        valid_after = call["valid"].copy()
        valid_after[[c for c, wr in zip(call["cells"], call["write"]) if wr]] = True
        last_change = np.maximum.accumulate(np.concatenate([[-1], changed_at[:-1]]))
        for (i, j), tok in zip(s["cells"], s["tokens"]):
            c = i * W + j
            row = call["cells"].index(c - 1) if c > 0 else None
            if row is None:
                continue
            resampled += 1
            reads = np.flatnonzero(valid_after[:c])
            reads = reads[reads != c - 1] if not call["write"][row] else reads
            bad = (committed[reads] < 0) | (slot_tok[reads] != committed[reads]) | (last_change[reads] > slot_time[reads])
            stale_cells += bool(bad.any())
            tokens = np.where(committed >= 0, committed, 0)
            visible = committed >= 0
            tokens[c - 1] = call["tokens"][row]
            want = reference(tokens, visible)[c - 1]
            tvs.append(0.5 * float((probs[row] - want).abs().sum()))
        for (i, j), tok in zip(s["cells"], s["tokens"]):
            committed[i * W + j] = tok
            if tok != proposal[i * W + j]:  # slots written while it held its proposal saw another token
                changed_at[i * W + j] = n_call
    return dict(prompt=cfg.prompt, seed=cfg.seed,
                resampled=resampled, read_stale=stale_cells,
                tv_mean=float(np.mean(tvs)) if tvs else 0.0, tv_max=float(np.max(tvs)) if tvs else 0.0,
                later_band_pooled_gap=pooled_gap, later_band_flips=flips,
                target_nfe=trace.totals["target_nfe"], drafter_nfe=trace.totals["drafter_nfe"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompt", default="", help="a prompt (default: the held-out prompt --heldout)")
    ap.add_argument("--heldout", type=int, default=0, help="index of the held-out prompt (the bench's order)")
    ap.add_argument("--seed", type=int, default=100)
    ap.add_argument("--spec", action="append", default=None, help="method spec, e.g. mulo:draft_rows=4 (repeatable)")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    pair = engine.load_pair("embedded")
    prompt = args.prompt or heldout(args.heldout + 1)[args.heldout].caption()
    rows = []
    for spec in args.spec or ["mulo"]:
        _, cfg = bench.parse_spec(spec, RunConfig(prompt=prompt, seed=args.seed))
        row = audit(pair, cfg)
        row["spec"] = spec
        rows.append(row)
        print(f"{spec:<36} resampled {row['resampled']:4d}, read a stale slot {row['read_stale']:4d}, "
              f"TV mean {row['tv_mean']:.4f} max {row['tv_max']:.4f}; later bands: pooled gap "
              f"{row['later_band_pooled_gap']:.4f}, flips {row['later_band_flips']}; "
              f"NFE {row['target_nfe']} + {row['drafter_nfe']}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
