"""The project's Triton kernels without a GPU: run under Triton's interpreter on CPU tensors, and compiled
ahead of time for sm_90 (H100/H200) with Triton's bundled ptxas. Tests using them are marked `triton`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
HOPPER_TARGET = ("cuda", 90, 32)  # compute capability 9.0, 32 threads a warp (what the CUDA driver reports)


def interpreter_results(script: str, timeout: float = 900) -> list[dict[str, Any]]:
    """Run `script` with TRITON_INTERPRET=1 and return what it printed on its `RESULTS <json>` line.

    The interpreter must be on before triton is first imported (its own @jit library functions are made
    at import), hence a child process.
    """
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    # The compat import first: Triton 3.6's interpreter (torch 2.11's) under NumPy >= 2.4 (its docstring).
    done = subprocess.run([sys.executable, "-c", "import tests.triton_interpreter_compat\n" + script], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULTS "))
    return json.loads(line[len("RESULTS "):])


def compile_for_hopper(fn: Any, signature: dict[str, str], values: dict[str, int], constants: dict[str, Any],
                       num_warps: int, num_stages: int) -> Any:
    """`fn` (a @triton.jit kernel) compiled for sm_90, specialized as the JIT would at a launch with these
    runtime `values`: a value of 1 becomes a constant, 16-aligned pointers and sizes get the divisibility
    hint. `signature` names every parameter in order with its type; skips where no sm_90 toolchain is."""
    triton = pytest.importorskip("triton")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    constants = {**constants, **{name: 1 for name, value in values.items() if value == 1}}
    names = list(signature)
    typed = {name: "constexpr" if name in constants else kind for name, kind in signature.items()}
    attrs = {(i,): [["tt.divisibility", 16]] for i, name in enumerate(names)
             if signature[name].startswith("*") or (name in values and values[name] % 16 == 0)}
    try:
        return triton.compile(ASTSource(fn=fn, signature=typed, constexprs=constants, attrs=attrs),
                              target=GPUTarget(*HOPPER_TARGET),
                              options={"num_warps": num_warps, "num_stages": num_stages})
    except (RuntimeError, FileNotFoundError) as exc:  # no ptxas in this Triton install
        pytest.skip(f"no sm_90 toolchain here: {exc}")
