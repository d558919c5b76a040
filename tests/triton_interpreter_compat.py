"""Imported first by the interpreter scripts (tests.triton_helpers.interpreter_results), with
TRITON_INTERPRET=1 already set: makes Triton's interpreter take a loop bound from a runtime scalar argument
(`for k0 in range(0, K, BLOCK_K)`) under NumPy >= 2.4.

The interpreter holds a scalar argument as a one-element array, and Triton 3.6 (the one torch 2.11 pins)
turns it into an int with `int(array)`, which NumPy 2.4 refuses ("only 0-dimensional arrays can be converted
to Python scalars"); later Tritons (3.9, with torch 2.13) squeeze the array first. Only where the installed
interpreter refuses a one-element array is its `__index__` replaced by that later one; the compiled GPU path
never runs this code.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

try:
    from triton.runtime import interpreter as _interpreter
except ImportError:  # no Triton: the script skips or fails on its own
    _interpreter = None


def _squeezed_index(self):
    return int(self.handle.data.squeeze())


def _refuses_one_element(index) -> bool:
    try:
        index(SimpleNamespace(handle=SimpleNamespace(data=np.array([3], dtype=np.int32))))
    except TypeError:
        return True
    return False


_original = getattr(_interpreter, "_patch_lang_tensor", None)
if _original is not None:

    def _patch_lang_tensor(tensor, scope):
        _original(tensor, scope)
        if _refuses_one_element(tensor.__index__):
            scope.set_attr(tensor, "__index__", _squeezed_index)  # restored with the rest after the launch

    _interpreter._patch_lang_tensor = _patch_lang_tensor
