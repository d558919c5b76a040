"""`python -m harness.cards`: lint, classify, show, diff and import-ncu on report files.

REPORT may be omitted to mean the shipped baseline report. Bad input ends with one line on stderr and
exit status 2; a lint run that finds defects exits 0 (they are the report's, not the command's).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from harness.cards.diff import ReportDiff, diff_reports, render_markdown
from harness.cards.lint import lint_report
from harness.cards.model import Card, Report, ReportError, load_report, save_report, write_json_atomic, write_text_atomic
from harness.cards.rules import RuleSet, classify_report

EXIT_BAD_INPUT = 2


class CliError(Exception):
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
        return 0
    counts: dict[str, int] = {}
    for finding in result.findings:
        counts[finding.code] = counts.get(finding.code, 0) + 1
        where = finding.card + (f" / {_short(finding.kernel, 48)}" if finding.kernel else "")
        print(f"{finding.code:24s} {where}: {finding.detail}")
    summary = ", ".join(f"{code} {n}" for code, n in sorted(counts.items())) or "no defects"
    cal = result.calibration
    print(
        f"\n{len(result.findings)} findings in {len(result.normalized.cards)} cards: {summary}. "
        f"Cross-check references from the report itself: SM clock {cal.clock_mhz or 0:.0f} MHz, "
        f"DRAM {cal.dram_tb_s or 0:.2f} TB/s. {sum(len(c) for c in result.corrections.values())} values "
        "corrected in the normalized view (see `classify`)."
    )
    return 0


def _cmd_classify(args: argparse.Namespace) -> int:
    report = load_report(args.report)
    out = _reclassified(report, _load_rules(args.rules))
    if args.out:
        save_report(out, args.out)
        print(f"wrote {args.out}: {len(out.cards)} cards; summary {out.summary}")
    else:
        json.dump(out.to_dict(), sys.stdout, indent=1)
        print()
    return 0


def _short(text: str | None, width: int) -> str:
    text = text or ""
    return text if len(text) <= width else text[: width - 1] + "…"


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(str(c).ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def _card_time(card: Card) -> float | None:
    known = [k.metric("dur_us") for k in card.kernels if k.metric("dur_us") is not None]
    return card.summed_kernel_us if card.summed_kernel_us is not None else (sum(known) if known else None)


def _cmd_show(args: argparse.Namespace) -> int:
    report = load_report(args.report)
    result = lint_report(report)
    normalized = classify_report(result.normalized)
    flags: dict[str, int] = {}
    for finding in result.findings:
        flags[finding.card] = flags.get(finding.card, 0) + 1
    if args.card is None:
        rows = []
        for stored, card in zip(report.cards, normalized.cards):
            rows.append([
                card.id, card.resolution, _fmt(_card_time(card)), stored.primary or "(none)",
                card.primary or "(none)", str(len(card.kernels)), str(flags.get(card.id, 0)),
            ])
        print(_table(rows, ["card", "resolution", "time_us", "stored primary", "rules (normalized)",
                            "kernels", "lint"]))
        print(f"\n{len(rows)} cards from {report.source}. `show REPORT CARD` for one card's kernels.")
        return 0
    stored = report.card(args.card)
    card = normalized.card(args.card)
    print(f"card       {card.id}\ngroup      {card.group}\nstage      {card.stage}   op {card.op}   "
          f"resolution {card.resolution}")
    print(f"shape      {json.dumps(card.shape_parameters)}")
    print(f"time       {_fmt(_card_time(card), 3)} us (summed_kernel_us {stored.summed_kernel_us})")
    print(f"primary    stored {stored.primary or '(none)'}; rules on normalized metrics {card.primary}")
    print(f"dominant   {_short(card.dominant_kernel, 100)}")
    print(f"status     {card.status}\nhypothesis {card.counter_experiment}\nalternative "
          f"{card.alternative_explanation}")
    for key in ("timing", "workload", "environment", "metrics_source", "peaks"):
        if key in card.extra:
            print(f"{key:10s} {json.dumps(card.extra[key])[:300]}")
    fields = ["dur_us", "sm_pct", "tensor_pct", "dram_pct", "l2_pct", "warps_active_pct", "waves",
              "dram_read_mb", "dram_write_mb"]
    rows = [[_short(k.name, 60)] + [_fmt(k.metric(f)) for f in fields] + [k.classification or "-"]
            for k in card.kernels]
    print()
    print(_table(rows, ["kernel"] + fields + ["class"]))
    notes = [f for f in result.findings if f.card == card.id]
    if notes:
        print("\nlint:")
        for finding in notes:
            print(f"  {finding.code}: {_short(finding.kernel, 40) + ': ' if finding.kernel else ''}{finding.detail}")
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    rules = RuleSet()
    before = _reclassified(load_report(args.before), rules)
    after = _reclassified(load_report(args.after), rules)
    diff = diff_reports(before, after)
    if not diff.cards:
        raise CliError(f"{args.before} and {args.after} share no card id; nothing to compare")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(render_markdown(diff), encoding="utf-8")
    if args.html:
        _write_diff_html(diff, before, after, args)
    if args.json:
        print(json.dumps(diff.as_dict(), indent=1))
    else:
        print(render_markdown(diff))
    return 0


def _write_diff_html(diff: ReportDiff, before: Report, after: Report, args: argparse.Namespace) -> None:
    from harness.cards.html import render_diff_html  # matplotlib: only when asked

    target = Path(args.html)
    if target.is_dir():  # before rendering: a page of many cards takes seconds
        raise CliError(f"{target}: is a directory; give a file name, e.g. {target / 'diff.html'}")
    page = render_diff_html(diff, before, after,
                            title=f"Before/after card diff: {Path(args.before).name} vs {Path(args.after).name}")
    try:
        write_text_atomic(target, page)
    except (FileExistsError, NotADirectoryError):
        raise CliError(f"{target}: cannot write the HTML report (a parent of it is a file, not a folder)") from None
    except OSError as exc:
        raise CliError(f"{target}: cannot write the HTML report ({exc.strerror or exc})") from None


def _cmd_import_ncu(args: argparse.Namespace) -> int:
    from harness.profile.ncu.importer import cards_from_ncu

    try:
        cards = cards_from_ncu(args.file, group_by=args.group_by)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    report = classify_report(Report(cards=cards, source=str(args.file)))
    report.scope = f"imported from {args.file} by harness.cards import-ncu"
    if args.out:
        write_json_atomic(args.out, report.to_dict())
        print(f"wrote {args.out}: {len(report.cards)} cards; summary {report.summary}")
    else:
        print(json.dumps(report.to_dict(), indent=1))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m harness.cards", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    lint = sub.add_parser("lint", help="name every defect of a report")
    lint.add_argument("report", nargs="?", help="report JSON (default: the shipped baseline)")
    lint.add_argument("--json", action="store_true", help="print a JSON list of findings")
    lint.set_defaults(run=_cmd_lint)

    classify = sub.add_parser("classify", help="re-classify the normalized report with the rules")
    classify.add_argument("report", nargs="?")
    classify.add_argument("--out", help="write the re-classified report here (default: stdout)")
    classify.add_argument("--rules", help="YAML with rule thresholds/order (see conf/rules/default.yaml)")
    classify.set_defaults(run=_cmd_classify)

    show = sub.add_parser("show", help="a table of cards, or one card with its kernels")
    show.add_argument("report", nargs="?")
    show.add_argument("card", nargs="?", help="card id (see the table)")
    show.set_defaults(run=_cmd_show)

    diff = sub.add_parser("diff", help="before/after diff of two reports matched by card id")
    diff.add_argument("before")
    diff.add_argument("after")
    diff.add_argument("--json", action="store_true")
    diff.add_argument("--out", help="also write the Markdown diff to this file")
    diff.add_argument("--html", metavar="OUT.html",
                      help="also write a self-contained HTML page (plots inline, no network)")
    diff.set_defaults(run=_cmd_diff)

    imp = sub.add_parser("import-ncu", help="turn an ncu output (.ncu-rep, raw or details CSV) into cards")
    imp.add_argument("file")
    imp.add_argument("--out", help="write the report here (default: stdout)")
    imp.add_argument("--group-by", choices=("range", "kernel"), default="range")
    imp.set_defaults(run=_cmd_import_ncu)
    return parser


def _resolve_show_args(args: argparse.Namespace) -> None:
    """`show CARD` alone means a card of the default report, when CARD is not a file."""
    if args.command == "show" and args.report and args.card is None and not Path(args.report).exists():
        if not args.report.endswith(".json"):
            args.card, args.report = args.report, None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _resolve_show_args(args)
    try:
        return int(args.run(args))
    except (ReportError, CliError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:
        return 0
