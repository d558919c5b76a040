"""Process-global torch state: pinned for every request, isolated per phase, restored after each.

The worker process measures trial after trial. A variant that turns on cuDNN's benchmark mode,
CPU autocast or a TF32 matmul mode, lowers the thread count or sets a side stream current would
otherwise leave that setting to every trial after it (after one CPU-autocast leak the next card's
fp32 baseline ran in bf16), and the comparison would no longer be of the variant alone. So:

- `pinned()` (one worker request) and `isolated(note)` (one phase inside it: preparing, checking
  or timing one side, one side of a confirm round) start the block from `PINNED`, record what the
  block left changed (`changed`, one line per setting, for the card's note), and restore what was
  there before. `pinned()` also drops Dynamo's compiled graphs first; `isolated()` does not, since a
  compiled variant would otherwise recompile on every side of every round.
- A variant may change a setting inside its own call when it restores it there; only what it
  leaves behind is reported.
- `snapshot()` is what a card records of the settings it was measured under: a dict of JSON-ready
  values under short keys ("cudnn.allow_tf32", "autocast.cpu.enabled"; `SETTINGS` gives each its
  label, the expression that reads it, which is how `changed` names it).

`PINNED` is torch's defaults, which is how the report's model ran (TF32 for cuDNN convolutions, full
fp32 matmuls, no autocast); blocks also pin the intra-op thread count to the one the first pin found
(the worker's: it sets the count from its settings before answering anything). Settings torch sets per
platform (the BLAS and linalg preference, the SDPA priority order) and per process (the current CUDA
device and stream) are not pinned, only restored; so are the torch-function and torch-dispatch mode
stacks, since a block may run inside a mode of the harness's own (harness.trial.precision's evidence mode):
only the modes a block enters and never leaves are undone.

The settings themselves, how each is read and set back, and PINNED are harness.trial.torch_settings's.
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import Any, Iterator

from harness.trial.torch_settings import INTEROP_THREADS, PINNED, SETTINGS, THREADS, Setting, loaded_dynamo

__all__ = ["INTEROP_THREADS", "NOT_RESTORABLE", "PINNED", "SETTINGS", "THREADS", "UNREADABLE", "Setting",
           "StateNotRestored", "apply", "changed", "isolated", "pin_for_card", "pinned", "pinned_value", "snapshot"]

UNREADABLE = "unreadable: "  # the value of a setting whose getter raised (a mixed-API TF32 state)
NOT_RESTORABLE = "not restorable: torch sets the inter-op pool size once per process"


class StateNotRestored(RuntimeError):
    """A setting could not be set back: every request after this one would inherit it."""


_first_threads: int | None = None  # the intra-op thread count at the first pin: the worker's own
# The math mode of the card being served (harness.cards.dtype.tf32_pins: TF32 allowed or refused as its kernels
# say), over PINNED; set when the card's workload is built (harness.trial.build), the same in worker and ncu child.
_card_pins: dict[str, Any] = {}


def _read(setting: Setting) -> Any:
    try:
        return setting.read()
    except RuntimeError as exc:  # a legacy TF32 getter over a state the new API set: torch refuses to answer
        return UNREADABLE + str(exc).split(",")[0][:160]


def snapshot() -> dict[str, Any]:
    """The current value of every setting readable now (see the module docstring)."""
    return {s.key: _read(s) for s in SETTINGS if s.available()}


def apply(state: dict[str, Any]) -> None:
    """Set the settings named in `state` (a `snapshot()` or `PINNED`) that differ from their value now.

    Keys this build lacks, settings not readable now, unreadable recorded values and settings torch
    cannot set again are skipped. Every setting is tried; StateNotRestored names those whose setter raised.
    """
    failed = []
    for setting in SETTINGS:
        if setting.key not in state or setting.write is None or not setting.available():
            continue
        value = state[setting.key]
        if isinstance(value, str) and value.startswith(UNREADABLE):
            continue
        if _read(setting) == value:
            continue  # no write: some setters have costs (an inference-mode guard, a warning)
        try:
            setting.write(value)
        except Exception as exc:  # noqa: BLE001 - e.g. flags frozen by torch.backends.disable_global_flags
            failed.append(f"{setting.label} -> {_shown(value)}: {type(exc).__name__}: {exc}")
    if failed:
        raise StateNotRestored("could not set " + "; ".join(failed))


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def changed(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """One line per setting whose value differs, named by its label: "torch.get_num_threads() 2 -> 1".

    Compared: the keys in both, and a key only `after` has against the value the setting had before
    it became readable, where that is known (device 0's default stream once CUDA is initialized).
    A setting torch cannot set again says so on its line.
    """
    by_key = {s.key: s for s in SETTINGS}
    lines = []
    for key, value in after.items():
        setting = by_key.get(key)
        if key in before:
            old = before[key]
        elif setting is not None and setting.initial is not None:
            old = setting.initial()
        else:
            continue
        if old != value:
            label = setting.label if setting is not None else key
            tail = f" ({NOT_RESTORABLE})" if setting is not None and setting.write is None else ""
            lines.append(f"{label} {_shown(old)} -> {_shown(value)}{tail}")
    return lines


def _pins(before: dict[str, Any]) -> dict[str, Any]:
    """What a block starts from: PINNED, the first pin's thread count, and `before` for everything else.

    The worker sets its thread count (search settings) before it answers its first request, so the
    first pin's count is the worker's; a variant's set_num_threads(1) is then undone for the next one.
    """
    global _first_threads
    if _first_threads is None:
        _first_threads = before[THREADS]
    return {**before, **PINNED, **_card_pins, THREADS: _first_threads}


def pin_for_card(pins: dict[str, Any]) -> dict[str, Any]:
    """Pin `pins` (a card's math mode) over PINNED in every later block; those this build has, returned."""
    global _card_pins
    known = {s.key for s in SETTINGS}
    _card_pins = {key: value for key, value in pins.items() if key in known}
    return dict(_card_pins)


def pinned_value(key: str) -> Any:
    """What a block pins `key` to now: the card's math mode, else PINNED."""
    return _card_pins.get(key, PINNED.get(key))


@contextmanager
def _pinned_block(note: list[str] | None, reset_dynamo: bool) -> Iterator[dict[str, Any]]:
    before = snapshot()
    target = _pins(before)
    if reset_dynamo and loaded_dynamo() is not None:
        loaded_dynamo().reset()  # no compiled graph or guard of an earlier trial serves this one
    start: dict[str, Any] | None = None
    try:
        apply(target)  # inside the try: a setting that cannot be pinned still gets the others restored
        start = snapshot()
        if note is not None:
            note.extend(f"not pinned: {line}" for line in changed({k: target[k] for k in start if k in target}, start))
        yield start
    finally:
        if start is not None and note is not None:
            note.extend(f"left changed: {line}" for line in changed(start, snapshot()))
        # A block that initializes CUDA gets device 0's default stream back, which `before` cannot name.
        first = {s.key: s.initial() for s in SETTINGS
                 if s.initial is not None and s.key not in before and s.available()}
        errors = []
        for state in (before, first):
            try:
                apply(state)
            except StateNotRestored as exc:
                errors.append(str(exc))
        errors += [line for line in changed(before, snapshot()) if NOT_RESTORABLE not in line]
        if errors:
            raise StateNotRestored("not restored after the block: " + "; ".join(errors))


@contextmanager
def pinned(note: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Run one request under PINNED settings and fresh Dynamo caches; restore the settings found before.

    Yields the settings the block starts from. `note`, when given, receives one line per setting the
    block left changed ("left changed: torch.get_num_threads() 2 -> 1") and per setting that could not
    be pinned. Raises StateNotRestored after the block when a setting could not be set back.
    """
    with _pinned_block(note, reset_dynamo=True) as start:
        yield start


@contextmanager
def isolated(note: list[str]) -> Iterator[dict[str, Any]]:
    """`pinned(note)` for one phase of a request (one side's preparation, check or timing, one side of
    a confirm round): the same pinning, recording and restoring, but Dynamo's compiled graphs are kept."""
    with _pinned_block(note, reset_dynamo=False) as start:
        yield start
