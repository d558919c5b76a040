"""The ncu steps: the preflight (does ncu profile here, which of the harness's metrics the chip knows), one kept
report and its raw page as a fixture (parsed back by a --helper of its own process), and the experiments under
ncu: stall_breakdown, vae_channels_last (its layout conversions) and vae_conv_kernels."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from .check import Check
from .outcome import Outcome, StepFailed, ok_or_fail
from .paths import ENTRY
from .plan import Step
from .run_folder import kernel_names, read_cards, refusals
from .texts import error_line, json_tail, read_json

# Cards (ids of the shipped report).
CONV_WITH_TRANSPOSES = "vae-480-conv3d-96to3k333t3-842ecd"  # nchwToNhwc x2 + nhwcToNchw in the report
UNRESOLVED_LINEAR = "dit-480-linear-m4680n5120k144-500175"


def _conversions(cards: list[dict[str, Any]]) -> Any:
    """The layout-conversion kernels of these cards (every one cuDNN or cuTENSOR runs), with time and bytes."""
    from harness.cards.layout_conversions import LayoutConversions, is_layout_conversion

    kernels = [k for c in cards for k in c.get("kernels") or []
               if is_layout_conversion(kernel_names({"kernels": [k]})[0])]

    def total(*fields: str) -> float | None:
        values = [(k.get("metrics") or {}).get(f) for k in kernels for f in fields]
        return None if any(not isinstance(v, (int, float)) for v in values) else float(sum(values))

    return LayoutConversions(kernel_names({"kernels": kernels}), total("dur_us"),
                             total("dram_read_mb", "dram_write_mb"))


def step_ncu_preflight(check: Check, step: Step, timeout: float) -> Outcome:
    from harness.profile.ncu.failures import detect
    from harness.profile.ncu.metrics import (
        SENTINEL_METRIC,
        metrics_for,
        parse_query_metrics,
        resolve_metrics,
    )
    from harness.profile.ncu.parse import NcuParseError, parse_text
    from harness.profile.ncu.probe import probe_command

    assert check.ncu is not None  # skip_reason skips this step without one
    query_out = check.work / "logs" / "ncu_query_metrics.txt"
    env = check.env(harness=False)
    # The metric list in the background (started with the check, else now) while the tiny kernel is profiled:
    # both inside the budget. The tiny kernel is profiler=auto's own probe (a PTX kernel through the driver API:
    # no torch import).
    query = check.start_metric_query()
    try:
        tiny_run = check.run(probe_command(check.ncu, check.python), timeout,
                             log=check.work / "logs" / f"{step.name}.log", env=env)
        try:
            query.wait(timeout=max(1.0, timeout - tiny_run.seconds))
        except subprocess.TimeoutExpired:
            check.kill(query)
    finally:
        check.stop_metric_query()
    numbers: dict[str, Any] = {"profile_seconds": round(tiny_run.seconds, 1), "query_exit": query.returncode}
    failure = detect(tiny_run.output, tiny_run.returncode)
    try:
        records = parse_text(tiny_run.output) if failure is None and not tiny_run.timed_out else []
    except NcuParseError:
        records = []
    # As harness.profile.ncu.probe judges it: profiled means a number for the sentinel metric.
    profiled = any(isinstance((r.value(SENTINEL_METRIC) or (None, None))[1], float) for r in records)
    # A list from a query that failed or was killed may be cut short: only an exit 0 answer is used.
    query_ok = query.returncode == 0 and query_out.exists()
    names = parse_query_metrics(query_out.read_text(errors="replace")) if query_ok else set()
    numbers["chip_metric_names"] = len(names)
    requested = metrics_for("report+stalls+bytes")
    plan = resolve_metrics(requested, names or None, "this GPU")
    usable_list = bool(names) and not any("not used" in note for note in plan.notes)
    if usable_list:
        check.metrics_file = check.work / "ncu_metrics.txt"
        check.metrics_file.write_text("\n".join(sorted(names)) + "\n")
        numbers.update(requested=len(requested), kept=len(plan.metrics), substituted=plan.substituted,
                       dropped=plan.dropped)
        for note in plan.notes:
            check.say(f"  metric: {note}")
        listed = (f"{len(requested) - len(plan.dropped) - len(plan.substituted)}/{len(requested)} requested metrics "
                  f"known to the chip")
        if plan.substituted:
            listed += ", " + ", ".join(f"{a.split('.')[0]} -> {b.split('.')[0]}" for a, b in plan.substituted.items())
        if plan.dropped:
            listed += ", dropped " + ", ".join(plan.dropped)
    else:
        listed = f"metric list not checked (`ncu --query-metrics` exit {query.returncode}, {len(names)} names)"
    if profiled:
        check.ncu_ok = True
        return Outcome("ok", f"ncu profiled a tiny kernel in {tiny_run.seconds:.1f} s; {listed}", numbers)
    if tiny_run.timed_out:  # slow, not proven unusable: the ncu steps still try, with their own deadlines
        check.ncu_ok = None
        return Outcome("timeout", f"ncu did not finish profiling one tiny kernel in {timeout:.0f} s (the ncu steps "
                                  f"still run); {listed}", numbers)
    check.ncu_ok = False
    if failure is not None:
        check.ncu_reason = f"{failure.code}: {failure}"
    else:
        check.ncu_reason = (f"ncu exit {tiny_run.returncode}, no {SENTINEL_METRIC} recorded: "
                            f"{error_line(tiny_run.output)}")
    numbers["reason"] = check.ncu_reason
    return Outcome("failed", f"ncu cannot profile here ({check.ncu_reason}); the ncu steps are skipped; {listed}",
                   numbers)


def step_fixture(check: Check, step: Step, timeout: float) -> Outcome:
    reports = sorted((p for keep in ("stalls", "reproduction", "channels_last")
                      for p in (check.work / "ncu_reports" / keep).rglob("*.ncu-rep") if p.stat().st_size > 0),
                     key=lambda p: (0 if "stalls" in p.parts else 1, p.stat().st_size))
    reports = [p for p in reports if p.stat().st_size <= 8 * 2**20]
    if not reports:
        raise StepFailed("no .ncu-rep was kept by the ncu steps", "skipped")
    report = reports[0]
    card = report.relative_to(check.work / "ncu_reports").parts[1]
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", f"fixture_{card}")
    target = check.out / f"{stem}.ncu-rep"
    shutil.copyfile(report, target)
    csv_path = check.out / f"{stem}_raw_page.csv"
    from harness.profile.ncu.command import export_command

    proc = check.run(export_command(report, ncu=check.ncu), timeout / 2, log=check.work / "logs" / f"{step.name}.log",
                     env=check.env(harness=False))
    csv_path.write_text(proc.output, encoding="utf-8")
    ok_or_fail(proc, "ncu --import --csv --page raw")
    parsed = check.run([check.python, str(ENTRY), "--helper", "parse-fixture", str(target),
                        str(csv_path)], timeout / 2, log=check.work / "logs" / f"{step.name}.log")
    found = json_tail(parsed.output) or {}
    numbers = {"report": str(report.relative_to(check.work)), "bytes": target.stat().st_size, **found}
    if parsed.returncode != 0 or not found.get("agree"):
        return Outcome("failed", f"{target.name}: parsing it: {error_line(parsed.output)}", numbers)
    return Outcome("ok", f"{target.name} ({target.stat().st_size / 1024:.0f} KiB) and its raw page: "
                         f"{found['kernels']} kernels, {found['fields']} report fields, {found['stalls']} stall ratios "
                         f"(units {', '.join(found['stall_units']) or '-'}); the report and the CSV parse alike",
                         numbers)


def helper_parse_fixture(report: str, csv_path: str) -> int:
    from harness.profile.ncu.importer import read_records
    from harness.profile.ncu.metrics import STALL_METRIC
    from harness.profile.ncu.parse import counter_metrics, report_metrics

    out: dict[str, Any] = {}
    parsed = {}
    for label, path in (("report", report), ("csv", csv_path)):
        records = read_records(path)
        fields = [report_metrics(r) for r in records]
        counters = [counter_metrics(r) for r in records]
        units = sorted({unit for r in records for key, (_, unit) in r.values.items() if STALL_METRIC.match(key)})
        parsed[label] = {
            "kernels": len(records),
            "fields": max((sum(v is not None for v in f.values()) for f in fields), default=0),
            "stalls": max((sum(k.startswith("stall_") for k in c) for c in counters), default=0),
            "stall_units": units,
            "dur_us": [f.get("dur_us") for f in fields],
        }
    out.update(parsed["report"])
    out["csv"] = parsed["csv"]
    durations = zip(parsed["report"]["dur_us"], parsed["csv"]["dur_us"])
    out["agree"] = parsed["report"]["kernels"] == parsed["csv"]["kernels"] and all(
        a is not None and b is not None and abs(a - b) <= 1e-6 * max(abs(a), 1.0) for a, b in durations)
    print(json.dumps(out))
    return 0


def step_stalls_ncu(check: Check, step: Step, timeout: float) -> Outcome:
    proc, run_dir = check.experiment(step, timeout, "stalls_ncu",
                                ["experiment=stall_breakdown", f"cards=[{UNRESOLVED_LINEAR}]"], "stalls")
    ok_or_fail(proc, "experiment=stall_breakdown")
    cards = read_cards(run_dir / "baseline.json")
    if not cards:
        raise StepFailed("no baseline card written")
    card = cards[0]
    stalls = card.get("stalls") or {}
    numbers = {"status": card.get("status"), "stalls": stalls, "source": card.get("metrics_source")}
    if stalls.get("dominant"):
        share = stalls.get("share") or stalls.get("dominant_share")
        text = f"dominant stall {stalls['dominant']}" + (f" ({float(share):.0%} of stall cycles)" if share else "")
        return Outcome("ok", f"{text} on {stalls.get('kernel')}; card status {card.get('status')}", numbers)
    return Outcome("ok", f"no stall breakdown ({stalls.get('note') or 'none recorded'}); card status "
                         f"{card.get('status')}", numbers)


def step_channels_last_ncu(check: Check, step: Step, timeout: float) -> Outcome:
    """One confirmed verdict (channels_last_3d against the baseline, paired rounds) and the transposes."""
    overrides = ["experiment=vae_channels_last", f"cards=[{CONV_WITH_TRANSPOSES}]", "search.n_trials=1",
                 "~experiment.space.channels_last_input", "~experiment.space.channels_last_weight"]
    if check.device_form:
        overrides.append("workload.scale=1.0")  # the report's shape: does cuDNN transpose it?
    proc, run_dir = check.experiment(step, timeout, "channels_last_ncu", overrides, "channels_last")
    ok_or_fail(proc, "experiment=vae_channels_last")

    base = read_cards(run_dir / "baseline.json")
    trial_files = sorted((run_dir / "trials").glob("*/trial_*_channels_last_3d.json"))
    variant = [c for f in trial_files for c in read_cards(f)]
    diff = next(iter((read_json(run_dir / "diff.json") or {}).get("cards") or []), {})
    # Every layout conversion, whatever cuDNN names it: on the H200 channels_last_3d ran two convertTensor
    # kernels where the baseline ran the transposes, and a count of transposes alone said "none".
    before, after = _conversions(base), _conversions(variant)
    numbers = {"baseline_conversions": before.as_dict(), "variant_conversions": after.as_dict(),
               "baseline_kernels": len([n for c in base for n in kernel_names(c)]),
               "variant_measured": bool(variant), "speedup": diff.get("speedup"),
               "timing_verdict": diff.get("timing_verdict"), "check": diff.get("verdict"),
               "source": next((c.get("metrics_source") for c in base), None)}
    text = f"layout conversions in the baseline: {before.text()}; in channels_last_3d: " + (
        after.text() if variant else "not measured")
    text += _verdict_text(diff, run_dir, f", check {diff.get('verdict')}")
    return Outcome("ok", text, numbers)


def step_conv_kernels_ncu(check: Check, step: Step, timeout: float) -> Outcome:
    """vae_conv_kernels under ncu on the conv card with transposes: cuDNN's kernels (the baseline) and the
    Triton implicit-GEMM conv at its default tile (one trial, the experiment's own default: a searched tile
    would need one ncu child per tile), which kernels each ran, and the card's evidence (waves, padding)."""
    if check.device_form:
        overrides = ["experiment=vae_conv_kernels", f"cards=[{CONV_WITH_TRANSPOSES}]", "search.n_trials=1",
                     "~experiment.space", "+experiment.space={triton_implicit_gemm: {}}", "workload.scale=1.0"]
    else:  # the CPU's own variants (the Triton and cuDNN ones need CUDA)
        overrides = ["experiment=vae_conv_kernels", f"cards=[{CONV_WITH_TRANSPOSES}]", "search.n_trials=2"]
    proc, run_dir = check.experiment(step, timeout, "conv_kernels_ncu", overrides, "conv_kernels")
    ok_or_fail(proc, "experiment=vae_conv_kernels")
    tried: dict[str, dict[str, Any]] = {"baseline": {}}
    for trial in sorted((run_dir / "trials").glob("*/*.json")):
        if trial.name != "baseline.json" and not trial.name.startswith("trial_"):
            continue
        variant = "baseline" if trial.name == "baseline.json" else re.sub(r"^trial_\d+_", "", trial.stem)
        names = [n for c in read_cards(trial) for n in kernel_names(c)]
        tried[variant] = {"kernels": sorted({n[:80] for n in names})[:4],
                          "conversions": _conversions(read_cards(trial)).counts()}
    diff = next(iter((read_json(run_dir / "diff.json") or {}).get("cards") or []), {})
    best = read_cards(run_dir / "tried.json")
    numbers = {"trials": tried, "speedup": diff.get("speedup"), "timing_verdict": diff.get("timing_verdict"),
               "variant": (diff.get("variant") or {}).get("label"),
               "conv_evidence": (best[0].get("conv") if best else None)}
    text = "; ".join(f"{variant}: {', '.join(found['kernels']) or 'no kernels'}" for variant, found in tried.items())
    text += _verdict_text(diff, run_dir, "", f"{numbers['variant']} ")
    return Outcome("ok", text, numbers)


def _verdict_text(diff: dict[str, Any], run_dir: Path, after: str, before: str = "") -> str:
    """'; <before>1.23x FASTER<after>' from the run's diff row, else '; no verdict' with what the run refused."""
    if diff.get("speedup"):
        return f"; {before}{diff['speedup']:.2f}x {diff.get('timing_verdict')}{after}"
    refused = refusals(run_dir)
    return f"; no verdict{': ' + refused if refused else ''}"
