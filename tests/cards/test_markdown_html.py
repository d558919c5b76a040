"""The summaries' Markdown as HTML (harness.report.markdown_html), and the auto/multirun index page."""

from harness.report.html import render_index_html
from harness.report.markdown_html import inline_html, markdown_to_html, safe_href, split_row

AUTO_SUMMARY = """# auto: each card's counter-experiments, chosen by its class

| card | class | experiments |
|---|---|---|
| `dit-480-linear-m3n5120k5120-d55d81` | dram_bandwidth_bound | dit_small_m_batching |

Sub-runs:
- [dit_small_m_batching](dit_small_m_batching/report.html) ([summary.md](dit_small_m_batching/summary.md)): 1 card(s)
- [output_cast](output_cast/report.html): 1 card(s)

## End to end: the report's time

| card | report us | saves us |
|---|---:|:---:|
| `a` | 17.3 | **0.0** |
"""


def test_the_auto_page_is_html_with_tables_headings_and_links_not_markdown_in_pre():
    page = render_index_html("harness auto run", AUTO_SUMMARY)
    assert "<pre>" not in page and "| card |" not in page  # was: the Markdown verbatim inside <pre>
    assert "<h1>auto: each card&#x27;s counter-experiments, chosen by its class</h1>" in page
    assert "<h2>End to end: the report&#x27;s time</h2>" in page
    assert page.count("<table>") == 2
    assert "<th>card</th><th>class</th><th>experiments</th>" in page
    assert "<td><code>dit-480-linear-m3n5120k5120-d55d81</code></td>" in page
    assert '<a href="dit_small_m_batching/report.html">dit_small_m_batching</a>' in page
    assert '<a href="output_cast/report.html">output_cast</a>' in page
    assert '<a href="dit_small_m_batching/summary.md">summary.md</a>' in page
    assert "<p>Sub-runs:</p>\n<ul><li>" in page  # a list right after a paragraph line
    assert '<td class="num">17.3</td><td style="text-align:center"><strong>0.0</strong></td>' in page
    assert "Content-Security-Policy" in page and "<script" not in page


def test_everything_is_escaped_and_only_safe_links_are_links():
    html = markdown_to_html(
        '# <b>"x"</b>\n\n| a & b | `<i>` |\n|---|---|\n| <script>alert(1)</script> | [t](x"y.html) |\n\n'
        "- [bad](javascript:void) and [data](data:text/html,hi) and [ok](https://e.org/a?b=1&c=2)\n")
    assert "<b>" not in html and "<script>" not in html and "<i>" not in html
    assert "<h1>&lt;b&gt;&quot;x&quot;&lt;/b&gt;</h1>" in html
    assert "<th>a &amp; b</th><th><code>&lt;i&gt;</code></th>" in html
    assert "<td>&lt;script&gt;alert(1)&lt;/script&gt;</td>" in html
    assert '<a href="x&quot;y.html">t</a>' in html
    assert 'href="javascript' not in html and 'href="data' not in html
    assert "<li>bad and data and" in html  # an unsafe link is written as its text
    assert '<a href="https://e.org/a?b=1&amp;c=2">ok</a>' in html
    assert safe_href("javascript:alert(1)") is None and safe_href("JavaScript:x") is None
    assert safe_href("0/report.html") == "0/report.html" and safe_href("#card-a") == "#card-a"


def test_inline_code_keeps_its_content_literally():
    assert inline_html("`**not bold** [not](link)`") == "<code>**not bold** [not](link)</code>"
    assert inline_html("``a ` b``") == "<code>a ` b</code>"
    assert inline_html(r"\*\*literal\*\* and \[x\]") == "**literal** and [x]"
    assert inline_html("[`code` label](a/b.md)") == '<a href="a/b.md"><code>code</code> label</a>'


def test_pipes_inside_code_or_escaped_stay_in_their_cell_and_rows_are_padded():
    assert split_row(r"| `a|b` | c\|d | e |") == ["`a|b`", r"c\|d", "e"]
    assert split_row("| `odd | x |") == ["`odd", "x"]  # an unmatched backtick is literal
    html = markdown_to_html("| x | y |\n|---|---|\n| 1 |\n| 1 | 2 | 3 |\n")
    assert "<tr><td>1</td><td></td></tr><tr><td>1</td><td>2</td></tr>" in html
    assert "<td>c|d</td>" in markdown_to_html("| h |\n|---|\n| c\\|d |\n")


def test_a_pipe_line_without_a_separator_row_is_a_paragraph_and_list_items_continue_when_indented():
    assert markdown_to_html("| not a table |\nnext line") == "<p>| not a table | next line</p>"
    assert markdown_to_html("- one\n  more\n- two\n\nafter") == "<ul><li>one more</li><li>two</li></ul>\n<p>after</p>"
