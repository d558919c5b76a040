"""Where a workload's tensors come from: a captured real input, verified by hash, or seeded synthetic data.

Captured inputs
---------------
A card's `input_sha256` names its captured real input. `find_captured(inputs_dir, sha256)` looks in
`inputs_dir` (not recursively) for, in this order:

1. `<sha256>.safetensors`, `<sha256>.pt`, `<sha256>.pth` (the full 64-hex-digit hash);
2. a prefix variant: `<prefix>.safetensors|.pt|.pth` where `<prefix>` is the first 12 or more hex digits
   of the hash; the longest prefix wins, `.safetensors` before `.pt` before `.pth`.

Names are compared case-insensitively and may carry a `sha256-`, `sha256_` or `sha256:` lead.

`load_captured` reads a `.safetensors` file with safetensors, anything else with
`torch.load(weights_only=True)` (a tensor, or a dict / list of tensors), and verifies the hash. The report
calls the hash "hash of the captured real input" without saying over what, so either of these is
accepted, and which one matched is recorded (`Captured.over`):

- `"file"`: SHA-256 of the file's bytes;
- `"tensor:<name>"`: SHA-256 of one stored tensor's raw bytes: contiguous, row-major, in its stored dtype
  and native (little-endian) byte order, no header (`tensor_sha256`).

Anything else is a `WorkloadError`: a file that claims a hash it does not have is never used.

Synthetic inputs
----------------
A tensor the file does not hold is drawn from its `Spread` under the workload's seed (harness.workloads.seeded):
float32 values, cast to the workload's dtype afterwards.

A file may also hold an activation's second captured call, `<name>@call1` (harness.capture): that is then the
activation's draw 1 (`Workload.redraw`), the second draw of every correctness check, instead of a seeded
one.

Every tensor taken records its `Spread` (`Source.spreads`): the distribution it was drawn from, or for a
captured tensor its measured mean and standard deviation (its range, where the builder asked for uniform
values). Another draw of an activation (`Workload.redraw`) comes from that spread, so it has the
scale of the workload's own.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from harness.workloads.params import WorkloadError
from harness.workloads.seeded import Spread

EXTENSIONS = (".safetensors", ".pt", ".pth")
# The suffix of a captured tensor's second call in the same file (harness.capture writes it when the op ran
# twice or more): the workload's draw 1 of that activation is then the model's own second call.
SECOND_CALL = "@call1"
MIN_PREFIX = 12
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_LEADS = ("sha256-", "sha256_", "sha256:")


@dataclass
class Captured:
    path: Path
    tensors: dict[str, torch.Tensor]  # on the CPU, as stored
    sha256: str
    over: str  # "file" or "tensor:<name>"

    @property
    def source(self) -> str:
        return f"captured:{self.path}"

    def record(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "path": str(self.path), "over": self.over}


def normalize_sha256(value: str) -> str:
    text = value.strip().lower()
    for lead in _LEADS:
        if text.startswith(lead):
            text = text[len(lead) :]
    if not _HEX64.match(text):
        raise WorkloadError(f"input_sha256 must be 64 hex digits, got {value!r}")
    return text


def _stem_and_ext(name: str) -> tuple[str, str] | None:
    lowered = name.lower()
    for ext in EXTENSIONS:
        if lowered.endswith(ext):
            stem = lowered[: -len(ext)]
            for lead in _LEADS:
                if stem.startswith(lead):
                    stem = stem[len(lead) :]
            return stem, ext
    return None


def find_captured(inputs_dir: str | Path, sha256: str) -> Path | None:
    """The file in `inputs_dir` named by `sha256` (see the module doc for the names tried), or None."""
    digest = normalize_sha256(sha256)
    folder = Path(inputs_dir)
    if not folder.is_dir():
        raise WorkloadError(f"inputs_dir {str(folder)!r} is not a directory")
    best: tuple[int, int, str] | None = None
    best_path: Path | None = None
    for entry in sorted(folder.iterdir()):
        parsed = _stem_and_ext(entry.name)
        if parsed is None or not entry.is_file():
            continue
        stem, ext = parsed
        if len(stem) < MIN_PREFIX or not digest.startswith(stem):
            continue
        rank = (len(stem), -EXTENSIONS.index(ext), entry.name)
        if best is None or rank[:2] > best[:2]:
            best, best_path = rank, entry
    return best_path


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 22), b""):
            digest.update(block)
    return digest.hexdigest()


def tensor_bytes(tensor: torch.Tensor) -> memoryview:
    """A tensor's raw bytes: contiguous, row-major, stored dtype, native byte order."""
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    if flat.numel() == 0:
        return memoryview(b"")
    # numpy's stubs give ndarray its buffer protocol (__buffer__) on Python >= 3.12 only
    return memoryview(flat.view(torch.uint8).numpy())  # type: ignore[arg-type]


def tensor_sha256(tensor: torch.Tensor) -> str:
    return hashlib.sha256(tensor_bytes(tensor)).hexdigest()


def _read(path: Path) -> dict[str, torch.Tensor]:
    if path.name.lower().endswith(".safetensors"):
        try:
            from safetensors.torch import load_file

            return dict(load_file(str(path), device="cpu"))
        except Exception as exc:  # safetensors raises its own error types
            raise WorkloadError(f"captured input {path}: not a readable safetensors file ({exc})") from None
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise WorkloadError(f"captured input {path}: torch.load(weights_only=True) failed ({message})") from None
    if isinstance(obj, torch.Tensor):
        return {"input": obj}
    if isinstance(obj, (list, tuple)):
        obj = {str(i): t for i, t in enumerate(obj)}
    if isinstance(obj, dict) and obj and all(isinstance(t, torch.Tensor) for t in obj.values()):
        return {str(k): v for k, v in obj.items()}
    raise WorkloadError(f"captured input {path}: holds {type(obj).__name__}, not a tensor or a dict of tensors")


def load_captured(path: str | Path, sha256: str) -> Captured:
    """Read a captured input and verify it against `sha256` (file bytes or one tensor's bytes)."""
    digest = normalize_sha256(sha256)
    target = Path(path)
    file_digest = file_sha256(target)
    tensors = _read(target)
    if file_digest == digest:
        return Captured(target, tensors, digest, "file")
    seen = []
    for name, tensor in tensors.items():
        got = tensor_sha256(tensor)
        if got == digest:
            return Captured(target, tensors, digest, f"tensor:{name}")
        seen.append(f"tensor {name!r} {got[:12]}")
    raise WorkloadError(
        f"captured input {target}: SHA-256 mismatch: expected {digest[:12]}..., "
        f"file bytes {file_digest[:12]}, {', '.join(seen)}"
    )


def find_and_load(inputs_dir: str | Path | None, sha256: str | None) -> tuple[Captured | None, str | None]:
    """The verified captured input for a card, or (None, a note saying why synthetic data is used)."""
    if sha256 is None:
        return None, "the card names no captured input (no input_sha256)"
    if inputs_dir is None:
        return None, "no inputs_dir given; captured input not looked for"
    path = find_captured(inputs_dir, sha256)
    if path is None:
        return None, f"no captured input for {normalize_sha256(sha256)[:12]}... in {inputs_dir}"
    return load_captured(path, sha256), None


def check_seed(seed: Any) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise WorkloadError(f"seed must be a non-negative integer, got {seed!r}")
    return seed


def fit_to(
    tensor: torch.Tensor, original: tuple[int, ...], target: tuple[int, ...], what: str
) -> tuple[torch.Tensor, bool]:
    """A captured tensor cut to the scaled shape: the leading block of every dimension.

    The tensor must have the card's shape (`original`) or already the scaled one (`target`).
    Returns (tensor, sliced).
    """
    original = tuple(int(t) for t in original)
    target = tuple(int(t) for t in target)
    have = tuple(tensor.shape)
    if have == target:
        return tensor, False
    if have != original:
        raise WorkloadError(f"captured {what} has shape {list(have)}, the card says {list(original)}")
    index = tuple(slice(0, want) for want in target)
    return tensor[index].contiguous(), True


class Source:
    """Hands a workload builder its tensors: captured where the file has them, seeded synthetic otherwise.

    A captured file with one tensor supplies the op's primary input (linear x, conv3d input, attention
    q, cast frames); a file with several supplies each tensor it has under one of the names the builder
    asks for. Everything else (weights, biases, missing tensors) is synthetic. `used` lists the captured
    tensors actually taken, `synthetic_names` the rest.
    """

    def __init__(self, captured: Captured | None, seed: int, device: str):
        self.captured = captured
        self.seed = seed
        self.device = device
        self.used: list[str] = []
        self.sliced: list[str] = []
        self.synthetic_names: list[str] = []
        self.notes: list[str] = []
        self.spreads: dict[str, Spread] = {}  # every tensor taken, by name: what another draw of it follows
        # A captured second call of the op (tensors named `<name>@call1`): that activation's draw 1.
        self.second_call: dict[str, torch.Tensor] = {}

    def find(self, aliases: tuple[str, ...], primary: bool) -> tuple[str, torch.Tensor] | None:
        if self.captured is None:
            return None
        tensors = self.captured.tensors
        lowered = {k.lower(): k for k in tensors}
        for alias in aliases:
            if alias.lower() in lowered:
                key = lowered[alias.lower()]
                return key, tensors[key]
        if primary and len(tensors) == 1:
            key = next(iter(tensors))
            return key, tensors[key]
        return None

    def take(
        self,
        name: str,
        original: tuple[int, ...],
        target: tuple[int, ...],
        dtype: torch.dtype,
        *,
        aliases: tuple[str, ...] = (),
        primary: bool = False,
        std: float = 1.0,
        uniform: tuple[float, float] | None = None,
        adapt: Any = None,
    ) -> torch.Tensor:
        """The tensor `name` at shape `target` on the device in `dtype`.

        `adapt(tensor) -> tensor`, when given, reshapes a captured tensor to the card's layout first
        (e.g. a [B, L, K] linear input to [M, K]); it may raise WorkloadError.
        """
        found = self.find((name, *aliases), primary)
        if found is not None:
            key, tensor = found
            if adapt is not None:
                tensor = adapt(tensor)
            tensor, sliced = fit_to(tensor, original, target, f"tensor {key!r}")
            if tensor.dtype != dtype:
                self.notes.append(f"captured {key!r} converted from {tensor.dtype} to {dtype}".replace("torch.", ""))
            if sliced:
                self.sliced.append(name)
                self.notes.append(f"captured {key!r} sliced from {list(original)} to {list(target)} (leading block)")
            self.used.append(name)
            self.spreads[name] = Spread.measured(tensor, uniform is not None)
            second = self.find((f"{key}{SECOND_CALL}",), primary=False)
            if second is not None:
                again = adapt(second[1]) if adapt is not None else second[1]
                again, _ = fit_to(again, original, target, f"tensor {second[0]!r}")
                self.second_call[name] = again.to(device=self.device, dtype=dtype)
            return tensor.to(device=self.device, dtype=dtype)
        self.synthetic_names.append(name)
        self.spreads[name] = Spread(std=std, uniform=uniform)
        values = self.spreads[name].draw(name, target, self.seed)
        return values.to(dtype=dtype).to(self.device)

    def input_source(self) -> str:
        if self.captured is not None and self.used:
            return self.captured.source
        return f"synthetic(seed={self.seed})"

    def summary_notes(self) -> list[str]:
        notes = list(self.notes)
        if self.captured is not None:
            if self.used:
                notes.append(
                    f"captured {', '.join(self.used)} from {self.captured.path.name} "
                    f"(sha256 verified over {self.captured.over})"
                )
            else:
                notes.append(f"{self.captured.path.name} verified but holds no tensor this op uses; all synthetic")
        if self.synthetic_names:
            notes.append(f"synthetic(seed={self.seed}): {', '.join(self.synthetic_names)}")
        return notes
