"""Every worker request starts from the pinned torch settings and leaves none of its own behind."""

from __future__ import annotations

import torch

from harness import torch_state


def _set_by_a_variant() -> None:
    torch.backends.cudnn.benchmark = True
    torch.set_float32_matmul_precision("medium")  # TF32-class matmuls: also flips cuda.matmul.allow_tf32


def test_a_request_starts_pinned_and_its_settings_are_undone():
    before = torch_state.snapshot()
    torch.backends.cudnn.deterministic = True  # something the process had before the request
    try:
        with torch_state.pinned() as start:
            assert start["cudnn.deterministic"] is False and start["float32_matmul_precision"] == "highest"
            _set_by_a_variant()
            inside = torch_state.snapshot()
            assert inside["cudnn.benchmark"] is True and inside["float32_matmul_precision"] == "medium"
            assert inside["cuda.matmul.allow_tf32"] is True
        after = torch_state.snapshot()
        assert after["cudnn.benchmark"] == before["cudnn.benchmark"]
        assert after["float32_matmul_precision"] == before["float32_matmul_precision"]
        assert after["cudnn.deterministic"] is True  # restored to what the process had, not to PINNED
        with torch_state.pinned() as next_request:
            assert next_request == {**next_request, **torch_state.PINNED}  # nothing inherited
    finally:
        torch_state.apply(before)


def test_a_failing_request_is_undone_too():
    before = torch_state.snapshot()
    try:
        with torch_state.pinned():
            _set_by_a_variant()
            raise RuntimeError("variant failed")
    except RuntimeError:
        pass
    assert torch_state.snapshot() == before
