"""The Triton cast kernel of output_cast under Triton's interpreter (TRITON_INTERPRET=1, CPU tensors), and
the GPU check's tiny PTX kernel through Triton's bundled ptxas for sm_90: code that otherwise runs only on
a GPU. Skipped without triton (`pip install triton`; no GPU needed)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.triton_helpers import compile_for_hopper, interpreter_results

ROOT = Path(__file__).resolve().parents[2]

# The interpreter must be on before triton is first imported, hence a child process.
_CAST_SCRIPT = r"""
import json, torch
from experiments.output_cast import _triton_kernel

triton, kernel = _triton_kernel()
gen = torch.Generator().manual_seed(0)
results = []
for src_dtype, dst_dtype in ((torch.float32, torch.uint8), (torch.bfloat16, torch.uint8),
                             (torch.float32, torch.float16), (torch.float16, torch.float32)):
    for n, block in ((1000, 256), (4096, 1024), (37, 64)):
        x = torch.randn(n, generator=gen) * 200  # negatives and values past 255: the uint8 wrap matters
        x[:4] = torch.tensor([-1.5, 255.9, 256.0, -300.0])
        x = x.to(src_dtype)
        out = torch.full((n,), 7, dtype=dst_dtype)
        via_int64 = dst_dtype == torch.uint8 and src_dtype.is_floating_point
        kernel[(triton.cdiv(n, block),)](x, out, n, BLOCK=block, VIA_INT64=via_int64)
        ref = x.to(torch.int64).to(dst_dtype) if via_int64 else x.to(dst_dtype)
        results.append({"case": [str(src_dtype), str(dst_dtype), n, block],
                        "equal": bool(torch.equal(out, ref)),
                        "mismatches": int((out != ref).sum())})
print("RESULTS " + json.dumps(results))
"""


@pytest.mark.triton
def test_triton_cast_kernel_in_the_interpreter() -> None:
    results = interpreter_results(_CAST_SCRIPT, timeout=600)
    assert len(results) == 12
    bad = [r for r in results if not r["equal"]]
    assert not bad, bad


@pytest.mark.parametrize("vector_width, load", [(4, "ld.global.v4.b32"), (1, "ld.global.b32")])
@pytest.mark.triton
def test_triton_cast_kernel_compiles_for_hopper_with_the_vector_width_asked(vector_width: int, load: str) -> None:
    """sm_90 PTX of the fp32 -> uint8 cast at 256 threads a program: `vector_width` elements per thread are
    read as one load that wide (4 x 4 B = 16 B, the widest), which is the variant's whole point."""
    pytest.importorskip("triton")
    from experiments.output_cast import _triton_kernel

    _, kernel = _triton_kernel()
    threads = 256
    compiled = compile_for_hopper(
        kernel, {"src": "*fp32", "dst": "*u8", "n": "i32", "BLOCK": "constexpr", "VIA_INT64": "constexpr"},
        {"n": 3 * 9 * 480 * 832}, {"BLOCK": threads * vector_width, "VIA_INT64": True}, threads // 32, 1)
    loads = set(re.findall(r"ld\.global[.\w]*", compiled.asm["ptx"]))
    assert loads == {load}


@pytest.mark.triton
def test_gpu_check_tiny_kernel_assembles_for_hopper(tmp_path: Path) -> None:
    """The PTX the ncu preflight JIT-compiles on the device (harness.profile.ncu.probe TINY_KERNEL, which
    scripts/gpu_check_steps/ncu_steps.py's ncu_preflight runs too) is valid sm_90 PTX."""
    triton = pytest.importorskip("triton")
    ptxas = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "ptxas"
    if not ptxas.is_file():
        pytest.skip("this triton has no bundled ptxas")
    from harness.profile.ncu.probe import TINY_KERNEL

    ptx = re.search(r'PTX = b"""(.*?)"""', TINY_KERNEL, re.DOTALL).group(1)
    source = tmp_path / "tiny.ptx"
    source.write_text(ptx)
    done = subprocess.run([str(ptxas), "-arch=sm_90", str(source), "-o", str(tmp_path / "tiny.cubin")],
                          check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "tiny.cubin").stat().st_size > 0
    compile(TINY_KERNEL, "tiny_kernel.py", "exec")  # and the program around it is valid Python
