"""The card's plots as inline SVG: kernel bars before/after, and the roofline.

Drawn with matplotlib's object API (a `Figure`, never pyplot), so nothing global changes for the
process that calls us, and saved with text as text and no date stamp, so the page stays small,
selectable and the same for the same cards.
"""

from __future__ import annotations

import io
import math

import matplotlib
from matplotlib import ticker
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from harness.cards.cells import shorten
from harness.cards.kernel_families import KernelRow
from harness.report.roofline import Roofs

BEFORE_COLOR, AFTER_COLOR = "#4c72b0", "#dd8452"
REMOVED_COLOR, ADDED_COLOR = "#c0392b", "#1e8449"
MAX_KERNEL_ROWS = 20  # a plot with more rows is unreadable; the table below it lists every kernel


def plain(text: str) -> str:
    """Matplotlib reads `$...$` as math; kernel names are plain text."""
    return text.replace("$", r"\$")


_SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def power_label(value: float, _position: object = None) -> str:
    """A log axis's tick as plain text: 10¹¹ for a power of ten, else 3 significant digits (2.5e+09)."""
    if value <= 0:
        return ""
    exponent = round(math.log10(value))
    if math.isclose(value, 10.0**exponent, rel_tol=1e-9):
        return "10" + str(exponent).translate(_SUPERSCRIPT)
    return f"{value:.3g}"


# Tick values per decade, coarsest first: the first that puts MIN_LOG_TICKS ticks in view is used.
_LOG_TICK_STEPS = ((1.0,), (1.0, 2.0, 5.0), (1.0, 1.5, 2.0, 3.0, 5.0, 7.0),
                   (1.0, 1.1, 1.2, 1.3, 1.5, 1.7, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0))
MIN_LOG_TICKS = 3


def log_ticks(low: float, high: float) -> list[float]:
    """Tick values for a log axis from `low` to `high` (both > 0): powers of ten where they give MIN_LOG_TICKS
    ticks in view, else 1-2-5 and finer steps per decade, so that a narrow axis has labels to read it by."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    ticks: list[float] = []
    for steps in _LOG_TICK_STEPS:
        ticks = [float(f"{step * 10.0**exponent:.6g}") for exponent in range(first, last + 1) for step in steps]
        ticks = [t for t in ticks if low <= t <= high]
        if len(ticks) >= MIN_LOG_TICKS:
            break
    return ticks


def _plain_log_axes(fig: Figure) -> None:
    """Log axes with plain-text labels at their major ticks and no minor ticks. matplotlib's default labels
    are mathtext ($10^{11}$), parsed and laid out per tick, and its minor ticks are a dozen more per decade:
    together most of a roofline's 0.8 s to draw (0.14 s without), report.html's largest cost. An axis of less
    than a few decades gets finer major ticks (log_ticks: its default would label one tick, or none); an axis
    whose ticks a plot set itself keeps them."""
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            if axis.get_scale() == "log" and isinstance(axis.get_major_locator(), ticker.LogLocator):
                axis.set_minor_locator(ticker.NullLocator())
                axis.set_major_locator(ticker.FixedLocator(log_ticks(*sorted(axis.get_view_interval()))))
                axis.set_major_formatter(ticker.FuncFormatter(power_label))


def svg(fig: Figure) -> str:
    """The figure as an inline <svg> element: text stays text (smaller, selectable), no date stamp."""
    _plain_log_axes(fig)
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE, invalid inside HTML


def kernel_bars_svg(rows: list[KernelRow], has_after: bool,
                    sides: tuple[str, str] = ("baseline", "variant")) -> str | None:
    """Bars per kernel family and side, per original call; a family removed is hatched, one added outlined."""
    if not rows:
        return None
    shown = rows[:MAX_KERNEL_ROWS]
    fig = Figure(figsize=(9, 0.5 * len(shown) + 1.3))
    ax = fig.subplots()
    height = 0.38 if has_after else 0.6
    # Bars compare like with like: per original call (a batched invocation serves several calls).
    durations = [d for r in shown for d in (r.before_per_call_us, r.after_per_call_us) if d]
    log = bool(durations) and max(durations) / max(min(durations), 1e-9) > 50
    left = min(durations) / 3 if log else 0.0  # on a log axis a bar needs a start left of its end
    for i, row in enumerate(shown):
        y = len(shown) - 1 - i
        before_us, after_us = row.before_per_call_us, row.after_per_call_us
        if before_us is not None:
            hatch = "//" if has_after and row.status == "removed" else None
            ax.barh(y + (height / 2 if has_after else 0), before_us - left, height, left=left,
                    color=BEFORE_COLOR, hatch=hatch, edgecolor=REMOVED_COLOR if hatch else BEFORE_COLOR)
            ax.annotate(f" {before_us:.1f}", (before_us, y + (height / 2 if has_after else 0)),
                        va="center", fontsize=7)
        if has_after and after_us is not None:
            edge = ADDED_COLOR if row.status == "added" else AFTER_COLOR
            ax.barh(y - height / 2, after_us - left, height, left=left, color=AFTER_COLOR, edgecolor=edge,
                    linewidth=1.5)
            ax.annotate(f" {after_us:.1f}", (after_us, y - height / 2), va="center", fontsize=7)
    labels = []
    for row in shown:
        suffix = f"  [{row.status}]" if has_after and row.status != "kept" else ""
        labels.append(plain(shorten(row.family, 48) + (f" ×{len(row.names)}" if len(row.names) > 1 else "")
                             + suffix))
    ax.set_yticks(range(len(shown) - 1, -1, -1), labels)
    for tick, row in zip(ax.get_yticklabels(), shown):
        if has_after and row.status != "kept":
            tick.set_color(REMOVED_COLOR if row.status == "removed" else ADDED_COLOR)
            tick.set_fontweight("bold")
    if log:
        ax.set_xscale("log")  # one slow kernel would flatten the rest to nothing
        ax.set_xlim(left, max(durations) * 3)
    elif durations:
        ax.set_xlim(0, max(durations) * 1.15)  # room for the value labels
    ax.set_xlabel("kernel-duration sum per original call, us" + (" (log scale)" if log else ""))
    handles = [Patch(color=BEFORE_COLOR, label=sides[0])]
    if has_after:
        handles.append(Patch(color=AFTER_COLOR, label=sides[1]))
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=2, fontsize=8, frameon=False)
    ax.grid(axis="x", alpha=0.3)
    return svg(fig)


def roofline_svg(roofs: list[Roofs], points: list[tuple[str, float, float]]) -> str:
    """Each distinct roof (the first solid, others dashed) and each side's (label, FLOP/byte, FLOP/s) point."""
    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    xs = [p[1] for p in points] + [r.compute_flops_s / r.bandwidth_bytes_s for r in roofs]
    lo, hi = min(xs) / 20, max(xs) * 20
    for i, roof in enumerate(roofs):
        ridge = roof.compute_flops_s / roof.bandwidth_bytes_s
        style = "-" if i == 0 else "--"
        ax.plot([lo, ridge, hi], [lo * roof.bandwidth_bytes_s, roof.compute_flops_s, roof.compute_flops_s],
                style, color="#444", label=plain(f"roof: {roof.label}: {roof.compute_flops_s / 1e9:.4g} GFLOP/s, "
                                                  f"{roof.bandwidth_bytes_s / 1e9:.4g} GB/s"))
    for (label, x, y), color in zip(points, (BEFORE_COLOR, AFTER_COLOR, "#55a868")):
        ax.plot([x], [y], "o", markersize=9, color=color, label=plain(f"{label}: {y / 1e9:.3g} GFLOP/s"))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    # Points above a roof happen (peaks measured on a busy CPU read low): keep them in view.
    top = max([r.compute_flops_s for r in roofs] + [p[2] for p in points])
    ax.set_ylim(min(p[2] for p in points) / 5, top * 4)
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("FLOP/s")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16))  # below: never hides a point or roof
    return svg(fig)
