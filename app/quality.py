"""A run's image quality against ar's image of the same prompt and seed, as the views word it.

Owns when the per-image yardsticks (core.likelihood.against_ar: sharpness ÷ ar and the log-lik gap)
are measured and how the Run tab says them. They cost teacher-forced target forwards, so the handlers
measure them once, when a run and its ar baseline are both complete, and keep the dict in the session
state; the views only read it. The set yardsticks (detail FD to ar's samples, FD to the data) need
many prompts and are the benchmark's (`python -m core bench`), not this module's.
"""
from __future__ import annotations

from core import likelihood

# ar against itself, by definition: as sharp as ar, as probable as ar
REFERENCE = dict(sharpness=1.0, loglik_gap=0.0)
SHARPNESS = "sharpness ÷ ar"
GAP = "log-lik gap"
SETS = ("The set yardsticks (detail FD to ar's samples, FD to the data) need many prompts: "
        "`python -m core bench` measures them.")


def against_ar(pair, trace, baseline, image=None, ar_image=None, probs=None) -> dict | None:
    """likelihood.against_ar of a run with its ar baseline; None for ar itself (the reference) or
    without a baseline (a replay before its baseline is run). probs: the run's tokens' p_target when
    already read (the ambiguity view's pass), so the target is not run over them twice."""
    if baseline is None or trace.method == "ar":
        return None
    return likelihood.against_ar(pair, trace, baseline, image, ar_image, probs)


def signed(x: float, digits: int) -> str:
    """A number as the page prints it: fixed digits, a true minus sign."""
    return f"{x:.{digits}f}".replace("-", "−")


def headline(q: dict) -> str:
    """The Run tab's quality line under the speed headline, each number with what it means."""
    floor = (f" {q['impossible']} of this run's tokens are ones the target rules out (counted at probability "
             f"{likelihood.IMPOSSIBLE:g}, so the gap understates the loss)." if q["impossible"] else "")
    return (f"Quality against ar's image of this prompt and seed: **{SHARPNESS} {signed(q['sharpness'], 2)}** "
            "(high-frequency energy of this image over ar's; 1 = as sharp as ar's), "
            f"**{GAP} {signed(q['loglik_gap'], 2)} nats/token** (the target's mean log-probability of these "
            f"tokens minus of ar's; 0 = as probable as the target's own sample).{floor}")


def table_rows(q: dict) -> list[tuple[str, str, str]]:
    """(label, this run, ar) rows for the totals table."""
    return [(SHARPNESS, signed(q["sharpness"], 2), signed(1.0, 2)),
            ("target log-lik per token (nats)", signed(q["loglik"], 3), signed(q["ar_loglik"], 3))]
