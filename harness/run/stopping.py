"""What a stopped run leaves behind: run.json with `stopped`, and a banner atop summary.md and report.html.

Why: the run-level files are rewritten after each card, so a run stopped by SIGINT/SIGTERM used to look
finished: summary.md and report.html silently left out the unfinished cards and run.json was missing.
`harness.run.execute.execute` attaches how far it got to the KeyboardInterrupt (`note_progress`); the app's stop
handler (`harness.__main__._stopped`) then calls `record_stop`, which writes run.json and the banners
(`mark_stopped`), atomically. A resumed run rewrites summary.md and report.html, banner gone, as it goes.

Also here, what a resumed run keeps of the stopped one: a finished card is measured again on resume
(its study adds no trial), and the baseline's drift checks, made between the trials of the first run,
would be lost with the re-measured baseline; `keep_drift` carries them over.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from harness.cards.atomic import write_json_atomic, write_text_atomic
from harness.cards.model import Report, ReportError, load_report, save_report
from harness.search import describe_url

if TYPE_CHECKING:
    from harness.run.state import CardOutcome, RunContext

PROGRESS_ATTR = "harness_progress"  # the KeyboardInterrupt's attribute holding a Progress
BANNER_START = "> **Stopped"
HTML_START, HTML_END = "<!-- harness:stopped -->", "<!-- /harness:stopped -->"
_BODY = re.compile(r"<body[^>]*>", re.IGNORECASE)
_HTML_BANNER = re.compile(re.escape(HTML_START) + ".*?" + re.escape(HTML_END), re.DOTALL)


@dataclass
class Progress:
    """How far one run directory's run got when it was stopped."""

    run_dir: Path
    cards_done: list[str]
    cards: list[str]
    facts: dict[str, Any] = field(default_factory=dict)  # run.json's facts so far (phases, environment)

    @property
    def pending(self) -> list[str]:
        return [c for c in self.cards if c not in self.cards_done]


def note_progress(stop: BaseException, ctx: RunContext, done: list[CardOutcome], cards: list[str]) -> None:
    """Attach to `stop` how far the run of `ctx` (with experiment=auto, the sub-run's) got, for `record_stop`."""
    facts = {"phases": dict(ctx.phases), "noise": ctx.noise(done).as_dict(), "environment": ctx.environment,
             "storage": describe_url(ctx.storage), "worker": ctx.cfg.search.worker}
    setattr(stop, PROGRESS_ATTR, Progress(ctx.run_dir, [o.card_id for o in done], list(cards), facts))


def banner(cards_done: int, cards_total: int | None, signal_name: str, resume_cmd: str,
           pending: Sequence[str] = (), scope: str | None = None) -> tuple[str, str]:
    """The banner as (headline, rest): how far the run got, which cards the files lack, how to resume."""
    where = f" in {scope}" if scope else ""
    if cards_total is None:
        head = f"Stopped{where} before any card finished"
    else:
        head = f"Stopped{where} after {cards_done} of {cards_total} card{'' if cards_total == 1 else 's'}"
    shown = ", ".join(f"`{c}`" for c in pending[:5]) + (f" and {len(pending) - 5} more" if len(pending) > 5 else "")
    missing = f"; not finished, so missing below: {shown}" if pending else ""
    return head, f" ({signal_name}){missing}; resume with: `{resume_cmd}`"


def mark_stopped(run_dir: Path, cards_done: int, cards_total: int | None, signal_name: str, resume_cmd: str,
                 *, pending: Sequence[str] = (), scope: str | None = None) -> None:
    """Prepend the stopped banner to summary.md (a minimal one if there is none) and put it at the top of
    report.html's body if the page exists; an earlier stop's banner is replaced, not stacked."""
    head, rest = banner(cards_done, cards_total, signal_name, resume_cmd, pending, scope)
    summary = run_dir / "summary.md"
    body = summary.read_text(encoding="utf-8") if summary.exists() else (
        "Nothing is summarized here yet: the run stopped before it wrote its summary.\n")
    lines = body.splitlines(keepends=True)
    if lines and lines[0].startswith(BANNER_START):  # an earlier stop's banner and its blank line
        lines = lines[2:] if len(lines) > 1 and not lines[1].strip() else lines[1:]
    write_text_atomic(summary, f"> **{head}**{rest}\n\n" + "".join(lines))
    page = run_dir / "report.html"
    if page.exists():
        markup = _HTML_BANNER.sub("", page.read_text(encoding="utf-8"))
        code = re.sub(r"`([^`]*)`", lambda m: f"<code>{m.group(1)}</code>", html.escape(rest, quote=False))
        div = (f'{HTML_START}<div role="alert" style="border:2px solid #b00020;background:#fdecea;'
               f'padding:0.5em 1em;margin:0 0 1em"><b>{html.escape(head)}</b>{code}</div>{HTML_END}')
        found = _BODY.search(markup)
        at = found.end() if found else 0
        write_text_atomic(page, markup[:at] + div + markup[at:])


def record_stop(run_dir: Path, stop: BaseException, signal_name: str, resume_cmd: str) -> None:
    """run.json with `stopped`, and the banners, for the run stopped by `stop` in `run_dir`.

    For experiment=auto, `run_dir` is the auto run's and the progress names the sub-run that was
    stopped: both folders are marked.
    """
    progress: Progress | None = getattr(stop, PROGRESS_ATTR, None)
    if progress is None:  # stopped before the first card (set-up), or between auto's sub-runs
        progress = Progress(run_dir, [], [])
    total = len(progress.cards) if progress.cards else None
    stopped = {"signal": signal_name, "cards_done": len(progress.cards_done), "cards_total": total,
               "cards_finished": progress.cards_done, "cards_not_finished": progress.pending, "resume": resume_cmd}
    write_json_atomic(progress.run_dir / "run.json",
                      {**progress.facts, "cards": progress.cards_done, "stopped": stopped})
    mark_stopped(progress.run_dir, len(progress.cards_done), total, signal_name, resume_cmd,
                 pending=progress.pending)
    if progress.run_dir.resolve() != run_dir.resolve():
        sub_run = progress.run_dir.name
        write_json_atomic(run_dir / "run.json", {"stopped": {**stopped, "sub_run": sub_run}})
        mark_stopped(run_dir, len(progress.cards_done), total, signal_name, resume_cmd,
                     pending=progress.pending, scope=f"sub-run {sub_run}")


def earlier_drift(run_dir: Path, card_id: str) -> list[dict[str, Any]]:
    """The drift checks recorded in the card's baseline by an earlier (stopped) run in this folder."""
    try:
        drift = load_report(run_dir / "trials" / card_id / "baseline.json").cards[0].extra.get("baseline_drift")
    except (ReportError, IndexError):
        return []
    return [d for d in drift if isinstance(d, dict)] if isinstance(drift, list) else []


def keep_drift(outcome: CardOutcome, earlier: list[dict[str, Any]], run_dir: Path) -> CardOutcome:
    """The outcome, its baseline's drift list completed with the earlier run's checks (trials of theirs).

    A resumed card re-measures its baseline, and its drift list holds only the trials this process
    ran: none for a card the stopped run finished. The checks after earlier trials are kept, in
    trial order; trials/<card>/baseline.json is saved again with them.
    """
    drift = outcome.baseline.extra.setdefault("baseline_drift", [])
    seen = {d.get("after_trial") for d in drift}
    carried = [d for d in earlier if d.get("after_trial") not in seen]
    if carried:
        drift[:] = sorted([*carried, *drift], key=lambda d: (d.get("after_trial") is None, d.get("after_trial") or 0))
        save_report(Report(cards=[outcome.baseline]), run_dir / "trials" / outcome.card_id / "baseline.json")
    return outcome
