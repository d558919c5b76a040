"""The steps that run more than one report card's kernels at once: a model captured from outside the package,
the chunk cards (a VAE decoder chunk, a DiT block) under the CUDA trace, and experiment=auto."""

from __future__ import annotations

import re
import time

from .check import Check
from .outcome import Outcome, StepFailed, ok_or_fail
from .paths import REPO
from .plan import MIN_STEP_S, Step
from .run_folder import read_cards
from .texts import read_json

AUTO_CARDS = [  # its experiments: stall_breakdown (baseline only) and output_cast (a Triton vectorized kernel)
    "output-480-cast-f18982",
]
# A model outside the package, captured (python -m harness.capture): its CAPTURE_TOP hottest groups re-profiled.
CAPTURE_MODEL = "examples.capture_model:make"
CAPTURE_TOP = 2


CHUNK_EXPERIMENTS = ("vae_decode_chunk", "dit_block")  # the chunk cards' experiments (harness.trial.chunks)
# Each experiment's 480 chunk card (on a GPU its default takes every resolution's: the first H200 run measured
# both 480 baselines and was killed before either run finished a card).
CHUNK_CARDS = {"vae_decode_chunk": "vae-480-chunk-decode-c9e063", "dit_block": "dit-480-chunk-block-88c34e"}
# One cheap variant each (the first run drew channels_last_low_precision and a max-autotune compile of the DiT
# block, which its time did not hold): the VAE chunk's layout, the DiT block's modulation computed once.
DEVICE_CHUNK_FORM = {
    "vae_decode_chunk": ["~experiment.space", "+experiment.space={channels_last_3d: {}}"],
    "dit_block": ["~experiment.space", "+experiment.space={modulation_once: {}}"],
}
# The CPU form: the VAE chunk's layout variant only (one latent frame of a 2x1 slice decodes in about a second);
# a DiT block streams its 351 M weights on every call, minutes of a CPU run, so it runs on the device only.
CPU_CHUNK_FORM = {"vae_decode_chunk": ["workload.scale=0.04", "~experiment.space",
                                       "+experiment.space={channels_last_3d: {}}", "search.n_trials=1"]}


def step_chunk_trace(check: Check, step: Step, timeout: float) -> Outcome:
    """Each chunk experiment on its 480 chunk card under the CUDA trace at the report's scale, one cheap
    trial each: the chunk's verdict and its op breakdown per contained report card."""
    device_form = check.device_form
    parts, numbers = [], {}
    names = [n for n in CHUNK_EXPERIMENTS if (REPO / "conf" / "experiment" / f"{n}.yaml").exists()
             and (device_form or n in CPU_CHUNK_FORM)]
    if not names:
        raise StepFailed("no chunk experiment config in conf/experiment")
    end = time.monotonic() + timeout
    for index, name in enumerate(names):
        left = max(MIN_STEP_S, (end - time.monotonic()) / (len(names) - index))
        form = (["workload.scale=1.0", "search.n_trials=1", "profiler=torch_cuda", *DEVICE_CHUNK_FORM[name]]
                if device_form else CPU_CHUNK_FORM[name])
        args = [a for a in check.common(device_form) if not a.startswith("workload.scale=")]
        proc, run_dir = check.harness_run(step, f"chunk_{name}", [*args, f"experiment={name}",
                                                                  f"cards=[{CHUNK_CARDS[name]}]", *form], left)
        if proc.returncode != 0:
            parts.append(f"{name}: exit {proc.returncode}" + (" (timed out)" if proc.timed_out else ""))
            numbers[name] = {"returncode": proc.returncode}
            continue
        rows = (read_json(run_dir / "diff.json") or {}).get("cards") or []
        row = rows[0] if rows else {}
        breakdown = [e.get("card") for e in row.get("op_breakdown") or [] if e.get("card") != "other"]
        numbers[name] = {"card": row.get("card"), "speedup": row.get("speedup"), "verdict": row.get("timing_verdict"),
                         "op_cards": breakdown}
        verdict = f"{row['speedup']:.2f}x {row.get('timing_verdict')}" if row.get("speedup") else "no verdict"
        parts.append(f"{name}: {verdict}, {len(breakdown)} report cards in its op breakdown")
    if not device_form:
        parts.append("dit_block: on the device only (a 351 M-parameter block per call)")
    status = "ok" if all("card" in numbers[n] for n in names) else "failed"
    return Outcome(status, "; ".join(parts), numbers)


def step_capture(check: Check, step: Step, timeout: float) -> Outcome:
    """examples/capture_model.py captured: its hot groups replayed on their captured inputs and re-profiled
    (ncu where it profiles, else the CUDA trace; the CPU profiler in the CPU form): coverage and classes."""
    out = check.work / "runs" / "capture"
    check.step_dirs.append(out / "reprofile")
    argv = [check.python, "-m", "harness.capture", CAPTURE_MODEL, "--out", str(out), "--top", str(CAPTURE_TOP)]
    if check.device_form:
        profiler = "ncu" if check.ncu and check.ncu_ok else "torch_cuda"
        argv += ["--device", "cuda", "--profiler", profiler]
        if profiler == "ncu":
            argv += [f"--override={o}" for o in check.ncu_overrides(step, "capture", timeout) if o != "profiler=ncu"]
    else:
        argv += ["--device", "cpu", "--profiler", "cpu", "--override=timing.cpu_threads=1"]
    proc = check.run(argv, timeout, log=check.work / "logs" / f"{step.name}.log")
    ok_or_fail(proc, "harness.capture")
    report = read_json(out / "report.json") or {}
    record = report.get("capture") or {}
    classes = {card.get("group", "?"): card.get("primary") for card in report.get("cards") or []}
    sources = sorted({str(card.get("metrics_source")) for card in report.get("cards") or []})
    numbers = {"groups": record.get("groups"), "cards": record.get("cards"), "classes": classes,
               "cards_share_of_forward": record.get("cards_share_of_forward"), "metrics_source": sources,
               "unprofiled": record.get("unprofiled"), "forward_us": record.get("forward_us")}
    share = record.get("cards_share_of_forward")
    return Outcome("ok", f"{record.get('cards')} of {record.get('groups')} groups as cards, "
                         f"{share:.0%} of the forward; metrics {', '.join(sources)}" if share is not None
                   else "no capture record", numbers)


def step_auto_trace(check: Check, step: Step, timeout: float) -> Outcome:
    overrides = ["experiment=auto", f"cards=[{','.join(AUTO_CARDS)}]", "search.n_trials=1"]
    if check.device_form:
        overrides += ["profiler=torch_cuda", "workload.scale=0.25"]
    proc, run_dir = check.experiment(step, timeout, "auto_trace", overrides, None)
    ok_or_fail(proc, "experiment=auto")
    parts, numbers = [], {}
    for sub in sorted(p for p in run_dir.iterdir() if p.is_dir() and (p / "run.json").exists()):
        tried: dict[str, int] = {}
        for trial in sorted(sub.glob("trials/*/trial_*.json")):
            variant = re.sub(r"^trial_\d+_", "", trial.stem)
            measured = any(c.get("timing") for c in read_cards(trial))
            key = variant if measured else f"{variant} (not measured)"
            tried[key] = tried.get(key, 0) + 1
        rows = (read_json(sub / "diff.json") or {}).get("cards") or []
        best = [f"{r.get('speedup'):.2f}x {r.get('timing_verdict')}" for r in rows if r.get("speedup")]
        numbers[sub.name] = {"trials": tried, "verdicts": best}
        parts.append(f"{sub.name}: " + (", ".join(f"{k} x{v}" for k, v in tried.items()) or "no trial")
                     + (f" -> {best[0]}" if best else ""))
    return Outcome("ok", "; ".join(parts) or "no sub-run", numbers)
