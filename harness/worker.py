"""Trial isolation: a persistent worker process measures the variants, so a bad one cannot end the run.

A sweep runs variants nobody has run before; some segfault, raise, run out of memory or hang. The
parent (the Hydra app, which owns Optuna, the storage and the outputs) never calls a variant itself:
one worker child (`python -m harness.worker`) does, and answers each request with one JSON line on
a private pipe. The parent waits for the answer under a deadline (`search.trial_deadline_s`):

- an exception in the variant: the answer says `ExceptionType: message`; the child stays up;
- out of memory (torch.OutOfMemoryError, MemoryError, a CPU allocator's "can't allocate memory"):
  `out of memory: ...`, the child frees the CUDA cache and stays up;
- the child dies (a segfault, the OOM killer, kill -9, os._exit): the parent names the signal or exit
  status and starts a new child for the next request;
- no answer by the deadline: the parent kills the child's process group (SIGKILL) and starts a new one.

The child is started once per process (importing torch costs seconds; one child serves every run of
the process, e.g. experiment=auto's sub-runs, logging to each run's folder) and again only after it
died, was killed, or hit a CUDA error that leaves its context unusable. The deadline covers every
request: the baseline, each trial, the drift re-time after it and the confirm rounds. It
rebuilds a card's workload from the same spec the ncu child gets and keeps it, with the experiment's
prepared baseline and the correctness reference, until a request for another card comes, so the
trials of one card pay the set-up once. Every output is judged against the workload's float64
reference (harness.correctness), computed once per card when the baseline is measured and saved, with
the baseline's own error e_b and dtype, as trials/<card>/reference.pt; a new child loads it instead of
recomputing it, so the trials after a restart are held to the same standard. The child writes every
card it measures itself (atomically), so what was measured is on disk before the parent hears of it.

The child ignores SIGINT and runs in its own session: Ctrl-C reaches the parent only, which kills
the child. It dies with the parent (PR_SET_PDEATHSIG on Linux, else a watchdog thread). Its stdout
and stderr go to `worker.log` in the run directory (faulthandler writes a crashed child's Python
stack there). `search.worker_memory_limit_gb` caps the child's address space (RLIMIT_AS, Linux, CPU
device only) so a runaway CPU variant fails with an allocation error instead of taking the machine.
"""

from __future__ import annotations

import atexit
import gc
import importlib
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

log = logging.getLogger("harness")

STARTUP_TIMEOUT_S = 300.0  # a child that has not said "ready" by then is broken (an import that hangs)
ENV_PARENT = "HARNESS_WORKER_PARENT"
ENV_MEMORY_LIMIT = "HARNESS_WORKER_MEMORY_LIMIT_GB"
ENV_CPU_THREADS = "HARNESS_WORKER_CPU_THREADS"
ENV_LOG = "HARNESS_WORKER_LOG"

_SIGNAL_MEANING = {
    "SIGSEGV": "segmentation fault",
    "SIGBUS": "bus error",
    "SIGABRT": "aborted",
    "SIGFPE": "floating-point exception",
    "SIGILL": "illegal instruction",
    "SIGKILL": "killed (the kernel's OOM killer, or kill -9)",
    "SIGTERM": "terminated",
}


class WorkerError(RuntimeError):
    """The worker process cannot be started; one line saying why."""


class TrialFailed(Exception):
    """Raised by an objective so that Optuna records the trial as FAIL; the message is the reason."""


def one_line(exc: BaseException, limit: int = 300) -> str:
    """`ExceptionType: first line of the message`, at most `limit` characters."""
    text = str(exc).strip().splitlines()
    message = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return message if len(message) <= limit else message[: limit - 3] + "..."


def is_out_of_memory(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return False
    kinds = tuple(k for k in (getattr(torch, "OutOfMemoryError", None),
                              getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)) if k is not None)
    if kinds and isinstance(exc, kinds):
        return True
    return isinstance(exc, RuntimeError) and ("can't allocate memory" in str(exc) or "out of memory" in str(exc))


def exit_reason(returncode: int | None) -> str:
    """Why the child went away, from its exit status."""
    if returncode is None:
        return "worker process went away"
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        meaning = _SIGNAL_MEANING.get(name)
        return f"worker died: {name}" + (f" ({meaning})" if meaning else "") + "; its last output is in worker.log"
    return f"worker exited with status {returncode} mid-request; its last output is in worker.log"


@dataclass
class Reply:
    """One answer from the worker. `kind`: ok, error, oom, skipped, setup, crash or deadline."""

    ok: bool
    kind: str
    result: dict[str, Any] = field(default_factory=dict)
    reason: str = ""

    @property
    def restarted(self) -> bool:
        """The child did not survive this request (a new one serves the next)."""
        return self.kind in ("crash", "deadline")


# ----------------------------------------------------------------------------------------------
# Parent side


class TrialWorker:
    """Owns one worker child; starts it on the first request and again after it died or was killed."""

    def __init__(self, *, log_path: Path | None = None, pid_path: Path | None = None,
                 memory_limit_gb: float | None = None, cpu_threads: int | None = None,
                 startup_timeout_s: float = STARTUP_TIMEOUT_S):
        self.log_path = log_path
        self.pid_path = pid_path
        self.memory_limit_gb = memory_limit_gb
        self.cpu_threads = cpu_threads
        self.startup_timeout_s = startup_timeout_s
        self.startups: list[float] = []  # wall seconds from spawn to "ready", per start
        self.torch_threads: int | None = None  # what the running child's torch uses
        self._proc: subprocess.Popen | None = None
        self._send: int | None = None
        self._recv: int | None = None
        self._buffer = b""

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    def use_run_dir(self, run_dir: Path) -> None:
        """Log to run_dir/worker.log and name the pid in run_dir/worker.pid from now on."""
        run_dir.mkdir(parents=True, exist_ok=True)
        self.log_path, self.pid_path = run_dir / "worker.log", run_dir / "worker.pid"
        if self.pid is not None:
            self.pid_path.write_text(f"{self.pid}\n", encoding="ascii")

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> float:
        """Start a child and wait until it can take requests; the seconds that took."""
        self.kill()
        t0 = time.perf_counter()
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        env = dict(os.environ)
        # The child imports what the parent imports: the parent's module search path, in its order.
        paths = [p or os.getcwd() for p in sys.path]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(p for p in paths if os.path.isdir(p)))
        env[ENV_PARENT] = str(os.getpid())
        env[ENV_LOG] = str(self.log_path) if self.log_path is not None else ""
        env.pop(ENV_MEMORY_LIMIT, None)
        if self.memory_limit_gb:
            env[ENV_MEMORY_LIMIT] = str(float(self.memory_limit_gb))
        env.pop(ENV_CPU_THREADS, None)
        if self.cpu_threads:
            env[ENV_CPU_THREADS] = str(int(self.cpu_threads))
        log_file = open(self.log_path, "ab") if self.log_path is not None else None  # noqa: SIM115
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "harness.worker", str(to_child_r), str(from_child_w)],
                pass_fds=(to_child_r, from_child_w), stdin=subprocess.DEVNULL,
                stdout=log_file if log_file else None, stderr=subprocess.STDOUT if log_file else None,
                start_new_session=True, env=env, close_fds=True,
            )
        finally:
            os.close(to_child_r)
            os.close(from_child_w)
            if log_file is not None:
                log_file.close()
        self._send, self._recv, self._buffer = to_child_w, from_child_r, b""
        line = self._read_line(time.monotonic() + self.startup_timeout_s)
        hello = json.loads(line) if line is not None else {}
        if not hello.get("ready"):
            why = (f"no answer after {self.startup_timeout_s:g} s" if self._proc.poll() is None
                   else exit_reason(self._proc.returncode))
            self.kill()
            raise WorkerError(f"the worker process could not start ({why}){self._log_tail()}")
        seconds = time.perf_counter() - t0
        self.startups.append(seconds)
        self.torch_threads = hello.get("torch_threads")
        if self.pid_path is not None:
            self.pid_path.write_text(f"{self._proc.pid}\n", encoding="ascii")
        log.info("worker process %d ready in %.1f s", self._proc.pid, seconds)
        return seconds

    def kill(self) -> None:
        """SIGKILL the child and everything it started (its own process group); forget it and its pid file."""
        proc, self._proc = self._proc, None
        if self.pid_path is not None:
            self.pid_path.unlink(missing_ok=True)
        for fd in (self._send, self._recv):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._send = self._recv = None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not take 10 s
            pass

    def close(self) -> None:
        """Ask the child to exit (it sees the pipe close); kill it if it does not go within 5 s."""
        proc = self._proc
        if proc is None:
            return
        if self._send is not None:
            try:
                os.close(self._send)
            except OSError:
                pass
            self._send = None
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.kill()

    # -- requests ----------------------------------------------------------------------------

    def request(self, op: str, payload: Mapping[str, Any], deadline_s: float | None) -> Reply:
        """Send one request and wait for its answer; a crash or a missed deadline is a Reply too.

        Raises WorkerError only when no child can be started; KeyboardInterrupt kills the child.
        """
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                self.kill()
            self.start()
        assert self._proc is not None and self._send is not None
        log_path = str(self.log_path) if self.log_path is not None else None
        message = (json.dumps({"op": op, "log_path": log_path, **payload}) + "\n").encode()
        until = None if deadline_s is None else time.monotonic() + float(deadline_s)
        try:
            try:
                view = memoryview(message)
                while view:
                    view = view[os.write(self._send, view):]
            except (BrokenPipeError, OSError):
                line = None
            else:
                line = self._read_line(until)
        except BaseException:  # Ctrl-C (or anything else) mid-request: the child is in an unknown state
            self.kill()
            raise
        if line is not None:
            answer = json.loads(line)
            if answer.get("ok"):
                return Reply(True, "ok", answer.get("result") or {})
            reason = answer.get("reason", "")
            if answer.get("restart"):
                self.kill()
                reason += "; worker restarted (the CUDA context is unusable after this error)"
            return Reply(False, answer.get("kind", "error"), answer.get("result") or {}, reason)
        proc = self._proc
        if proc.poll() is None and until is not None and time.monotonic() >= until:
            self.kill()
            return Reply(False, "deadline", {}, f"deadline: no result after {float(deadline_s):g} s "
                                                "(search.trial_deadline_s); the worker was killed")
        try:
            proc.wait(timeout=10)  # the pipe closed: the child is exiting
        except subprocess.TimeoutExpired:
            pass
        reason = exit_reason(proc.poll())
        self.kill()
        return Reply(False, "crash", {}, reason)

    def _read_line(self, until: float | None) -> bytes | None:
        """The next line from the child; None at end of file, child exit or `until` (monotonic)."""
        assert self._recv is not None and self._proc is not None
        while b"\n" not in self._buffer:
            wait = 1.0 if until is None else max(0.0, min(1.0, until - time.monotonic()))
            ready, _, _ = select.select([self._recv], [], [], wait)
            if ready:
                chunk = os.read(self._recv, 1 << 16)
                if not chunk:
                    return None
                self._buffer += chunk
            elif self._proc.poll() is not None:
                return None
            elif until is not None and time.monotonic() >= until:
                return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line

    def _log_tail(self) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        lines = [s for s in self.log_path.read_text(encoding="utf-8", errors="replace").splitlines() if s.strip()]
        return f": {lines[-1].strip()[:300]}" if lines else ""


_WORKER: TrialWorker | None = None
_WARNED: set[int] = set()


def worker_for(ctx: Any) -> TrialWorker:
    """This process's worker, pointed at the run of `ctx` (its worker.log and worker.pid).

    One worker serves every run of the process (experiment=auto runs one per experiment), so its
    start-up is paid once; a different search.worker_memory_limit_gb or timing.cpu_threads starts a
    new one.
    """
    global _WORKER
    search = ctx.cfg.get("search") or {}
    limit = search.get("worker_memory_limit_gb")
    if limit is not None and (not ctx.device.startswith("cpu") or not sys.platform.startswith("linux")):
        if id(ctx) not in _WARNED:
            _WARNED.add(id(ctx))
            log.warning("search.worker_memory_limit_gb is ignored here: it needs Linux (RLIMIT_AS) and the CPU "
                        "device (CUDA reserves more address space than any such limit)")
        limit = None
    threads = (ctx.cfg.get("timing") or {}).get("cpu_threads") if ctx.device.startswith("cpu") else None
    if _WORKER is not None and (_WORKER.memory_limit_gb, _WORKER.cpu_threads) != (limit, threads):
        close_worker()
    if _WORKER is None:
        _WORKER = TrialWorker(memory_limit_gb=limit, cpu_threads=threads)
    _WORKER.use_run_dir(Path(ctx.run_dir))
    return _WORKER


@atexit.register
def close_worker() -> None:
    """End this process's worker (at exit, or when a run needs a differently limited one)."""
    global _WORKER
    worker, _WORKER = _WORKER, None
    if worker is not None:
        worker.close()


def deadline_from(cfg: Mapping[str, Any]) -> float | None:
    value = (cfg.get("search") or {}).get("trial_deadline_s", 900)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"search.trial_deadline_s={value!r}: give seconds > 0, or null for none")
    return float(value)


class CardSession:
    """The requests of one card: what every request repeats (so a new child can rebuild the card)."""

    def __init__(self, worker: TrialWorker, common: dict[str, Any], deadline_s: float | None):
        self.worker = worker
        self.common = common
        self.deadline_s = deadline_s

    def measure(self, *, role: str, variant: str, params: dict[str, Any], label: dict[str, Any],
                card_path: Path, extra: dict[str, Any] | None = None) -> Reply:
        return self.worker.request("measure", {**self.common, "role": role, "variant": variant, "params": params,
                                               "label": label, "card_path": str(card_path),
                                               "extra": extra or {}}, self.deadline_s)

    def retime(self, settings: Any) -> Reply:
        return self.worker.request("retime", {**self.common, "retime_settings": asdict(settings)}, self.deadline_s)

    def confirm(self, variant: str, params: dict[str, Any], rounds: int, budget_s: float,
                cuda_graph: bool = False) -> Reply:
        return self.worker.request("confirm", {**self.common, "best": {"variant": variant, "params": params},
                                               "rounds": rounds, "budget_s": budget_s, "cuda_graph": cuda_graph},
                                   self.deadline_s)


class _QuietTrialFailures(logging.Filter):
    """Optuna logs a failed trial's exception with its traceback. A TrialFailed is a recorded outcome
    (the objective logged its one-line reason) and a KeyboardInterrupt is the app's to report."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], (TrialFailed, KeyboardInterrupt)):
            return False
        return not record.getMessage().endswith("failed with value None.")


def quiet_trial_failures() -> None:
    optimize_logger = logging.getLogger("optuna.study._optimize")
    if not any(isinstance(f, _QuietTrialFailures) for f in optimize_logger.filters):
        optimize_logger.addFilter(_QuietTrialFailures())


# ----------------------------------------------------------------------------------------------
# Child side


def annotate(experiment: Any, card: Any, workload: Any) -> None:
    """The experiment's own evidence on a measured card; an infeasible card (never timed) gets none."""
    if experiment.annotate_fn is not None and card.extra.get("timing") is not None:
        experiment.annotate_fn(card, workload)


@dataclass
class _CardState:
    key: str
    card: Any
    experiment: Any
    workload: Any
    baseline: Any  # the experiment's Prepared baseline
    reference: Any = None  # the workload's float64 reference, once computed or loaded
    standard: Any = None  # harness.correctness.Standard: the rule and the baseline's error e_b, once known


def _json_key(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


class _Server:
    """Answers requests; keeps one card's workload, prepared baseline and reference between them."""

    def __init__(self) -> None:
        self.state: _CardState | None = None
        self._rules: dict[str, Any] = {}
        self._profilers: dict[str, Any] = {}

    def card(self, request: dict[str, Any]) -> tuple[_CardState, float]:
        """The request's card, built (workload, prepared baseline) unless it is the one kept."""
        from harness.cards.model import parse_report
        from harness.experiment import load_experiment
        from harness.trial_spec import build_trial_workload, prepare_baseline

        spec = request["spec"]
        key = _json_key({"spec": spec, "card": request["card"], "reference": request.get("reference_path")})
        if self.state is not None and self.state.key == key:
            return self.state, 0.0
        self.forget()
        t0 = time.perf_counter()
        card = parse_report({"cards": [request["card"]]}, "worker request").cards[0]
        experiment = load_experiment(spec["experiment_module"])
        workload, carried = build_trial_workload(spec, card, experiment)
        state = _CardState(key, card, experiment, carried, None)
        self.state = state
        state.baseline = prepare_baseline(spec, workload, experiment)
        return state, time.perf_counter() - t0

    def forget(self) -> None:
        """Drop the kept card (its tensors), e.g. before building another."""
        self.state = None
        _free_memory()

    def reference(self, state: _CardState, request: dict[str, Any]) -> Any:
        """The card's float64 reference: computed for the baseline, else the one saved with its standard.

        A trial needs the baseline's error too, so a new child loads both from reference_path (written
        when the baseline was measured) rather than recomputing anything.
        """
        import torch

        from harness.correctness import Rule, Standard
        from harness.workloads.base import parse_dtype

        if request["role"] == "baseline":
            if state.reference is None:
                state.reference = state.workload.reference(torch.float64)
        elif state.standard is None:
            path = request.get("reference_path")
            if not path or not os.path.exists(path):
                raise RuntimeError(f"no correctness reference at {path}: the baseline was not measured")
            saved = torch.load(path, map_location=state.workload.device, weights_only=True)
            state.reference = saved["reference"]
            state.standard = Standard(Rule.from_config(request["correctness"]), float(saved["baseline_error"]),
                                      parse_dtype(saved["baseline_dtype"]), state.workload.reduction_length)
        return state.reference

    def rules(self, cfg: Any) -> Any:
        from harness.cards.rules import RuleSet

        key = _json_key(cfg)
        if key not in self._rules:
            self._rules[key] = RuleSet.from_config(cfg)
        return self._rules[key]

    def profiler(self, cfg: dict[str, Any]) -> Any:
        key = _json_key(cfg)
        if key not in self._profilers:
            name = cfg.get("name")
            if name == "cpu":
                from harness.profile.cpu import CpuProfiler

                self._profilers[key] = CpuProfiler()
            elif name == "torch_cuda":
                from harness.profile.torch_cuda import TorchCudaProfiler

                self._profilers[key] = TorchCudaProfiler()
            elif name == "ncu":
                from harness.profile.ncu_backend import NcuProfiler

                self._profilers[key] = NcuProfiler(cfg)
            elif name in (None, "none"):
                self._profilers[key] = None
            else:
                raise ValueError(f"profiler {name!r}: the worker knows cpu, torch_cuda and ncu")
        return self._profilers[key]

    def measure(self, state: _CardState, request: dict[str, Any], result: dict[str, Any]) -> None:
        """Measure the baseline or a trial, annotate its card and write it to request["card_path"]."""
        from harness.cards.model import Report, save_report
        from harness.correctness import Correctness, Rule, judge_baseline
        from harness.measure import TimingSettings, measure
        from harness.workloads.base import dtype_name

        variant, params = request["variant"], dict(request.get("params") or {})
        t0 = time.perf_counter()
        reference = self.reference(state, request)
        reference_s = time.perf_counter() - t0
        judged: dict[str, Any] = {}
        if request["role"] == "baseline":
            prepared = state.baseline
            rule = Rule.from_config(request["correctness"])

            def check(output: Any) -> Correctness:
                judged["standard"], correctness = judge_baseline(output, reference, rule,
                                                                 state.workload.reduction_length)
                return correctness
        else:
            prepared = state.experiment.prepare(variant, state.workload, params)

            def check(output: Any) -> Correctness:
                return state.standard.judge(output, reference, precision=prepared.precision,
                                            expected=prepared.expected, calls=prepared.calls)
        m = measure(source_card=state.card, workload=state.workload, prepared=prepared, check=check,
                    profiler=self.profiler(request["profiler"]),
                    settings=TimingSettings(**request["settings"]), rules=self.rules(request["rules"]),
                    label=request["label"], environment=request["environment"],
                    spec={**request["spec"], "variant": variant, "params": params, "role": request["role"]})
        card, path = m.card, Path(request["card_path"])
        card.extra.update(request.get("extra") or {})
        try:
            annotate(state.experiment, card, state.workload)
        except Exception as exc:  # the card was measured: keep it, then fail the request
            card.extra["annotate_error"] = one_line(exc)
            save_report(Report(cards=[card]), path)
            result["card_path"] = str(path)
            raise
        save_report(Report(cards=[card]), path)
        if request["role"] == "baseline":
            if not m.correctness.feasible:  # no variant can be held to a malformed baseline
                result["card_path"] = str(path)
                raise RuntimeError(f"its output is unusable ({m.correctness.note})")
            state.standard = judged["standard"]
            _save({"reference": reference.detach(), "baseline_error": state.standard.baseline_error,
                   "baseline_dtype": dtype_name(state.standard.dtype)},
                  Path(request["reference_path"]))
        seconds = {**m.seconds, "reference_s": reference_s}
        seconds["setup_s"] = seconds.get("setup_s", 0.0) + reference_s  # the reference is set-up too
        result.update(card_path=str(path), correctness=m.correctness.as_dict(),
                      median_us=m.timing.median_us if m.timing is not None else None, calls=prepared.calls,
                      seconds=seconds)

    def retime(self, state: _CardState, request: dict[str, Any], result: dict[str, Any]) -> None:
        """Time the kept baseline again (the drift check between trials)."""
        from harness.measure import TimingSettings, time_callable

        t0 = time.perf_counter()
        timing = time_callable(state.baseline.fn, state.workload.device,
                               TimingSettings(**request["retime_settings"]))
        result.update(median_us=timing.median_us, seconds={"retime_s": time.perf_counter() - t0})

    def confirm(self, state: _CardState, request: dict[str, Any], result: dict[str, Any]) -> None:
        """Baseline and best in paired rounds, interleaved A B, B A, A B, ... (ABBA), one median per side a round.

        Both sides are warmed up until their timings are stable before the first round, so a cold
        first call (a resumed run, a fresh worker) cannot decide anything. Each round times A and
        B back to back, the order alternating, so a linear drift across the rounds hits both alike
        and cancels in the paired ratios the parent's verdict is computed from.
        """
        from harness.measure import TimingSettings, time_callable, warm_up_until_stable

        best = request["best"]
        best_fn = state.experiment.prepare(best["variant"], state.workload, dict(best.get("params") or {})).fn
        rounds, budget = int(request["rounds"]), float(request["budget_s"])
        cuda_graph = bool(request.get("cuda_graph"))
        sides = {"base": state.baseline.fn, "best": best_fn}
        samples: dict[str, list[float]] = {"base": [], "best": []}
        medians: dict[str, list[float]] = {"base": [], "best": []}
        last: dict[str, Any] = {}
        t0 = time.perf_counter()
        warmups = {key: warm_up_until_stable(fn, state.workload.device) for key, fn in sides.items()}
        for number in range(rounds):
            order = ("base", "best") if number % 2 == 0 else ("best", "base")
            for key in order:
                timing = time_callable(sides[key], state.workload.device,
                                       TimingSettings(warmup=1, min_repeats=3, budget_s=budget, cuda_graph=cuda_graph))
                samples[key].extend(timing.samples_us)
                medians[key].append(timing.median_us)
                last[key] = timing
        seconds = time.perf_counter() - t0
        for key in ("base", "best"):
            pooled = type(last[key]).from_samples(
                samples[key], warmup=warmups[key]["calls"],
                method=f"{last[key].method}, {rounds} paired rounds in ABBA order with the other side",
                device_name=last[key].device_name, clock_mhz=last[key].clock_mhz)
            result[key] = {**pooled.to_dict(), "round_medians_us": medians[key], "warm_up": warmups[key]}
        result["seconds"] = {"timing_s": seconds}


def _save(obj: Any, path: Path) -> None:
    """torch.save, atomically: a reader sees the old file or the whole new one."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _free_memory() -> None:
    gc.collect()
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def _answer(server: _Server, request: dict[str, Any]) -> dict[str, Any]:
    """Run one request; every failure becomes an answer (the child only dies when the process does)."""
    from harness import torch_state
    from harness.experiment import VariantSkipped
    from harness.workloads.base import WorkloadError

    result: dict[str, Any] = {}
    stage = "setup"
    try:
        state, build_s = server.card(request)
        stage = "run"
        op = request.get("op")
        handlers = {"measure": server.measure, "retime": server.retime, "confirm": server.confirm}
        if op not in handlers:
            raise ValueError(f"unknown request {op!r}")
        with torch_state.pinned():  # no request inherits what an earlier variant set
            handlers[op](state, request, result)
        result.setdefault("seconds", {})["build_s"] = build_s
        return {"ok": True, "result": result}
    except VariantSkipped as exc:
        return {"ok": False, "kind": "skipped", "reason": str(exc), "result": result}
    except BaseException as exc:  # noqa: BLE001 - a variant may raise anything, SystemExit included
        traceback.print_exc()
        sys.stderr.flush()
        if is_out_of_memory(exc):
            kind, reason = "oom", "out of memory: " + one_line(exc, 280)
        else:
            # A workload that cannot be built is a configuration problem, not a trial's failure.
            setup = stage == "setup" and isinstance(exc, (WorkloadError, TypeError))
            kind, reason = ("setup" if setup else "error"), one_line(exc)
        # After a device-side CUDA error the context is unusable: answer, then let the parent restart us.
        restart = kind != "oom" and ("CUDA error" in reason or type(exc).__name__ == "AcceleratorError")
        del exc
        if kind == "setup" or stage == "setup":
            server.forget()
        else:
            _free_memory()
        return {"ok": False, "kind": kind, "reason": reason, "result": result, "restart": restart}


def _send(fd: int, obj: Any) -> None:
    view = memoryview((json.dumps(obj, default=str) + "\n").encode())
    while view:
        view = view[os.write(fd, view):]


def _die_with_parent(parent: int | None) -> None:
    """SIGKILL this process when the parent goes (Linux: PR_SET_PDEATHSIG; elsewhere a watchdog)."""
    if not parent:
        return
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            if libc.prctl(1, int(signal.SIGKILL), 0, 0, 0) == 0:  # 1 = PR_SET_PDEATHSIG
                if os.getppid() != parent:  # the parent went before the call took effect
                    os._exit(1)
                return
        except (OSError, AttributeError):
            pass
    import threading

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="harness-worker-watchdog", daemon=True).start()


def _limit_memory(value: str | None) -> None:
    if not value:
        return
    import resource

    limit = int(float(value) * 2**30)
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    print(f"harness worker {os.getpid()}: address space limited to {limit / 2**30:g} GiB "
          "(search.worker_memory_limit_gb)", file=sys.stderr, flush=True)


def _log_to(path: str) -> None:
    """Point this process's stdout and stderr (faulthandler's too) at `path`, appending."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m harness.worker REQUEST_FD REPLY_FD (started by harness.worker.TrialWorker)",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    _die_with_parent(int(os.environ.get(ENV_PARENT, "0")))
    import faulthandler

    faulthandler.enable(all_threads=True)  # a crash leaves its Python stack in worker.log
    requests, replies = os.fdopen(int(argv[0]), "rb"), int(argv[1])
    import torch  # the import the worker exists to pay once

    for module in ("harness.measure", "harness.workloads.registry"):  # paid here, not by the first trial
        importlib.import_module(module)

    if os.environ.get(ENV_CPU_THREADS):
        torch.set_num_threads(int(os.environ[ENV_CPU_THREADS]))

    _limit_memory(os.environ.get(ENV_MEMORY_LIMIT))
    server = _Server()
    log_path = os.environ.get(ENV_LOG) or None
    _send(replies, {"ready": True, "pid": os.getpid(), "torch_threads": torch.get_num_threads()})
    for line in requests:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
        except ValueError as exc:
            answer: dict[str, Any] = {"ok": False, "kind": "error", "reason": f"bad request: {exc}"}
        else:
            if request.get("log_path") and request["log_path"] != log_path:
                log_path = request["log_path"]
                _log_to(log_path)  # a later run of the same parent process: its own worker.log
            answer = _answer(server, request)
        _send(replies, answer)
        sys.stdout.flush()
    return 0  # the parent closed the pipe: the run is over


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
