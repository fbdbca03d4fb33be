"""LlamaGen's prompt cleaning on the inputs where only the official helpers get it right: BeautifulSoup's
html.parser text (<script>/<style> bodies dropped, HTML5 entities decoded) and ftfy.fix_text (mojibake
repaired). Each expected string is the output of the official T5Embedder.text_preprocessing
(FoundationVision/LlamaGen@ce98ec4, language/t5.py) with beautifulsoup4 4.15 and ftfy 6.3, run outside
this repository. Negative controls: with the helpers swapped for standard-library stand-ins (html.parser
text with HTML 4 entities; text left as it is) the same inputs come out differently while the plain ones
still match, and without the packages cleaning fails with an ImportError that names them while importing
the module still works."""
import html
import subprocess
import sys
from html.entities import name2codepoint
from html.parser import HTMLParser
from pathlib import Path

import pytest

from core.models import caption_text
from core.models import llamagen as lg

ROOT = Path(__file__).resolve().parent.parent

OFFICIAL = [
    # <script>/<style> bodies are not text to BeautifulSoup (bs4 >= 4.10)
    ("a <script>var x = 1;</script> cat", "a cat"),
    ("a <style>p {color: red}</style> dog", "a dog"),
    # HTML5-only named entities, decoded by bs4's html.parser backend
    ("a &star; rating", "a \u2606 rating"),
    ("a &check; mark", "a \u2713 mark"),
    ("a &approx; 10 cm", "a \u2248 10 cm"),
    # mojibake: the official lower-cases and drops "™" (a loose punctuation mark) before ftfy runs, so
    # ftfy sees "doesnâ€ t" and reads "â€ " as the UTF-8 of "†"; a whole "â€œ…â€\x9d" becomes quotes
    ("doesn\u00e2\u20ac\u2122t", "doesn\u2020t"),
    ("it doesn\u00e2\u20ac\u2122t matter", "it doesn\u2020t matter"),
    ("the \u00e2\u20ac\u0153best\u00e2\u20ac\x9d dog", 'the "best" dog'),
]
PLAIN = [  # official outputs the old standard-library helpers already matched
    ("a red <b>car</b> &amp; a &bogus; van", "a red car a bogus van"),
    ("A Cat,a dog.a bird", "a cat, a dog. a bird"),
]


@pytest.mark.parametrize("raw, cleaned", OFFICIAL + PLAIN)
def test_prompt_cleaning_equals_the_official_one(raw, cleaned):
    assert lg.clean_prompt(raw) == cleaned


class _TagStripper(HTMLParser):
    """Every data run kept (script and style bodies too), HTML 4 entities decoded, others kept as "&name"."""

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.parts = []

    def handle_data(self, data):
        self.parts.append(data)

    def handle_entityref(self, name):
        self.parts.append(chr(name2codepoint[name]) if name in name2codepoint else f"&{name}")

    def handle_charref(self, name):
        self.parts.append(html.unescape(f"&#{name};"))


def _stdlib_html_text(text):
    p = _TagStripper()
    p.feed(text)
    p.close()
    return "".join(p.parts)


def test_standard_library_stand_ins_fail_the_same_inputs(monkeypatch):   # negative control
    monkeypatch.setattr(caption_text, "html_text", _stdlib_html_text)
    monkeypatch.setattr(caption_text, "fix_text", lambda t: t)
    wrong = [raw for raw, cleaned in OFFICIAL if caption_text.clean_caption(raw) != cleaned]
    assert wrong == [raw for raw, _ in OFFICIAL]
    assert all(caption_text.clean_caption(raw) == cleaned for raw, cleaned in PLAIN)


def test_markup_the_official_parser_rejects_is_a_clear_error():
    with pytest.raises(ValueError, match="cannot be parsed"):
        lg.clean_prompt("a <![foo[ b")


def test_without_the_packages_import_works_and_cleaning_names_them():
    code = ("import sys; sys.modules['bs4'] = sys.modules['ftfy'] = None\n"
            "from core.models import caption_text\n"
            "try:\n    caption_text.clean_caption('a cat')\n"
            "except ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "'beautifulsoup4'" in out.stdout and "pip install beautifulsoup4" in out.stdout
