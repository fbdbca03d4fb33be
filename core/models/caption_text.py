"""The text cleaning LlamaGen applies to a caption before FLAN-T5 reads it (its T5 text preprocessing,
inherited from DeepFloyd IF / PixArt): one pass of the rules below, run twice, as the official code does.

The regular-expression rules are reproduced rule for rule; the two helpers of the original are the
same libraries, called the same way: BeautifulSoup(text, features="html.parser").text for the HTML
(tags, comments and <script>/<style>/<template> bodies dropped, HTML5 entities such as &star;
decoded) and ftfy.fix_text (mojibake repair, NFC, full-width forms, curly quotes, ...). Both are
imported on first use, so importing this module needs neither; cleaning without them raises an
ImportError naming the package. Tested on a table of official outputs
(tests/fixtures/llamagen_golden/golden.json; `scripts/llamagen_golden.py --fuzz N` compares random
punctuation-heavy strings against the official function). It knows nothing about tokenizers or models.
"""
from __future__ import annotations

import html
import re
import warnings
from urllib.parse import unquote_plus

_TLD = r"(?:com|co|ru|net|org|edu|gov|it)"
_FILE_EXT = r"(?:png|jpg|jpeg|bmp|webp|eps|pdf|apk|mp4)"
_DASHES = ("\u002d\u058a\u05be\u1400\u1806\u2010-\u2015\u2e17\u2e1a\u2e3a\u2e3b\u2e40\u301c\u3030\u30a0"
           "\ufe31\ufe32\ufe58\ufe63\uff0d")
_LOOSE_PUNCT = r"#®•©™&@·º½¾¿¡§~)(\]\[}{|\\/*"


def _rules(*pairs) -> list[tuple[re.Pattern, str]]:
    return [(re.compile(p), r) for p, r in pairs]


# before the HTML is read: web addresses (with a scheme, "www:", or a bare domain and path)
_ADDRESSES = _rules(*[(r"\b((?:%s:(?:/{1,3}|[a-zA-Z0-9%%])|[a-zA-Z0-9.\-]+[.]%s[\w/-]*\b/?(?!@)))" % (s, _TLD), "")
                      for s in ("https?", "www")])

# after the HTML: handles, CJK, unified dashes and quotes, entities, numbers that carry no meaning
_SYMBOLS = _rules(
    (r"@[\w\d]+\b", ""),                                 # @nickname
    ("[\u31c0-\u9fff]+", ""),                            # CJK strokes .. unified ideographs (one block)
    (f"[{_DASHES}]+", "-"),                              # every kind of dash, runs included
    ("[`´«»“”¨]", '"'),
    ("[‘’]", "'"),
    (r"&quot;?", ""),
    (r"&amp", ""),
    (r"\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}", " "),        # IP addresses
    (r"\d:\d\d\s+$", ""),                                # article ids at the end
    (r"\\n", " "),                                       # a written-out "\n"
    (r"#\d{1,3}\b", ""),                                 # "#12"
    (r"#\d{5,}\b", ""),                                  # "#12345..."
    (r"\b\d{6,}\b", ""),                                 # long digit runs
    (rf"[\S]+\.{_FILE_EXT}", ""),                        # file names
    (r"[\"']{2,}", '"'),                                 # runs of quotes
    (r"[\.]{2,}", " "),                                  # ellipses
    (f"[{_LOOSE_PUNCT}]+", " "),                         # brackets, slashes, stars, &, #, ...
    (r"\s+\.\s+", " "),                                  # a lone full stop
)
_SEPARATORS = re.compile(r"[-_]")                        # more than three: words-joined-like-this

# after ftfy and entity decoding: codes, shop words, sizes, spacing, stray ends
_WORDS = _rules(
    (r"\b[a-zA-Z]{1,3}\d{3,15}\b", ""),                  # jc6640
    (r"\b[a-zA-Z]+\d+[a-zA-Z]+\b", ""),                  # jc6640vc
    (r"\b\d+[a-zA-Z]+\d+\b", ""),                        # 6640vc231
    (r"(worldwide\s+)?(free\s+)?shipping", ""),
    (r"(free\s)?download(\sfree)?", ""),
    (r"\bclick\b\s(?:for|on)\s\w+", ""),
    (rf"\b{_FILE_EXT}(\simage[s]?)?", ""),
    (r"\bpage\s+\d+\b", ""),
    (r"\b\d*[a-zA-Z]+\d+[a-zA-Z]+\d+[a-zA-Z\d]*\b", " "),  # j2d1a2a...
    (r"\b\d+\.?\d*[xх×]\d+\.?\d*\b", ""),                # 1920x1080 (Latin x, Cyrillic х, ×)
    (r"\b\s+:\s+", ": "),
    (r"(\D[,\./])\b", r"\1 "),                           # a space after , . / glued to a word
    (r"\s+", " "),
    (r"^[\"']([\w\W]+)[\"']$", r"\1"),                   # surrounding quotes
    (r"^['_,\-:;]", ""),
    (r"['_,\-:+]$", ""),
    (r"^\.\S+$", ""),
)


_LIBS: dict = {}


def _lib(name: str):
    """bs4 or ftfy, imported on first use; a clear ImportError when the package is missing."""
    if name not in _LIBS:
        package = {"bs4": "beautifulsoup4", "ftfy": "ftfy"}[name]
        try:
            mod = __import__(name)
        except ImportError as e:
            raise ImportError(f"LlamaGen prompt cleaning needs the {package!r} package, as the official T5 "
                              f"preprocessing does: pip install {package} (see requirements.txt)") from e
        if name == "bs4":  # prompts that look like a file name or URL are text here, not a mistake
            warnings.filterwarnings("ignore", category=mod.MarkupResemblesLocatorWarning)
        _LIBS[name] = mod
    return _LIBS[name]


def html_text(text: str) -> str:
    """The text content of an HTML fragment, as BeautifulSoup's html.parser backend gives it."""
    bs4 = _lib("bs4")
    try:
        return bs4.BeautifulSoup(text, features="html.parser").text
    except bs4.ParserRejectedMarkup as e:  # e.g. "<![foo[": the official cleaning fails on it too
        raise ValueError(f"the prompt's markup cannot be parsed (as in the official cleaning): {text!r}") from e


def fix_text(text: str) -> str:
    return _lib("ftfy").fix_text(text)


def _apply(rules, text: str) -> str:
    for pattern, repl in rules:
        text = pattern.sub(repl, text)
    return text


def clean_once(text: str) -> str:
    text = unquote_plus(str(text)).strip().lower()
    text = text.replace("<person>", "person")
    text = html_text(_apply(_ADDRESSES, text))
    text = _apply(_SYMBOLS, text)
    if len(_SEPARATORS.findall(text)) > 3:
        text = _SEPARATORS.sub(" ", text)
    text = html.unescape(html.unescape(fix_text(text))).strip()
    return _apply(_WORDS, text).strip()


def clean_caption(text: str) -> str:
    """A prompt as LlamaGen's T5 preprocessing leaves it: the cleaning pass applied twice."""
    return clean_once(clean_once(text))
