"""Files written whole or not at all: a reader (or a browser reloading a page) never sees a half-written one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write so that a reader (or a browser reloading a page) never sees a half-written file, even if
    we are killed mid-write: a temporary file beside it, synced, then renamed over it."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; outputs are for whoever can read the run
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def write_json_atomic(path: str | os.PathLike[str], obj: Any) -> Path:
    return write_text_atomic(path, json.dumps(obj, indent=1) + "\n")
