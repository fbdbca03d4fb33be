"""The docs stay honest: every relative link of README.md and docs/*.md names a file that exists (and,
with #anchor, a heading of that page); every `python -m core …` command they show, in a code block
or a code span, parses with that sub-command's own argparse (core.cli's parser, nothing run); the
README stays a front page, under README_LINES lines, and keeps the two set-up commands that .ci/run
and a newcomer run. Each check has a negative control: a broken link, a missing anchor and a flag
the CLI does not have are caught."""
import contextlib
import io
import re
import shlex
from pathlib import Path

import pytest

from core import cli

ROOT = Path(__file__).resolve().parent.parent
README_LINES = 200
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_APP = "pip install torch==2.13.0 -r requirements.txt && python app.py"
RUN_TESTS = "bash .ci/run"


# ---- links ---------------------------------------------------------------------------------------

def _prose(text: str) -> str:
    """The text outside fenced code blocks (a link or heading inside one is code, not a link)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip().lower())   # a link keeps its words
    text = re.sub(r"[^\w\- ]", "", text.replace("`", ""))
    return text.replace(" ", "-")


def anchors(text: str) -> set[str]:
    """The anchors of a page's headings, with GitHub's -1, -2 … for repeated ones."""
    seen: dict[str, int] = {}
    out = set()
    for h in re.findall(r"^#{1,6} (.+)$", _prose(text), flags=re.M):
        s = slug(h)
        out.add(s if s not in seen else f"{s}-{seen[s]}")
        seen[s] = seen.get(s, 0) + 1
    return out


def links(text: str) -> list[str]:
    """The targets of the Markdown links and images of a page, outside code."""
    prose = re.sub(r"`[^`\n]*`", "", _prose(text))
    return re.findall(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose)


def broken(page: Path, text: str | None = None) -> list[str]:
    """The relative links of a page that resolve to no file, or to no heading of their page."""
    text = page.read_text() if text is None else text
    bad = []
    for target in links(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):   # http:, https:, mailto: — not ours to check
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            bad.append(f"{target}: no file {file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}")
        elif anchor and file.suffix == ".md" and anchor not in anchors(file.read_text()):
            bad.append(f"{target}: no heading #{anchor} in {file.name}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_a_file_and_a_heading_that_exist(page):
    assert broken(page) == []


def test_a_broken_link_and_a_missing_anchor_are_caught():   # negative control of the check above
    page = ROOT / "docs" / "methods.md"
    text = "See [nowhere](no-such-page.md), [results](results.md#no-such-heading) and [ok](results.md)."
    assert [b.split(":")[0] for b in broken(page, text)] == ["no-such-page.md", "results.md#no-such-heading"]


def test_the_slug_is_github_s():
    assert slug("The explorer (`python -m app.bench`)") == "the-explorer-python--m-appbench"
    assert slug("Quality that can see what verification buys: the yardsticks") == \
        "quality-that-can-see-what-verification-buys-the-yardsticks"
    assert anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


# ---- commands ------------------------------------------------------------------------------------

def commands(text: str) -> list[str]:
    """Every `python -m core …` (or `torchrun … -m core …`) command of a page: the lines of its code
    blocks, joined over trailing backslashes as the shell joins them, and its code spans (which may
    run over a line end); a shell prompt, environment settings and a trailing comment are dropped."""
    found = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.M | re.S):
        found += [l for l in block.replace("\\\n", "").split("\n") if re.search(r"(^|\s)-m core\b", l)]
    found += [" ".join(c.split()) for c in re.findall(r"`([^`]+)`", _prose(text)) if "-m core " in c]
    out = []
    for c in found:
        c = re.sub(r"^\s*\$\s*", "", c)
        c = re.sub(r"\s+#.*$", "", c).strip()
        out.append(c)
    return out


def argv(command: str) -> list[str]:
    """The words after `-m core` of a shown command."""
    words = shlex.split(command)
    at = max(i for i, w in enumerate(words) if w == "-m" and words[i + 1:i + 2] == ["core"])
    return words[at + 2:]


def parses(args: list[str]) -> str | None:
    """None if core.cli's parser accepts args (sub-command, flags, choices, types), else its message.
    Nothing runs: `--help` prints and stops, as the shell would show it."""
    parser = cli.build_parser()
    cli._extend(parser, cli._chosen_model(args))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            parser.parse_args(args)
    except SystemExit as e:
        return None if e.code == 0 else err.getvalue().strip().splitlines()[-1]
    return None


SHOWN = [(p, c) for p in PAGES for c in commands(p.read_text())]


def test_the_pages_show_commands_of_every_sub_command():
    shown = {argv(c)[0] for _, c in SHOWN}
    assert {"generate", "bench", "report", "evaluate", "train"} <= shown, shown


@pytest.mark.parametrize("page,command", SHOWN, ids=[f"{p.name}:{c[:60]}" for p, c in SHOWN])
def test_every_core_command_shown_parses_with_its_sub_command_s_flags(page, command):
    assert parses(argv(command)) is None, command


@pytest.mark.parametrize("args", [["generate", "--no-such-flag"], ["bench", "--methods", "mulo", "--prompt", "3",
                                                                   "--seeds", "0"],
                                  ["evaluate", "--what", "everything"], ["train", "--job", "target"],
                                  ["bench", "--prompts", "many"], ["no-such-command"]])
def test_a_flag_choice_or_value_the_cli_does_not_take_is_refused(args):   # negative controls
    assert parses(args) is not None


def test_commands_are_read_from_blocks_spans_and_continued_lines():
    text = ("Run `python -m core report\nruns/x`.\n```bash\n$ python -m core bench --methods \\\n"
            "ar,\\\nmulo --prompts 2   # two\nMULO_DEVICE=cuda torchrun --standalone -m core generate --seed 1\n```\n")
    assert [argv(c) for c in commands(text)] == [["bench", "--methods", "ar,mulo", "--prompts", "2"],
                                                 ["generate", "--seed", "1"], ["report", "runs/x"]]


# ---- the front page ------------------------------------------------------------------------------

def test_the_readme_is_a_front_page_under_its_line_budget():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= README_LINES, f"README.md has {lines} lines; move reference into docs/"


def test_the_readme_keeps_the_space_card_and_the_two_set_up_commands_ci_runs():
    text = (ROOT / "README.md").read_text()
    assert text.startswith("---\n") and "\napp_file: app.py\n" in text.split("\n---\n", 1)[0]
    assert f"```bash\n{RUN_APP}\n```" in text and f"```bash\n{RUN_TESTS}\n```" in text
    ci = (ROOT / ".ci" / "run").read_text()
    assert "pip install -q torch==2.13.0 -r requirements.txt -r requirements-test.txt" in ci
    assert ci.rstrip().splitlines()[-1] == "python -m pytest -q"   # the README's test command, last
