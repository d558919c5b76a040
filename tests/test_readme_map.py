"""The folder table (docs/architecture.md) is the map of harness/: one row per package, each of its modules named in
its row, and every dotted `harness.` name in README.md and docs/ one that imports (a module or what a module
defines)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
ROW = re.compile(r"^\| `(harness/[^`]*)`[^|]*\| (.*)\|\s*$")
DOTTED = re.compile(r"\bharness(?:\.[A-Za-z_]\w*)+")


def _rows() -> dict[str, str]:
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    return {m.group(1): m.group(2) for line in text.splitlines() if (m := ROW.match(line))}


def _packages() -> list[str]:
    top = REPO / "harness"
    return ["harness/"] + sorted(f"harness/{p.parent.name}/" for p in top.glob("*/__init__.py"))


def _modules(folder: Path) -> list[str]:
    """The names a row gives its folder's modules: `name`, and `sub/name` for a subpackage's."""
    names = [p.stem for p in folder.glob("*.py") if p.stem != "__init__"]
    for init in folder.glob("*/__init__.py"):
        if folder != REPO / "harness":  # the root's subpackages have rows of their own
            names += [f"{init.parent.name}/{p.stem}" for p in init.parent.glob("*.py") if p.stem != "__init__"]
    return sorted(names)


def test_every_package_has_a_row_and_every_row_a_package() -> None:
    rows = _rows()
    assert sorted(rows) == _packages()


@pytest.mark.parametrize("folder", _packages())
def test_a_row_names_every_module_of_its_folder(folder: str) -> None:
    row = _rows()[folder]
    unnamed = [name for name in _modules(REPO / folder) if f"`{name}`" not in row]
    assert not unnamed, f"docs/architecture.md's row for {folder} does not name {unnamed}"


def _dotted_names() -> list[tuple[str, str]]:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    return sorted({(doc.name, m.group(0)) for doc in docs for m in DOTTED.finditer(doc.read_text(encoding="utf-8"))})


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_every_dotted_name_in_the_docs_imports() -> None:
    stale = [f"{doc}: {name}" for doc, name in _dotted_names() if not _resolves(name)]
    assert not stale, f"names in the docs that no longer import: {stale}"


def test_a_stale_name_is_caught() -> None:
    assert _resolves("harness.report.html.write_run_html")
    assert not _resolves("harness.cards.html.write_run_html")  # where the page lived before report/
