"""The pipe between the run (harness.run.worker) and its worker child (`python -m harness.trial`): one JSON
line each way, and the environment the run starts the child with.

The run writes one request line and reads one reply line before it writes the next. A request line names its
type (`{"type": "measure", "log_path": ..., "request": {...}}`), so the child reads it back as that dataclass;
a reply line is the reply's fields, read back as the type its request is answered with (`Request.reply`), so
a reply needs no name of its own, and a child that could not even read a request answers a bare `Reply` that
reads as any of them. A message is a dataclass of JSON's own types, enums and other such dataclasses: `plain`
writes one, `typed` reads it back by its annotations and refuses a key it does not know (a line written by
another harness version). The ncu child reads its Measure from a file the same way (harness.trial.ncu_child).
"""

from __future__ import annotations

import json
import os
import types
from dataclasses import fields, is_dataclass
from enum import Enum
from functools import cache
from typing import Any, Mapping, TypeVar, Union, get_args, get_origin, get_type_hints

from harness.boundary.replies import Reply
from harness.boundary.requests import Confirm, Describe, Measure, Request, Retime

# The environment the run starts its child with.
ENV_PARENT = "HARNESS_WORKER_PARENT"  # the run's pid: the child dies with it
ENV_MEMORY_LIMIT = "HARNESS_WORKER_MEMORY_LIMIT_GB"  # search.worker_memory_limit_gb
ENV_CPU_THREADS = "HARNESS_WORKER_CPU_THREADS"  # timing.cpu_threads
ENV_LOG = "HARNESS_WORKER_LOG"  # where its output goes until a request names another run's worker.log

# Each request type by the name its line carries.
REQUESTS: dict[str, type[Request[Any]]] = {"describe": Describe, "measure": Measure, "retime": Retime,
                                           "confirm": Confirm}
_NAMES = {kind: name for name, kind in REQUESTS.items()}

T = TypeVar("T")
R = TypeVar("R", bound=Reply)


def request_line(request: Request[Any], log_path: str | None = None) -> bytes:
    """One request, its type named; `log_path`: the worker.log the child writes to from now on."""
    return _line({"type": _NAMES[type(request)], "log_path": log_path, "request": request})


def read_request(line: bytes) -> tuple[Request[Any], str | None]:
    """A request line read back: the request, and the worker.log it names; ValueError, with why, for a line that
    is not one."""
    try:
        message = json.loads(line)
        kind = REQUESTS[message["type"]]
        return typed(kind, message["request"], f"{message['type']} request"), message.get("log_path")
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"bad request: {exc}") from None


def reply_line(reply: Reply) -> bytes:
    return _line(reply)


def read_reply(line: bytes, kind: type[R]) -> R:
    """A reply line read back as the reply its request expects."""
    return typed(kind, json.loads(line), f"{kind.__name__} reply")


def ready_line(pid: int, torch_threads: int) -> bytes:
    """The child's first line: it can take requests (its imports are done)."""
    return _line({"ready": True, "pid": pid, "torch_threads": torch_threads})


def send(fd: int, line: bytes) -> None:
    """Write the whole line (a pipe takes a long one in parts)."""
    view = memoryview(line)
    while view:
        view = view[os.write(fd, view):]


def _line(message: Any) -> bytes:
    return (json.dumps(plain(message), default=str) + "\n").encode()


def plain(value: Any) -> Any:
    """JSON's own types: enums by value, tuples as lists, dataclasses as their fields."""
    if isinstance(value, Enum):
        return value.value
    if is_dataclass(value) and not isinstance(value, type):  # field by field: asdict would deep-copy every leaf
        return {f.name: plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, Mapping):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def typed(kind: Any, value: Any, what: str) -> Any:
    """`value` (JSON's types) read back as the annotation `kind`: a dataclass by its fields (a key it does not
    have is an error), an enum by its value, a container item by item; anything else as it is."""
    origin, args = get_origin(kind), get_args(kind)
    if value is None:
        return None
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        return typed(inner[0], value, what) if len(inner) == 1 else value
    if isinstance(kind, type) and issubclass(kind, Enum):
        return kind(value)
    if isinstance(kind, type) and is_dataclass(kind):
        hints = _hints(kind)
        unknown = sorted(set(value) - set(hints))
        if unknown:
            raise ValueError(f"{what}: unknown keys {', '.join(unknown)} (written by another harness version?)")
        return kind(**{name: typed(hints[name], v, f"{what} {name}") for name, v in value.items()})
    if origin is dict:
        return {k: typed(args[1], v, what) for k, v in value.items()}
    if origin is list:
        return [typed(args[0], v, what) for v in value]
    if origin is tuple:
        items = [args[0]] * len(value) if args[-1] is Ellipsis else list(args)
        return tuple(typed(item, v, what) for item, v in zip(items, value))
    return value


@cache
def _hints(kind: type) -> dict[str, Any]:
    """A dataclass's fields by name, each with its annotation resolved."""
    hints = get_type_hints(kind)
    return {f.name: hints[f.name] for f in fields(kind) if f.init}
