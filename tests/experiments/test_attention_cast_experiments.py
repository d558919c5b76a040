"""attention_backends and output_cast: variants against their references on tiny workloads (CPU), skips, configs."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
import torch
import yaml

from harness.api.experiment import ExperimentError, VariantSkipped, load_experiment
from harness.boundary.spec import CorrectnessRule
from harness.trial.correctness import Standard, check_output, judge_baseline
from harness.workloads import CastConfig, build_workload

CONF = Path(__file__).resolve().parents[2] / "conf" / "experiment"
CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"

ATTENTION = load_experiment("experiments.attention_backends")
CAST = load_experiment("experiments.output_cast")


def _conf(name: str) -> dict:
    return yaml.safe_load((CONF / f"{name}.yaml").read_text(encoding="utf-8"))["experiment"]


def _standard(experiment, w) -> tuple[Standard, torch.Tensor]:
    """What a run holds this workload's variants to: the config's factors, the baseline's own error."""
    ref = w.reference()
    rule = CorrectnessRule.from_config(_conf(experiment.name)["correctness"])
    baseline = experiment.prepare(experiment.baseline_name, w, {}).fn()
    return judge_baseline(baseline, ref, rule, w.reduction_length)[0], ref


def _judge(experiment, w, out):
    standard, ref = _standard(experiment, w)
    return standard.judge(out, ref)


# A cache of 96 slots with the first 40 filled; the rest holds random values, as a reused cache would.
ATTENTION_PARAMS = {"role": "self", "valid_keys": 40, "allocated_keys": 96, "queries": 24, "heads": 2,
                    "head_dim": 32}


def _attention(device: str = "cpu"):
    return build_workload("attention", ATTENTION_PARAMS, device=device, dtype="bfloat16", seed=3)


def _cast(device: str = "cpu", frames: int = 2):
    return build_workload("cast", {"resolution": "48x64"}, device=device, dtype="float32", seed=5,
                          cast=CastConfig(frames=frames))


def _run(experiment, variant, workload, params):
    try:
        return experiment.prepare(variant, workload, params)
    except VariantSkipped as exc:
        pytest.skip(f"{variant}{params}: {exc}")


# ---------------------------------------------------------------------------------------------
# attention_backends


def test_attention_experiment_is_bf16():
    assert ATTENTION.workload_dtype == "bfloat16"
    assert ATTENTION.check == "effective_flops"


@pytest.mark.parametrize("keys", ["valid_prefix", "masked_allocation"])
@pytest.mark.parametrize("backend", ["flash", "math"])
def test_cpu_sdpa_variants_match_the_exact_valid_keys_reference(backend, keys):
    w = _attention()  # its reference: float64 softmax over the 40 valid keys only
    prepared = ATTENTION.prepare("sdpa", w, {"backend": backend, "keys": keys})
    out = prepared.fn()
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (1, 2, 24, 32)
    result = _judge(ATTENTION, w, out)
    assert result.feasible, result
    assert prepared.facts["backend"] == f"sdpa:{backend}" and prepared.facts["keys"] == keys


def test_baseline_matches_the_exact_reference():
    w = _attention()
    out = ATTENTION.prepare(ATTENTION.baseline_name, w, {}).fn()
    assert _judge(ATTENTION, w, out).feasible


@pytest.mark.parametrize("backend", ["flash", "math"])
def test_masked_allocation_equals_valid_prefix(backend):
    w = _attention()
    valid = ATTENTION.prepare("sdpa", w, {"backend": backend, "keys": "valid_prefix"}).fn()
    masked = ATTENTION.prepare("sdpa", w, {"backend": backend, "keys": "masked_allocation"}).fn()
    torch.testing.assert_close(masked.float(), valid.float(), atol=2e-2, rtol=2e-2)


def test_attending_to_the_unfilled_slots_is_caught():
    """The bound separates bf16 rounding from a wrong key range (the unfilled slots hold data)."""
    w = _attention()
    q, k, v = w.inputs["q"], w.inputs["k"], w.inputs["v"]
    wrong = torch.nn.functional.scaled_dot_product_attention(q, k, v)  # all 96 slots, no mask
    result = _judge(ATTENTION, w, wrong)
    assert not result.feasible and result.max_rel > 5 * result.bound


def test_executed_flops_count_the_scored_keys():
    w = _attention()
    b, h, lq, d = 1, 2, 24, 32
    assert w.flops == 4 * b * h * lq * 40 * d
    masked = ATTENTION.prepare("sdpa", w, {"backend": "math", "keys": "masked_allocation"})
    valid = ATTENTION.prepare("sdpa", w, {"backend": "math", "keys": "valid_prefix"})
    assert masked.executed_flops == 4 * b * h * lq * 96 * d
    assert valid.executed_flops == w.flops
    assert masked.executed_flops / w.flops == pytest.approx(96 / 40)
    assert masked.facts["keys_scored"] == 96 and valid.facts["keys_scored"] == 40


@pytest.mark.skipif(CUDA, reason="CPU-only skips")
@pytest.mark.parametrize("backend", ["cudnn", "efficient"])
def test_gpu_only_sdpa_backends_skip_on_cpu_with_torchs_reason(backend):
    with pytest.raises(VariantSkipped, match=rf"SDPA backend {backend} .* on cpu: .*\S"):
        ATTENTION.prepare("sdpa", _attention(), {"backend": backend, "keys": "valid_prefix"})


@pytest.mark.skipif(CUDA, reason="CPU-only skips")
@pytest.mark.parametrize("version", [2, 3])
@pytest.mark.parametrize("keys", ["valid_prefix", "cache_seqlens"])
def test_flash_attn_skips_on_cpu(version, keys):
    with pytest.raises(VariantSkipped, match=rf"flash-attn {version} needs CUDA"):
        ATTENTION.prepare("flash_attn", _attention(), {"version": version, "keys": keys})


def test_flash_attn_refuses_a_key_mask_before_any_trial():
    """flash-attn has no key mask: its `keys` annotation leaves it out, so a space that asks for one is refused
    when the run starts, and a direct prepare is refused too (nothing built, nothing timed)."""
    message = "keys: 'masked_allocation' is not one of valid_prefix, cache_seqlens"
    with pytest.raises(ExperimentError, match=message):
        ATTENTION.check_space({"flash_attn": {"version": [2], "keys": ["valid_prefix", "masked_allocation"]}})
    with pytest.raises(ExperimentError, match=message):
        ATTENTION.prepare("flash_attn", _attention(), {"version": 2, "keys": "masked_allocation"})


@pytest.mark.gpu
@pytest.mark.parametrize("keys", ["valid_prefix", "masked_allocation"])
@pytest.mark.parametrize("backend", ["flash", "cudnn", "efficient", "math"])
def test_gpu_sdpa_backends_match_or_skip_with_reason(backend, keys):
    w = _attention("cuda")
    try:
        prepared = ATTENTION.prepare("sdpa", w, {"backend": backend, "keys": keys})
    except VariantSkipped as exc:
        assert str(exc).strip()
        pytest.skip(str(exc))
    assert _judge(ATTENTION, w, prepared.fn()).feasible


@pytest.mark.gpu
@pytest.mark.parametrize("keys", ["valid_prefix", "cache_seqlens"])
@pytest.mark.parametrize("version", [2, 3])
def test_gpu_flash_attn_matches_the_exact_reference(version, keys):
    w = _attention("cuda")
    prepared = _run(ATTENTION, "flash_attn", w, {"version": version, "keys": keys})
    out = prepared.fn()
    assert tuple(out.shape) == tuple(w.output_shape)
    assert _judge(ATTENTION, w, out).feasible
    assert prepared.executed_flops == w.flops


# ---------------------------------------------------------------------------------------------
# output_cast


def test_cast_workload_gets_the_frame_count_it_is_given():
    assert _cast(frames=9).shape["shape"] == [1, 3, 9, 48, 64]
    assert _cast(frames=12).shape["shape"] == [1, 3, 12, 48, 64]


@pytest.mark.parametrize("out", ["new", "preallocated"])
@pytest.mark.parametrize("memory_format", ["contiguous", "channels_last_3d"])
def test_torch_cast_variants_reproduce_the_baseline_exactly(memory_format, out):
    w = _cast()
    baseline = CAST.prepare(CAST.baseline_name, w, {}).fn()
    prepared = CAST.prepare("torch_cast", w, {"memory_format": memory_format, "out": out})
    got = prepared.fn()
    assert got.dtype == torch.uint8
    assert check_output(got, baseline, 0.0).feasible
    assert _judge(CAST, w, got).feasible  # truncation, as the exact reference
    again = prepared.fn()  # a reused output buffer is overwritten with the same values
    assert torch.equal(again, baseline)


def test_rounding_instead_of_truncating_is_caught():
    w = _cast()
    baseline = CAST.prepare(CAST.baseline_name, w, {}).fn()
    rounded = w.inputs["frames"].round().clamp(0, 255).to(torch.uint8)  # round-to-nearest: wrong semantics
    result = _judge(CAST, w, rounded)
    assert not result.feasible and result.bound == 0.0  # an exact baseline, an integer output: no floor
    assert result.max_abs == 1.0  # one LSB on about half the elements
    assert result.max_rel == pytest.approx(1 / float(baseline.max()))


def test_eager_fused_producer_reproduces_the_baseline():
    w = _cast()
    baseline = CAST.prepare(CAST.baseline_name, w, {}).fn()
    prepared = CAST.prepare("fused_producer", w, {"mode": "eager"})
    assert check_output(prepared.fn(), baseline, 0.0).feasible
    assert prepared.facts["passes_over_frames"] == 4


def test_producer_input_is_nudged_across_integer_boundaries():
    from experiments.output_cast import postprocess, producer_input

    k = torch.arange(0, 255, dtype=torch.float32)
    frames = torch.cat([k, torch.nextafter(k + 1, k), k + 0.5, torch.nextafter(k, k + 1)]).clamp(0, 254.99998)
    target = frames.to(torch.uint8)
    naive = postprocess((frames.double() / 127.5 - 1).float())
    assert (naive != target).any()  # the plain affine does cross integers here
    x, nudged = producer_input(frames, target)
    assert nudged > 0
    assert torch.equal(postprocess(x), target)
    assert float(x.min()) >= -1.0 and float(x.max()) <= 1.0


def test_compiled_fused_producer_reproduces_the_baseline():
    w = _cast()
    baseline = CAST.prepare(CAST.baseline_name, w, {}).fn()
    prepared = _run(CAST, "fused_producer", w, {"mode": "compiled"})  # skips where torch.compile cannot run
    assert check_output(prepared.fn(), baseline, 0.0).feasible
    assert prepared.facts["passes_over_frames"] == 1


@pytest.mark.skipif(CUDA, reason="CPU-only skip")
def test_vectorized_kernel_skips_on_cpu_with_reason():
    with pytest.raises(VariantSkipped, match="needs CUDA"):
        CAST.prepare("vectorized_kernel", _cast(), {"block_size": 256, "vector_width": 4})


def test_vectorized_kernel_rejects_bad_parameters():
    with pytest.raises(ExperimentError, match="block_size: 100 is not one of 32, 64, 128, 256, 512, 1024"):
        CAST.prepare("vectorized_kernel", _cast(), {"block_size": 100, "vector_width": 4})
    with pytest.raises(VariantSkipped, match="vector_width"):
        CAST.prepare("vectorized_kernel", _cast(), {"block_size": 128, "vector_width": 3})


@pytest.mark.gpu
@pytest.mark.parametrize("vector_width", [4, 8, 16])
@pytest.mark.parametrize("block_size", [128, 256, 512])
def test_gpu_vectorized_kernel_reproduces_the_baseline(block_size, vector_width):
    w = _cast("cuda", frames=9)
    baseline = CAST.prepare(CAST.baseline_name, w, {}).fn()
    prepared = _run(CAST, "vectorized_kernel", w, {"block_size": block_size, "vector_width": vector_width})
    assert check_output(prepared.fn(), baseline, 0.0).feasible


@pytest.mark.gpu
def test_gpu_vectorized_kernel_wraps_like_torch_out_of_range():
    """Outside [0, 255] torch casts float -> int64 -> uint8 (wraps); the kernel must agree."""
    w = _cast("cuda")
    w.inputs["frames"].copy_(torch.linspace(-300.0, 600.0, w.inputs["frames"].numel(), device="cuda")
                             .view_as(w.inputs["frames"]))
    prepared = _run(CAST, "vectorized_kernel", w, {"block_size": 256, "vector_width": 4})
    assert torch.equal(prepared.fn(), w.inputs["frames"].to(torch.uint8))


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_gpu_fused_producer_reproduces_the_baseline(mode):
    w = _cast("cuda", frames=9)
    baseline = CAST.prepare(CAST.baseline_name, w, {}).fn()
    prepared = _run(CAST, "fused_producer", w, {"mode": mode})
    assert check_output(prepared.fn(), baseline, 0.0).feasible


# ---------------------------------------------------------------------------------------------
# Configs


@pytest.mark.parametrize("name, experiment", [("attention_backends", ATTENTION), ("output_cast", CAST)])
def test_config_names_registered_variants_and_applicable_cards(name, experiment, seed_report):
    conf = _conf(name)
    assert conf["module"] == f"experiments.{name}" and conf["name"] == experiment.name
    for variant, params in conf["space"].items():
        assert variant in experiment.variants and variant != experiment.baseline_name
        fn = experiment.variants[variant]
        assert set(params) <= set(inspect.signature(fn).parameters)
    from harness.run.selection import select_cards

    chosen = select_cards(seed_report, None, experiment, conf["default_cards"], "cpu")
    assert chosen and all(experiment.applies_to(card.op_kind) for card in chosen)


def test_bounds():
    cast, attention = _standard(CAST, _cast())[0], _standard(ATTENTION, _attention())[0]
    assert cast.bound().value == 0.0  # uint8 is exact: one LSB is a different rounding, not noise
    assert 2.5e-3 < attention.bound().value <= 2e-2  # above bf16 output rounding, far below a wrong key range
