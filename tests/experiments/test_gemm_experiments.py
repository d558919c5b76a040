"""dit_gemm_tiles and dit_small_m_batching: variant outputs, batching's per-block correctness, pruning
of tile configurations that cannot launch, CUDA-only skips, executed FLOPs, and the evidence hooks.

Everything here runs on a CPU in seconds. The Triton kernel is also checked without a GPU where
Triton is installed (its interpreter, float32/float16: the 3.x interpreter's tl.dot multiplies bf16
bit patterns, so bf16 is left to the GPU test; and an ahead-of-time sm_90 compile). Tests that run
the real Triton and CuPy kernels are marked `gpu`.
"""

from __future__ import annotations

import itertools
import math
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from experiments import dit_gemm_tiles as tiles
from experiments import dit_small_m_batching as small_m
from experiments.dit_gemm_tiles import kernel
from harness.api import tiles as tile_math
from harness.api.experiment import ExperimentError, VariantSkipped
from harness.boundary.spec import CorrectnessRule
from harness.cards.measured import TrialLabel
from harness.cards.model import Card, Kernel
from harness.cards.rules import RuleSet
from harness.hardware.occupancy import SmLimits
from harness.trial.correctness import check_output, judge_baseline
from harness.trial.measure import TimingSettings, measure_prepared
from harness.workloads import batch_for, build_workload
from tests.triton_helpers import compile_for_hopper, interpreter_results

# A fixed bound for these checks against the baseline's output; a run derives its bound per card from the
# float64 reference (harness.trial.correctness, tests/test_correctness.py).
TOLERANCE = 1.0e-2
ROOT = Path(__file__).resolve().parents[2]


def _workload(dtype: str = "float32", m: int = 3, n: int = 256, k: int = 128, bias: bool = True):
    return build_workload("linear", {"M": m, "N": n, "K": k, "bias": bias}, device="cpu", dtype=dtype,
                          scale=1.0, seed=0)


@pytest.fixture(scope="module")
def w32():
    return _workload("float32")


@pytest.fixture(scope="module")
def wbf16():
    return _workload("bfloat16")


def _config(name: str):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(OmegaConf.load(ROOT / "conf" / "experiment" / f"{name}.yaml"))["experiment"]


# ---------------------------------------------------------------------------------------------
# dit_gemm_tiles: variants on the CPU


def test_baseline_is_the_workloads_linear(w32):
    out = tiles.EXPERIMENT.prepare("linear", w32, {}).fn()
    assert torch.equal(out, w32.run())


@pytest.mark.parametrize("workload,compute_dtype,layout", [
    ("wbf16", "float32", "nk"), ("wbf16", "float32", "kn"), ("wbf16", "bfloat16", "kn"),
    ("w32", "float32", "kn"), ("w32", "bfloat16", "nk"),
])
def test_dtype_layout_matches_the_baseline(request, workload, compute_dtype, layout):
    w = request.getfixturevalue(workload)
    ref = w.run()
    prepared = tiles.dtype_layout(w, compute_dtype=compute_dtype, weight_layout=layout)
    out = prepared.fn()
    assert out.dtype == ref.dtype and out.shape == ref.shape
    assert check_output(out, ref, TOLERANCE).feasible
    assert prepared.facts["compute_dtype"] == compute_dtype and prepared.facts["weight_layout"] == layout


def test_dtype_layout_without_bias_and_the_baseline_itself_is_skipped():
    w = _workload("bfloat16", bias=False)
    out = tiles.dtype_layout(w, compute_dtype="float32", weight_layout="kn").fn()
    assert check_output(out, w.run(), TOLERANCE).feasible
    with pytest.raises(VariantSkipped, match="baseline itself"):
        tiles.dtype_layout(w, compute_dtype="bfloat16", weight_layout="nk")
    with pytest.raises(ExperimentError, match="weight_layout: 'nn' is not one of nk, kn"):
        tiles.EXPERIMENT.prepare("dtype_layout", w, {"compute_dtype": "float32", "weight_layout": "nn"})


def test_a_wrong_weight_layout_would_be_caught():
    """The tolerance sees a transposition error: a square W used as [K, N] without the transpose."""
    square = _workload("bfloat16", n=128, k=128)
    x, weight, bias = square.inputs["x"], square.inputs["weight"], square.inputs["bias"]
    wrong = torch.addmm(bias, x, weight)  # forgot .t(): x @ W instead of x @ W^T
    assert not check_output(wrong, square.run(), TOLERANCE).feasible


def test_compiled_default_matches_the_baseline_on_cpu(w32):
    prepared = tiles.compiled(w32, mode="default")
    assert check_output(prepared.fn(), w32.run(), TOLERANCE).feasible
    assert prepared.facts["compile_mode"] == "default" and prepared.facts["compile_s"] >= 0
    with pytest.raises(VariantSkipped, match="mode="):
        tiles.compiled(w32, mode="fastest")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU skip")
def test_cuda_only_gemm_variants_skip_on_cpu_with_the_reason(w32):
    with pytest.raises(VariantSkipped, match="needs CUDA"):
        tiles.blas_library(w32, library="cublaslt")
    with pytest.raises(VariantSkipped, match="needs CUDA"):
        tiles.triton_matmul(w32, BLOCK_M=16, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, num_stages=4, num_warps=8)
    with pytest.raises(ExperimentError, match="library: 'mkl' is not one of cublas, cublaslt"):
        tiles.EXPERIMENT.prepare("blas_library", w32, {"library": "mkl"})
    # Through the experiment, as run.py calls it (VariantSkipped -> pruned trial with this reason).
    with pytest.raises(VariantSkipped, match="needs CUDA"):
        tiles.EXPERIMENT.prepare("blas_library", w32, {"library": "cublas"})


def test_a_config_that_cannot_launch_is_pruned_before_the_device_or_install_check(wbf16):
    with pytest.raises(VariantSkipped, match="cannot launch: shared memory 245760 B"):
        tiles.triton_matmul(wbf16, BLOCK_M=128, BLOCK_N=256, BLOCK_K=64, GROUP_M=8, num_stages=5, num_warps=8)


# ---------------------------------------------------------------------------------------------
# Launchability (pure arithmetic, no GPU)


def _tile(bm=128, bn=128, bk=64, group=8, stages=4, warps=8):
    return tile_math.TileConfig(bm, bn, bk, group, stages, warps)


def test_launchable_configs_pass():
    assert tile_math.launch_problem(_tile(), 2) is None
    assert tile_math.launch_problem(_tile(128, 256, 64, stages=4), 2) is None  # 196608 B on Hopper
    assert tile_math.launch_problem(_tile(16, 128, 64, stages=4), 2) is None


@pytest.mark.parametrize(
    "config,elem,match",
    [
        (_tile(128, 256, 64, stages=5), 2,
         "shared memory 245760 B = 5 stages x \\(128x64 \\+ 64x256\\) x 2 B exceeds the 232448 B"),
        (_tile(128, 128, 64, stages=4), 4, "shared memory 262144 B"),  # float32 doubles the bytes
        (_tile(128, 256, 64, stages=3, warps=4), 2, "256 registers per thread"),
        (_tile(96, 128, 64), 2, "BLOCK_M=96: tl.arange needs a power of two"),
        (_tile(128, 128, 8), 2, "BLOCK_K=8"),
        (_tile(warps=3), 2, "num_warps=3"),
        (_tile(warps=64), 2, "num_warps=64"),
        (_tile(group=0), 2, "GROUP_M=0"),
        (_tile(stages=0), 2, "num_stages=0"),
        (_tile(16, 16, 64, warps=8), 2, "less than one 16x8 MMA fragment"),
    ],
)
def test_configs_that_cannot_launch_are_named(config, elem, match):
    problem = tile_math.launch_problem(config, elem)
    assert problem is not None
    assert re.search(match, problem), problem


def test_the_limit_is_the_devices_own():
    a100 = SmLimits.for_arch(8, 0, 108)  # 163 KiB per block
    config = _tile(128, 256, 64, stages=4)  # 196608 B: fits Hopper, not an A100
    assert tile_math.launch_problem(config, 2, tile_math.HOPPER) is None
    assert "exceeds the 166912 B" in tile_math.launch_problem(config, 2, a100)
    limits, source = tile_math.device_limits("cpu")
    assert limits.smem_per_block_optin == 227 * 1024 and "assumed" in source


def test_default_space_has_exactly_one_tile_pruned_for_shared_memory():
    space = _config("dit_gemm_tiles")["space"]["triton_matmul"]
    keys = list(space)
    problems = [tile_math.launch_problem(tile_math.TileConfig(**dict(zip(keys, values))), 2)
                for values in itertools.product(*space.values())]
    assert sum(p is not None for p in problems) == 1
    assert "shared memory" in next(p for p in problems if p)


# ---------------------------------------------------------------------------------------------
# Executed FLOPs


def test_executed_flops_pad_every_dimension_to_the_tile():
    assert tile_math.executed_flops(3, 256, 128, 16, 128, 64) == 2.0 * 16 * 256 * 128
    assert tile_math.executed_flops(1170, 5120, 144, 128, 256, 64) == 2.0 * 1280 * 5120 * 192
    assert tile_math.executed_flops(1024, 1024, 1024, 128, 128, 64) == 2.0 * 1024 ** 3  # divisible: nominal
    assert tile_math.tile_count(1170, 5120, 128, 256) == 10 * 20
    assert tile_math.padded(3, 128) == 128 and tile_math.padded(128, 128) == 128


# ---------------------------------------------------------------------------------------------
# The Triton kernel without a GPU (where Triton is installed)


_INTERPRETER_SCRIPT = r"""
import json, math, sys
import torch, torch.nn.functional as F
from experiments import dit_gemm_tiles as tiles
from experiments.dit_gemm_tiles import kernel
from harness.api import tiles as tile_math
from harness.trial.correctness import check_output
from harness.cards.measured import TrialLabel

cases = [
    (3, 256, 128, (16, 64, 32, 8, 2, 4)),    # M=3 in a 16-row tile
    (70, 130, 100, (32, 64, 32, 2, 2, 4)),   # ragged M, N and K; several groups of row tiles
    (33, 64, 144, (16, 32, 64, 4, 3, 4)),    # K=144: a partial last K slab
]
results = []
for dtype in (torch.float32, torch.float16):
    for m, n, k, config in cases:
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(m, k, generator=gen).to(dtype)
        weight = (torch.randn(n, k, generator=gen) / math.sqrt(k)).to(dtype)
        bias = torch.randn(n, generator=gen).to(dtype)
        for b in (bias, None):
            y, _ = kernel.triton_linear(x, weight, b, tile_math.TileConfig(*config))
            ref = F.linear(x.double(), weight.double(), None if b is None else b.double())
            c = check_output(y, ref, 1e-6 if dtype == torch.float32 else 1e-2)
            results.append({"case": [m, n, k, str(dtype), b is not None], "dtype_ok": y.dtype == dtype,
                            "max_rel": c.max_rel, "feasible": c.feasible})
print("RESULTS " + json.dumps(results))
"""


@pytest.mark.triton
def test_triton_kernel_in_the_interpreter():
    """Triton's interpreter runs the kernel on CPU tensors. It must be on before triton is first
    imported (its own @jit library functions, tl.cdiv among them, are made at import), hence a child
    process."""
    results = interpreter_results(_INTERPRETER_SCRIPT)
    assert len(results) == 12
    bad = [r for r in results if not (r["feasible"] and r["dtype_ok"])]
    assert not bad, bad


@pytest.mark.triton
def test_triton_kernel_compiles_for_hopper_with_the_estimated_shared_memory():
    """Ahead-of-time sm_90 compile (Triton's bundled ptxas, no GPU): pipelined wgmma, and the shared
    memory the compiler assigns is the launch check's estimate."""
    pytest.importorskip("triton")
    if kernel.triton is None:
        pytest.skip("experiments.dit_gemm_tiles was imported without triton")
    config = tile_math.TileConfig(128, 128, 64, 8, 4, 8)
    m, n, k = 1170, 5120, 5120
    pointers = {name: "*bf16" for name in ("a_ptr", "w_ptr", "bias_ptr", "c_ptr")}
    values = {"M": m, "N": n, "K": k, "stride_am": k, "stride_ak": 1, "stride_wn": k, "stride_wk": 1,
              "stride_cm": n, "stride_cn": 1}
    constants = {"HAS_BIAS": True, "BLOCK_M": config.BLOCK_M, "BLOCK_N": config.BLOCK_N,
                 "BLOCK_K": config.BLOCK_K, "GROUP_M": config.GROUP_M, "INPUT_PRECISION": "ieee"}
    signature = {**pointers, **dict.fromkeys(values, "i32"), **dict.fromkeys(constants, "constexpr")}
    compiled = compile_for_hopper(kernel._linear_kernel, signature, values, constants, config.num_warps,
                                  config.num_stages)
    assert compiled.metadata.shared == config.smem_bytes(2)
    assert "warp_group_dot" in compiled.asm["ttgir"] and "async_copy" in compiled.asm["ttgir"]


# ---------------------------------------------------------------------------------------------
# dit_small_m_batching


def test_batched_computes_the_calls_the_harness_built(w32):
    k = 4
    prepared = small_m.batched(w32, k=k)
    m = w32.shape["M"]
    assert prepared.calls == k
    batch = batch_for(w32, k)  # built by the variant with w.calls(k)
    weight, bias = w32.inputs["weight"], w32.inputs["bias"]
    out = prepared.fn()
    assert out.shape == (k * m, w32.shape["N"])
    blocks = out.split(m)
    assert torch.allclose(blocks[0], w32.run(), rtol=0, atol=1e-5)  # the first call is the workload's own
    for block, call in zip(blocks, batch.inputs):
        assert torch.allclose(block, F.linear(call["x"], weight, bias), rtol=0, atol=1e-5)
    # The other calls' rows are distinct from each other and from the workload's.
    assert len({tuple(r.tolist()) for r in batch.stacked["x"]}) == k * m
    assert check_output(out, batch.reference(), TOLERANCE).feasible


def test_a_wrong_batch_is_caught(w32):
    k, m = 5, w32.shape["M"]
    prepared = small_m.batched(w32, k=k)
    reference = batch_for(w32, k).reference()
    standard = judge_baseline(w32.run(), w32.reference(), CorrectnessRule(4, 4), w32.reduction_length)[0]
    out = prepared.fn()
    assert standard.judge(out, reference).feasible
    reused = out.clone()
    reused[2 * m:3 * m] = out[:m]  # call 3 got call 1's result (its rows never used)
    assert not standard.judge(reused, reference).feasible
    no_bias = out.clone()
    no_bias[4 * m:] -= w32.inputs["bias"]  # the last call lost its bias
    assert not standard.judge(no_bias, reference).feasible
    assert not standard.judge(out[: (k - 1) * m], reference).feasible  # a call missing
    assert not standard.judge(out[:m].repeat(k, 1), reference).feasible  # one call computed, repeated k times


def test_batched_in_bf16_within_tolerance(wbf16):
    prepared = small_m.batched(wbf16, k=8)
    assert check_output(prepared.fn(), batch_for(wbf16, 8).reference(), TOLERANCE).feasible
    assert prepared.facts["weight_reads_per_call"] == pytest.approx(1 / 8)
    with pytest.raises(VariantSkipped, match="k="):
        small_m.batched(wbf16, k=0)


def test_batching_is_refused_where_the_weight_is_not_what_streams():
    tall = _workload("float32", m=512, n=64, k=128)  # the N=64 head: the activation dominates
    with pytest.raises(VariantSkipped, match="weight is .* of this call's bytes"):
        small_m.batched(tall, k=4)


def test_gemv_launch_problems_are_pure_arithmetic():
    assert small_m.gemv_launch_problem(3, 5120, "bfloat16", 256, 8) is None
    assert small_m.gemv_launch_problem(3, 5120, "float32", 128, 4) is None
    assert "16 byte load" in small_m.gemv_launch_problem(3, 5120, "float32", 256, 8)
    assert "not a multiple" in small_m.gemv_launch_problem(3, 5121, "bfloat16", 256, 8)
    assert "whole warps" in small_m.gemv_launch_problem(3, 5120, "bfloat16", 100, 8)
    assert "at most 8" in small_m.gemv_launch_problem(60, 5120, "bfloat16", 256, 8)
    assert "written for" in small_m.gemv_launch_problem(3, 5120, "float16", 256, 8)
    assert small_m.gemv_grid(30720, 256) == 3840 and small_m.gemv_grid(130, 128) == 33


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU skip")
def test_gemv_skips_on_cpu_with_the_reason(wbf16):
    with pytest.raises(VariantSkipped, match="needs CUDA"):
        small_m.gemv(wbf16, block_size=256, vector_width=8)
    with pytest.raises(VariantSkipped, match="cannot launch: vector_width=8"):
        small_m.gemv(_workload("float32"), block_size=256, vector_width=8)


def test_gemv_source_is_specialized():
    source = small_m.gemv_source("bfloat16", 3, 8, 256)
    assert "#define ROWS 3" in source and "typedef uint4 vec_t" in source and "unsigned short elem_t" in source
    assert "__launch_bounds__(BLOCK)" in source and "#define BLOCK 256" in source and "@" not in source
    source = small_m.gemv_source("float32", 5, 2, 128)
    assert "typedef float2 vec_t" in source and "typedef float elem_t" in source


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="no nvcc to compile the CUDA C")
def test_gemv_source_compiles_for_hopper(tmp_path):
    for dtype, width in (("bfloat16", 8), ("bfloat16", 2), ("float32", 4)):
        source = tmp_path / f"gemv_{dtype}_{width}.cu"
        source.write_text(small_m.gemv_source(dtype, 3, width, 256))
        done = subprocess.run(["nvcc", "-arch=sm_90", "--cubin", "-o", str(tmp_path / "k.cubin"), str(source)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------------------------------------
# Evidence hooks


def _card(extra: dict, kernels: list[Kernel] | None = None) -> Card:
    return Card(group="g", resolution="480x832", stage="dit", op="aten::linear", shape_parameters={},
                kernels=kernels or [], extra=extra)


def test_weight_stream_is_per_original_call(wbf16):
    n, k = wbf16.shape["N"], wbf16.shape["K"]
    kernel = Kernel(name="aten::addmm", metrics={"dram_read_mb": 0.4, "dram_write_mb": 0.1})
    card = _card({"variant": {"calls": 4, "per_call_us": 10.0}, "metrics_source": "ncu",
                  "peaks": {"kind": "cpu", "mem_bw_bytes_per_s": 1.0e10, "flops_per_s": {"float32": 1e11}}},
                 [kernel])
    small_m.add_weight_stream(card, wbf16)
    ws = card.extra["weight_stream"]
    per_call = n * k * 2 / 4
    assert ws["weight_bytes_per_call"] == per_call
    assert ws["bandwidth_bound_us_per_call"] == pytest.approx(per_call / 1.0e10 * 1e6)
    assert ws["dram_bytes_per_call_profiled"] == pytest.approx(0.5e6 / 4)
    assert ws["time_over_bound"] == pytest.approx(10.0 / ws["bandwidth_bound_us_per_call"])
    assert ws["achieved_weight_gbps"] == pytest.approx(per_call / 10.0 / 1e3)
    # Not collected: None, not zero.
    bare = _card({"variant": {"calls": 1, "per_call_us": 5.0}, "peaks": None}, [Kernel(name="k", metrics={})])
    small_m.add_weight_stream(bare, wbf16)
    assert bare.extra["weight_stream"]["dram_bytes_per_call_profiled"] is None
    if not torch.cuda.is_available():
        assert bare.extra["weight_stream"]["bandwidth_bound_us_per_call"] is None


def test_gpu_peaks_give_the_bound_and_the_compute_share(wbf16):
    gpu_peaks = {"peaks": {"dram_tbps": {"value": 4.3, "source": "practical"},
                           "bf16_tflops": {"value": 790.0, "source": "practical"}},
                 "limits": {"sm_count": 132}}
    card = _card({"variant": {"calls": 1, "per_call_us": 100.0}, "peaks": gpu_peaks})
    small_m.add_weight_stream(card, wbf16)
    assert card.extra["weight_stream"]["peak_gbps"] == pytest.approx(4300.0)
    gemm_card = _card({"variant": {"calls": 1, "per_call_us": 1.0, "achieved_tflops": 79.0,
                                   "executed_flops": 4.0e6, "executed_over_nominal": 2.0,
                                   "tile": {"BLOCK_M": 16, "BLOCK_N": 128}}, "peaks": gpu_peaks})
    tiles.add_gemm_evidence(gemm_card, wbf16)
    gemm = gemm_card.extra["gemm"]
    assert gemm["pct_of_peak"] == pytest.approx(10.0)
    assert gemm["executed_tflops"] == pytest.approx(4.0)
    assert gemm["padding_pct"] == pytest.approx(100.0)
    assert gemm["waves_one_tile_per_sm"] == pytest.approx(2 / 132)  # 3x256 in 16x128 tiles: 2 tiles


def test_measured_batched_card_carries_per_call_evidence(seed_report, w32):
    """Through measure_prepared(), as a trial is measured: time per call, and the hook's per-call weight bytes."""
    source = seed_report.card("dit-480-linear-m3n5120k5120-d55d81")
    prepared = small_m.batched(w32, k=5)
    ref = w32.reference()
    standard = judge_baseline(w32.run(), ref, CorrectnessRule(4, 4), w32.reduction_length)[0]

    def check(out):
        return standard.judge(out, batch_for(w32, prepared.calls).reference())

    m = measure_prepared(source_card=source, workload=w32, prepared=prepared, check=check, profiler=None,
                settings=TimingSettings(warmup=1, min_repeats=2, budget_s=0.01),
                rules=RuleSet.from_config(None), environment={},
                label=TrialLabel(experiment="dit_small_m_batching", variant="batched", role="trial"))
    assert m.correctness.feasible
    small_m.add_weight_stream(m.card, w32)
    variant = m.card.extra["variant"]
    assert variant["calls"] == 5 and variant["per_call_us"] == pytest.approx(m.timing.median_us / 5)
    ws = m.card.extra["weight_stream"]
    assert ws["weight_bytes_per_call"] == 256 * 128 * 4 / 5 and ws["per_call_us"] == variant["per_call_us"]


def test_configs_name_registered_variants_and_cuda_only_ones():
    for name, module in (("dit_gemm_tiles", tiles), ("dit_small_m_batching", small_m)):
        cfg = _config(name)
        assert cfg["module"] == f"experiments.{name}"
        assert set(cfg["space"]) <= set(module.EXPERIMENT.variants)
        size = sum(math.prod(len(v) for v in params.values()) for params in cfg["space"].values())
        assert size <= 16, "the default search (n_trials=16) must cover the space"
    assert {"blas_library", "triton_matmul"} <= set(_config("dit_gemm_tiles")["space"])
    assert "gemv" in _config("dit_small_m_batching")["space"]


# ---------------------------------------------------------------------------------------------
# On a GPU: the real kernels


def _cuda_workload(m: int, n: int, k: int):
    return build_workload("linear", {"M": m, "N": n, "K": k}, device="cuda", dtype="bfloat16", scale=1.0, seed=0)


@pytest.mark.gpu
@pytest.mark.parametrize("m,n,k", [(3, 5120, 256), (1170, 1280, 5120), (100, 300, 144)])
def test_triton_matmul_on_gpu(m, n, k):
    pytest.importorskip("triton")
    w = _cuda_workload(m, n, k)
    for config in ((16, 128, 64, 8, 4, 8), (128, 256, 64, 8, 4, 8)):
        prepared = tiles.triton_matmul(w, *config)
        assert check_output(prepared.fn(), w.run(), TOLERANCE).feasible
        assert prepared.executed_flops == tile_math.executed_flops(m, n, k, config[0], config[1], config[2])
        assert prepared.facts["tile"]["BLOCK_M"] == config[0]


@pytest.mark.gpu
def test_blas_library_on_gpu_restores_the_setting():
    w = _cuda_workload(1170, 1280, 5120)
    before = torch.backends.cuda.preferred_blas_library()
    for library in tiles.BLAS_LIBRARIES:
        prepared = tiles.blas_library(w, library=library)
        assert check_output(prepared.fn(), w.run(), TOLERANCE).feasible
        assert torch.backends.cuda.preferred_blas_library() == before


@pytest.mark.gpu
@pytest.mark.parametrize("block_size,vector_width", [(128, 4), (256, 8), (1024, 2)])
def test_gemv_on_gpu(block_size, vector_width):
    pytest.importorskip("cupy")
    for m, n, k in ((3, 30720, 5120), (3, 5120, 256), (1, 130, 64)):
        w = _cuda_workload(m, n, k)
        out = small_m.gemv(w, block_size=block_size, vector_width=vector_width).fn()
        torch.cuda.synchronize()
        assert check_output(out, w.run(), TOLERANCE).feasible


@pytest.mark.gpu
def test_batched_on_gpu():
    w = _cuda_workload(3, 5120, 5120)
    prepared = small_m.batched(w, k=5)
    assert check_output(prepared.fn(), batch_for(w, 5).reference(), TOLERANCE).feasible
