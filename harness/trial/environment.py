"""Where a measurement was taken: versions, device, clocks and the config hash, recorded per card."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import socket
from typing import Any

import torch

from harness.profile.nvml import nvml_clocks


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# Keys that say where results go and how processes share them, not what is measured: left out of the
# hash, so the processes sharing a study and a resumed run record the same config hash.
UNHASHED = {"search": ("storage", "resume", "worker", "timeout", "heartbeat_interval_s", "grace_period_s",
                       "max_retry")}


def config_hash(config: Any) -> str:
    if isinstance(config, dict):
        config = {key: ({k: v for k, v in value.items() if k not in UNHASHED[key]}
                        if key in UNHASHED and isinstance(value, dict) else value)
                  for key, value in config.items()}
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()[:12]


def resolve_device(requested: str) -> str:
    """`auto` is cuda when torch sees a GPU, else cpu; an explicit cuda without a GPU is an error."""
    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device={requested} but torch sees no CUDA device here; use device=auto or device=cpu")
    if requested not in ("cpu",) and not requested.startswith("cuda"):
        raise ValueError(f"device={requested!r} is not one of auto, cpu, cuda, cuda:N")
    return requested


def describe_environment(device: str, config: Any) -> dict[str, Any]:
    env: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "numpy": _version("numpy"),
        "optuna": _version("optuna"),
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cpu_name": cpu_name(),
        "cpu_mhz": _cpu_mhz(),
        # The measuring worker's threads: timing.cpu_threads when set, else torch's default.
        "torch_threads": ((config or {}).get("timing") or {}).get("cpu_threads") or torch.get_num_threads(),
        "device_kind": "cuda" if device.startswith("cuda") else "cpu",
        # Which physical GPU "cuda" was when several processes share the studies (docs/scale-out.md).
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "config_hash": config_hash(config),
    }
    if device.startswith("cuda"):
        index = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(index)
        env.update(device_name=props.name, sm_count=props.multi_processor_count,
                   compute_capability=f"{props.major}.{props.minor}", driver=_driver_version(),
                   device_index=index, device_uuid=str(getattr(props, "uuid", "")) or None)
        env.update(nvml_clocks(index))
    else:
        env["device_name"] = env["cpu_name"]
    return env


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # not installed
        return None


def _cpu_mhz() -> float | None:
    """The current clock of the first CPU as /proc/cpuinfo reports it (None where it does not)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("cpu MHz"):
                    return float(line.split(":", 1)[1])
    except (OSError, ValueError):
        pass
    return None


def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # pynvml absent or NVML unavailable: ask the kernel module
        pass
    try:  # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 ..."
        with open("/proc/driver/nvidia/version", encoding="utf-8") as handle:
            words = handle.readline().split()
        return next((w for w in words if w[:1].isdigit() and "." in w), None)
    except OSError:
        return None
