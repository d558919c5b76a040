"""A card's inputs kept as they were built: a variant that writes into them is caught and undone.

The worker keeps one workload per card for every trial, the drift re-times and the confirm rounds. A
variant that changes an input in place (halving it after computing its output, normalizing it, reusing
it as scratch) would leave every later measurement of the card on damaged data: the next trial of the
baseline's own op was found infeasible after one. So the guard holds a pristine copy of every input
tensor; after a variant was prepared, checked and timed it compares the inputs bit for bit with their
copies (on their device; NaN payloads and signed zeros included, by comparing the bits, not the values),
names what changed, and restores it before anything else is measured. An output that shares storage with
an input is reported too: the next call (or the caller's next op) would overwrite what it returned.
"""

from __future__ import annotations

from typing import Iterable

import torch

_SAME_SIZE_INT = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bits as integers of the same size: equal bits compare equal, NaN included."""
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex:
        if tensor.dtype.is_complex:
            tensor = torch.view_as_real(tensor)
        return tensor.view(_SAME_SIZE_INT[tensor.element_size()])
    return tensor


class InputGuard:
    """Pristine copies of named input tensors; what changed since, restored on request."""

    def __init__(self, inputs: dict[str, torch.Tensor]):
        self._inputs = {name: t for name, t in inputs.items() if isinstance(t, torch.Tensor)}
        with torch.no_grad():
            self._pristine = {name: t.detach().clone(memory_format=torch.preserve_format)
                              for name, t in self._inputs.items()}
        # Its own strides, not the copy's: a copy of a slice with gaps (a replayed strided view) is contiguous.
        self._strides = {name: t.stride() for name, t in self._inputs.items()}

    def changed(self) -> list[str]:
        """The inputs whose bits, shape or strides are no longer what they were built with."""
        out = []
        for name, tensor in self._inputs.items():
            pristine = self._pristine[name]
            if tensor.shape != pristine.shape or tensor.stride() != self._strides[name]:
                out.append(name)
            elif not torch.equal(_bits(tensor.detach()), _bits(pristine)):
                out.append(name)
        return out

    def restore(self) -> None:
        """Put every input back as it was built (in place: the variants and references hold these tensors)."""
        with torch.no_grad():
            for name, tensor in self._inputs.items():
                pristine = self._pristine[name]
                if tensor.shape != pristine.shape or tensor.stride() != self._strides[name]:
                    # torch's stub types set_'s source as a Storage only; it documents and takes a tensor
                    tensor.set_(pristine.clone(memory_format=torch.preserve_format))  # type: ignore[call-overload]
                else:
                    tensor.copy_(pristine)

    def check_and_restore(self) -> str | None:
        """One line naming the inputs a variant changed in place (then restored), or None."""
        changed = self.changed()
        if not changed:
            return None
        self.restore()
        return f"mutates its input {', '.join(changed)} in place (restored before anything else was measured)"

    def aliased(self, output: object) -> str | None:
        """One line naming the inputs the output shares storage with, or None."""
        tensors = [output] if isinstance(output, torch.Tensor) else list(_tensors(output))
        shared = sorted({name for t in tensors for name, tensor in self._inputs.items() if _shares(t, tensor)})
        if not shared:
            return None
        return f"its output aliases its input {', '.join(shared)} (shares its storage)"


def _tensors(value: object) -> Iterable[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors(item)


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.device != b.device or a.numel() == 0 or b.numel() == 0:
        return False
    sa, sb = a.untyped_storage(), b.untyped_storage()
    start_a, start_b = sa.data_ptr(), sb.data_ptr()
    return start_a < start_b + sb.nbytes() and start_b < start_a + sa.nbytes()
