"""The experiment steps that carry the check's verdicts: the report's cards re-profiled under ncu with
`python -m harness.report reproduce`'s verdict on each (reproduction.md), the wins a user comes for at scale 1
under the CUDA trace, and an A/A pair through the paired-rounds verdict."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

from .check import Check
from .outcome import Outcome, StepFailed, ok_or_fail
from .paths import REPO, rel
from .plan import MIN_STEP_S, Step
from .run_folder import class_text, read_cards, refusals, scan_run, short_id
from .texts import error_line, json_document, now_utc, read_json

# Cards (ids of the shipped report).
PER_OP_KIND = [  # the smallest card of each op kind whose report time is known
    "dit-480-linear-m3n5120k256-ff7b7c",
    "vae-480-conv3d-16to16k111t3-9507c7",
    "attention-704-fa3-cross-512of512-55bfe1",
    "output-480-cast-f18982",
]
REPRODUCTION = [  # the cards that carry the report's time
    "dit-480-linear-m4680n5120k5120-8f26a7",  # compute-bound GEMM
    "dit-480-linear-m3n5120k5120-d55d81",  # M=3: weight streaming
    "vae-480-conv3d-96to3k333t3-842ecd",  # conv3d with layout transposes
    "attention-480-fa3-self-4680of29640-b97006",  # flash attention
    "output-480-cast-f18982",  # the output cast
]
REPRODUCTION_NCU = list(dict.fromkeys([*PER_OP_KIND, *REPRODUCTION]))  # 8 cards: the cast is in both
# The verdicts' command (another engineer's): the step is skipped, saying so, while the CLI lacks it.
CARDS_CLI = REPO / "harness" / "report" / "cli.py"
REPRODUCE_PARSER = re.compile(r"add_parser\(\s*[\"']reproduce[\"']")
# The wins a user comes for, each on its card at scale 1 under the CUDA trace: (experiment, card, what of its
# space runs, trials). vae_bf16's bf16 in both memory formats; dit_small_m_batching's largest batch (k=20: every
# distinct timestep of four chunks embedded at once), the one its whole search adopts (the CuPy GEMV's
# correctness is gpu_tests' test_gemv_on_gpu).
WINS = [
    ("vae_bf16", "vae-480-conv3d-96to96k333t6-13c157", ["experiment.space.low_precision.dtype=[bfloat16]"], 2),
    ("dit_small_m_batching", "dit-480-linear-m3n30720k5120-c91997",
     ["~experiment.space.gemv", "experiment.space.batched.k=[20]"], 1),
]


def _reprofile_headline(run_dir: Path) -> tuple[str, dict[str, Any]]:
    """Each card's time here against the report's, and its class here against the report's."""
    diff = read_json(run_dir / "diff.json") or {}
    sources = {c.get("id") or c.get("card"): c.get("metrics_source") for c in read_cards(run_dir / "baseline.json")}
    parts, numbers = [], {}
    for row in diff.get("cards") or []:
        card, before, after = row.get("card"), row.get("before_us"), row.get("after_us")
        ratio = after / before if before and after else None
        numbers[card] = {"report_us": before, "here_us": after, "report_class": row.get("class_before"),
                         "class": row.get("class_after"), "class_source": row.get("class_source"),
                         "kernels_added": row.get("kernels_added"), "kernels_removed": row.get("kernels_removed"),
                         "source": sources.get(card)}
        text = (f"{short_id(card)} {after:.1f} us" + (f" ({ratio:.2f}x report)" if ratio else "")
                if after is not None else f"{short_id(card)} n/a")
        parts.append(f"{text}, {class_text(row.get('class_after'), sources.get(card), row.get('class_before'))}")
    measured = sum(1 for v in numbers.values() if v["here_us"] is not None)
    source = ", ".join(sorted({str(s) for s in sources.values()}))
    return f"{measured}/{len(numbers)} cards measured ({source}): " + "; ".join(parts), numbers


def _add_reproduction(check: Check, key: str, title: str, run_dir: Path, extra: str = "") -> None:
    """A section of reproduction.md from a run's baseline_reproduction.md and `extra` after it (the file is
    rewritten whole, so it holds every section written so far even if a later step never runs)."""
    table = run_dir / "baseline_reproduction.md"
    if not table.exists():
        raise StepFailed("the run wrote no baseline_reproduction.md")
    check.reproduction[key] = f"<!-- {title} -->\n\n{table.read_text(encoding='utf-8')}" + (
        f"\n\n{extra}" if extra else "")
    header = f"<!-- scripts/gpu_check.sh {check.summary['mode']} {now_utc()} -->\n\n"
    (check.out / "reproduction.md").write_text(header + "\n\n".join(check.reproduction.values()), encoding="utf-8")


def reproduce_unmet() -> str | None:
    text = CARDS_CLI.read_text(errors="replace") if CARDS_CLI.is_file() else ""
    return None if REPRODUCE_PARSER.search(text) else (
        f"`python -m harness.report reproduce` missing ({rel(CARDS_CLI)} has no reproduce subcommand)")


def _verdict_table(verdicts: dict[str, dict[str, Any]]) -> str:
    """reproduction.md's verdicts: one row per card, as `python -m harness.report reproduce` judged it."""
    rows = ["| card | verdict | time here / report | report's kernels | kernels here | built in | class | reason |",
            "|---|---|---|---|---|---|---|---|"]
    for card, v in verdicts.items():
        ratio = f"{v['time_ratio']:.2f}x" if isinstance(v.get("time_ratio"), (int, float)) else "-"
        klass = (f"{v.get('class_report')} -> {v.get('class_here')}" if v.get("class_compared")
                 else f"{v.get('class_report')} (not compared)")
        rows.append(f"| `{card}` | {v.get('verdict')} | {ratio} | {', '.join(v.get('families_report') or []) or '-'} | "
                    f"{', '.join(v.get('families_here') or []) or '-'} | {v.get('dtype_here') or '-'} | {klass} | "
                    f"{v.get('reason') or ''} |")
    return "### Verdicts (`python -m harness.report reproduce <run>/baseline.json`)\n\n" + "\n".join(rows) + "\n"


def step_reproduction_ncu(check: Check, step: Step, timeout: float) -> Outcome:
    """One card per op kind and the five that carry the report's time, under ncu at scale 1, each built in
    the dtype the report evidences (the harness decides it; no override here); then each card's verdict."""
    end = time.monotonic() + timeout
    overrides = ["experiment=reprofile", f"cards=[{','.join(REPRODUCTION_NCU)}]"]
    if check.device_form:
        overrides.append("workload.scale=1.0")
        how = "ncu at scale 1"
    else:
        how = "the CPU stand-in (device=cpu profiler=cpu, scale 0.1): NOT_COMPARABLE with the report by design"
    # The verdicts' command keeps a few seconds of the step (step.work.other_s).
    proc, run_dir = check.experiment(step, max(MIN_STEP_S, timeout - step.work.other_s), "reproduction_ncu",
                                overrides, "reproduction")
    ok_or_fail(proc, "experiment=reprofile (reproduction_ncu)")
    measured, numbers = _reprofile_headline(run_dir)
    verdict_run = check.run([check.python, "-m", "harness.report", "reproduce", str(run_dir / "baseline.json"),
                             "--json"], max(5.0, end - time.monotonic()), log=check.work / "logs" / f"{step.name}.log")
    found = json_document(verdict_run.output)
    verdicts = {str(v.get("card")): v for v in (found or {}).get("cards") or [] if isinstance(v, dict)}
    costs = {card: entry["ncu"] for card, entry in scan_run(run_dir)["cards"].items() if entry.get("ncu")}
    numbers.update(report_device=(found or {}).get("report_device"), ncu_costs=costs,
                   verdicts={card: v.get("verdict") for card, v in verdicts.items()})
    for card, verdict in verdicts.items():
        numbers.setdefault(card, {})["reproduce"] = verdict
    _add_reproduction(check, step.name, f"{step.name}: {len(REPRODUCTION_NCU)} cards re-profiled with {how}",
                      run_dir, _verdict_table(verdicts) if verdicts else "")
    if verdict_run.returncode != 0 or not verdicts:
        raise StepFailed(f"{measured}; python -m harness.report reproduce: exit {verdict_run.returncode}: "
                         f"{error_line(verdict_run.output)}", numbers=numbers)
    counts: dict[str, int] = {}
    for verdict in verdicts.values():
        counts[str(verdict.get("verdict"))] = counts.get(str(verdict.get("verdict")), 0) + 1
    each = "; ".join(f"{short_id(card)} {v.get('verdict')}" + (
        f" {v['time_ratio']:.2f}x" if isinstance(v.get("time_ratio"), (int, float)) else "")
        for card, v in verdicts.items())
    tally = ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items()))
    return Outcome("ok", f"{how}: {measured.split(':', 1)[0]}; reproduce: {tally}: {each}", numbers)


def step_aa_timing(check: Check, step: Step, timeout: float) -> Outcome:
    out = check.work / "runs" / "aa_timing.json"
    args = ["--rounds", "8", "--budget-s", "0.1"] if check.device_form else [
        "--device", "cpu", "--rounds", "6", "--budget-s", "0.05"]
    proc = check.run([check.python, str(REPO / "scripts" / "gpu_aa_timing.py"), *args, "--out", str(out)], timeout,
                     log=check.work / "logs" / f"{step.name}.log")
    ok_or_fail(proc, "scripts/gpu_aa_timing.py")
    found = read_json(out) or {}
    clock = found.get("sm_clock_mhz") or {}
    numbers = {k: found.get(k) for k in ("verdict", "false_verdict", "speedup", "ci", "band", "device", "median_us")}
    numbers["sm_clock_mhz"] = clock
    text = f"A/A on {found.get('device')}: {found.get('describe')}"
    if clock.get("min"):
        text += f"; SM clock {clock['min']:.0f}-{clock['max']:.0f} MHz over the rounds"
    elif found.get("device_kind") == "cuda":
        text += "; SM clock not read (" + "; ".join(found.get("notes") or ["no reading"]) + ")"
    return Outcome("failed" if found.get("false_verdict") else "ok", text, numbers)


def _win(run_dir: Path) -> dict[str, Any]:
    """A search's result on its card (diff.json's row): the best variant tried, its confirmed verdict and
    interval, whether it was adopted (the variant best.json holds) or the baseline kept."""
    row: dict[str, Any] = next(iter((read_json(run_dir / "diff.json") or {}).get("cards") or []), {})
    tried = (row.get("variant") or {}).get("label")
    return {"card": row.get("card"), "tried": tried, "speedup": row.get("speedup"), "ci": row.get("speedup_ci"),
            "verdict": row.get("timing_verdict"), "rule": row.get("verdict_rule"), "before_us": row.get("before_us"),
            "after_us": row.get("after_us"), "adopted": bool(row.get("adopted")),
            "adopted_variant": tried if row.get("adopted") else None, "refused": refusals(run_dir) or None}


def step_wins(check: Check, step: Step, timeout: float) -> Outcome:
    """The wins a user comes for, each on its card at scale 1 under the CUDA trace (the timing is CUDA
    events either way; the trace adds the kernels): a confirmed verdict and the variant adopted."""
    end = time.monotonic() + timeout
    parts: list[str] = []
    numbers: dict[str, Any] = {}
    for index, (experiment, card, space, trials) in enumerate(WINS):
        left = max(MIN_STEP_S, (end - time.monotonic()) / (len(WINS) - index))
        form = ["workload.scale=1.0", "profiler=torch_cuda"] if check.device_form else []
        proc, run_dir = check.experiment(step, left, f"wins_{experiment}", [
            f"experiment={experiment}", f"cards=[{card}]", f"search.n_trials={trials}", *space, *form], None)
        if proc.returncode != 0:
            why = "timed out" if proc.timed_out else error_line(proc.output)
            numbers[experiment] = {"card": card, "returncode": proc.returncode, "error": why}
            parts.append(f"{experiment}: exit {proc.returncode} ({why})")
            continue
        numbers[experiment] = win = _win(run_dir)
        if win["speedup"]:
            ci = f" [{win['ci'][0]:.2f}, {win['ci'][1]:.2f}]" if win["ci"] else ""
            found = f"{win['tried']} {win['speedup']:.2f}x{ci} {win['verdict']}, " + (
                f"adopted {win['adopted_variant']}" if win["adopted"] else "the baseline kept")
        else:
            found = "no verdict" + (f": {win['refused']}" if win["refused"] else "")
        parts.append(f"{experiment} on {short_id(card)}: {found}")
    status = "ok" if all(numbers[e].get("verdict") for e, *_ in WINS) else "failed"
    return Outcome(status, "; ".join(parts), numbers)
