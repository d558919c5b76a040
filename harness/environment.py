"""Where a measurement was taken: versions, device, clocks and the config hash, recorded per card."""

from __future__ import annotations

import hashlib
import json
import platform
import socket
from typing import Any

import torch


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def config_hash(config: Any) -> str:
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
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "cpu_name": cpu_name(),
        "torch_threads": torch.get_num_threads(),
        "device_kind": "cuda" if device.startswith("cuda") else "cpu",
        "config_hash": config_hash(config),
    }
    if device.startswith("cuda"):
        index = torch.device(device).index or 0
        props = torch.cuda.get_device_properties(index)
        env.update(device_name=props.name, sm_count=props.multi_processor_count,
                   compute_capability=f"{props.major}.{props.minor}", driver=_driver_version())
        env["sm_clock_mhz"] = _sm_clock(index)
    else:
        env["device_name"] = env["cpu_name"]
    return env


def _driver_version() -> str | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # pynvml absent or NVML unavailable: the driver version stays unknown
        return None


def _sm_clock(index: int) -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        return int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:  # pynvml absent or NVML unavailable
        return None
