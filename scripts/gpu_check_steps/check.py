"""The check's state while it runs (Check): its folders and summary.json, the commands it starts (each in a
process group of its own, its output to a log, killed with everything it started when its time is up), and the
harness command lines of a step's two forms."""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .outcome import Proc
from .paths import REPO
from .texts import now_utc, write_json

if TYPE_CHECKING:
    from .plan import Step


PROGRESS_EVERY_S = 10.0  # how often a running step's finished work is written into summary.json
SIDE_TOKEN = "-side"  # appended to the check's token for a process that runs beside a step's commands


class Check:
    def __init__(self, args: argparse.Namespace):
        from harness.profile.ncu.command import find_ncu

        self.started = time.monotonic()
        self.deadline = self.started + args.deadline
        self.out = Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = Path(args.work).resolve() if args.work else Path(
            os.environ.get("GPU_CHECK_WORK") or (Path("/tmp") / f"gpu_check_work-{os.getpid()}"))
        if self.work.exists():
            shutil.rmtree(self.work)
        (self.work / "runs").mkdir(parents=True)
        (self.work / "logs").mkdir()
        self.site = self.work / "site"
        self.token = uuid.uuid4().hex
        self.requested_dry_run = args.dry_run
        self.dry_run = args.dry_run
        self.python = os.environ.get("GPU_CHECK_PYTHON") or sys.executable
        self.cuda = False
        self.ncu = find_ncu()  # the harness's own search: PATH, NCU_HOME, /opt/nvidia/nsight-compute/*/
        self.ncu_ok: bool | None = None  # None: not probed
        self.ncu_reason = ""
        self.metrics_file: Path | None = None
        self.metric_query: subprocess.Popen[bytes] | None = None  # `ncu --query-metrics`, started ahead
        self.installed = False
        self.step_timeout = 0.0  # the running step's time: its budget, more on saved time, less near the deadline
        self.current: subprocess.Popen[bytes] | None = None
        self.step_dirs: list[Path] = []  # the running step's harness run folders (what it has finished)
        self.progress: Callable[[], None] | None = None  # called every PROGRESS_EVERY_S while a step runs
        self.record: dict[str, Any] | None = None  # the running step's entry in summary.json
        self.reproduction: dict[str, str] = {}  # reproduction.md's sections, by the step that wrote each
        self.summary: dict[str, Any] = {
            "tool": "scripts/gpu_check.sh", "argv": sys.argv[1:], "started": now_utc(), "deadline_s": args.deadline,
            "mode": "dry-run" if args.dry_run else "device", "ncu": self.ncu, "steps": [], "out_files": [],
        }
        self._clear_out()
        self.log_file = (self.out / "gpu_check.log").open("a", encoding="utf-8", errors="replace")

    # -- bookkeeping

    def _clear_out(self) -> None:
        ours = re.compile(r"^(gpu_check\.log|summary\.json|versions\.txt|runs\.tgz|reproduction\.md|fixture_.*)$")
        for path in self.out.iterdir():
            if path.is_file() and ours.match(path.name):
                path.unlink()

    def say(self, text: str) -> None:
        line = f"[{time.monotonic() - self.started:6.1f}s] {text}"
        print(line, flush=True)
        self.log_file.write(line + "\n")
        self.log_file.flush()

    def left(self) -> float:
        return self.deadline - time.monotonic()

    @property
    def device_form(self) -> bool:
        return self.cuda and not self.dry_run

    def write_summary(self) -> None:
        self.summary["seconds"] = round(time.monotonic() - self.started, 1)
        self.summary["out_files"] = sorted(p.name for p in self.out.iterdir() if p.is_file())
        write_json(self.out / "summary.json", self.summary)

    # -- processes

    def env(self, harness: bool = True, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        paths = [str(REPO)]
        if harness and not self.dry_run and self.site.is_dir():
            paths.insert(0, str(self.site))
        if env.get("PYTHONPATH"):
            paths.append(env["PYTHONPATH"])
        env.update(PYTHONPATH=os.pathsep.join(paths), PYTHONUNBUFFERED="1", HYDRA_FULL_ERROR="1",
                   GPU_CHECK_TOKEN=self.token)
        env.update(extra)
        return env

    def run(self, argv: list[str], timeout: float, log: Path | None = None, env: dict[str, str] | None = None,
            cwd: Path = REPO, echo: bool = False) -> Proc:
        """Run `argv` in a process group of its own, its output appended to `log`; on `timeout` it dies
        with everything it started. The output goes to the file, not a pipe, so that what a killed
        step printed is there to read, and no process left outside the group can hold the step open."""
        started = time.monotonic()
        self.log_file.write(f"$ {shlex.join(argv)}\n")
        self.log_file.flush()
        target = log or self.work / "logs" / "misc.log"
        offset = target.stat().st_size if target.exists() else 0
        with target.open("ab") as sink:
            try:
                proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=sink, stderr=subprocess.STDOUT,
                                        cwd=cwd, env=env or self.env(), start_new_session=True)
            except OSError as exc:
                return Proc(127, False, 0.0, f"cannot start {argv[0]}: {exc}")
            self.current = proc
            timed_out = False
            end = started + max(1.0, timeout)
            try:
                while True:
                    try:
                        proc.wait(timeout=max(0.0, min(PROGRESS_EVERY_S, end - time.monotonic())))
                        break
                    except subprocess.TimeoutExpired:
                        if time.monotonic() >= end:
                            timed_out = True
                            self.kill(proc)
                            break
                        if self.progress is not None:
                            self.progress()
            finally:
                self.current = None
                self.sweep()
        with target.open("rb") as written:
            written.seek(offset)
            text = written.read().decode("utf-8", errors="replace")
        self.log_file.write(text if len(text) < 200_000 else text[:100_000] + "\n[...]\n" + text[-100_000:])
        if echo:
            print(text, end="", flush=True)
        self.log_file.write(f"# exit {proc.returncode}{' (timed out)' if timed_out else ''} after "
                            f"{time.monotonic() - started:.1f} s\n")
        self.log_file.flush()
        returncode = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        return Proc(returncode, timed_out, time.monotonic() - started, text)

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):  # one stuck in the driver is left to the sweep
            proc.wait(timeout=10)

    def sweep(self, side_too: bool = False) -> None:
        """SIGKILL every process still carrying this check's token (one that left the step's group);
        `side_too`: also those of a step's side process (SIDE_TOKEN), which outlive the commands beside it."""
        needle = f"GPU_CHECK_TOKEN={self.token}".encode()
        for entry in Path("/proc").glob("[0-9]*"):
            pid = int(entry.name)
            if pid == os.getpid():
                continue
            try:
                found = [v for v in (entry / "environ").read_bytes().split(b"\0") if v.startswith(needle)]
                if needle in found or (side_too and found):
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                continue

    def start_metric_query(self) -> subprocess.Popen[bytes]:
        """`ncu --query-metrics` in the background (it took 16 s on the H200, the tiny kernel 2.3 s): started
        with the check, it runs beside machine and install. It carries a side token: the sweep after each
        step's commands leaves it running."""
        if self.metric_query is None:
            assert self.ncu is not None
            env = {**self.env(harness=False), "GPU_CHECK_TOKEN": f"{self.token}{SIDE_TOKEN}"}
            with (self.work / "logs" / "ncu_query_metrics.txt").open("wb") as sink:
                self.metric_query = subprocess.Popen(
                    [self.ncu, "--query-metrics", "--query-metrics-mode", "all"], stdout=sink,
                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        return self.metric_query

    def stop_metric_query(self) -> None:
        if self.metric_query is not None and self.metric_query.poll() is None:
            self.kill(self.metric_query)
        self.sweep(side_too=True)

    # -- the harness

    def harness_run(self, step: Step, name: str, overrides: list[str], timeout: float) -> tuple[Proc, Path]:
        run_dir = self.work / "runs" / name
        self.step_dirs.append(run_dir)
        argv = [self.python, "-m", "harness", f"hydra.run.dir={run_dir}", *overrides]
        return self.run(argv, timeout, log=self.work / "logs" / f"{step.name}.log"), run_dir

    def common(self, device_form: bool) -> list[str]:
        if device_form:
            return ["device=cuda", "timing.budget_s=0.1", "timing.drift_budget_s=0.05", "timing.confirm_rounds=3"]
        return ["device=cpu", "profiler=cpu", "workload.scale=0.1", "timing.cpu_threads=1", "timing.budget_s=0.05",
                "timing.drift_budget_s=0.02", "timing.confirm_rounds=2"]

    def ncu_overrides(self, step: Step, keep: str, timeout: float) -> list[str]:
        metrics = str(self.metrics_file) if self.metrics_file else "auto"
        return ["profiler=ncu", f"profiler.keep_dir={self.work / 'ncu_reports' / keep}",
                f"profiler.available_metrics={metrics}", f"profiler.deadline_s={max(20, int(timeout * 0.8))}"]

    def experiment(self, step: Step, timeout: float, name: str, overrides: list[str],
                   keep: str | None) -> tuple[Proc, Path]:
        """A harness run of the step in its form: the common settings, `overrides`, and in the device form,
        where `keep` names the reports' folder, ncu's."""
        args = [*self.common(self.device_form), *overrides]
        if self.device_form and keep:
            args += self.ncu_overrides(step, keep, timeout)
        return self.harness_run(step, name, args, timeout)
