from collections import Counter

from harness.cards.kernel_names import is_damaged_name, is_merged_name
from harness.cards.lint import lint_report
from harness.cards.model import parse_report


def _codes(findings):
    return Counter(f.code for f in findings)


def test_seed_defects_are_all_named(seed_report):
    result = lint_report(seed_report)
    codes = _codes(result.findings)
    print("lint findings on the seed:", dict(codes))
    assert codes["damaged_entry"] == 14
    assert codes["dominant_missing"] == 6
    assert codes["merged_name"] == 3
    assert codes["shape_parameters_encoded"] == 10
    assert codes["primary_missing"] == 9
    assert codes["duplicate_group"] == 3
    assert codes["null_metrics"] == 10  # the attention kernels without launch or cycle data
    assert codes["sum_mismatch"] == 3  # truncated lists whose dominant is missing
    scaled_fields = Counter(f.field for f in result.findings if f.code == "unit_scaled")
    assert scaled_fields["dur_us"] == 25  # five 96/192/384-channel cards written in ms
    assert scaled_fields["dram_read_mb"] == 10
    assert scaled_fields["smem_static_b"] == 82


def test_duration_in_ms_is_corrected_by_the_clock(seed_report):
    result = lint_report(seed_report)
    card = result.normalized.card("vae-480-conv3d-96to96k333t6-13c157")
    durations = [k.metric("dur_us") for k in card.kernels]
    assert abs(sum(durations) - card.summed_kernel_us) < 0.01
    fprop = next(k for k in card.kernels if "fprop" in k.name)
    assert abs(fprop.metric("dur_us") - 1340.0) < 1e-6
    clock = fprop.metric("cycles_elapsed") / fprop.metric("dur_us")
    assert 1500 < clock < 2100
    recorded = card.extra["normalization"]
    assert any(c["field"] == "dur_us" and c["before"] == 1.34 for c in recorded)


def test_byte_counts_in_gb_are_corrected(seed_report):
    card = lint_report(seed_report).normalized.card("vae-704-conv3d-96to96k333t6-b28294")
    transpose = card.kernels[0]
    assert abs(transpose.metric("dram_read_mb") - 523.785) < 1e-6
    assert abs(transpose.metric("dram_write_mb") - 505.793792) < 1e-6  # untouched


def test_ambiguous_values_are_left_alone_and_reported(seed_report):
    result = lint_report(seed_report)
    suspects = [f for f in result.findings if f.code == "unit_suspect"]
    assert [f.field for f in suspects] == ["dram_write_mb"]
    card = result.normalized.card(suspects[0].card)
    kernel = next(k for k in card.kernels if k.name == suspects[0].kernel)
    assert kernel.metric("dram_write_mb") == 0.000768


def test_damaged_entry_recovered_from_evidence(seed_report):
    card = lint_report(seed_report).normalized.card("output-480-cast-f18982")
    kernel = card.kernels[0]
    assert kernel.name == "void unrolled_elementwise_kernel"
    assert kernel.metric("dur_us") == card.summed_kernel_us  # inferred from the card sum, and said
    assert kernel.extra["dur_us_inferred"] is True
    assert kernel.metric("sm_pct") == 55.696


def test_name_heuristics():
    assert is_damaged_name("void flash_fwd_kernel= 60% and no clear occupancy/tail signature")
    assert not is_damaged_name("void at::elementwise_kernel<128, 2, void at::gpu_kernel_impl_nocast>(x)")
    assert is_merged_name("void cask_plugin__5x_cudnn::init_device_workspace_kernel(cudnn::nhwc2nchw_params_t, T1)")
    assert not is_merged_name("void cudnn::nchwToNhwcKernel(cudnn::nchw2nhwc_params_t, const T1 *, T2 *)")


def test_summary_mismatch_detected(seed_report):
    raw = seed_report.to_dict()
    raw["summary"]["compute_bound"] += 1
    raw["by_stage"]["vae"]["compute_bound"] -= 1
    findings = lint_report(parse_report(raw)).findings
    mismatches = [f for f in findings if f.code == "summary_mismatch"]
    assert {f.field for f in mismatches} == {"summary", "by_stage"}
    assert not [f for f in lint_report(seed_report).findings if f.code == "summary_mismatch"]


def test_clean_card_has_no_findings():
    raw = {"cards": [{
        "group": "g", "resolution": "480x832", "stage": "dit", "op": "aten.linear.default",
        "shape_parameters": {"M": 1, "N": 1, "K": 1}, "input_sha256": "ab", "nominal_mac_flops": 2,
        "summed_kernel_us": 10.0, "dominant_kernel": "k", "primary": "compute_bound",
        "kernels": [{"kernel": "k", "classification": "compute_bound", "metrics": {
            "dur_us": 10.0, "sm_pct": 70.0, "tensor_pct": 70.0, "dram_pct": 10.0, "l2_pct": 10.0,
            "warps_active_pct": 20.0, "max_warps_pct": 20.0, "waves": 2.0, "grid": 264.0, "block": 128.0,
            "regs": 64.0, "smem_dyn_kb": 1.0, "smem_static_b": 0.0, "l2_hit_pct": 50.0,
            "sm_cycles_active": 18000.0, "cycles_elapsed": 19000.0, "dram_read_mb": 4.0,
            "dram_write_mb": 0.8, "occ_limit_regs": 4.0, "occ_limit_smem": 8.0}}],
    }], "summary": {"compute_bound": 1}, "by_stage": {"dit": {"compute_bound": 1}}}
    assert lint_report(parse_report(raw)).findings == []
