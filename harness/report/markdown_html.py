"""Markdown to HTML for the harness's own summaries (summary.md of `experiment=auto` and of a multirun).

Not a general Markdown converter: the harness writes these files itself, so this covers exactly the
subset they use (no dependency needed for it):

- ATX headings, `#` to `######`;
- paragraphs: consecutive non-blank lines, joined;
- pipe tables: a header row, a separator row (`---`, `---:` right-aligned, `:---:` centred), body rows;
  a `|` inside a code span or written `\\|` stays in its cell;
- bullet lists (`- ` or `* `) and numbered ones (`1. `, started at their first number), one level; an
  indented line continues the item above it;
- quoted lines (`> `, indented or not), kept line by line as preformatted text: recipe.md quotes code;
- inline: code spans, links `[text](href)`, bold `**text**`, backslash escapes.

Every piece of text, attribute values included, is HTML-escaped. A link whose target names a scheme
other than http, https or mailto (`javascript:`, `data:`) is written as its text, not as a link.
"""

from __future__ import annotations

import html
import re

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)(?:\s+#+)?\s*$")
_BULLET = re.compile(r"^[-*]\s+(.*)$")
_NUMBERED = re.compile(r"^(\d+)\.\s+(.*)$")
_QUOTE = re.compile(r"^\s*>\s?(.*)$")
_SEPARATOR_CELL = re.compile(r"^:?-+:?$")
# Inline tokens, leftmost first: a backslash escape, a code span (any run of backticks, closed by the
# same run), a link (its text may hold code spans), bold.
_INLINE = re.compile(
    r"\\(?P<escaped>[!-/:-@\[-`{-~])"
    r"|(?P<ticks>`+)(?P<code>.+?)(?P=ticks)"
    r"|\[(?P<label>(?:`[^`]*`|[^\[\]`])+)\]\((?P<href>[^()\s]+)\)"
    r"|\*\*(?P<bold>.+?)\*\*"
)
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):")
SAFE_SCHEMES = frozenset({"http", "https", "mailto"})


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def safe_href(href: str) -> str | None:
    """`href` when following it can only open a page (a relative path, an anchor, http, https,
    mailto), else None."""
    scheme = _SCHEME.match(href)
    return href if scheme is None or scheme.group(1).lower() in SAFE_SCHEMES else None


def inline_html(text: str) -> str:
    """One line's inline Markdown as HTML; everything else in it escaped."""
    out: list[str] = []
    pos = 0
    for match in _INLINE.finditer(text):
        out.append(_esc(text[pos:match.start()]))
        pos = match.end()
        if match.group("escaped") is not None:
            out.append(_esc(match.group("escaped")))
        elif match.group("code") is not None:
            out.append(f"<code>{_esc(match.group('code').strip())}</code>")
        elif match.group("label") is not None:
            label, href = inline_html(match.group("label")), safe_href(match.group("href"))
            out.append(f'<a href="{_esc(href)}">{label}</a>' if href is not None else label)
        else:
            out.append(f"<strong>{inline_html(match.group('bold'))}</strong>")
    out.append(_esc(text[pos:]))
    return "".join(out)


def _closes(row: str, start: int, run: int) -> bool:
    """Whether a backtick run of exactly `run` follows `start`: only then do the backticks open a code
    span (an unmatched backtick is a literal one, and the pipes after it still split cells)."""
    return re.search(rf"(?<!`)`{{{run}}}(?!`)", row[start:]) is not None


def split_row(line: str) -> list[str]:
    """A pipe-table row's cells, stripped; `|` inside a code span or escaped as `\\|` is cell text."""
    cells: list[str] = []
    current: list[str] = []
    ticks = 0  # the backtick run that opened the code span we are in; 0 outside one
    i, row = 0, line.strip()
    while i < len(row):
        ch = row[i]
        if ch == "\\" and row[i + 1:i + 2] == "|" and not ticks:
            current.append("\\|")  # kept escaped: inline_html turns it into a plain |
            i += 2
            continue
        if ch == "`":
            run = len(row[i:]) - len(row[i:].lstrip("`"))
            if not ticks and _closes(row, i + run, run):
                ticks = run
            elif run == ticks:
                ticks = 0
            current.append("`" * run)
            i += run
            continue
        if ch == "|" and not ticks:
            cells.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
        i += 1
    cells.append("".join(current).strip())
    if row.startswith("|"):
        cells = cells[1:]
    if row.endswith("|") and not row.endswith("\\|") and cells:
        cells = cells[:-1]
    return cells


def _alignments(line: str) -> list[str] | None:
    """The separator row's alignment per column ("left", "right", "center"), or None when `line` is
    not a separator row."""
    if "|" not in line or "-" not in line:
        return None
    cells = split_row(line)
    if not cells or not all(_SEPARATOR_CELL.match(c) for c in cells):
        return None
    return ["center" if c.startswith(":") and c.endswith(":") else "right" if c.endswith(":") else "left"
            for c in cells]


def _cell(tag: str, text: str, align: str) -> str:
    # Right-aligned columns hold numbers: class "num" (the report pages' CSS sets it right, in columns).
    attr = {"left": "", "right": ' class="num"', "center": ' style="text-align:center"'}[align]
    return f"<{tag}{attr}>{inline_html(text)}</{tag}>"


def _table(header: str, align: list[str], rows: list[str]) -> str:
    def cells(line: str, tag: str) -> str:
        values = split_row(line)
        values = (values + [""] * len(align))[:len(align)]  # as GitHub does: pad short rows, cut long ones
        return "<tr>" + "".join(_cell(tag, v, a) for v, a in zip(values, align)) + "</tr>"

    body = "".join(cells(row, "td") for row in rows)
    return f"<table><thead>{cells(header, 'th')}</thead><tbody>{body}</tbody></table>"


def _starts_table(lines: list[str], i: int) -> bool:
    return lines[i].lstrip().startswith("|") and i + 1 < len(lines) and _alignments(lines[i + 1]) is not None


def _starts_block(lines: list[str], i: int) -> bool:
    """Whether line i opens a block other than a paragraph (it then ends the paragraph above it)."""
    return bool(_HEADING.match(lines[i]) or _BULLET.match(lines[i]) or _NUMBERED.match(lines[i])
                or _QUOTE.match(lines[i]) or _starts_table(lines, i))


def _list_items(lines: list[str], i: int, item: re.Pattern[str]) -> tuple[list[str], int]:
    """The items of the list starting at line i (each its text after the marker, continuation lines joined) and
    the line after it."""
    items: list[str] = []
    while i < len(lines) and lines[i].strip():
        found = item.match(lines[i])
        if found:
            items.append(found.group(found.lastindex or 1))
        elif lines[i][:1].isspace() and items and not _QUOTE.match(lines[i]):  # continues its item
            items[-1] += " " + lines[i].strip()
        else:
            break
        i += 1
    return items, i


def markdown_to_html(text: str) -> str:
    """The summary's Markdown as HTML blocks (no page around them)."""
    lines = text.splitlines()
    blocks: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
            continue
        heading = _HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            blocks.append(f"<h{level}>{inline_html(heading.group(2))}</h{level}>")
            i += 1
        elif _starts_table(lines, i):
            align = _alignments(lines[i + 1]) or []
            end = i + 2
            while end < len(lines) and lines[end].lstrip().startswith("|"):
                end += 1
            blocks.append(_table(line, align, lines[i + 2:end]))
            i = end
        elif _BULLET.match(line):
            items, i = _list_items(lines, i, _BULLET)
            blocks.append("<ul>" + "".join(f"<li>{inline_html(item)}</li>" for item in items) + "</ul>")
        elif numbered := _NUMBERED.match(line):
            items, i = _list_items(lines, i, _NUMBERED)
            start = int(numbered.group(1))
            blocks.append((f'<ol start="{start}">' if start != 1 else "<ol>")
                          + "".join(f"<li>{inline_html(item)}</li>" for item in items) + "</ol>")
        elif _QUOTE.match(line):
            quoted: list[str] = []
            while i < len(lines) and (found := _QUOTE.match(lines[i])):
                quoted.append(found.group(1))
                i += 1
            blocks.append(f"<pre>{_esc(chr(10).join(quoted))}</pre>")
        else:
            para = [line.strip()]
            i += 1
            while i < len(lines) and lines[i].strip() and not _starts_block(lines, i):
                para.append(lines[i].strip())
                i += 1
            blocks.append(f"<p>{inline_html(' '.join(para))}</p>")
    return "\n".join(blocks)
