"""The small pieces every section of the HTML pages is written with: escaping, numbers, tables, the style.

The pages are self-contained and open from disk: the style is inline (CSS) and the
Content-Security-Policy (CSP) forbids every load, so a stray URL shows as a console error instead of
quietly leaking a request. Cells are built as HTML by their callers, who escape what they put in;
`Num` marks a cell holding a number, right-aligned so digits line up in columns.
"""

from __future__ import annotations

import html
from typing import Any

CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Helvetica,Arial,sans-serif;margin:0 auto;max-width:1180px;
 padding:16px 24px;color:#222;line-height:1.4}
h1{font-size:1.6em;margin-bottom:.2em} h2{font-size:1.25em;margin:0 0 .4em} h3{font-size:1.05em;margin:1em 0 .3em}
table{border-collapse:collapse;margin:.4em 0;font-size:.88em} th,td{border:1px solid #ccc;padding:3px 7px;
 text-align:left;vertical-align:top} th{background:#f2f2f2} td.num{text-align:right;font-variant-numeric:tabular-nums}
section.card{border:1px solid #bbb;border-radius:6px;padding:12px 16px;margin:20px 0;background:#fff}
.FASTER{color:#1e8449;font-weight:bold} .SLOWER{color:#c0392b;font-weight:bold} .SAME{color:#666;font-weight:bold}
tr.removed td{background:#fbeaea} tr.added td{background:#eaf7ee}
.tag{display:inline-block;padding:0 6px;border-radius:3px;font-size:.8em;font-weight:bold;color:#fff}
.tag.removed{background:#c0392b} .tag.added{background:#1e8449}
.note{color:#666;font-style:italic} .plots{display:flex;flex-wrap:wrap;gap:12px;align-items:flex-start}
figure{margin:.4em 0} .plots figure,.side{margin:0;flex:1 1 480px;min-width:0} h4{margin:.3em 0}
figcaption{font-size:.82em;color:#555}
svg{max-width:100%;height:auto} code{font-size:.92em;word-break:break-all} pre{white-space:pre-wrap;font-size:.85em;
 background:#f7f7f7;padding:8px;border:1px solid #ddd}
details{margin:.4em 0} summary{cursor:pointer;color:#345} td a code{white-space:nowrap;word-break:normal}
#at-a-glance{border:2px solid #345;border-radius:6px;padding:10px 16px;margin:10px 0 18px}
#at-a-glance td code,#end-to-end td code{white-space:nowrap;word-break:normal} #noise{margin:.2em 0 .5em}
ul.next{padding-left:1.2em} ul.next pre{margin:.2em 0 .5em;user-select:all}
"""

# Forbid every load (scripts, fonts, images, frames); only the inline styles are allowed.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


class Num(str):
    """A table cell holding a number: right-aligned, digits in columns."""


def html_table(header: list[str], rows: list[list[str]], classes: list[str] | None = None) -> str:
    """Cells are HTML already (callers escape); `Num` cells are right-aligned."""
    out = ["<table><thead><tr>", "".join(f"<th>{h}</th>" for h in header), "</tr></thead><tbody>"]
    for row, cls in zip(rows, classes or [""] * len(rows)):
        cells = "".join(f'<td class="num">{c}</td>' if isinstance(c, Num) else f"<td>{c}</td>" for c in row)
        out.append(f'<tr class="{cls}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def anchor(card_id: str) -> str:
    """The id of a card's section, for the summary's in-page links."""
    return "card-" + "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in card_id)
