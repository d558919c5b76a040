"""A self-contained HTML page for a run directory, or for a before/after diff of two reports.

The page opens from disk with no network: no scripts at all, styles inline, plots inline as SVG
(matplotlib's object API, no pyplot, so nothing global changes for the process that calls us), and a
Content-Security-Policy that forbids every external load, so a stray URL shows as a console error
instead of quietly leaking a request.

Building blocks, shared by both entry points:
- `CardView`: one card's baseline, best (None when there is none), its diff entry and Optuna study;
- the summary table; per card the kernel bars, classes with evidence, correctness, roofline, search.
"""

from __future__ import annotations

import html
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import matplotlib
import optuna
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.ticker import MaxNLocator

from harness.cards.diff import (
    VERDICT_RULE_TEXT,
    ReportDiff,
    basis_header,
    kernel_family,
    kernel_sum_text,
)
from harness.cards.measures import KERNEL_SUM_BASIS, TIMING_BASIS, calls_per_invocation, card_time_us, time_basis
from harness.cards.labels import class_label
from harness.cards.markdown_html import markdown_to_html
from harness.cards.model import Card, Report, ReportError, load_report, write_text_atomic

BEFORE_COLOR, AFTER_COLOR = "#4c72b0", "#dd8452"
REMOVED_COLOR, ADDED_COLOR = "#c0392b", "#1e8449"
MAX_KERNEL_ROWS = 20  # a plot with more rows is unreadable; the table below it lists every kernel

# Keys the page shows in their own place (or that are bulky); any other key in card.extra is an
# experiment's own evidence and is shown verbatim.
_SHOWN_EXTRA = frozenset({
    "id", "harness", "timing", "search_timing", "correctness", "memory", "workload", "environment",
    "metrics_source", "profiler", "peaks", "profiler_settings", "profiler_notes", "report_card",
    "baseline_drift", "ncu_output",
})
_UNIT_SCALE = {"TFLOP/s": 1e12, "GFLOP/s": 1e9, "TB/s": 1e12, "GB/s": 1e9}


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _plain(text: str) -> str:
    """Matplotlib reads `$...$` as math; kernel names are plain text."""
    return text.replace("$", r"\$")


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# ---------------------------------------------------------------------------------------------
# What one card section is made from


@dataclass
class StudyView:
    """A card's Optuna study, read once; `note` says why there is none."""

    name: str | None
    trials: list[optuna.trial.FrozenTrial]
    importances: dict[str, float] | None
    importance_note: str
    note: str = ""


@dataclass
class CardView:
    card_id: str
    before: Card
    after: Card | None
    diff: dict[str, Any] | None  # CardDiff.as_dict()
    study: StudyView | None = None
    missing_reason: str = ""
    sides: tuple[str, str] = ("baseline", "variant")  # a run's words; the diff CLI says before/after


def _views(before: Report, after: Report | None, diff: Mapping[str, Any], sides: tuple[str, str]) -> list[CardView]:
    """One view per before card, in its order; a card without an after side keeps its before side."""
    after_by_id = {c.id: c for c in after.cards} if after else {}
    diff_by_id = {d["card"]: d for d in diff.get("cards", [])}
    return [CardView(c.id, c, after_by_id.get(c.id), diff_by_id.get(c.id), sides=sides) for c in before.cards]


# ---------------------------------------------------------------------------------------------
# Plots


def _svg(fig: Figure) -> str:
    """The figure as an inline <svg> element: text stays text (smaller, selectable), no date stamp."""
    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", bbox_inches="tight", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and DOCTYPE, invalid inside HTML


@dataclass
class KernelRow:
    """One kernel family's duration sum per invocation on each side (None: absent on that side)."""

    family: str
    before_us: float | None
    after_us: float | None
    names: list[str]
    before_calls: int = 1  # original calls one invocation of that side serves (a batched variant's k)
    after_calls: int = 1

    @property
    def before_per_call_us(self) -> float | None:
        return self.before_us / self.before_calls if self.before_us is not None else None

    @property
    def after_per_call_us(self) -> float | None:
        return self.after_us / self.after_calls if self.after_us is not None else None

    @property
    def status(self) -> str:
        if self.after_us is None:
            return "removed"
        if self.before_us is None:
            return "added"
        return "kept"


def kernel_rows(before: Card, after: Card | None) -> list[KernelRow]:
    """Kernels paired by family (the diff's matching), longest per original call first; None marks an absent side.

    Durations are summed per invocation, as profiled (diff.md's kernel table); each row knows its
    sides' calls per invocation, for the per-call values a batching variant is compared on."""
    calls_b, calls_a = calls_per_invocation(before), calls_per_invocation(after) if after else 1
    rows: dict[str, KernelRow] = {}
    for side, card in (("before", before), ("after", after)):
        for kernel in card.kernels if card else []:
            family = kernel_family(kernel.name)
            row = rows.setdefault(family, KernelRow(family, None, None, [], calls_b, calls_a))
            dur = kernel.metric("dur_us") or 0.0
            if side == "before":
                row.before_us = (row.before_us or 0.0) + dur
            else:
                row.after_us = (row.after_us or 0.0) + dur
            if kernel.name not in row.names:
                row.names.append(kernel.name)
    if after is None:  # baseline only: nothing was removed, there is just no after side
        return sorted(rows.values(), key=lambda r: -(r.before_per_call_us or 0.0))
    return sorted(rows.values(), key=lambda r: -max(r.before_per_call_us or 0.0, r.after_per_call_us or 0.0))


def kernel_bars_svg(rows: list[KernelRow], has_after: bool,
                    sides: tuple[str, str] = ("baseline", "variant")) -> str | None:
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
        labels.append(_plain(_short(row.family, 48) + (f" ×{len(row.names)}" if len(row.names) > 1 else "")
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
    return _svg(fig)


@dataclass
class Roofs:
    compute_flops_s: float
    bandwidth_bytes_s: float
    label: str


def _peak_value(entry: Any) -> float | None:
    """A gpu_peaks Peak dict ({value, unit, ...}) in base units."""
    if not isinstance(entry, Mapping) or not isinstance(entry.get("value"), (int, float)):
        return None
    return float(entry["value"]) * _UNIT_SCALE.get(str(entry.get("unit")), 1.0)


def device_roofs(card: Card) -> Roofs | None:
    """The roofs the profiler used for this card (extra["peaks"]), CPU or GPU layout; None if absent."""
    peaks = card.extra.get("peaks")
    if not isinstance(peaks, Mapping):
        return None
    if peaks.get("kind") == "cpu" or "mem_bw_bytes_per_s" in peaks:
        dtype = str((card.extra.get("workload") or {}).get("dtype") or "float32")
        compute = (peaks.get("flops_per_s") or {}).get(dtype)
        bandwidth = peaks.get("mem_bw_bytes_per_s")
        label = f"{peaks.get('cpu_model') or 'CPU'} {dtype}, measured"
    else:
        table = peaks.get("peaks") or {}
        used = peaks.get("used") or {}
        compute = _peak_value(used.get("compute") or table.get(str(peaks.get("compute_peak"))))
        bandwidth = _peak_value(used.get("dram") or table.get("dram_tbps"))
        source = (used.get("compute") or {}).get("source", "")
        label = f"{peaks.get('device_name') or peaks.get('table_entry') or 'GPU'} {peaks.get('compute_peak')}, {source}"
    if not all(isinstance(v, (int, float)) and v > 0 for v in (compute, bandwidth)):
        return None
    return Roofs(float(compute), float(bandwidth), label)  # type: ignore[arg-type]  # checked just above


def _dram_bytes(card: Card) -> float | None:
    """The profiler's DRAM read + write per original call, in bytes (MB in the report are 1e6 B)."""
    total, seen = 0.0, False
    for kernel in card.kernels:
        for name in ("dram_read_mb", "dram_write_mb"):
            value = kernel.metric(name)
            if value is not None:
                total, seen = total + value * 1e6, True
    return total / calls_per_invocation(card) if seen and total > 0 else None


def roofline_points(cards: list[tuple[str, Card]]) -> tuple[list[tuple[str, float, float]], str] | None:
    """(label, FLOP/byte, FLOP/s) per card, all on one byte basis so the points compare."""
    measured = [_dram_bytes(c) for _, c in cards]
    use_measured = all(b is not None for b in measured)
    points = []
    for (label, card), dram in zip(cards, measured):
        workload = card.extra.get("workload") or {}
        flops = workload.get("flops") or card.nominal_mac_flops
        nbytes = dram if use_measured else workload.get("min_bytes")
        seconds = (card_time_us(card) or 0.0) * 1e-6
        if not flops or not nbytes or seconds <= 0:
            return None
        points.append((label, flops / nbytes, flops / seconds))
    basis = ("bytes: the profiler's DRAM read + write per original call" if use_measured
             else "bytes: the workload's compulsory minimum (min_bytes), the same for both sides")
    return points, basis


def roofline_svg(roofs: list[Roofs], points: list[tuple[str, float, float]]) -> str:
    fig = Figure(figsize=(7, 4.2))
    ax = fig.subplots()
    xs = [p[1] for p in points] + [r.compute_flops_s / r.bandwidth_bytes_s for r in roofs]
    lo, hi = min(xs) / 20, max(xs) * 20
    for i, roof in enumerate(roofs):
        ridge = roof.compute_flops_s / roof.bandwidth_bytes_s
        style = "-" if i == 0 else "--"
        ax.plot([lo, ridge, hi], [lo * roof.bandwidth_bytes_s, roof.compute_flops_s, roof.compute_flops_s],
                style, color="#444", label=_plain(f"roof: {roof.label}: {roof.compute_flops_s / 1e9:.4g} GFLOP/s, "
                                                  f"{roof.bandwidth_bytes_s / 1e9:.4g} GB/s"))
    for (label, x, y), color in zip(points, (BEFORE_COLOR, AFTER_COLOR, "#55a868")):
        ax.plot([x], [y], "o", markersize=9, color=color, label=_plain(f"{label}: {y / 1e9:.3g} GFLOP/s"))
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
    return _svg(fig)


def history_svg(trials: list[optuna.trial.FrozenTrial]) -> str:
    """Objective per trial, the best so far as a step line; pruned trials marked on the floor."""
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None]
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    variants = sorted({str(t.user_attrs.get("variant", t.params.get("variant", "?"))) for t in done})
    palette = matplotlib.colormaps["tab10"]
    for i, variant in enumerate(variants):
        mine = [t for t in done if str(t.user_attrs.get("variant", t.params.get("variant", "?"))) == variant]
        ax.plot([t.number for t in mine], [t.value for t in mine], "o", color=palette(i % 10), label=_plain(variant))
    if done:
        best, xs, ys = float("inf"), [], []
        for t in sorted(done, key=lambda t: t.number):
            best = min(best, t.value)
            xs.append(t.number)
            ys.append(best)
        ax.step(xs, ys, where="post", color="#c0392b", label="best so far")
    numbers = {t.number for t in done}
    others = [t for t in trials if t.number not in numbers]
    if others:
        floor = min((t.value for t in done), default=1.0) * 0.9
        ax.plot([t.number for t in others], [floor] * len(others), "x", color="#7f7f7f",
                label="pruned / failed (no value)")
    values = [t.value for t in done]
    if values and min(values) > 0 and max(values) / min(values) > 50:
        ax.set_yscale("log")  # one pathological trial would flatten the others onto the floor
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("trial")
    ax.set_ylabel("objective (us per call, search timing)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _svg(fig)


def importance_svg(importances: Mapping[str, float]) -> str:
    names = list(importances)[::-1]
    fig = Figure(figsize=(7, 0.45 * len(names) + 1.2))
    ax = fig.subplots()
    ax.barh(range(len(names)), [importances[n] for n in names], 0.6, color=BEFORE_COLOR)
    ax.set_yticks(range(len(names)), [_plain(n) for n in names])
    ax.set_xlabel("importance (optuna.importance, fANOVA)")
    ax.set_xlim(0, 1.05)
    return _svg(fig)


# ---------------------------------------------------------------------------------------------
# Optuna


def _storage_url(run_dir: Path, run: Mapping[str, Any]) -> str | None:
    """run.json's storage if it can be read without creating anything, else the run dir's optuna.db."""
    url = run.get("storage")
    if isinstance(url, str) and url:
        if not url.startswith("sqlite:///") or Path(url[len("sqlite:///"):]).is_file():
            return url
    local = run_dir / "optuna.db"
    return f"sqlite:///{local.resolve()}" if local.is_file() else None


def _importances(study: optuna.Study, done: list[optuna.trial.FrozenTrial]) -> tuple[dict[str, float] | None, str]:
    varying = [p for p in {k for t in done for k in t.params} if len({repr(t.params.get(p)) for t in done}) > 1]
    if len(done) < 2 or not varying:
        return None, (f"not enough trials for parameter importances: {len(done)} completed, "
                      f"{len(varying)} parameter(s) varying (needs >= 2 completed trials with a varying parameter)")
    try:
        values = optuna.importance.get_param_importances(study)
    except Exception as exc:  # fANOVA refuses some conditional spaces; the page must still render
        return None, f"parameter importances not computable ({type(exc).__name__}: {exc})"
    note = " (the only parameter: importance 1 by construction)" if len(values) == 1 else ""
    return dict(values), f"fANOVA over {len(done)} completed trials{note}"


def load_studies(views: list[CardView], storage: str | None) -> None:
    """Attach each card's study (`<experiment>:<card id>`); every failure becomes a note, never a crash."""
    if storage is None:
        for view in views:
            view.study = StudyView(None, [], None, "", note="no Optuna storage in this run directory")
        return
    try:
        rdb = optuna.storages.RDBStorage(storage)
    except Exception as exc:  # not a database, locked, unreachable: say so on the page
        for view in views:
            view.study = StudyView(None, [], None, "", note=f"storage {storage} unreadable ({type(exc).__name__})")
        return
    try:
        _attach_studies(views, rdb)
    finally:
        rdb.engine.dispose()  # run.py re-renders after every card: do not leave a connection pool behind


def _attach_studies(views: list[CardView], rdb: optuna.storages.RDBStorage) -> None:
    names = set(optuna.study.get_all_study_names(rdb))
    for view in views:
        experiment = (view.before.extra.get("harness") or {}).get("experiment")
        name = f"{experiment}:{view.card_id}"
        if name not in names:
            matches = [n for n in names if n.endswith(f":{view.card_id}")]
            name = matches[0] if len(matches) == 1 else None
        if name is None:
            view.study = StudyView(None, [], None, "", note="no study for this card (nothing was searched)")
            continue
        try:
            study = optuna.load_study(study_name=name, storage=rdb)
            trials = study.get_trials(deepcopy=False)
            done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
            importances, note = _importances(study, done)
            view.study = StudyView(name, trials, importances, note)
        except Exception as exc:
            view.study = StudyView(name, [], None, "", note=f"study {name} unreadable ({type(exc).__name__}: {exc})")


def _missing_reason(view: CardView) -> str:
    """Why a card has no variant tried: the study tells a failed search from a baseline-only experiment."""
    trials = view.study.trials if view.study else []
    if not trials:
        return "baseline only: no variant was searched for this card"
    counts: dict[str, int] = {}
    for t in trials:
        key = t.user_attrs.get("status") or t.state.name.lower()
        counts[key] = counts.get(key, 0) + 1
    if any(t.state == optuna.trial.TrialState.COMPLETE for t in trials):
        return "no variant recorded for this card"
    return "no feasible variant (" + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + ")"


# ---------------------------------------------------------------------------------------------
# HTML pieces


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
"""

# Forbid every load (scripts, fonts, images, frames); only the inline styles are allowed.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


class Num(str):
    """A table cell holding a number: right-aligned, digits in columns."""


def _table(header: list[str], rows: list[list[str]], classes: list[str] | None = None) -> str:
    """Cells are HTML already (callers escape); `Num` cells are right-aligned."""
    out = ["<table><thead><tr>", "".join(f"<th>{h}</th>" for h in header), "</tr></thead><tbody>"]
    for row, cls in zip(rows, classes or [""] * len(rows)):
        cells = "".join(f'<td class="num">{c}</td>' if isinstance(c, Num) else f"<td>{c}</td>" for c in row)
        out.append(f'<tr class="{cls}">{cells}</tr>' if cls else f"<tr>{cells}</tr>")
    out.append("</tbody></table>")
    return "".join(out)


def _anchor(card_id: str) -> str:
    return "card-" + "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in card_id)


def _variant(card: Card | None) -> str:
    label = (card.extra.get("harness") or {}) if card else {}
    params = label.get("params") or {}
    text = str(label.get("variant") or "")
    return f"{text}({', '.join(f'{k}={v}' for k, v in params.items())})" if params else text


def _max_rel(card: Card | None) -> float | None:
    value = ((card.extra.get("correctness") or {}) if card else {}).get("max_rel")
    return float(value) if isinstance(value, (int, float)) else None


def _speedup(d: Mapping[str, Any]) -> str:
    """The diff row's speedup with its 95% interval, as diff.md and summary.md print it."""
    if not d.get("speedup"):
        return "n/a"
    ci = d.get("speedup_ci")
    return f"{d['speedup']:.2f}x" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def _outcome(d: Mapping[str, Any]) -> str:
    """'adopted: X' or 'baseline kept: best tried X, 0.91x SLOWER' (None when the row has no adoption)."""
    variant = (d.get("variant") or {}).get("label") or "none"
    if d.get("adopted") is None:
        return ""
    if d["adopted"]:
        return f"adopted: {variant}"
    return f"baseline kept: best tried {variant}, {_speedup(d)} {d.get('timing_verdict') or 'n/a'}"


def _row_basis(view: CardView) -> str:
    """The basis of the times in a view's summary row: its diff row's, or the lone before card's own."""
    if view.after is None or view.diff is None:
        return time_basis(view.before)
    return str(view.diff.get("time_basis") or "")


def _verdict_cell(d: Mapping[str, Any]) -> str:
    """The time verdict, coloured, with the interval-vs-band comparison that decided it."""
    verdict = d.get("timing_verdict") or "n/a"
    numbers = d.get("verdict_numbers")
    decided = f" <small>({esc(numbers)})</small>" if numbers else ""
    return f'<span class="{esc(verdict)}">{esc(verdict)}</span>{decided}'


def summary_table(views: list[CardView]) -> str:
    before, after = views[0].sides if views else ("baseline", "variant")
    basis = esc(basis_header({_row_basis(v) for v in views}))
    header = ["card", f"{before} us{basis}", f"{after} us{basis}", "speedup [95% CI]",
              "time verdict (what decided it)", "class before -&gt; after", "max rel error", "variant",
              "experiment's check", "card's own check"]
    rows = []
    for v in views:
        link = f'<a href="#{_anchor(v.card_id)}"><code>{esc(v.card_id)}</code></a>'
        d = v.diff
        if v.after is None or d is None:
            rows.append([link, Num(_fmt(card_time_us(v.before), 1)), "n/a", "n/a", "n/a",
                         f"{esc(v.before.primary or 'none')} -&gt; n/a", "n/a", esc(v.missing_reason), "n/a", "n/a"])
            continue
        err = _max_rel(v.after)
        rows.append([
            link, Num(_fmt(d.get("before_us"), 1)), Num(_fmt(d.get("after_us"), 1)),
            Num(esc(_speedup(d))),
            _verdict_cell(d),
            esc(d.get("class_transition") or f"{d.get('class_before') or 'none'} -> {d.get('class_after') or 'none'}"),
            Num(f"{err:.2e}" if err is not None else "n/a"), esc(_outcome(d) or _variant(v.after)),
            f"<b>{esc(d.get('verdict'))}</b> <small>({esc(d.get('check'))})</small>",
            f"<b>{esc(d.get('card_verdict') or 'n/a')}</b> <small>({esc(d.get('card_check') or 'none')})</small>",
        ])
    return _table(header, rows)


def _kernel_block(view: CardView) -> str:
    rows = kernel_rows(view.before, view.after)
    has_after = view.after is not None
    svg = kernel_bars_svg(rows, has_after, view.sides)
    if svg is None:
        return '<p class="note">no kernels recorded on either side</p>'
    more = (f'<p class="note">plot shows the {MAX_KERNEL_ROWS} longest of {len(rows)} kernel families</p>'
            if len(rows) > MAX_KERNEL_ROWS else "")
    before, after = view.sides
    calls_b = calls_per_invocation(view.before)
    calls_a = calls_per_invocation(view.after) if view.after is not None else 1
    batched = calls_b > 1 or calls_a > 1  # the per-invocation sums then differ from the per-call bars: show both
    table_rows, classes = [], []
    for row in rows:
        status = row.status if has_after else ""
        tag = f'<span class="tag {status}">{status}</span>' if status in ("removed", "added") else esc(status)
        names = "<br>".join(f'<code title="{esc(n)}">{esc(_short(n, 110))}</code>' for n in row.names)
        per_call = [Num(_fmt(row.before_per_call_us)), Num(_fmt(row.after_per_call_us))] if batched else []
        table_rows.append([f"<code>{esc(row.family)}</code>", names, Num(_fmt(row.before_us)),
                           Num(_fmt(row.after_us)), *per_call, tag])
        classes.append(status)
    per_call_header = [f"{before} us per original call (/ {calls_b})",
                       f"{after} us per original call (/ {calls_a})"] if batched else []
    table = _table(["family", "kernels", f"{before} us ({KERNEL_SUM_BASIS})", f"{after} us ({KERNEL_SUM_BASIS})",
                    *per_call_header, ""], table_rows, classes)
    return (f'<figure class="kernels">{svg}<figcaption>Kernels by family, {before} vs {after}, the profiler\'s '
            f"kernel-duration sums per original call (the table gives them per invocation): a family present "
            f"before and absent after is marked removed (hatched), a new one added.</figcaption></figure>"
            f"{more}<details{' open' if len(rows) <= 8 else ''}><summary>kernel table</summary>{table}</details>")


def _evidence_table(evidence: Mapping[str, Any]) -> str:
    rows = [[esc(k), esc(_fmt(v, 3) if not isinstance(v, (list, dict)) else json.dumps(v))]
            for k, v in evidence.items()]
    return _table(["evidence", "value"], rows)


def _class_side(title: str, card: Card) -> str:
    dominant = next((k for k in card.kernels if k.name == card.dominant_kernel), None)
    if dominant is None and card.kernels:
        dominant = max(card.kernels, key=lambda k: k.metric("dur_us") or 0.0)
    parts = [f"<h4>{esc(title)}: <code>{esc(class_label(card))}</code></h4>",
             f"<p>rule: {esc(card.primary_rule or 'n/a')}</p>"]
    if dominant is not None:
        parts.append(f"<p>dominant kernel: <code>{esc(_short(dominant.name, 120))}</code> "
                     f"({esc(dominant.classification or 'unclassified')})</p>")
        if dominant.evidence:
            parts.append(_evidence_table(dominant.evidence))
    source = card.extra.get("metrics_source")
    if source:
        parts.append(f"<p>metrics source: <code>{esc(source)}</code></p>")
    for note in card.extra.get("profiler_notes") or []:
        parts.append(f'<p class="note">{esc(note)}</p>')
    own = {k: v for k, v in card.extra.items() if k not in _SHOWN_EXTRA}
    if isinstance(own.get("variant"), dict):
        # per_call_us is the search's timing, taken before the confirm rounds re-timed the card: the card's
        # time is the one in the section's header, and a second value under the same name would contradict it.
        own["variant"] = {k: v for k, v in own["variant"].items() if k != "per_call_us"}
    if own:
        parts.append(f"<details><summary>experiment evidence ({esc(', '.join(own))})</summary>"
                     f"<pre>{esc(json.dumps(own, indent=1, default=str))}</pre></details>")
    return '<div class="side">' + "".join(parts) + "</div>"


def _class_block(view: CardView) -> str:
    d = view.diff or {}
    parts = ['<div class="plots">', _class_side(f"{view.sides[0]} class", view.before)]
    if view.after is not None:
        parts.append(_class_side(f"{view.sides[1]} class", view.after))
    parts.append("</div>")
    if d:
        parts.append(f"<p>Hypothesis: {esc(d.get('hypothesis'))}</p>")
        parts.append(f"<p>Class: {esc(d.get('class_transition') or '')}</p>")
        parts.append(f"<p>Experiment's check <code>{esc(d.get('check'))}</code>: <b>{esc(d.get('verdict'))}</b>: "
                     f"{esc(d.get('verdict_detail'))}</p>")
        parts.append(f"<p>The card's own check &ldquo;{esc(d.get('card_check') or 'none')}&rdquo;: "
                     f"<b>{esc(d.get('card_verdict') or 'n/a')}</b>: {esc(d.get('card_verdict_detail') or '')}</p>")
        deltas = d.get("metric_deltas") or {}
        if deltas:
            rows = [[esc(k)] + [Num(_fmt(v.get(side), 3)) for side in ("before", "after", "delta")]
                    for k, v in deltas.items()]
            parts.append(_table(["check metric", "before", "after", "delta"], rows))
        for note in d.get("notes") or []:
            parts.append(f"<p><b>{esc(note)}</b></p>")
    return "".join(parts)


def _correctness_block(view: CardView) -> str:
    c = (view.after.extra.get("correctness") if view.after else None) or {}
    if not c:
        where = f"on the {view.sides[1]} card" if view.after is not None else f"(no {view.sides[1]} card)"
        return f'<p class="note">no correctness record {where}</p>'
    rows = [[esc(k), esc(_fmt(c.get(k), 3) if not isinstance(c.get(k), float) else f"{c[k]:.3e}")]
            for k in ("max_abs", "max_rel", "bound", "derivation", "baseline_error", "precision", "feasible", "note")
            if k in c]
    return _table([f"correctness ({view.sides[1]} output vs the float64 reference)", ""], rows)


def _roofline_block(view: CardView) -> str:
    sides = [(view.sides[0], view.before)] + ([(view.sides[1], view.after)] if view.after is not None else [])
    roofs: list[Roofs] = []
    for _, card in sides:
        roof = device_roofs(card)
        if roof and all((r.compute_flops_s, r.bandwidth_bytes_s) != (roof.compute_flops_s, roof.bandwidth_bytes_s)
                        for r in roofs):
            roofs.append(roof)
    if not roofs:
        return '<p class="note">roofline: no device peaks recorded on these cards (extra["peaks"])</p>'
    placed = roofline_points(sides)
    if placed is None:
        return '<p class="note">roofline: no FLOPs, bytes or time to place the cards</p>'
    points, basis = placed
    return (f'<figure>{roofline_svg(roofs, points)}<figcaption>Roofline: achieved FLOP/s = workload FLOPs / '
            f"timing median; {esc(basis)}. Roofs are the profiler's peaks.</figcaption></figure>")


def _study_block(view: CardView) -> str:
    s = view.study
    if s is None:
        return ""
    if not s.trials:
        return f'<p class="note">Optuna: {esc(s.note or "the study has no trials")}</p>'
    figures = [f'<figure>{history_svg(s.trials)}<figcaption>Optimization history of study '
               f"<code>{esc(s.name)}</code> ({len(s.trials)} trials).</figcaption></figure>"]
    if s.importances:
        figures.append(f"<figure>{importance_svg(s.importances)}<figcaption>Parameter importances: "
                       f"{esc(s.importance_note)}.</figcaption></figure>")
    else:
        figures.append(f'<p class="note">{esc(s.importance_note)}</p>')
    rows = []
    for t in s.trials:
        value = Num(_fmt(t.value, 3) if t.value is not None else "n/a")
        status = t.user_attrs.get("status") or t.state.name.lower()
        reason = t.user_attrs.get("reason") or ""
        rows.append([str(t.number), esc(t.user_attrs.get("variant", "")), esc(json.dumps(t.params)), value,
                     esc(f"{status} {reason}".strip())])
    table = _table(["trial", "variant", "params", "objective us", "status"], rows)
    return f'<div class="plots">{"".join(figures)}</div><details><summary>trials</summary>{table}</details>'


def card_section(view: CardView) -> str:
    d = view.diff or {}
    if view.after is None:
        head = (f"<p><b>No {esc(view.sides[1])} for this card</b>: {esc(view.missing_reason)}. "
                f"{esc(view.sides[0].capitalize())} {_fmt(card_time_us(view.before), 1)} us "
                f"({esc(time_basis(view.before))}).</p>")
    else:
        sums = kernel_sum_text(d.get("kernel_sum_us") or {}, d.get("calls") or {})
        head = (f"<p>{_fmt(d.get('before_us'), 2)} us -&gt; {_fmt(d.get('after_us'), 2)} us "
                f"({esc(d.get('time_basis'))}), {esc(_speedup(d))}, {_verdict_cell(d)}"
                + (f"; {esc(_outcome(d))}" if _outcome(d) else
                   f"; variant <code>{esc(_variant(view.after))}</code>" if _variant(view.after) else "")
                + "</p>"
                + (f"<p>Kernels, the profiler's durations (not the time above): {esc(sums)}</p>"
                   if sums and d.get("time_basis") == TIMING_BASIS else "")
                + (f'<p class="note">{esc(d.get("verdict_rule"))}</p>' if d.get("verdict_rule") else ""))
    return (f'<section class="card" id="{_anchor(view.card_id)}"><h2><code>{esc(view.card_id)}</code></h2>{head}'
            f"<h3>Kernels</h3>{_kernel_block(view)}"
            f"<h3>Classification</h3>{_class_block(view)}"
            f"<h3>Correctness</h3>{_correctness_block(view)}"
            f"<h3>Roofline</h3>{_roofline_block(view)}"
            + (f"<h3>Search</h3>{_study_block(view)}" if view.study is not None else "")
            + "</section>")


def page(title: str, intro: str, views: list[CardView], tail: str = "") -> str:
    sections = "".join(card_section(v) for v in views)
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f"<h1>{esc(title)}</h1>{intro}<h2>Summary</h2>{summary_table(views)}"
        f'<p class="note">{esc(VERDICT_RULE_TEXT)}</p>'
        f"{sections}{tail}"
        f'<p class="note">Generated {esc(time.strftime("%Y-%m-%d %H:%M:%S"))} by harness.cards.html.</p>'
        "</body></html>\n"
    )


# ---------------------------------------------------------------------------------------------
# Entry points


def _read_json(path: Path) -> dict[str, Any]:
    """An optional run file: absent or unreadable gives {} (the page says what is missing)."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _run_intro(run_dir: Path, run: Mapping[str, Any], baseline: Report, storage: str | None) -> str:
    env = run.get("environment") or {}
    experiment = next(((c.extra.get("harness") or {}).get("experiment") for c in baseline.cards), None)
    facts = [["run directory", f"<code>{esc(run_dir)}</code>"], ["experiment", esc(experiment or "n/a")],
             ["device", esc(f"{env.get('device_name') or 'n/a'} ({env.get('device_kind') or '?'})")],
             ["scope", esc(baseline.scope or "")], ["Optuna storage", f"<code>{esc(storage or 'none')}</code>"]]
    for name, value in (run.get("phases") or {}).items():
        facts.append([esc(name), Num(esc(_fmt(value, 2)))])
    env_rows = [[esc(k), esc(v)] for k, v in env.items()]
    details = f"<details><summary>environment</summary>{_table(['key', 'value'], env_rows)}</details>"
    return _table(["run", ""], facts) + (details if env_rows else "")


def render_run_html(run_dir: Path) -> str:
    """The page for one run directory (baseline.json is required; every other file is optional)."""
    run_dir = Path(run_dir)
    baseline = load_report(run_dir / "baseline.json")
    try:  # the best variant each search tried, adopted or not (the diff's after side)
        best: Report | None = load_report(run_dir / "tried.json")
    except ReportError:
        best = None
    diff = _read_json(run_dir / "diff.json")
    run = _read_json(run_dir / "run.json")
    views = _views(baseline, best, diff, ("baseline", "variant"))
    storage = _storage_url(run_dir, run)
    load_studies(views, storage)
    for view in views:
        if view.after is None:
            view.missing_reason = _missing_reason(view)
    try:
        summary = (run_dir / "summary.md").read_text(encoding="utf-8")
        tail = f"<details><summary>summary.md</summary><pre>{esc(summary)}</pre></details>"
    except OSError:
        tail = ""
    experiment = next(((c.extra.get("harness") or {}).get("experiment") for c in baseline.cards), None)
    return page(f"harness run: {experiment or run_dir.name}", _run_intro(run_dir, run, baseline, storage), views, tail)


def render_diff_html(diff: ReportDiff, before: Report, after: Report, title: str, note: str = "") -> str:
    """The page for `python -m harness.cards diff --html`: no study, the rest as for a run.

    `note` says what kind of comparison this is (harness.cards.diff.comparison_note), e.g. two runs' cards."""
    views = _views(before, after, diff.as_dict(), ("before", "after"))
    for view in views:
        if view.after is None:
            view.missing_reason = "only in the before report"
    intro = (f"<p>before: <code>{esc(before.source)}</code><br>after: <code>{esc(after.source)}</code></p>"
             + (f"<p><b>{esc(note)}</b></p>" if note else ""))
    if diff.only_after:
        intro += "<p>Only in after: " + ", ".join(f"<code>{esc(c)}</code>" for c in diff.only_after) + "</p>"
    return page(title, intro, views)


def render_index_html(title: str, summary: str) -> str:
    """A page over several runs (experiment=auto, a multirun): their summary.md as HTML, its tables as
    tables and its links (to each run's report.html and summary.md) as links."""
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        f"{markdown_to_html(summary)}"
        "</body></html>\n"
    )


def write_run_html(run_dir: Path) -> Path:
    """Render run_dir/report.html from the run's files; returns its path."""
    return write_text_atomic(Path(run_dir) / "report.html", render_run_html(Path(run_dir)))
