"""`python -m harness.capture MODULE:FACTORY --out DIR`: any PyTorch model as a report of cards.

    python -m harness.capture mymodel:make --out captures/mine          # capture, replay, profile
    python -m harness experiment=auto report=captures/mine/report.json inputs.dir=captures/mine/inputs
    python -m harness.capture mymodel:make --out captures/mine --apply outputs/auto/DATE/<exp>/best.json

Bad input (a module that does not import, a factory that raises or returns something else, a model that
calls no torch operator, a usage mistake) ends with one `error: ...` line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn, Sequence

from harness.capture.apply import apply_best
from harness.capture.factory import CaptureError, load_factory, place
from harness.capture.pipeline import (
    MIN_SHARE,
    CaptureOptions,
    CaptureResult,
    capture,
    resolve_device,
    thread_overrides,
)
from harness.capture.recorder import MAX_FORWARDS, SETTLE_S
from harness.cards.atomic import write_json_atomic, write_text_atomic
from harness.cards.labels import class_label
from harness.cards.model import CAPTURE_KEY, ReportError, load_report
from harness.errors import HarnessError

EXIT_BAD_INPUT = 2
COVERAGE_TEXT = ("How the shares are measured: forwards in which every call is timed alone (the CPU clock, or CUDA "
                 "events), each call's own time (the part of its span no earlier call's span covered, so nested or "
                 "overlapping calls count once) over those forwards' whole time; so the shares add up to at most "
                 "100%, the rest being the model's Python between the calls and the timer's own work. A group's "
                 "time in the model is its share of the plain forward's time.")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see python -m harness.capture --help)", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="python -m harness.capture", description=__doc__.split("\n\n")[0],
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("factory", metavar="MODULE:FACTORY",
                        help="FACTORY() in MODULE (importable) returns (model, example_inputs)")
    parser.add_argument("--out", required=True, type=Path, help="the capture's folder: report.json, inputs/")
    parser.add_argument("--device", default="auto", help="auto (cuda where available), cpu or cuda")
    parser.add_argument("--dtype", help="put the model and its floating inputs in this dtype first")
    parser.add_argument("--top", type=_positive, help="keep the N hottest groups (default: every group above 1%% "
                                                      "of the forward)")
    parser.add_argument("--profiler", default="auto", choices=("auto", "cpu", "torch_cuda", "ncu"),
                        help="the backend that profiles each replayed group (as profiler= of a run)")
    parser.add_argument("--resolution", help="HxW as the report writes it (480x832); default: the first input's "
                                             "last two dims")
    parser.add_argument("--stage", help="one stage name for every card (default: the model's top-level child "
                                        "that issued the op, `model` for its own forward)")
    parser.add_argument("--stage-map", default="", help="CHILD=STAGE,...: stage names for top-level children")
    parser.add_argument("--repeats", type=_positive, default=3,
                        help="pairs of forwards timed at least (plain, and call by call); more until their time "
                             f"settles, at most {MAX_FORWARDS}")
    parser.add_argument("--threads", type=_positive,
                        help="torch's CPU threads for the capture, its re-profile and the next run "
                             "(timing.cpu_threads; default: torch's, one per core); 1 steadies a shared CPU")
    parser.add_argument("--settle-s", type=_seconds, default=SETTLE_S,
                        help="the most seconds of timed forwards while their time settles, and a third of it of "
                             "untimed ones before (default %(default)s; 0: --repeats pairs after one warm-up forward)")
    parser.add_argument("--no-profile", action="store_true", help="write the cards without replaying them")
    parser.add_argument("--override", action="append", default=[], metavar="KEY=VALUE",
                        help="a Hydra override for the re-profile run (repeatable): profiler.keep_dir=DIR, "
                             "timing.budget_s=0.2, ...")
    parser.add_argument("--apply", type=Path, metavar="BEST_JSON",
                        help="apply what a run on this capture adopted to the whole model and time the forward "
                             "before/after (writes DIR/applied.json)")
    parser.add_argument("--rounds", type=_positive, default=8, help="paired rounds of --apply's forward timing")
    parser.add_argument("--budget-s", type=float, default=1.0, help="timing budget of each side of a round")
    return parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 0")
    return value


def _stage_map(text: str) -> dict[str, str]:
    mapping = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        child, sep, stage = item.partition("=")
        if not sep or not child or not stage:
            raise CaptureError(f"--stage-map {text!r}: give CHILD=STAGE pairs separated by commas")
        mapping[child] = stage
    return mapping


def summary_table(result: CaptureResult) -> str:
    record = result.report.extra[CAPTURE_KEY]
    lines = [f"# Capture of {record['model']}", "",
             f"{record['recorded_calls']} calls in {record['groups']} groups; forward {record['forward_us']:.0f} us "
             f"(median of plain forwards), {_percent(record['ops_share_of_forward'])} of it in these calls; the "
             f"{record['cards']} cards cover {_percent(record['cards_share_of_forward'])} of the forward.", "",
             COVERAGE_TEXT, "", _settled(record), "",
             "| card | op | calls | time in model us | share | class |", "|---|---|---:|---:|---:|---|"]
    for kept in result.kept:
        card = kept.card
        lines.append(f"| `{card.id}` | {card.op} | {kept.group.calls} | {kept.group.time_s * 1e6:.1f} | "
                     f"{kept.share:.1%} | {class_label(card) if card.kernels else '(not profiled)'} |")
    for card_id, why in record["unprofiled"].items():
        lines.append(f"\nnot profiled: `{card_id}`: {why}")
    not_replayable = record["not_replayable"]
    if not_replayable:
        lines.append(f"\n{len(not_replayable)} groups not replayable (first: {not_replayable[0]['op']}: "
                     f"{not_replayable[0]['why']})")
    return "\n".join(lines) + "\n"


def _percent(value: Any) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def _apply(args: argparse.Namespace) -> int:
    try:
        best = load_report(args.apply)
    except ReportError as exc:
        raise CaptureError(f"--apply: {exc}") from None
    device = resolve_device(args.device)
    loaded = place(load_factory(args.factory), device, args.dtype)
    result = apply_best(loaded, best, args.rounds, args.budget_s, device.startswith("cuda"))
    path = write_json_atomic(args.out / "applied.json", {"best": str(args.apply), **result})
    predicted = result.get("predicted_speedup")
    print(f"applied: {', '.join(result['applied']) or 'nothing'}"
          + ("" if result["applied"] else f" ({result['why_nothing']})"))
    for item in result["not_applicable"]:
        print(f"not applicable model-wide: {item}")
    if "speedup" in result:
        print(f"whole forward: {result['rule']}; the op cards predicted "
              f"{'n/a' if predicted is None else f'{predicted:.2f}x'}")
    print(f"written: {path}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.apply is not None:
        return _apply(args)
    if (args.out / "report.json").exists() or (args.out / "captured.json").exists():
        raise CaptureError(f"{args.out} already holds a capture: give another --out")
    options = CaptureOptions(spec=args.factory, out=args.out, device=args.device, dtype=args.dtype, top=args.top,
                             profiler=args.profiler, resolution=args.resolution, stage=args.stage,
                             stage_map=_stage_map(args.stage_map), repeats=args.repeats, threads=args.threads,
                             settle_s=args.settle_s,
                             profile=not args.no_profile, overrides=list(args.override))
    result = capture(options)
    table = summary_table(result)
    write_text_atomic(args.out / "capture.md", table)
    print(table)
    print(f"report: {result.path}\nnext: {next_command(result, options)}")
    return 0


def next_command(result: CaptureResult, options: CaptureOptions) -> str:
    """`experiment=auto` on the capture: its cards at scale 1 on their captured inputs (the run's default for a
    captured card), with the capture's thread setting, so that the run times the replays as the capture did."""
    cuda = str(result.report.extra[CAPTURE_KEY].get("device", "")).startswith("cuda")
    return " ".join(["python -m harness experiment=auto", f"report={result.path}",
                     f"inputs.dir={options.out / 'inputs'}", *thread_overrides(options, cuda)])


def _settled(record: dict[str, Any]) -> str:
    """Whether the forward's time settled before the capture took it, in words."""
    forwards, spread = record.get("forwards"), record.get("forward_spread") or 0.0
    threads = f"{record.get('threads')} torch thread(s)" + ("" if record.get("threads_set") else " (torch's default)")
    spread_text = f"the plain forwards' interquartile range {spread:.1%} of their median"
    if record.get("forward_stable"):
        return (f"Timed over {forwards} pairs of forwards, until the median of the last 3 of each kind was within "
                f"10% of the 3 before ({spread_text}); {threads}.")
    return (f"**The forward's time did not settle** in {forwards} pairs of forwards ({spread_text}; "
            f"{threads}): its shares, and which groups pass {MIN_SHARE:.0%}, may move from one capture to the next; "
            "capture on a quiet machine, or with --threads 1.")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT

