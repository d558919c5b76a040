"""`python -m harness.report`: lint, classify, show, diff, reproduce and import-ncu on report files.

REPORT may be omitted to mean the shipped baseline report. Bad input (a usage mistake too) ends with one
`error: ...` line on stderr and exit status 2. `lint` exits by the worst severity it found: 0 for none or
only info, 1 for warnings, 3 for errors (harness.cards.lint.EXIT_BY_SEVERITY), so that a script can
tell a report with lost data from a report it could not read.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any, NoReturn, Sequence

from harness.cards.atomic import write_text_atomic
from harness.cards.cells import fmt, shorten
from harness.cards.checks import CheckError
from harness.cards.fields import UNRESOLVED
from harness.cards.findings import SEVERITIES, exit_status
from harness.cards.launches import invocation_text, launches
from harness.cards.lint import LintResult, lint_report
from harness.cards.lint_text import finding_line, render
from harness.cards.measures import (
    KERNEL_SUM_BASIS,
    TIMING_BASIS,
    calls_per_invocation,
    kernel_sum_us,
    timing_median_us,
)
from harness.cards.model import Card, Report, ReportError, load_report
from harness.cards.reproduce import reported_device, reproduce
from harness.cards.rules import RuleSet, classify_report, undecided
from harness.errors import HarnessError
from harness.report.diff_command import DiffError, cmd_diff
from harness.report.ncu_lines import kernel_lines

EXIT_BAD_INPUT = 2
CORRECTED = "*"  # marks a value `show` prints from the normalized view that differs from the stored one
LEGEND = f"{CORRECTED} corrected from the report (see lint)"
_CARD_ID = re.compile(r"[A-Za-z0-9_-]+")  # the characters of every card id (harness.cards.ids)


class CliError(HarnessError):
    """A usage problem reported in one line with exit status 2."""


def _load_rules(path: str | None) -> RuleSet:
    if path is None:
        return RuleSet()
    try:
        from omegaconf import OmegaConf

        cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except FileNotFoundError:
        raise CliError(f"{path}: no such rules file") from None
    except Exception as exc:  # OmegaConf raises several YAML and config error types
        raise CliError(f"{path}: not a valid rules file ({type(exc).__name__}: {exc})") from None
    if not isinstance(cfg, dict):
        raise CliError(f"{path}: a rules file must be a mapping with 'thresholds' and 'order'")
    cfg = cfg.get("rules", cfg)
    try:
        return RuleSet.from_config(cfg)
    except ValueError as exc:
        raise CliError(f"{path}: {exc}") from None


def _reclassified(report: Report, rules: RuleSet) -> Report:
    return classify_report(lint_report(report).normalized, rules)


def _cmd_lint(args: argparse.Namespace) -> int:
    result = lint_report(load_report(args.report))
    if args.json:
        print(json.dumps([f.as_dict() for f in result.findings], indent=1))
    else:
        print(render(result, verbose=args.verbose))
    return exit_status(result.findings)


def no_class_reason(card: Card) -> str:
    """Why a classified card has no primary class (harness.cards.rules.classify_card's cases)."""
    if reason := undecided(card.primary_rule):  # an estimate, or a reading, the nulls could classify otherwise
        return reason
    if "classification_note" in card.extra:
        return "dominant kernel not listed"
    if card.dominant_kernel is None:
        return "no kernel duration known"
    return "dominant kernel unclassified"


def class_line(report: Report) -> str:
    """The classes of a classified report, a card without a class counted apart from an unresolved one.

    The report's `summary` counts both as unresolved_no_dominant_limiter (its own convention, kept in
    the JSON); a reader deciding what to re-profile needs them apart: unresolved cards have a dominant
    kernel no rule explains, cards without a class do not even have a dominant kernel with metrics.
    """
    classes = Counter(c.primary for c in report.cards if c.primary is not None)
    reasons = Counter(no_class_reason(c) for c in report.cards if c.primary is None)
    parts = [f"{name} {n}" for name, n in classes.most_common()]
    if reasons:
        why = ", ".join(f"{n} {reason}" for reason, n in reasons.most_common())
        parts.append(f"no class {sum(reasons.values())} ({why})")
    line = f"{len(report.cards)} cards: " + ", ".join(parts)
    if reasons:
        line += (f"; the JSON's summary counts a card without a class as {UNRESOLVED} "
                 f"({(report.summary or {}).get(UNRESOLVED, 0)}), as the report does")
    return line


def _cmd_classify(args: argparse.Namespace) -> int:
    report = load_report(args.report)
    out = _reclassified(report, _load_rules(args.rules))
    if args.out:
        _save(out, args.out)
        print(f"wrote {args.out}: {class_line(out)}")
    else:
        print(_standard_json(out))
        print()
        print(class_line(out), file=sys.stderr)  # for the reader; stdout stays one JSON document
    return 0


def _fmt(value: Any, digits: int = 1) -> str:
    """The text tables' cell: one digit, "-" for a missing value."""
    return fmt(value, digits, missing="-")


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def _marked(text: str, corrected: bool) -> str:
    return text + CORRECTED if corrected else text


def _cmd_show(args: argparse.Namespace) -> int:
    report = load_report(args.report)
    result = lint_report(report)
    normalized = classify_report(result.normalized)
    if args.card is None:
        _show_table(report, normalized, result)
    else:
        _show_card(report.card(args.card), normalized.card(args.card), result)
    return 0


def _show_table(report: Report, normalized: Report, result: LintResult) -> None:
    flags: dict[str, list[str]] = {}
    for finding in result.findings:
        flags.setdefault(finding.card, []).append(finding.severity)
    # A measured card has two times that differ (wall clock vs the profiler's kernels): one column each,
    # named by its basis; a report of profiler cards only has the kernel sum.
    timed = any(timing_median_us(card) is not None for card in normalized.cards)
    rows, marked = [], False
    for stored, card in zip(report.cards, normalized.cards):
        corrected = kernel_sum_us(card) != kernel_sum_us(stored)
        marked |= corrected
        severities = flags.get(card.id, [])
        worst = next((s for s in SEVERITIES if s in severities), None)
        times = [_fmt(_timing_per_call_us(card))] if timed else []
        rows.append([
            card.id, card.resolution or "-", *times, _marked(_fmt(kernel_sum_us(card)), corrected),
            stored.primary or "(none)", card.primary or f"(no class: {no_class_reason(card)})", str(len(card.kernels)),
            f"{len(severities)} ({worst})" if worst else "0",
        ])
    print(_table(rows, ["card", "resolution", *(["time_us"] if timed else []), "kernels_us", "stored primary",
                        "rules (normalized)", "kernels", "lint (worst)"]))
    print(("\ntime_us: " + TIMING_BASIS + "; " if timed else "\n") + f"kernels_us: {KERNEL_SUM_BASIS}.")
    print(f"{len(rows)} cards from {report.source}. `show REPORT CARD` for one card's kernels.")
    if marked:
        print(LEGEND)


def _timing_per_call_us(card: Card) -> float | None:
    median = timing_median_us(card)
    return median / calls_per_invocation(card) if median is not None else None


def _time_lines(stored: Card, card: Card, corrected: bool) -> list[str]:
    """A measured card's time is its timing median per original call; its kernel sum is labelled as such."""
    calls = calls_per_invocation(card)
    kernels = kernel_sum_us(card)
    counted = invocation_text(card)
    kernel_text = (f"{_marked(_fmt(kernels, 3), corrected)} us ({KERNEL_SUM_BASIS}"
                   + (f"; {counted}" if counted else "")
                   + (f"; {_fmt(kernels / calls, 3)} us per original call over {calls} calls"
                      if calls > 1 and kernels is not None else "")
                   + f"; stored summed_kernel_us {_fmt(stored.summed_kernel_us, 3)})")
    median = timing_median_us(card)
    if median is None:  # a report card: the profiler's kernels are all it has
        return [f"time       {kernel_text}"]
    calls_text = f"median_us {_fmt(median, 3)} / {calls} calls" if calls > 1 else "one call per invocation"
    return [f"time       {_fmt(median / calls, 3)} us ({TIMING_BASIS}; {calls_text})",
            f"kernels    {kernel_text}"]


def _show_card(stored: Card, card: Card, result: LintResult) -> None:
    time_corrected = kernel_sum_us(card) != kernel_sum_us(stored)
    print(f"card       {card.id}\ngroup      {card.group}\nstage      {card.stage}   op {card.op}   "
          f"resolution {card.resolution}")
    print(f"shape      {json.dumps(card.shape_parameters)}")
    rebuilt = card.extra.get("shape_rebuilt")
    if rebuilt is not None:
        if isinstance(rebuilt, dict):
            print(f"rebuilt    {json.dumps(rebuilt.get('shape'))}: {rebuilt.get('why', '(no reason recorded)')}")
        else:
            print(f"rebuilt    {json.dumps(rebuilt)}")
    print("\n".join(_time_lines(stored, card, time_corrected)))
    print(f"primary    stored {stored.primary or '(none)'}; rules on normalized metrics "
          f"{card.primary or f'(no class: {no_class_reason(card)})'}")
    print(f"dominant   {shorten(card.dominant_kernel, 100)}")
    print(f"status     {card.status}\nhypothesis {card.counter_experiment}\nalternative "
          f"{card.alternative_explanation}")
    for key in ("timing", "workload", "environment", "metrics_source", "peaks"):
        if key in card.extra:
            print(f"{key:10s} {json.dumps(card.extra[key])[:300]}")
    fields = ["dur_us", "sm_pct", "tensor_pct", "dram_pct", "l2_pct", "warps_active_pct", "waves",
              "dram_read_mb", "dram_write_mb"]
    rows, marked = [], time_corrected
    counted = any(launches(k) > 1 for k in card.kernels)  # an imported report's entries of several launches
    for before, kernel in zip(stored.kernels, card.kernels):
        cells = [_marked(shorten(kernel.name, 60), before.damaged)] + ([str(launches(kernel))] if counted else [])
        for field in fields:
            if before.damaged:  # the values come from the entry's surviving evidence; only a duration is inferred
                corrected = field == "dur_us" and bool(kernel.extra.get("dur_us_inferred"))
            else:
                corrected = kernel.metric(field) != before.metric(field)
            cells.append(_marked(_fmt(kernel.metric(field)), corrected))
        marked |= before.damaged or any(c.endswith(CORRECTED) for c in cells[1:])
        rows.append(cells + [kernel.classification or "-"])
    print()
    print(_table(rows, ["kernel"] + (["launches"] if counted else []) + fields + ["class"]))
    calls = calls_per_invocation(card)
    print("(metrics per kernel and " + ("launch: an entry of several launches gives their mean" if counted
                                        else "invocation")
          + (f"; one invocation serves {calls} original calls)" if calls > 1 else ")"))
    if marked:
        print(LEGEND)
    ncu = kernel_lines(card)
    if ncu:
        print("\nncu:\n" + "\n".join("  " + line for line in ncu))
    notes = [f for f in result.findings if f.card == card.id]
    if notes:
        print("\nlint:")
        for finding in sorted(notes, key=lambda f: SEVERITIES.index(f.severity)):
            print("  " + finding_line(finding))


def _standard_json(report: Report) -> str:
    """The report as standard JSON: NaN and Infinity are not JSON (JSON.parse refuses them), so one is an error."""
    try:
        return json.dumps(report.to_dict(), indent=1, allow_nan=False)
    except ValueError as exc:
        raise CliError(f"{report.source}: not written: a value is not a finite number ({exc})") from None


def _save(report: Report, path: str) -> None:
    write_text_atomic(path, _standard_json(report) + "\n")


def _cmd_import_ncu(args: argparse.Namespace) -> int:
    from harness.profile.ncu.importer import import_ncu

    try:
        imported = import_ncu(args.file, group_by=args.group_by)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    report = classify_report(imported)
    report.scope = f"imported from {args.file} by harness.report import-ncu"
    if args.out:
        _save(report, args.out)
        device = report.extra.get("device") or "no GPU named"
        version = report.extra.get("ncu_version")
        tool = f"ncu {version}" if version else "ncu version not recorded"
        print(f"wrote {args.out}: {len(report.cards)} cards ({device}; {tool}); {class_line(report)}")
    else:
        print(_standard_json(report))
    return 0


def _cmd_predict(args: argparse.Namespace) -> int:
    from harness.predict.command import predict_report, print_rows

    try:
        rows = predict_report(args.report, args.device)
    except HarnessError as exc:  # a device without peaks, a report that cannot be read
        raise CliError(str(exc)) from None
    print_rows(rows, sys.stdout, args.json)
    return 0


def _cmd_reproduce(args: argparse.Namespace) -> int:
    measured = load_report(args.baseline)
    report = lint_report(load_report(args.report)).normalized
    device = reported_device(report, args.report_device)
    results = reproduce(measured, report, device)
    if args.json:
        print(json.dumps({"report_device": device, "cards": [r.as_dict() for r in results]}, indent=1))
        return 0
    rows = [[r.card, r.verdict.value, fmt(r.time_ratio, 2), ", ".join(r.families_report) or "-",
             ", ".join(r.families_here) or "-", r.dtype_here or "-",
             f"{r.class_report} -> {r.class_here}" if r.class_compared else f"{r.class_report} (not compared)"]
            for r in results]
    print(_table(rows, ["card", "verdict", "time x", "report's kernels", "kernels here", "built in", "class"]))
    print()
    for r in results:
        print(f"- {r.line()}")
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors as one `error:` line and exit status 2, like every other bad input."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m harness.report", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    lint = sub.add_parser("lint", help="name every defect of a report")
    lint.add_argument("report", nargs="?", help="report JSON (default: the shipped baseline)")
    lint.add_argument("--json", action="store_true", help="print every finding as JSON, each with its severity")
    lint.add_argument("--verbose", "-v", action="store_true",
                      help="one line per finding instead of one per (code, field)")
    lint.set_defaults(run=_cmd_lint)

    classify = sub.add_parser("classify", help="re-classify the normalized report with the rules")
    classify.add_argument("report", nargs="?")
    classify.add_argument("--out", help="write the re-classified report here (default: stdout)")
    classify.add_argument("--rules", help="YAML with rule thresholds/order (see conf/rules/default.yaml)")
    classify.set_defaults(run=_cmd_classify)

    show = sub.add_parser("show", help="a table of cards, or one card with its kernels")
    show.add_argument("report", nargs="?")
    show.add_argument("card", nargs="?", help="card id (see the table); the id without its -xxxxxx suffix "
                      "when that names one card")
    show.set_defaults(run=_cmd_show)

    diff = sub.add_parser("diff", help="before/after diff of two reports matched by card id; a run folder is read "
                          "as its baseline.json (before) or best.json (after), one alone as its baseline vs its best")
    diff.add_argument("before", help="a report file, or a run folder (its baseline.json)")
    diff.add_argument("after", nargs="?", help="a report file, or a run folder (its best.json); default: BEFORE")
    diff.add_argument("--json", action="store_true")
    diff.add_argument("--out", help="also write the Markdown diff to this file")
    diff.add_argument("--html", metavar="OUT.html",
                      help="also write a self-contained HTML page (plots inline, no network)")
    diff.add_argument("--report-device", help="where a side's report cards were profiled (default: what that "
                      "report says: its declaration, or the device its capture ran on)")
    diff.set_defaults(run=cmd_diff)

    rep = sub.add_parser("reproduce", help="did a measured baseline run the report's kernels at its speed? "
                         "REPRODUCED / OTHER_KERNELS / OTHER_SPEED / NOT_COMPARABLE per card")
    rep.add_argument("baseline", help="a run's baseline.json (or any report of measured cards)")
    rep.add_argument("--report", help="the report its cards come from (default: the shipped baseline)")
    rep.add_argument("--report-device", help="the device the report was profiled on (default: what the report "
                     "says: its declaration, e.g. H200, or the device its capture ran on)")
    rep.add_argument("--json", action="store_true", help="per card: verdict, families_report, families_here, "
                     "time_ratio, class_report, class_here, class_compared, reason")
    rep.set_defaults(run=_cmd_reproduce)

    pred = sub.add_parser("predict", help="each card's counter-experiments' expected speedup on a device, with an "
                          "80%% interval and the terms it comes from (harness.predict), before any GPU time")
    pred.add_argument("report", nargs="?", help="report JSON (default: the shipped baseline)")
    pred.add_argument("--device", help="a GPU of the peak table (default: the report's, e.g. H200), or cpu: this "
                      "machine's measured peaks")
    pred.add_argument("--json", action="store_true", help="every row: card, experiment, variant, params, speedup, "
                      "interval, saving_us, saving_in_model_us, basis, interval_from")
    pred.set_defaults(run=_cmd_predict)

    imp = sub.add_parser("import-ncu", help="turn an ncu output (.ncu-rep, raw or details CSV) into cards")
    imp.add_argument("file")
    imp.add_argument("--out", help="write the report here (default: stdout)")
    imp.add_argument("--group-by", choices=("range", "kernel"), default="range")
    imp.set_defaults(run=_cmd_import_ncu)
    return parser


def _resolve_show_args(args: argparse.Namespace) -> None:
    """`show X` alone: X is a report when it is a file or cannot be a card id (a `/`, a `.`: ids are
    letters, digits, `-` and `_`), so that a mistyped path says "no such file"; else a card of the
    shipped report."""
    if args.command == "show" and args.report and args.card is None and not Path(args.report).exists():
        if _CARD_ID.fullmatch(args.report):
            args.card, args.report = args.report, None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _resolve_show_args(args)
    try:
        return int(args.run(args))
    except (ReportError, CliError, CheckError, DiffError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0
