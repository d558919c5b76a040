"""The README is a front page (what it is, the two commands, a short tour, the page, the flow, where to read on):
short, every number it quotes the tool's own, and every relative link in README.md and docs/*.md a file that exists
(with a `#heading`, a heading of that file)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from harness.cards.fields import CLASSES
from harness.cards.model import load_report
from harness.trial.checks import CHECKS

REPO = Path(__file__).resolve().parents[1]
FRONT = REPO / "README.md"
PAGES = [FRONT, *sorted((REPO / "docs").glob("*.md"))]
WORDS = {6: "six"}
# Names with digits in them, not quantities: the report's model and GPUs.
NAMES = {"Wan2.x", "14B", "H200", "H100"}
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _experiments() -> list[str]:
    """What `experiment=` takes, as the tool lists it for a name it does not know."""
    proc = subprocess.run([sys.executable, "-m", "harness", "experiment=no_such_experiment"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    listed = re.search(r"choose one of: ([\w, ]+)", proc.stderr)
    assert proc.returncode == 2 and listed, proc.stderr
    return listed.group(1).split(", ")


def _python_floor() -> str:
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    found = re.search(r'^requires-python = ">=([\d.]+)"', pyproject, re.MULTILINE)
    assert found, "pyproject.toml names no requires-python"
    return found.group(1)


# Each quoted number: the phrase that quotes it (its number as {}), and where the tool gives it.
QUOTED: list[tuple[str, Callable[[], object]]] = [
    ("a bottleneck class from {} fixed rules", lambda: WORDS[len(CLASSES)]),  # one rule per class
    ("On a fresh machine (Python >= {})", _python_floor),
    ("the shipped report has {} cards", lambda: len(load_report().cards)),
    ("there are {} experiments and `auto`", lambda: len([name for name in _experiments() if name != "auto"])),
    ("the {} checks a win must survive", lambda: len(CHECKS)),
]


def _prose(text: str) -> str:
    """The text outside code fences, its lines joined: what a reader reads as sentences."""
    return " ".join(" ".join(re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE).split()).split())


def test_the_readme_is_a_front_page():
    lines = FRONT.read_text(encoding="utf-8").splitlines()
    assert len(lines) < 200, f"README.md has {len(lines)} lines: the reference belongs in docs/"
    headings = [line for line in lines if line.startswith("## ")]
    assert headings[:2] == ["## Quick start", "## A short tour"] and "## Where to read on" in headings


@pytest.mark.parametrize("phrase, source", QUOTED, ids=[phrase for phrase, _ in QUOTED])
def test_a_number_the_front_page_quotes_is_the_tools(phrase, source):
    assert phrase.format(source()) in _prose(FRONT.read_text(encoding="utf-8"))


def test_the_front_page_quotes_no_number_without_its_source():
    """A number added to the front page needs its row in QUOTED: what is left after those is names and code."""
    text = _prose(FRONT.read_text(encoding="utf-8"))
    for phrase, _ in QUOTED:
        text = re.sub(re.escape(phrase).replace(r"\{\}", r"\S+"), "", text)
    text = re.sub(r"`[^`]*`", "", LINK.sub("", text))  # code and link targets are not quantities
    unsourced = set(re.findall(r"[\w.]*\d[\w.]*", text)) - NAMES
    assert not unsourced, f"numbers on the front page no test holds: {sorted(unsourced)}"


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, each space a hyphen."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor on a page (outside code fences); a repeated one gets -1, -2, ... as on GitHub."""
    found: set[str] = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        fenced ^= line.startswith("```")
        if not fenced and (heading := re.match(r"#{1,6} (.*)", line)):
            base = slug(heading.group(1).replace("`", ""))
            name, n = base, 0
            while name in found:
                n += 1
                name = f"{base}-{n}"
            found.add(name)
    return found


def broken_links(page: Path) -> list[str]:
    """The relative links of a page whose file, or heading, is not there."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL | re.MULTILINE)
    broken = []
    for target in LINK.findall(re.sub(r"`[^`\n]*`", "", text)):
        if re.match(r"[a-z]+:", target):  # https:, mailto:: not this repository's
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.is_file():
            broken.append(f"{target}: no such file")
        elif anchor and (file.suffix != ".md" or anchor not in anchors(file)):
            broken.append(f"{target}: no heading #{anchor} in {file.name}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_every_relative_link_resolves(page):
    assert not broken_links(page), f"{page.relative_to(REPO)}: {broken_links(page)}"


def test_a_broken_link_or_heading_is_caught(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## Stopping, resuming, several GPUs or hosts\n\n## report.html\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#stopping-resuming-several-gpus-or-hosts) [ok](other.md#reporthtml) [ok](#a-b)\n"
                    "## A `b`\n[gone](missing.md) [stale](other.md#report-html) `[code](missing.md)`\n"
                    "```\n[fenced](missing.md)\n```\n[web](https://example.org/x)\n")
    assert broken_links(page) == ["missing.md: no such file",
                                  "other.md#report-html: no heading #report-html in other.md"]
