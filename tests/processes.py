"""Process checks the kill-with-the-harness tests share (Linux /proc)."""

from __future__ import annotations

import time
from pathlib import Path


def alive(pid: int) -> bool:
    """Running, not a zombie waiting for its reaper."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_dead(pids: list[int], seconds: float = 10.0) -> list[int]:
    """The pids still alive after waiting up to `seconds` for all of them to end."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if not any(alive(pid) for pid in pids):
            return []
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]
