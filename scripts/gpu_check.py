#!/usr/bin/env python3
"""The GPU check: the GPU path end to end in one call of at most 10 minutes on a machine with no network.

    scripts/gpu_check.sh [--dry-run] [--steps a,b,...] [--out DIR] [--deadline S] [--list]

Steps, in order of value (`--list` prints them with their budgets), each recorded in summary.json with
its status (ok, failed, timeout, skipped), seconds, one line of result and its headline numbers:

  machine            nvidia-smi, driver, torch/CUDA/triton/cupy/ncu versions, SM clock -> versions.txt
  install            the wheels of .whl/ (scripts/device_wheels.sh) with --no-index --no-deps --target,
                     every requirement checked (versions too), every module of the project imported
  ncu_preflight      ncu on one tiny kernel (does it profile here at all?) and `ncu --query-metrics`:
                     every metric the harness asks for checked on this chip, a missing one swapped for
                     an alternative or dropped with a note (the harness gets the list)
  reprofile_ncu      experiment=reprofile under ncu, one small card per op kind, each report kept
  stalls_ncu         experiment=stall_breakdown under ncu on one unresolved card: the dominant warp stall
  fixture            the smallest .ncu-rep and its raw-page CSV into $OUT, both parsed back (future fixtures)
  channels_last_ncu  vae_channels_last under ncu on one conv3d card: do the nchwToNhwc/nhwcToNchw
                     transposes show in the baseline, and in the channels_last_3d variant?
  conv_kernels_ncu   vae_conv_kernels under ncu on the same conv card: cuDNN's algorithm choice, the Triton
                     implicit-GEMM tiles, frame batching; which kernels each trial ran, the card's evidence
  gpu_tests          the gpu/ncu-marked unit tests (not tests/app): Triton GEMM and cast, CuPy GEMV, SDPA
  aa_timing          an A/A pair through the paired-rounds verdict with CUDA events, SM clock per round
  reproduction       a handful of cards re-profiled at scale 1 against the report -> reproduction.md
                     (under ncu; under the CUDA trace where ncu cannot profile)
  chunk_trace        vae_decode_chunk and dit_block on their smallest chunk card at the report's scale under
                     the CUDA trace: verdict, op breakdown per contained report card
  auto_trace         experiment=auto under the CUDA trace on a few cards, few trials
  pack               (always) runs.tgz and summary.json

One global deadline (--deadline, 360 s) bounds them all, with a budget per step inside it; a step that
no longer fits is skipped, so the whole call ends well inside the 10 minutes of one device command.
Each step runs in its own process group and is killed with everything it started (ncu and its
target included) when its time is up.

$OUT (default ./gpu_check_out) gets at most 8 files, each under 16 MiB: gpu_check.log, summary.json,
versions.txt, runs.tgz (every run directory, step log and helper output), reproduction.md, and one small
fixture_<card>.ncu-rep with its fixture_<card>_raw_page.csv.

--dry-run (also what runs on a machine without CUDA): the steps that need CUDA or ncu are skipped
with the reason; the rest really runs: the wheels install as a set (--no-index --no-deps --target) into
a scratch environment of pyenv's Python 3.12 that stands in for the GPU machine's image (the
preinstalled packages the wheels need, from the package index, cached), the torch-free modules import
there; the experiments run on the CPU with this environment (device=cpu profiler=cpu, small scale);
deadlines and packing as on the device.

Standard library only at import: it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
WHEELS = REPO / ".whl"
DEFAULT_DEADLINE_S = 360.0
PACK_RESERVE_S = 20.0
MIN_STEP_S = 8.0
MAX_OUT_FILES = 8
MAX_FILE_BYTES = 15 * 2**20  # under the 16 MiB a returned file may weigh
REPORTS_BYTES = 8 * 2**20  # the kept .ncu-rep files that go into runs.tgz
CACHE = Path(os.environ.get("GPU_CHECK_CACHE", Path.home() / ".cache" / "harness-gpu-check"))

# Cards (ids of the shipped report).
PER_OP_KIND = [  # the smallest card of each op kind whose report time is known
    "dit-480-linear-m3n5120k256-ff7b7c",
    "vae-480-conv3d-16to16k111t3-9507c7",
    "attention-704-fa3-cross-512of512-55bfe1",
    "output-480-cast-f18982",
]
CONV_WITH_TRANSPOSES = "vae-480-conv3d-96to3k333t3-842ecd"  # nchwToNhwc x2 + nhwcToNchw in the report
UNRESOLVED_LINEAR = "dit-480-linear-m4680n5120k144-500175"
REPRODUCTION = [
    "dit-480-linear-m4680n5120k5120-8f26a7",  # compute-bound GEMM
    "dit-480-linear-m3n5120k5120-d55d81",  # M=3: weight streaming
    "vae-480-conv3d-96to3k333t3-842ecd",  # conv3d with layout transposes
    "attention-480-fa3-self-4680of29640-b97006",  # flash attention
    "output-480-cast-f18982",  # the output cast
]
AUTO_CARDS = [
    "dit-480-linear-m3n5120k5120-d55d81",  # dit_small_m_batching: batched, CuPy gemv
    "dit-480-linear-m1170n5120k5120-b9770e",  # dit_gemm_tiles: cuBLASLt, Triton tiles
    "output-480-cast-f18982",  # output_cast: Triton vectorized kernel; stall_breakdown
]
TRANSPOSE = re.compile(r"nchwToNhwc|nhwcToNchw")

# Import names whose distribution is spelled otherwise (for the import sweep's verdicts).
DIST_OF_MODULE = {
    "yaml": "pyyaml", "PIL": "pillow", "pynvml": "nvidia-ml-py", "cupy": "cupy-cuda13x", "sklearn": "scikit-learn",
    "cv2": "opencv-python-headless", "dateutil": "python-dateutil", "google": "protobuf", "_pytest": "pytest",
    "attr": "attrs", "typing_extensions": "typing-extensions", "ncu_report": "ncu-report",
}


# ---------------------------------------------------------------------------------------------
# Steps


@dataclass
class Step:
    name: str
    budget_s: float  # on the device
    cpu_budget_s: float  # its CPU form (dry run); 0: no CPU form
    needs: tuple[str, ...]  # "cuda", "ncu" (the device form), "harness" (the installed wheels)
    run: Callable[[Check, Step], Outcome]
    doc: str = ""


@dataclass
class Outcome:
    status: str  # ok | failed | timeout | skipped
    result: str  # one line
    numbers: dict[str, Any] = field(default_factory=dict)


class StepFailed(Exception):
    """A step that cannot go on: its status and one line."""

    def __init__(self, result: str, status: str = "failed", numbers: dict[str, Any] | None = None):
        super().__init__(result)
        self.outcome = Outcome(status, result, numbers or {})


@dataclass
class Proc:
    returncode: int
    timed_out: bool
    seconds: float
    output: str


class Check:
    def __init__(self, args: argparse.Namespace):
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
        self.ncu = shutil.which("ncu") or (shutil.which("ncu", path=os.environ["NCU_HOME"])
                                           if os.environ.get("NCU_HOME") else None)
        self.ncu_ok: bool | None = None  # None: not probed
        self.ncu_reason = ""
        self.metrics_file: Path | None = None
        self.installed = False
        self.step_timeout = 0.0  # the running step's time: its budget, or less near the deadline
        self.current: subprocess.Popen[bytes] | None = None
        self.summary: dict[str, Any] = {
            "tool": "scripts/gpu_check.sh", "argv": sys.argv[1:], "started": _now(), "deadline_s": args.deadline,
            "mode": "dry-run" if args.dry_run else "device", "steps": [], "out_files": [],
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

    def write_summary(self) -> None:
        self.summary["seconds"] = round(time.monotonic() - self.started, 1)
        self.summary["out_files"] = sorted(p.name for p in self.out.iterdir() if p.is_file())
        _write_json(self.out / "summary.json", self.summary)

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
        """Run `argv` in a process group of its own; on `timeout` it dies with everything it started."""
        started = time.monotonic()
        self.log_file.write(f"$ {shlex.join(argv)}\n")
        self.log_file.flush()
        target = (log or self.work / "logs" / "misc.log").open("ab")
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    cwd=cwd, env=env or self.env(), start_new_session=True)
        except OSError as exc:
            target.close()
            return Proc(127, False, 0.0, f"cannot start {argv[0]}: {exc}")
        self.current = proc
        timed_out = False
        try:
            out, _ = proc.communicate(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            timed_out = True
            self.kill(proc)
            self.sweep()  # before reading on: a process in a session of its own may hold the pipe
            try:
                out, _ = proc.communicate(timeout=5)
            except subprocess.TimeoutExpired:
                if proc.stdout is not None:
                    proc.stdout.close()
                proc.wait()
                out = b"[output lost: a process outside the step kept its pipe open]\n"
        finally:
            self.current = None
            self.sweep()
        text = out.decode("utf-8", errors="replace")
        target.write(out)
        target.close()
        self.log_file.write(text if len(text) < 200_000 else text[:100_000] + "\n[...]\n" + text[-100_000:])
        if echo:
            print(text, end="", flush=True)
        self.log_file.write(f"# exit {proc.returncode}{' (timed out)' if timed_out else ''} after "
                            f"{time.monotonic() - started:.1f} s\n")
        self.log_file.flush()
        return Proc(proc.returncode, timed_out, time.monotonic() - started, text)

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)

    def sweep(self) -> None:
        """SIGKILL every process still carrying this check's token (one that left the step's group)."""
        needle = f"GPU_CHECK_TOKEN={self.token}".encode()
        for entry in Path("/proc").glob("[0-9]*"):
            pid = int(entry.name)
            if pid == os.getpid():
                continue
            try:
                if needle in (entry / "environ").read_bytes().split(b"\0"):
                    os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                continue

    # -- the harness

    def harness_run(self, step: Step, name: str, overrides: list[str], timeout: float) -> tuple[Proc, Path]:
        run_dir = self.work / "runs" / name
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


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _last_line(text: str, pattern: str = "") -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and (not pattern or re.search(pattern, ln))]
    return lines[-1][:300] if lines else ""


def _error_line(text: str) -> str:
    """The line of a failed run that says why."""
    for pattern in (r"^error: ", r"Error: ", r"Error\b", r"==ERROR==", r"Traceback"):
        line = _last_line(text, pattern)
        if line:
            return line
    return _last_line(text) or "no output"


def _ok_or_fail(proc: Proc, what: str) -> None:
    if proc.timed_out:
        raise StepFailed(f"{what}: killed at its time limit ({proc.seconds:.0f} s)", "timeout")
    if proc.returncode != 0:
        raise StepFailed(f"{what}: exit {proc.returncode}: {_error_line(proc.output)}")


def _cards(path: Path) -> list[dict[str, Any]]:
    data = _read_json(path)
    return list(data.get("cards") or []) if isinstance(data, dict) else []


def _kernel_names(card: dict[str, Any]) -> list[str]:
    return [str(k.get("kernel") or k.get("name") or "") for k in card.get("kernels") or []]


def _short(card_id: str) -> str:
    return card_id.rsplit("-", 1)[-1] if re.search(r"-[0-9a-f]{6}$", card_id) else card_id


# ---------------------------------------------------------------------------------------------
# machine


def step_machine(check: Check, step: Step) -> Outcome:
    lines = [f"# gpu_check {check.summary['mode']} {_now()}", f"repo: {REPO}"]
    numbers: dict[str, Any] = {}

    def capture(title: str, argv: list[str], timeout: float = 15) -> str:
        if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
            lines.extend([f"\n## {title}", f"({argv[0]} not found)"])
            return ""
        proc = check.run(argv, timeout, env=check.env(harness=False))
        lines.extend([f"\n## {title}: {shlex.join(argv)}", proc.output.rstrip()])
        return proc.output if proc.returncode == 0 else ""

    capture("system", ["uname", "-a"])
    smi = capture("nvidia-smi", ["nvidia-smi"])
    fields = "name,driver_version,memory.total,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw"
    query = capture("GPU and clocks", ["nvidia-smi", f"--query-gpu={fields}", "--format=csv"])
    if check.ncu:
        capture("ncu", [check.ncu, "--version"])
    probe = (
        "import json, platform, sys\n"
        "out = {'python': platform.python_version(), 'executable': sys.executable}\n"
        "for name in ('torch', 'triton', 'cupy', 'numpy', 'scipy', 'optuna', 'hydra', 'omegaconf', 'pynvml'):\n"
        "    try:\n"
        "        module = __import__(name)\n"
        "        out[name] = getattr(module, '__version__', 'installed')\n"
        "    except Exception as exc:\n"
        "        out[name] = None\n"
        "try:\n"
        "    import torch\n"
        "    out['cuda_available'] = torch.cuda.is_available()\n"
        "    out['torch_cuda'] = torch.version.cuda\n"
        "    out['cudnn'] = torch.backends.cudnn.version()\n"
        "    if torch.cuda.is_available():\n"
        "        p = torch.cuda.get_device_properties(0)\n"
        "        out.update(device=p.name, sm_count=p.multi_processor_count, cc=f'{p.major}.{p.minor}',\n"
        "                   memory_gib=round(p.total_memory / 2**30, 1))\n"
        "except Exception as exc:\n"
        "    out['cuda_available'] = False\n"
        "    out['torch_error'] = repr(exc)\n"
        "print('PROBE ' + json.dumps(out))\n"
    )
    proc = check.run([check.python, "-c", probe], 60, env=check.env(harness=False))
    found = next((ln[6:] for ln in proc.output.splitlines() if ln.startswith("PROBE ")), None)
    info = json.loads(found) if found else {}
    lines.extend(["\n## python (the harness's interpreter)", json.dumps(info, indent=1)])
    if WHEELS.is_dir():
        lines.extend(["\n## carried wheels (.whl/)", *sorted(p.name for p in WHEELS.glob("*.whl"))])
    (check.out / "versions.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    check.cuda = bool(info.get("cuda_available")) and not check.requested_dry_run
    if not check.cuda and not check.requested_dry_run:
        check.say("no CUDA device seen by torch: running as --dry-run (the CPU forms; CUDA/ncu steps skipped)")
        check.dry_run = True
        check.summary["mode"] = "dry-run (no CUDA)"
    numbers.update({k: info.get(k) for k in ("device", "torch", "torch_cuda", "triton", "cupy", "python", "sm_count")})
    clocks = [ln for ln in query.splitlines()[1:] if ln.strip()]
    if clocks:
        numbers["nvidia_smi"] = clocks[0]
    driver = re.search(r"Driver Version:\s*(\S+)", smi)
    numbers["driver"] = driver.group(1) if driver else None
    gpu = info.get("device") or "no GPU"
    result = (f"{gpu}, driver {numbers['driver'] or '-'}; torch {info.get('torch')} (CUDA {info.get('torch_cuda')}), "
              f"triton {info.get('triton') or '-'}, cupy {info.get('cupy') or '-'}, ncu {'at ' + check.ncu if check.ncu else 'absent'}; "
              f"python {info.get('python')}")
    if clocks:
        result += f"; nvidia-smi: {clocks[0]}"
    return Outcome("ok", result, numbers)


# ---------------------------------------------------------------------------------------------
# install


def python312() -> str | None:
    """pyenv's Python 3.12 (or python3.12 on PATH, if it runs)."""
    if os.environ.get("GPU_CHECK_PY312"):
        return os.environ["GPU_CHECK_PY312"]
    roots = [Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"]
    candidates = sorted((p for root in roots if root.is_dir() for p in root.glob("3.12*/bin/python3.12")),
                        key=lambda p: [int(x) for x in re.findall(r"\d+", p.parent.parent.name)])
    for path in reversed(candidates):
        if os.access(path, os.X_OK):
            return str(path)
    found = shutil.which("python3.12")
    if found and subprocess.run([found, "-c", "pass"], capture_output=True, check=False).returncode == 0:
        return found
    return None


def scratch_python(check: Check, step: Step, timeout: float) -> str:
    """A cached venv of Python 3.12 with the preinstalled packages the wheels need (the GPU machine's
    image, as far as the carried wheels are concerned)."""
    base = python312()
    if base is None:
        raise StepFailed("no Python 3.12 here (pyenv's, or python3.12 on PATH) for the scratch environment")
    standins = check.run([sys.executable, str(REPO / "scripts" / "device_wheels.py"), "standins"], 30,
                         env=check.env(harness=False)).output.split()
    venv = CACHE / "py312-standin"
    stamp = venv / "standins.txt"
    wanted = " ".join(sorted(standins))
    if stamp.is_file() and stamp.read_text().strip() == wanted and (venv / "bin" / "python").exists():
        return str(venv / "bin" / "python")
    if venv.exists():
        shutil.rmtree(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    log = check.work / "logs" / f"{step.name}.log"
    proc = check.run([base, "-m", "venv", str(venv)], timeout, log=log, env=check.env(harness=False))
    _ok_or_fail(proc, "python3.12 -m venv")
    if standins:
        proc = check.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *standins],
                         max(10.0, timeout - proc.seconds), log=log, env=check.env(harness=False))
        _ok_or_fail(proc, f"installing the stand-ins {wanted}")
    stamp.write_text(wanted + "\n")
    return str(venv / "bin" / "python")


def step_install(check: Check, step: Step, timeout: float) -> Outcome:
    end = time.monotonic() + timeout
    log = check.work / "logs" / f"{step.name}.log"
    numbers: dict[str, Any] = {}
    wheels = sorted(WHEELS.glob("*.whl"))
    py = check.python
    if check.dry_run:
        py = scratch_python(check, step, max(10.0, end - time.monotonic()))
        numbers["scratch_python"] = py
    if not wheels:
        probe = check.run([py, "-c", "import optuna, hydra, omegaconf"], 60, log=log, env=check.env(harness=False))
        if probe.returncode == 0 and not check.dry_run:
            check.installed = True
            return Outcome("ok", "no .whl/ carried; optuna, hydra and omegaconf are importable already", numbers)
        raise StepFailed("no .whl/: run scripts/device_wheels.sh on a networked machine and carry `.whl` "
                         f"({_error_line(probe.output)})")
    # The set itself: pinned, complete, one version each (quick; no network).
    proc = check.run([py, str(REPO / "scripts" / "device_wheels.py"), "check"], 60, log=log,
                     env=check.env(harness=False))
    numbers["set"] = _last_line(proc.output, r"^\.whl/") or _last_line(proc.output)
    _ok_or_fail(proc, "scripts/device_wheels.py check")
    if check.site.exists():
        shutil.rmtree(check.site)
    argv = [py, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
            "--disable-pip-version-check", "--upgrade", "--target", str(check.site), *map(str, wheels)]
    proc = check.run(argv, max(5.0, end - time.monotonic()), log=log, env=check.env(harness=False), echo=True)
    numbers["pip_seconds"] = round(proc.seconds, 1)
    _ok_or_fail(proc, "pip install --no-index --no-deps --target")
    env = check.env(harness=False, PYTHONPATH=os.pathsep.join([str(check.site), str(REPO)]))
    verify = [py, str(REPO / "scripts" / "device_wheels.py"), "verify-installed", "--json"]
    if check.dry_run:
        verify.append("--stand-in")
    proc = check.run(verify, max(5.0, end - time.monotonic()), log=log, env=env)
    found = _json_tail(proc.output) or {"problems": [f"verify-installed gave no answer: {_error_line(proc.output)}"],
                                        "notes": []}
    numbers["requirement_problems"] = found["problems"]
    numbers["requirement_notes"] = len(found["notes"])
    for problem in found["problems"]:
        check.say(f"  requirement: {problem}")
    sweep = check.run([py, str(Path(__file__).resolve()), "--helper", "import-sweep"],
                      max(5.0, end - time.monotonic()), log=log, env=env)
    modules = _json_tail(sweep.output)
    if not isinstance(modules, dict):
        raise StepFailed(f"import sweep gave no answer: {_error_line(sweep.output)}", numbers=numbers)
    preinstalled = _preinstalled()
    ok = [m for m, r in modules.items() if r == "ok"]
    absent_there = {}  # module -> what it needs that the GPU machine has (a stand-in lacks it)
    broken = {}
    for module, result in modules.items():
        if result == "ok":
            continue
        missing = result[len("missing "):] if result.startswith("missing ") else None
        dist = _normalize(DIST_OF_MODULE.get(missing, missing)) if missing else None
        if missing and check.dry_run and dist in preinstalled:
            absent_there[module] = missing
        else:
            broken[module] = result
    numbers.update(modules_ok=len(ok), modules_total=len(modules), needs_preinstalled=sorted(set(absent_there.values())),
                   import_failures=broken)
    _write_json(check.work / "logs" / "import_sweep.json", modules)
    for module, result in sorted(broken.items()):
        check.say(f"  import {module}: {result}")
    check.installed = not found["problems"] and not broken
    size = sum(p.stat().st_size for p in wheels) / 2**20
    where = "a scratch Python 3.12 (stand-ins for the machine's packages)" if check.dry_run else "the GPU machine's python3"
    result = (f"{len(wheels)} wheels ({size:.1f} MiB) installed with --no-index --no-deps --target into {where} in "
              f"{numbers['pip_seconds']} s; requirement problems: {len(found['problems'])}; modules importing: "
              f"{len(ok)}/{len(modules)}")
    if absent_there:
        result += f" (the other {len(absent_there)} need {', '.join(sorted(set(absent_there.values())))}: preinstalled there)"
    if broken:
        result += f"; {len(broken)} fail: " + "; ".join(f"{m}: {r}" for m, r in sorted(broken.items())[:3])
    return Outcome("ok" if check.installed else "failed", result, numbers)


def _json_tail(text: str) -> Any:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                return json.loads(line)
    return None


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _preinstalled() -> set[str]:
    path = REPO / "scripts" / "gpu_machine_preinstalled.txt"
    return {_normalize(ln.split("#")[0].strip()) for ln in path.read_text().splitlines() if ln.split("#")[0].strip()}


def helper_import_sweep() -> int:
    """Import every module of harness/ and experiments/; print {module: ok | missing X | error ...}."""
    import importlib

    results: dict[str, str] = {}
    names = []
    for package in ("harness", "experiments"):
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            parts = list(rel.parts)
            if parts[-1] == "__main__":
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            names.append(".".join(parts))
    for name in names:
        try:
            importlib.import_module(name)
            results[name] = "ok"
        except ModuleNotFoundError as exc:
            top = (exc.name or "?").split(".")[0]
            results[name] = f"missing {top}" if top not in ("harness", "experiments") else f"error {exc}"
        except Exception as exc:  # noqa: BLE001 - a sweep: every failure is a finding
            results[name] = f"error {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    print(json.dumps(results))
    return 0


# ---------------------------------------------------------------------------------------------
# ncu preflight and fixture


# One tiny kernel through the CUDA driver API (ctypes, PTX JIT-compiled): starts in a fraction of a
# second, where importing torch would take most of the preflight's 10 s; torch where libcuda won't load.
TINY = r'''
import ctypes, sys
PTX = b"""
.version 7.0
.target sm_50
.address_size 64
.visible .entry tiny(.param .u64 p_out)
{
    .reg .b32 %r<2>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [p_out];
    cvta.to.global.u64 %rd2, %rd1;
    mov.u32 %r1, 42;
    st.global.u32 [%rd2], %r1;
    ret;
}
"""
def driver():
    cuda = ctypes.CDLL("libcuda.so.1")
    def ok(code, what):
        if code != 0:
            raise RuntimeError(f"{what} returned CUDA error {code}")
    ok(cuda.cuInit(0), "cuInit")
    dev, ctx, mod, fn = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_void_p()
    ok(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    ok(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    ok(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    ok(cuda.cuModuleLoadData(ctypes.byref(mod), ctypes.c_char_p(PTX)), "cuModuleLoadData")
    ok(cuda.cuModuleGetFunction(ctypes.byref(fn), mod, b"tiny"), "cuModuleGetFunction")
    ptr = ctypes.c_uint64()
    ok(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(4)), "cuMemAlloc")
    params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(ptr), ctypes.c_void_p))
    ok(cuda.cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, None, params, None), "cuLaunchKernel")
    ok(cuda.cuCtxSynchronize(), "cuCtxSynchronize")
    host = ctypes.c_uint32()
    ok(cuda.cuMemcpyDtoH_v2(ctypes.byref(host), ptr, ctypes.c_size_t(4)), "cuMemcpyDtoH")
    return host.value
try:
    print("tiny kernel (driver API) wrote", driver())
except Exception as exc:
    print("driver API path failed:", exc, "- trying torch", file=sys.stderr)
    import torch
    x = torch.ones(4096, device="cuda")
    print("tiny kernel (torch) wrote", float((x * 2).sum()))
'''


def step_ncu_preflight(check: Check, step: Step, timeout: float) -> Outcome:
    sys.path.insert(0, str(REPO))
    from harness.profile.ncu.failures import detect
    from harness.profile.ncu.metrics import (
        metrics_for,
        parse_query_metrics,
        resolve_metrics,
    )

    tiny = check.work / "tiny_kernel.py"
    tiny.write_text(TINY)
    query_out = check.work / "logs" / "ncu_query_metrics.txt"
    env = check.env(harness=False)
    # The metric list in the background while the tiny kernel is profiled: both inside the budget.
    with query_out.open("wb") as sink:
        query = subprocess.Popen([check.ncu, "--query-metrics", "--query-metrics-mode", "all"], stdout=sink,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        try:
            tiny_run = check.run([check.ncu, "--metrics", "gpu__time_duration.sum", "--clock-control", "none",
                                  "--csv", "--page", "raw", "-c", "1", check.python, str(tiny)], timeout,
                                 log=check.work / "logs" / f"{step.name}.log", env=env)
            try:
                query.wait(timeout=max(1.0, timeout - tiny_run.seconds))
            except subprocess.TimeoutExpired:
                check.kill(query)
        finally:
            if query.poll() is None:
                check.kill(query)
    numbers: dict[str, Any] = {"profile_seconds": round(tiny_run.seconds, 1), "query_exit": query.returncode}
    failure = detect(tiny_run.output, tiny_run.returncode)
    profiled = not tiny_run.timed_out and failure is None and "gpu__time_duration" in tiny_run.output
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
        check.ncu_reason = f"ncu exit {tiny_run.returncode}: {_error_line(tiny_run.output)}"
    numbers["reason"] = check.ncu_reason
    return Outcome("failed", f"ncu cannot profile here ({check.ncu_reason}); the ncu steps are skipped; {listed}",
                   numbers)


def step_fixture(check: Check, step: Step, timeout: float) -> Outcome:
    reports = sorted((p for keep in ("stalls", "reprofile", "channels_last")
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
    sys.path.insert(0, str(REPO))
    from harness.profile.ncu.command import export_command

    proc = check.run(export_command(report, ncu=check.ncu), timeout / 2, log=check.work / "logs" / f"{step.name}.log",
                     env=check.env(harness=False))
    csv_path.write_text(proc.output, encoding="utf-8")
    _ok_or_fail(proc, "ncu --import --csv --page raw")
    parsed = check.run([check.python, str(Path(__file__).resolve()), "--helper", "parse-fixture", str(target),
                        str(csv_path)], timeout / 2, log=check.work / "logs" / f"{step.name}.log")
    found = _json_tail(parsed.output) or {}
    numbers = {"report": str(report.relative_to(check.work)), "bytes": target.stat().st_size, **found}
    if parsed.returncode != 0 or not found.get("agree"):
        return Outcome("failed", f"{target.name}: parsing it: {_error_line(parsed.output)}", numbers)
    return Outcome("ok", f"{target.name} ({target.stat().st_size / 1024:.0f} KiB) and its raw page: "
                         f"{found['kernels']} kernels, {found['fields']} report fields, {found['stalls']} stall ratios "
                         f"(units {', '.join(found['stall_units']) or '-'}); the report and the CSV parse alike", numbers)


def helper_parse_fixture(report: str, csv_path: str) -> int:
    sys.path.insert(0, str(REPO))
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


# ---------------------------------------------------------------------------------------------
# Experiments


def _reprofile_headline(run_dir: Path) -> tuple[str, dict[str, Any]]:
    diff = _read_json(run_dir / "diff.json") or {}
    sources = {c.get("id") or c.get("card"): c.get("metrics_source") for c in _cards(run_dir / "baseline.json")}
    parts, numbers = [], {}
    for row in diff.get("cards") or []:
        card, before, after = row.get("card"), row.get("before_us"), row.get("after_us")
        ratio = after / before if before and after else None
        numbers[card] = {"report_us": before, "here_us": after, "kernels_added": row.get("kernels_added"),
                         "kernels_removed": row.get("kernels_removed"), "source": sources.get(card)}
        parts.append(f"{_short(card)} {after:.1f} us" + (f" ({ratio:.2f}x report)" if ratio else "")
                     if after is not None else f"{_short(card)} n/a")
    measured = sum(1 for v in numbers.values() if v["here_us"] is not None)
    source = ", ".join(sorted({str(s) for s in sources.values()}))
    return f"{measured}/{len(numbers)} cards measured ({source}): " + "; ".join(parts), numbers


def _experiment(check: Check, step: Step, timeout: float, name: str, overrides: list[str], keep: str | None) -> tuple[Proc, Path]:
    device_form = check.cuda and not check.dry_run
    args = [*check.common(device_form), *overrides]
    if device_form and keep:
        args += check.ncu_overrides(step, keep, timeout)
    return check.harness_run(step, name, args, timeout)


def step_reprofile_ncu(check: Check, step: Step, timeout: float) -> Outcome:
    scale = ["workload.scale=1.0"] if check.cuda and not check.dry_run else []
    proc, run_dir = _experiment(check, step, timeout, "reprofile_ncu",
                                ["experiment=reprofile", f"cards=[{','.join(PER_OP_KIND)}]", *scale], "reprofile")
    _ok_or_fail(proc, "experiment=reprofile")
    result, numbers = _reprofile_headline(run_dir)
    reports = list((check.work / "ncu_reports" / "reprofile").rglob("*.ncu-rep"))
    numbers["ncu_reports"] = len(reports)
    if reports:
        result += f"; {len(reports)} reports kept"
    return Outcome("ok", result, numbers)


def step_stalls_ncu(check: Check, step: Step, timeout: float) -> Outcome:
    proc, run_dir = _experiment(check, step, timeout, "stalls_ncu",
                                ["experiment=stall_breakdown", f"cards=[{UNRESOLVED_LINEAR}]"], "stalls")
    _ok_or_fail(proc, "experiment=stall_breakdown")
    cards = _cards(run_dir / "baseline.json")
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
    overrides = ["experiment=vae_channels_last", f"cards=[{CONV_WITH_TRANSPOSES}]", "search.n_trials=1",
                 "~experiment.space.channels_last_input", "~experiment.space.channels_last_weight"]
    if check.cuda and not check.dry_run:
        overrides.append("workload.scale=1.0")  # the report's shape: does cuDNN transpose it?
    proc, run_dir = _experiment(check, step, timeout, "channels_last_ncu", overrides, "channels_last")
    _ok_or_fail(proc, "experiment=vae_channels_last")

    def transposes(cards: list[dict[str, Any]]) -> list[str]:
        return [n for c in cards for n in _kernel_names(c) if TRANSPOSE.search(n)]

    base = _cards(run_dir / "baseline.json")
    trial_files = sorted((run_dir / "trials").glob("*/trial_*_channels_last_3d.json"))
    variant = [c for f in trial_files for c in _cards(f)]
    diff = next(iter((_read_json(run_dir / "diff.json") or {}).get("cards") or []), {})
    before, after = transposes(base), transposes(variant)
    numbers = {"baseline_transposes": before, "variant_transposes": after, "baseline_kernels": len(
        [n for c in base for n in _kernel_names(c)]), "variant_measured": bool(variant),
        "speedup": diff.get("speedup"), "timing_verdict": diff.get("timing_verdict"), "check": diff.get("verdict"),
        "source": next((c.get("metrics_source") for c in base), None)}

    def count(names: list[str]) -> str:
        if not names:
            return "none"
        found = {key: sum(key in n for n in names) for key in ("nchwToNhwc", "nhwcToNchw")}
        return ", ".join(f"{k} x{v}" for k, v in found.items() if v)

    text = f"transposes in the baseline: {count(before)}; in channels_last_3d: " + (
        count(after) if variant else "not measured")
    if diff.get("speedup"):
        text += f"; {diff['speedup']:.2f}x {diff.get('timing_verdict')}, check {diff.get('verdict')}"
    return Outcome("ok", text, numbers)


def step_conv_kernels_ncu(check: Check, step: Step, timeout: float) -> Outcome:
    """vae_conv_kernels under ncu on the conv card with transposes: cuDNN's algorithm choice and the Triton
    implicit-GEMM tiles (on the device), which kernels each ran, and the card's evidence (waves, padding)."""
    overrides = ["experiment=vae_conv_kernels", f"cards=[{CONV_WITH_TRANSPOSES}]", "search.n_trials=4"]
    if check.cuda and not check.dry_run:
        overrides.append("workload.scale=1.0")
    proc, run_dir = _experiment(check, step, timeout, "conv_kernels_ncu", overrides, "conv_kernels")
    _ok_or_fail(proc, "experiment=vae_conv_kernels")
    tried: dict[str, dict[str, Any]] = {}
    for trial in sorted((run_dir / "trials").glob("*/trial_*.json")):
        variant = re.sub(r"^trial_\d+_", "", trial.stem)
        names = [n for c in _cards(trial) for n in _kernel_names(c)]
        tried[variant] = {"kernels": sorted({n[:80] for n in names})[:4],
                          "transposes": sum(bool(TRANSPOSE.search(n)) for n in names)}
    diff = next(iter((_read_json(run_dir / "diff.json") or {}).get("cards") or []), {})
    best = _cards(run_dir / "tried.json")
    numbers = {"trials": tried, "speedup": diff.get("speedup"), "timing_verdict": diff.get("timing_verdict"),
               "variant": (diff.get("variant") or {}).get("label"), "conv_evidence": (best[0].get("conv") if best else None)}
    text = f"{len(tried)} trials ({', '.join(tried) or 'none'})"
    if diff.get("speedup"):
        text += f"; best {numbers['variant']} {diff['speedup']:.2f}x {diff.get('timing_verdict')}"
    return Outcome("ok", text, numbers)


def step_gpu_tests(check: Check, step: Step, timeout: float) -> Outcome:
    argv = [check.python, "-m", "pytest", "-q", "-m", "gpu or ncu", "tests", "--ignore=tests/app",
            "-p", "no:cacheprovider", "-o", "addopts=-ra"]
    proc = check.run(argv, timeout, log=check.work / "logs" / f"{step.name}.log")
    line = _last_line(proc.output, r"passed|failed|error|skipped|no tests ran")
    counts = {key: int(n) for n, key in re.findall(r"(\d+) (passed|failed|skipped|error|errors|deselected)", line)}
    if proc.timed_out:
        return Outcome("timeout", f"pytest killed at {timeout:.0f} s; last: {line}", counts)
    status = "ok" if proc.returncode == 0 else "failed"
    failed = [ln.strip() for ln in proc.output.splitlines() if ln.startswith(("FAILED", "ERROR"))][:5]
    return Outcome(status, line + (("; " + "; ".join(failed)) if failed else ""), {**counts, "failed": failed})


def step_aa_timing(check: Check, step: Step, timeout: float) -> Outcome:
    out = check.work / "runs" / "aa_timing.json"
    args = ["--rounds", "8", "--budget-s", "0.1"] if check.cuda and not check.dry_run else [
        "--device", "cpu", "--rounds", "6", "--budget-s", "0.05"]
    proc = check.run([check.python, str(REPO / "scripts" / "gpu_aa_timing.py"), *args, "--out", str(out)], timeout,
                     log=check.work / "logs" / f"{step.name}.log")
    _ok_or_fail(proc, "scripts/gpu_aa_timing.py")
    found = _read_json(out) or {}
    clock = found.get("sm_clock_mhz") or {}
    numbers = {k: found.get(k) for k in ("verdict", "false_verdict", "speedup", "ci", "band", "device", "median_us")}
    numbers["sm_clock_mhz"] = clock
    text = f"A/A on {found.get('device')}: {found.get('describe')}"
    if clock.get("min"):
        text += f"; SM clock {clock['min']:.0f}-{clock['max']:.0f} MHz over the rounds"
    elif found.get("device_kind") == "cuda":
        text += "; SM clock not read (" + "; ".join(found.get("notes") or ["no reading"]) + ")"
    return Outcome("failed" if found.get("false_verdict") else "ok", text, numbers)


def step_reproduction(check: Check, step: Step, timeout: float) -> Outcome:
    device_form = check.cuda and not check.dry_run
    overrides = ["experiment=reprofile", f"cards=[{','.join(REPRODUCTION)}]"]
    how = "CPU stand-in (device=cpu profiler=cpu, scale 0.1): not comparable with the report"
    keep = None
    if device_form:
        overrides.append("workload.scale=1.0")
        if check.ncu_ok:
            keep, how = "reproduction", "ncu at scale 1"
        else:
            overrides.append("profiler=torch_cuda")
            how = f"the CUDA trace at scale 1 (ncu: {check.ncu_reason or 'not probed'})"
    proc, run_dir = _experiment(check, step, timeout, "reproduction", overrides, keep)
    _ok_or_fail(proc, "experiment=reprofile (reproduction)")
    table = run_dir / "baseline_reproduction.md"
    if not table.exists():
        raise StepFailed("the run wrote no baseline_reproduction.md")
    header = (f"<!-- scripts/gpu_check.sh {check.summary['mode']} {_now()}: {len(REPRODUCTION)} cards re-profiled "
              f"with {how} -->\n\n")
    (check.out / "reproduction.md").write_text(header + table.read_text(encoding="utf-8"), encoding="utf-8")
    result, numbers = _reprofile_headline(run_dir)
    return Outcome("ok", f"{how}: {result}", numbers)


CHUNK_EXPERIMENTS = ("vae_decode_chunk", "dit_block")  # the chunk cards' experiments (harness.chunks)
# The CPU form: the VAE chunk's layout variant only (one latent frame of a 2x1 slice decodes in about a second);
# a DiT block streams its 351 M weights on every call, minutes of a CPU run, so it runs on the device only.
CPU_CHUNK_FORM = {"vae_decode_chunk": ["workload.scale=0.04", "~experiment.space",
                                       "+experiment.space={channels_last_3d: {}}", "search.n_trials=1"]}


def step_chunk_trace(check: Check, step: Step, timeout: float) -> Outcome:
    """Each chunk experiment on its smallest chunk card under the CUDA trace at the report's scale: the
    chunk's verdict and its op breakdown per contained report card."""
    device_form = check.cuda and not check.dry_run
    parts, numbers = [], {}
    names = [n for n in CHUNK_EXPERIMENTS if (REPO / "conf" / "experiment" / f"{n}.yaml").exists()
             and (device_form or n in CPU_CHUNK_FORM)]
    if not names:
        raise StepFailed("no chunk experiment config in conf/experiment")
    for index, name in enumerate(names):
        left = max(MIN_STEP_S, timeout / (len(names) - index))
        form = ["workload.scale=1.0", "search.n_trials=3", "profiler=torch_cuda"] if device_form else CPU_CHUNK_FORM[name]
        args = [a for a in check.common(device_form) if not a.startswith("workload.scale=")]
        proc, run_dir = check.harness_run(step, f"chunk_{name}", [*args, f"experiment={name}", *form], left)
        timeout -= left
        if proc.returncode != 0:
            parts.append(f"{name}: exit {proc.returncode}" + (" (timed out)" if proc.timed_out else ""))
            numbers[name] = {"returncode": proc.returncode}
            continue
        rows = (_read_json(run_dir / "diff.json") or {}).get("cards") or []
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


def step_auto_trace(check: Check, step: Step, timeout: float) -> Outcome:
    device_form = check.cuda and not check.dry_run
    overrides = ["experiment=auto", f"cards=[{','.join(AUTO_CARDS)}]", "search.n_trials=4"]
    if device_form:
        overrides += ["profiler=torch_cuda", "workload.scale=0.25"]
    else:
        overrides[-1] = "search.n_trials=3"
    proc, run_dir = _experiment(check, step, timeout, "auto_trace", overrides, None)
    _ok_or_fail(proc, "experiment=auto")
    parts, numbers = [], {}
    for sub in sorted(p for p in run_dir.iterdir() if p.is_dir() and (p / "run.json").exists()):
        tried: dict[str, int] = {}
        for trial in sorted(sub.glob("trials/*/trial_*.json")):
            variant = re.sub(r"^trial_\d+_", "", trial.stem)
            measured = any(c.get("timing") for c in _cards(trial))
            key = variant if measured else f"{variant} (not measured)"
            tried[key] = tried.get(key, 0) + 1
        rows = (_read_json(sub / "diff.json") or {}).get("cards") or []
        best = [f"{r.get('speedup'):.2f}x {r.get('timing_verdict')}" for r in rows if r.get("speedup")]
        numbers[sub.name] = {"trials": tried, "verdicts": best}
        parts.append(f"{sub.name}: " + (", ".join(f"{k} x{v}" for k, v in tried.items()) or "no trial")
                     + (f" -> {best[0]}" if best else ""))
    return Outcome("ok", "; ".join(parts) or "no sub-run", numbers)


# ---------------------------------------------------------------------------------------------
# Packing


def pack(check: Check) -> Outcome:
    """runs.tgz: run directories, step logs, helper outputs. The float64 references (*.pt) stay out;
    kept reports (*.ncu-rep) go in, smallest first, while they add up to at most REPORTS_BYTES; if the
    archive still weighs over MAX_FILE_BYTES, only the logs, JSON and Markdown go in."""
    files = sorted(p for p in check.work.rglob("*") if p.is_file() and p.relative_to(check.work).parts[0] != "site")
    chosen = [p for p in files if p.suffix not in (".pt", ".ncu-rep")]
    used = 0
    for report in sorted((p for p in files if p.suffix == ".ncu-rep"), key=lambda p: p.stat().st_size):
        if used + report.stat().st_size <= REPORTS_BYTES:
            chosen.append(report)
            used += report.stat().st_size
    target = check.out / "runs.tgz"
    tmp = target.with_name("runs.tgz.tmp")

    def write(paths: list[Path]) -> None:
        with tarfile.open(tmp, "w:gz") as archive:
            for path in paths:
                archive.add(path, arcname=str(Path("gpu_check") / path.relative_to(check.work)))

    write(chosen)
    if tmp.stat().st_size > MAX_FILE_BYTES:
        chosen = [p for p in chosen if p.suffix in (".log", ".json", ".md", ".txt") and p.stat().st_size < 2**20]
        write(chosen)
    tmp.replace(target)
    left_out = [str(p.relative_to(check.work)) for p in files if p not in chosen]
    return Outcome("ok", f"runs.tgz {target.stat().st_size / 2**20:.2f} MiB, {len(chosen)} files"
                         + (f"; left out {len(left_out)} (float64 references *.pt, reports over the budget)"
                            if left_out else ""),
                   {"bytes": target.stat().st_size, "files": len(chosen), "left_out": left_out[:50]})


# ---------------------------------------------------------------------------------------------
# The table of steps


def _wrap(fn: Callable[[Check, Step, float], Outcome]) -> Callable[[Check, Step], Outcome]:
    return lambda check, step: fn(check, step, check.step_timeout)


STEPS = [
    Step("machine", 15, 30, (), step_machine, "versions, driver, clocks -> versions.txt"),
    Step("install", 45, 90, (), _wrap(step_install), "the carried wheels, requirements, imports"),
    Step("ncu_preflight", 10, 0, ("cuda", "ncu"), _wrap(step_ncu_preflight), "tiny kernel under ncu, metric list"),
    Step("reprofile_ncu", 75, 70, ("cuda", "ncu", "harness"), _wrap(step_reprofile_ncu),
         "reprofile under ncu, one card per op kind"),
    Step("stalls_ncu", 40, 40, ("cuda", "ncu", "harness"), _wrap(step_stalls_ncu), "stall_breakdown under ncu"),
    Step("fixture", 10, 0, ("cuda", "ncu", "harness"), _wrap(step_fixture), "one .ncu-rep + raw page into $OUT"),
    Step("channels_last_ncu", 50, 50, ("cuda", "ncu", "harness"), _wrap(step_channels_last_ncu),
         "vae_channels_last under ncu: transposes"),
    Step("conv_kernels_ncu", 45, 45, ("cuda", "ncu", "harness"), _wrap(step_conv_kernels_ncu),
         "vae_conv_kernels under ncu: cuDNN algorithms, Triton conv tiles"),
    Step("gpu_tests", 45, 0, ("cuda", "harness"), _wrap(step_gpu_tests), "gpu/ncu-marked unit tests"),
    Step("aa_timing", 20, 25, ("cuda", "harness"), _wrap(step_aa_timing), "A/A pair, SM clock"),
    Step("reproduction", 60, 60, ("cuda", "harness"), _wrap(step_reproduction), "cards vs the report -> reproduction.md"),
    Step("chunk_trace", 50, 60, ("cuda", "harness"), _wrap(step_chunk_trace),
         "the chunk experiments at the report's scale under the CUDA trace: op breakdown"),
    Step("auto_trace", 50, 90, ("cuda", "harness"), _wrap(step_auto_trace), "experiment=auto under the CUDA trace"),
]
STEP_NAMES = [s.name for s in STEPS]


def skip_reason(check: Check, step: Step) -> str | None:
    device_form = check.cuda and not check.dry_run
    if not device_form and step.needs and "cuda" in step.needs and not step.cpu_budget_s:
        return "needs CUDA" + (" and ncu" if "ncu" in step.needs else "") + (
            " (--dry-run)" if check.requested_dry_run else " (no CUDA device here)")
    if device_form and "ncu" in step.needs:
        if not check.ncu:
            return "needs ncu: not on PATH (and NCU_HOME not set)"
        if check.ncu_ok is False:
            return f"ncu cannot profile here: {check.ncu_reason}"
    if "harness" in step.needs and device_form and not check.installed:
        return "the install step did not succeed (or did not run): the harness cannot import here"
    return None


def run_steps(check: Check, names: list[str]) -> int:
    failures = 0
    for step in STEPS:
        if step.name not in names:
            continue
        record: dict[str, Any] = {"name": step.name, "doc": step.doc}
        check.summary["steps"].append(record)
        device_form = check.cuda and not check.dry_run
        budget = step.budget_s if device_form else (step.cpu_budget_s or step.budget_s)
        record.update(budget_s=budget, form="device" if device_form else "cpu")
        reason = skip_reason(check, step)
        left = check.left() - PACK_RESERVE_S
        if reason is None and left < min(MIN_STEP_S, budget):
            reason = f"global deadline: {max(0.0, left):.0f} s left of {check.summary['deadline_s']:.0f} s"
        if reason:
            record.update(status="skipped", seconds=0.0, result=reason)
            check.say(f"-- {step.name}: skipped: {reason}")
            check.write_summary()
            continue
        check.step_timeout = min(budget, left)
        if not device_form and any(n in step.needs for n in ("cuda", "ncu")):
            record["note"] = "the CPU form (device=cpu profiler=cpu): " + ("needs CUDA" + (
                " and ncu" if "ncu" in step.needs else "")) + " for the device form"
        check.say(f"== {step.name} (budget {check.step_timeout:.0f} s, {record['form']} form)")
        started = time.monotonic()
        try:
            outcome = step.run(check, step)
        except StepFailed as exc:
            outcome = exc.outcome
        except Exception as exc:  # noqa: BLE001 - a broken step is recorded, the others go on
            outcome = Outcome("failed", f"{type(exc).__name__}: {exc}")
        seconds = time.monotonic() - started
        if outcome.status == "ok" and seconds > check.step_timeout + 5:
            outcome.status = "timeout"
        record.update(status=outcome.status, seconds=round(seconds, 1), result=outcome.result, numbers=outcome.numbers)
        check.say(f"   {step.name}: {outcome.status} in {seconds:.1f} s: {outcome.result}")
        if outcome.status in ("failed", "timeout"):
            failures += 1
        if step.name != "machine":
            with contextlib.suppress(Exception):
                pack(check)  # what is there so far comes back even if the call is cut short
        check.write_summary()
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dry-run", action="store_true", help="CPU forms only; CUDA/ncu steps skipped")
    parser.add_argument("--steps", default=",".join(STEP_NAMES), help="comma-separated subset, e.g. install,aa_timing")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(REPO / "gpu_check_out"))
    parser.add_argument("--work", default=None, help="scratch folder for run directories (default: /tmp/...)")
    parser.add_argument("--deadline", type=float, default=DEFAULT_DEADLINE_S, help="seconds for all steps")
    parser.add_argument("--list", action="store_true", help="print the steps and their budgets")
    parser.add_argument("--helper", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.helper:
        if args.helper[0] == "import-sweep":
            return helper_import_sweep()
        if args.helper[0] == "parse-fixture":
            return helper_parse_fixture(*args.helper[1:3])
        parser.error(f"unknown helper {args.helper[0]}")
    if args.list:
        for step in STEPS:
            print(f"{step.name:18} {step.budget_s:4.0f} s on the device, "
                  f"{f'{step.cpu_budget_s:4.0f} s' if step.cpu_budget_s else '   - '} CPU form; {step.doc}")
        return 0
    names = [n.strip() for n in args.steps.split(",") if n.strip()]
    unknown = [n for n in names if n not in STEP_NAMES and n != "pack"]
    if unknown:
        parser.error(f"unknown step(s) {', '.join(unknown)}; steps: {', '.join(STEP_NAMES)}")
    check = Check(args)

    def stop(signum: int, _frame: Any) -> None:
        check.say(f"signal {signum}: stopping the current step and packing what there is")
        if check.current is not None:
            check.kill(check.current)
        check.sweep()
        with contextlib.suppress(Exception):
            check.summary["interrupted"] = f"signal {signum}"
            pack(check)
            check.write_summary()
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    check.say(f"gpu_check {check.summary['mode']}: steps {', '.join(names)}; deadline {args.deadline:.0f} s; "
              f"out {check.out}; work {check.work}")
    if "machine" not in names:  # the other steps need to know whether there is a GPU
        check.cuda = not args.dry_run and _probe(check, "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)")
        check.dry_run = check.dry_run or not check.cuda
    if "install" not in names and not check.dry_run:  # installed earlier, or by hand
        check.installed = _probe(check, "import optuna, hydra, omegaconf")
    failures = run_steps(check, names)
    outcome = pack(check)
    check.summary["pack"] = {"status": outcome.status, "result": outcome.result, **outcome.numbers}
    check.summary["failed_steps"] = failures
    check.write_summary()
    files = sorted(p.name for p in check.out.iterdir() if p.is_file())
    too_many = len(files) > MAX_OUT_FILES
    big = [p.name for p in check.out.iterdir() if p.is_file() and p.stat().st_size > MAX_FILE_BYTES]
    check.say("")
    check.say(f"{'step':18} {'status':8} {'s':>6}  result")
    for record in check.summary["steps"]:
        check.say(f"{record['name']:18} {record['status']:8} {record['seconds']:6.1f}  {record['result'][:160]}")
    check.say(f"{len(files)} files in {check.out}: {', '.join(files)} ({check.summary['seconds']:.0f} s in all)")
    if too_many or big:
        check.say(f"problem: {'more than 8 files' if too_many else ''} {'over 15 MiB: ' + ', '.join(big) if big else ''}")
        failures += 1
    check.log_file.close()
    if not os.environ.get("GPU_CHECK_KEEP_WORK"):
        shutil.rmtree(check.work, ignore_errors=True)
    return 1 if failures else 0


def _probe(check: Check, code: str) -> bool:
    return check.run([check.python, "-c", code], 60, env=check.env()).returncode == 0


if __name__ == "__main__":
    sys.exit(main())
