"""Float64 references kept on disk by their inputs' hash, so each is computed once per (op, inputs).

Why: a reference is the costliest set-up of a card (the Wan VAE chunk's float64 decode; 1.0-1.5 s for the
default run's three conv3d cards on a 2-core CPU), and before this cache a resumed run, a later round and every
experiment of an `experiment=auto` run computed the same numbers again. The folder is `references/` beside the
run folder (`inputs.references` sets another), so a resume (the same folder), the runs next to it and auto's
sub-runs (beside each other inside the auto run) share it.

The key is the content the reference is computed from, never where it came from: the op (its kind, the
scaled shape, the code that computes the reference), every input tensor's dtype, shape and values in
logical order (a channels_last copy of the same numbers hashes alike: its reference is the same), a chunk
module's parameters and buffers, the reference dtype and the device kind (a CUDA float64 result may
differ from a CPU one in its last bits). A batch of k calls is keyed by each call's inputs.

A reference file (the cache's, and the run's `trials/<card>/reference.pt` with the baseline's standard, which
holds the reference itself only where the folder does not) is
written atomically and carries a CRC32 of its tensors' bytes, checked on every read: a damaged file is computed
again, never served. Not torch's own CRC: torch.save's per-record one (miniz's) costs 4x the write (0.07 of
0.09 s for a 19 MB reference on a 2-core Xeon) and torch.load never checks it (a flipped byte loads); zlib's
takes 5 ms for the same 19 MB.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import time
import zlib
from pathlib import Path
from typing import Any, Callable

import torch

from harness.workloads.base import CallBatch, Workload

FORMAT = 2  # bumped when the key or the file changes meaning (2: the file checksummed)


def _host_bytes(tensor: torch.Tensor) -> memoryview:
    """The tensor's values as bytes in logical order (a memory format reads alike), on the host, uncopied there."""
    return tensor.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy().data


def _tensor_digest(digest: Any, name: str, tensor: torch.Tensor) -> None:
    """The tensor's name, dtype, shape and values (logical order, so a memory format hashes alike)."""
    digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
    digest.update(_host_bytes(tensor))


def _code(fn: Callable[..., Any] | None) -> str:
    """Which code computes the reference (a bind's closure): its module and qualified name."""
    return "" if fn is None else f"{getattr(fn, '__module__', '')}.{getattr(fn, '__qualname__', repr(fn))}"


def _inputs_digest(workload: Workload) -> str:
    """The sha256 of a workload's input tensors and, for a chunk, its module's parameters and buffers."""
    digest = hashlib.sha256()
    for name in sorted(workload.inputs):
        if isinstance(workload.inputs[name], torch.Tensor):
            _tensor_digest(digest, f"input.{name}", workload.inputs[name])
    if workload.module is not None:  # a chunk: its weights and primed state are inputs of the reference too
        for name, tensor in sorted([*workload.module.named_parameters(), *workload.module.named_buffers()],
                                   key=lambda p: p[0]):
            _tensor_digest(digest, f"module.{name}", tensor)
    return digest.hexdigest()


class ReferenceCache:
    """References by key in `folder`; None: no folder, every reference computed (as before the cache).

    Every key includes the card's workload as built (`built`): a bind's reference reads the constants
    it was built with, which a round's carried inputs (a bf16 copy of the weight) do not show.
    """

    def __init__(self, folder: str | None):
        self.folder = Path(folder) if folder else None
        self.computed = 0  # references computed (not read back) by this process: what reuse saves shows here
        self.loaded = 0
        self.computing_s = 0.0  # the seconds computing (and writing) them took: what a first run pays once
        self._built: tuple[Workload, str] | None = None  # the last built workload and its digest

    def key(self, source: Workload | CallBatch, built: Workload, dtype: torch.dtype = torch.float64) -> str:
        """The sha256 naming `source`'s reference in `dtype` (module docstring); `built`: the card's
        workload as built, whose constants the reference reads."""
        if self._built is None or self._built[0] is not built:
            self._built = (built, _inputs_digest(built))
        digest = hashlib.sha256()
        if isinstance(source, CallBatch):
            head: dict[str, Any] = {"batch": source.k, "code": [_code(r) for r in source.references]}
            inputs = {f"call{i}.{name}": t for i, call in enumerate(source.inputs) for name, t in call.items()}
        else:
            head = {"draw": source.draw, "code": _code(source._reference)}
            inputs = {} if source is built else dict(source.inputs)
        head.update(format=FORMAT, op=built.op_kind, shape=built.shape, built=self._built[1], dtype=str(dtype),
                    device=torch.device(built.device).type)
        digest.update(json.dumps(head, sort_keys=True, default=str).encode())
        for name in sorted(inputs):
            if isinstance(inputs[name], torch.Tensor):
                _tensor_digest(digest, f"input.{name}", inputs[name])
        return digest.hexdigest()

    def holds(self, source: Workload | CallBatch, built: Workload, dtype: torch.dtype = torch.float64) -> bool:
        """Whether the folder holds `source`'s reference in `dtype`: a later child reads it from there."""
        return self.folder is not None and (self.folder / f"{self.key(source, built, dtype)}.pt").exists()

    def reference(self, source: Workload | CallBatch, built: Workload,
                  dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """`source.reference(dtype)`, read from the folder when an earlier run computed it."""
        path = None if self.folder is None else self.folder / f"{self.key(source, built, dtype)}.pt"
        loaded = None if path is None else load_reference_file(path, built.device)  # None: absent, or damaged
        if loaded is not None and isinstance(loaded.get("reference"), torch.Tensor):
            self.loaded += 1
            return loaded["reference"]
        t0 = time.perf_counter()
        self.computed += 1
        reference = source.reference(dtype)
        if path is not None:
            try:  # through a temporary name: runs share the folder
                save_reference_file({"reference": reference.detach()}, path)
            except OSError:  # a full or read-only disk costs the reuse, not the run
                pass
        self.computing_s += time.perf_counter() - t0
        return reference


CHECKSUM = "crc32"  # the key of the tensors' CRC32 in a saved dict


def _crc32(tensors: dict[str, Any]) -> int:
    """The CRC32 of the dict's tensors' bytes, in key order (a CUDA tensor's through a host copy)."""
    crc = 0
    for name in sorted(tensors):
        value = tensors[name]
        if isinstance(value, torch.Tensor):
            crc = zlib.crc32(_host_bytes(value), crc)
    return crc


def save_reference_file(obj: dict[str, Any], path: Path) -> None:
    """`obj` (tensors and plain values by name) saved with its CRC32 through a temporary name: a reader sees
    no file, the old one or the whole new one. OSError (a full or read-only disk) is the caller's."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    set_crc = getattr(torch.serialization, "set_crc32_options", None)  # torch >= 2.6; older ones write theirs
    before = torch.serialization.get_crc32_options() if set_crc is not None else None
    try:
        if set_crc is not None:
            set_crc(False)
        torch.save({**obj, CHECKSUM: _crc32(obj)}, tmp)
    finally:
        if set_crc is not None:
            set_crc(bool(before))
    os.replace(tmp, path)


def load_reference_file(path: Path, device: str | torch.device) -> dict[str, Any] | None:
    """What save_reference_file wrote at `path`, its tensors on `device`; None when the file is absent, unreadable
    (another format, a partial write) or its tensors' bytes differ from its CRC32."""
    try:
        loaded = torch.load(path, map_location=device, weights_only=True)
    except (OSError, RuntimeError, EOFError, ValueError, pickle.UnpicklingError):
        return None
    if not isinstance(loaded, dict) or not isinstance(loaded.get(CHECKSUM), int):
        return None
    expected = loaded.pop(CHECKSUM)
    return loaded if _crc32(loaded) == expected else None
