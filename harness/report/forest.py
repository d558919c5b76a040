"""The forest plot of a run's verdicts: every measured variant's speedup with its 95% interval, on one log axis.

A row per card (and experiment) whose best variant was timed against its baseline: the point estimate, the
interval as a bar, the SAME band that decided the verdict shaded behind it, coloured by verdict, the adopted ones
marked with a filled diamond. Log axis: a 2x speedup and a 2x slowdown lie as far from 1 on either side.
"""

from __future__ import annotations

import math
from typing import Sequence

from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from harness.cards.cells import shorten
from harness.cards.diff_markdown import interval_text
from harness.report.glance import GlanceRow
from harness.report.plots import log_ticks, plain, svg

VERDICT_COLORS = {"FASTER": "#1e8449", "SLOWER": "#c0392b", "SAME": "#555555", "INCONCLUSIVE": "#b9770e",
                  "UNCONFIRMED": "#7f7f7f"}
BAND_COLOR = "#d9d9d9"
WIDEST = 4.0  # how far past the points and bands the axis may reach for an interval's end


def plotted(rows: Sequence[GlanceRow]) -> list[GlanceRow]:
    """The rows the plot draws: those with a speedup measured."""
    return [r for r in rows if r.speedup]


def _label(row: GlanceRow, with_experiment: bool) -> str:
    variant = f"{row.experiment}: {row.variant}" if with_experiment else str(row.variant)
    return plain(f"{shorten(row.card, 40)}  {shorten(variant, 36)}")


def _limits(rows: Sequence[GlanceRow]) -> tuple[float, float]:
    """The axis: every point, band edge and 1, padded; widened to the intervals' ends, but at most WIDEST times past
    that core on either side (an interval of a few rounds on a busy machine may span 1000x: it is cut, with an
    arrow, rather than flatten every other row)."""
    core = [r.speedup for r in rows if r.speedup] + [
        edge for r in rows if r.band for edge in (1 / (1 + r.band), 1 + r.band)] + [1.0]
    ends = [v for r in rows for v in (r.ci or []) if v > 0]
    low = max(min(core + ends), min(core) / WIDEST)
    high = min(max(core + ends), max(core) * WIDEST)
    pad = max(math.log(high / low) * 0.06, 0.04)
    return low * math.exp(-pad), high * math.exp(pad)


def _interval(ax: Axes, ci: Sequence[float], y: float, color: str, limits: tuple[float, float]) -> None:
    """The interval as a bar with end ticks; an end past the axis is cut there and drawn as an arrowhead."""
    low, high = max(ci[0], limits[0]), min(ci[1], limits[1])
    ax.plot([low, high], [y, y], color=color, linewidth=2.2, solid_capstyle="butt", zorder=2)
    for end, cut, marker in ((low, ci[0] < limits[0], "<"), (high, ci[1] > limits[1], ">")):
        ax.plot([end], [y], marker if cut else "|", color=color, markersize=8 if cut else 9, zorder=2)


def forest_svg(rows: Sequence[GlanceRow]) -> str | None:
    """The plot as inline SVG; None when no row has a speedup."""
    shown = plotted(rows)
    if not shown:
        return None
    several = len({r.experiment for r in shown}) > 1
    fig = Figure(figsize=(9.5, 0.42 * len(shown) + 1.25))
    ax = fig.subplots()
    low, high = _limits(shown)
    run_band = next((r.band for r in shown if r.band), None)  # for a row no band decided (too few rounds kept)
    for i, row in enumerate(shown):
        y, speedup = len(shown) - 1 - i, float(row.speedup or 0.0)  # every row shown has one
        band = row.band or run_band
        if band:
            ax.fill_betweenx([y - 0.42, y + 0.42], 1 / (1 + band), 1 + band, color=BAND_COLOR, zorder=0)
        color = VERDICT_COLORS.get(row.verdict or "", "#7f7f7f")
        if row.ci:
            _interval(ax, row.ci, y, color, (low, high))
        ax.plot([speedup], [y], "D" if row.adopted else "o", markersize=8 if row.adopted else 7, zorder=3,
                color=color, markerfacecolor=color if row.adopted else "white", markeredgewidth=1.6)
        note = f"{interval_text(row.speedup, row.ci)} {row.verdict or ''}" + (", adopted" if row.adopted else "")
        ax.annotate(note, (1.0, y), xycoords=("axes fraction", "data"), xytext=(6, 0), textcoords="offset points",
                    va="center", fontsize=8, color=color)
    ax.axvline(1.0, color="#333333", linewidth=0.8, zorder=1)
    ax.set_xscale("log")
    ax.set_xlim(low, high)
    ax.xaxis.set_major_locator(ticker.FixedLocator(log_ticks(low, high)))
    ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:.3g}x"))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.set_ylim(-0.6, len(shown) - 0.4)
    ax.set_yticks(range(len(shown) - 1, -1, -1), [_label(r, several) for r in shown], fontsize=8)
    ax.set_xlabel("speedup, baseline / variant per original call (log scale; > 1: the variant is faster)")
    ax.grid(axis="x", alpha=0.3)
    handles = [Patch(color=BAND_COLOR, label="SAME band"),
               Line2D([], [], marker="D", linestyle="", color="#444444", label="adopted"),
               Line2D([], [], marker="o", linestyle="", color="#444444", markerfacecolor="white",
                      label="not adopted (baseline kept)")]
    ax.legend(handles=handles, loc="lower left", bbox_to_anchor=(0, 1.0), ncol=3, fontsize=8, frameon=False)
    return svg(fig)
