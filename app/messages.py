"""How a message reaches the page: a mistake in the input as a gr.Error (one log line, no traceback),
text from a client or a file escaped once where it leaves (a toast renders HTML, a level title
Markdown) and clipped for quoting, and the engine's field names given the symbols the page shows.

Owns the wording's safety, not its content: knows no knob's range, no model, no Trace.
"""
from __future__ import annotations

import logging
import re
from contextlib import contextmanager

import gradio as gr

from core.config import ParameterError
from core.embedded.domain import PromptError
from core.trace import TraceError

log = logging.getLogger("mulo.app")


def user_error(message: str) -> gr.Error:
    """A mistake in the input: shown once in the page (escaped there), one line in the server log, no traceback."""
    log.warning("user input refused: %s", message)
    return gr.Error(plain(message), print_exception=False)


@contextmanager
def user_errors(what: str = ""):
    """Turn the core's errors about bad input into a gr.Error with the same message."""
    try:
        yield
    except (ParameterError, PromptError, TraceError) as e:
        raise user_error(f"{what}{with_symbol(str(e))}") from None


def plain(text: str) -> str:
    """A message as a toast shows it (the page renders a toast's text as HTML): any markup a client
    slipped into it made inert. Applied once, where the message leaves for the page."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markdown_text(value) -> str:
    """A value from a client or a file as plain text inside Markdown: every ASCII punctuation mark
    backslash-escaped (no link, autolink, emphasis, HTML or LaTeX), on one line."""
    return re.sub(r"([!-/:-@\[-`{-~])", r"\\\1", " ".join(str(value).split()))


def clip(text: str, most: int = 40) -> str:
    """Text from a client as a message quotes it, unquoted: at most `most` characters."""
    return text if len(text) <= most else text[:most - 3] + "..."


def short(v) -> str:
    """A value a client sent, quoted for a message: at most 40 characters (user_error escapes it)."""
    s = repr(v)
    return s if len(s) <= 40 else s[:37] + "..."


# the symbols the page shows beside the field names the engine's messages use
SYMBOLS = dict(tau="τ", scale="r", radius="l", window="w", gamma="γ", delta="δ", sjd_window="L", gsd_group="G",
               pjd_c="c", cool_delta="δ", cool_nu="ν", lantern_lambda="λ")


def with_symbol(message: str) -> str:
    """'tau must be …' -> 'τ (tau) must be …': the engine's message with the symbol the page shows."""
    name = message.split(" ", 1)[0]
    return f"{SYMBOLS[name]} ({name}){message[len(name):]}" if name in SYMBOLS else message
