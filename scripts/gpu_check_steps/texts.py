"""The check's small readers and writers: JSON files (written whole, read back or None), a command's telling
line, the JSON a command printed."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import re
from pathlib import Path
from typing import Any


def now_utc() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_json(path: Path, obj: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=str) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def last_line(text: str, pattern: str = "") -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and (not pattern or re.search(pattern, ln))]
    return lines[-1][:300] if lines else ""


def error_line(text: str) -> str:
    """The line of a failed run that says why."""
    for pattern in (r"^error: ", r"Error: ", r"Error\b", r"==ERROR==", r"Traceback"):
        line = last_line(text, pattern)
        if line:
            return line
    return last_line(text) or "no output"


def json_tail(text: str) -> Any:
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            with contextlib.suppress(ValueError):
                return json.loads(line)
    return None


def json_document(text: str) -> Any:
    """The last JSON object in `text` that starts a line (an indented, multi-line one too)."""
    decoder = json.JSONDecoder()
    found = None
    for match in re.finditer(r"^\{", text, re.MULTILINE):
        with contextlib.suppress(ValueError):
            found, _ = decoder.raw_decode(text, match.start())
    return found
