"""The machine and install steps: what the machine has (versions.txt, and whether there is CUDA at all), and the
carried wheels installed with --no-index --no-deps --target, every requirement checked, every module imported
(the import sweep, a --helper of its own process)."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .check import Check
from .outcome import Outcome, StepFailed, ok_or_fail
from .paths import CACHE, ENTRY, REPO, WHEELS
from .plan import Step
from .texts import error_line, json_tail, last_line, now_utc, write_json

# Import names whose distribution is spelled otherwise (for the import sweep's verdicts).
DIST_OF_MODULE = {
    "yaml": "pyyaml", "PIL": "pillow", "pynvml": "nvidia-ml-py", "cupy": "cupy-cuda13x", "sklearn": "scikit-learn",
    "cv2": "opencv-python-headless", "dateutil": "python-dateutil", "google": "protobuf", "_pytest": "pytest",
    "attr": "attrs", "typing_extensions": "typing-extensions", "ncu_report": "ncu-report",
}


def step_machine(check: Check, step: Step, timeout: float) -> Outcome:
    end = time.monotonic() + timeout
    lines = [f"# gpu_check {check.summary['mode']} {now_utc()}", f"repo: {REPO}"]
    numbers: dict[str, Any] = {}

    def capture(title: str, argv: list[str]) -> str:
        if shutil.which(argv[0]) is None and not os.path.exists(argv[0]):
            lines.extend([f"\n## {title}", f"({argv[0]} not found)"])
            return ""
        proc = check.run(argv, min(15.0, max(2.0, end - time.monotonic())), env=check.env(harness=False))
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
    # The probe decides the mode of every later step: it gets its minute even past the step's budget.
    proc = check.run([check.python, "-c", probe], max(60.0, end - time.monotonic()), env=check.env(harness=False))
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
    numbers["ncu"] = check.ncu
    clocks = [ln for ln in query.splitlines()[1:] if ln.strip()]
    if clocks:
        numbers["nvidia_smi"] = clocks[0]
    driver = re.search(r"Driver Version:\s*(\S+)", smi)
    numbers["driver"] = driver.group(1) if driver else None
    gpu = info.get("device") or "no GPU"
    result = (f"{gpu}, driver {numbers['driver'] or '-'}; torch {info.get('torch')} (CUDA {info.get('torch_cuda')}), "
              f"triton {info.get('triton') or '-'}, cupy {info.get('cupy') or '-'}, "
              f"ncu {'at ' + check.ncu if check.ncu else 'absent'}; "
              f"python {info.get('python')}")
    if clocks:
        result += f"; nvidia-smi: {clocks[0]}"
    return Outcome("ok", result, numbers)


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
    ok_or_fail(proc, "python3.12 -m venv")
    if standins:
        proc = check.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *standins],
                         max(10.0, timeout - proc.seconds), log=log, env=check.env(harness=False))
        ok_or_fail(proc, f"installing the stand-ins {wanted}")
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
                         f"({error_line(probe.output)})")
    # The set itself: pinned, complete, one version each (quick; no network).
    proc = check.run([py, str(REPO / "scripts" / "device_wheels.py"), "check"], 60, log=log,
                     env=check.env(harness=False))
    numbers["set"] = last_line(proc.output, r"^\.whl/") or last_line(proc.output)
    ok_or_fail(proc, "scripts/device_wheels.py check")
    if check.site.exists():
        shutil.rmtree(check.site)
    argv = [py, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
            "--disable-pip-version-check", "--upgrade", "--target", str(check.site), *map(str, wheels)]
    proc = check.run(argv, max(5.0, end - time.monotonic()), log=log, env=check.env(harness=False), echo=True)
    numbers["pip_seconds"] = round(proc.seconds, 1)
    ok_or_fail(proc, "pip install --no-index --no-deps --target")
    env = check.env(harness=False, PYTHONPATH=os.pathsep.join([str(check.site), str(REPO)]))
    verify = [py, str(REPO / "scripts" / "device_wheels.py"), "verify-installed", "--json"]
    if check.dry_run:
        verify.append("--stand-in")
    proc = check.run(verify, max(5.0, end - time.monotonic()), log=log, env=env)
    found = json_tail(proc.output) or {"problems": [f"verify-installed gave no answer: {error_line(proc.output)}"],
                                        "notes": []}
    numbers["requirement_problems"] = found["problems"]
    numbers["requirement_notes"] = len(found["notes"])
    for problem in found["problems"]:
        check.say(f"  requirement: {problem}")
    sweep = check.run([py, str(ENTRY), "--helper", "import-sweep"],
                      max(5.0, end - time.monotonic()), log=log, env=env)
    modules = json_tail(sweep.output)
    if not isinstance(modules, dict):
        raise StepFailed(f"import sweep gave no answer: {error_line(sweep.output)}", numbers=numbers)
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
    numbers.update(modules_ok=len(ok), modules_total=len(modules),
                   needs_preinstalled=sorted(set(absent_there.values())), import_failures=broken)
    write_json(check.work / "logs" / "import_sweep.json", modules)
    for module, result in sorted(broken.items()):
        check.say(f"  import {module}: {result}")
    check.installed = not found["problems"] and not broken
    size = sum(p.stat().st_size for p in wheels) / 2**20
    where = ("a scratch Python 3.12 (stand-ins for the machine's packages)" if check.dry_run
             else "the GPU machine's python3")
    result = (f"{len(wheels)} wheels ({size:.1f} MiB) installed with --no-index --no-deps --target into {where} in "
              f"{numbers['pip_seconds']} s; requirement problems: {len(found['problems'])}; modules importing: "
              f"{len(ok)}/{len(modules)}")
    if absent_there:
        result += (f" (the other {len(absent_there)} need {', '.join(sorted(set(absent_there.values())))}: "
                   "preinstalled there)")
    if broken:
        result += f"; {len(broken)} fail: " + "; ".join(f"{m}: {r}" for m, r in sorted(broken.items())[:3])
    return Outcome("ok" if check.installed else "failed", result, numbers)


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
