"""The report card's own check (harness.cards.card_check) and honest class labels (harness.cards.labels)."""

from __future__ import annotations

import json
import re

import pytest

from harness.cards.card_check import (
    NO,
    NOT_MEASURABLE,
    NOT_MEASURABLE_ESTIMATED,
    YES,
    card_check_text,
    check_name,
    judge_card_check,
    launch_waves,
    tail_waste,
)
from harness.cards.fields import (
    COMPUTE_BOUND,
    DRAM_BANDWIDTH_BOUND,
    L2_BANDWIDTH_BOUND,
    LATENCY_OR_OCCUPANCY_LIMITED,
    PARTIAL_WAVE_TAIL,
    UNRESOLVED,
)
from harness.cards.labels import class_label, class_source, evaluable_rules, flag_over_peak, transition
from harness.cards.model import Card, Kernel, default_report_path
from harness.cards.rules import CLASS_TEXT

REPORT_CHECKS = {
    "compare effective vs executed FLOPs": "effective_vs_executed",
    "compare waves and duration": "waves_and_duration",
    "compare lts bytes": "lts_bytes",
    "check bytes and time fall together": "bytes_and_time_fall",
    "Collect stall reasons (smsp__warp_issue_stalled_*) and l1tex/lts bytes": "stall_breakdown",
}


def _kernel(name: str = "k", extra: dict | None = None, **metrics: float | None) -> Kernel:
    return Kernel(name=name, metrics={"dur_us": 10.0, **metrics}, extra=extra or {})


def _card(kernels: list[Kernel], primary: str | None = COMPUTE_BOUND, nominal: float | None = 1e9,
          **extra) -> Card:
    counter = CLASS_TEXT[primary].counter_experiment if primary else CLASS_TEXT[UNRESOLVED].counter_experiment
    return Card(group="g", resolution="480x832", stage="dit", op="aten.linear.default",
                shape_parameters={"M": 3, "N": 5120, "K": 256}, kernels=kernels, nominal_mac_flops=nominal,
                summed_kernel_us=sum(k.metric("dur_us") or 0.0 for k in kernels),
                dominant_kernel=kernels[0].name if kernels else None, primary=primary,
                counter_experiment=counter, extra=extra)


def _measured(kernels: list[Kernel], source: str = "ncu", role: str = "trial", host: str = "gpu-1",
              device: str = "NVIDIA H200", variant: dict | None = None, **kw) -> Card:
    extra = {"metrics_source": source, "environment": {"device_name": device, "hostname": host},
             "harness": {"role": role, "variant": "v"}, "variant": variant or {}}
    return _card(kernels, **kw, **extra)


def _report_card(primary: str) -> Card:
    return _card([_kernel()], primary=primary)


# ---------------------------------------------------------------------------------------------
# Texts


def test_every_check_text_of_the_shipped_report_maps_to_a_judge(seed_report):
    raw = default_report_path().read_text(encoding="utf-8")
    texts = {json.loads(f'"{value}"').rsplit("; ", 1)[-1]
             for value in re.findall(r'"counter_experiment":\s*"((?:[^"\\]|\\.)*)"', raw)}
    assert texts == set(REPORT_CHECKS)
    for card in seed_report.cards:
        text = card_check_text(card)
        assert text in REPORT_CHECKS and check_name(text) == REPORT_CHECKS[text]
        assert judge_card_check(card, card, card, None).name == REPORT_CHECKS[text]


def test_a_text_without_a_judge_maps_to_none():
    card = _report_card(LATENCY_OR_OCCUPANCY_LIMITED)
    assert card_check_text(card) == "compare achieved occupancy, waves and duration"
    result = judge_card_check(card, card, card, "FASTER")
    assert result.name is None and result.verdict == NOT_MEASURABLE
    card.counter_experiment = None
    assert card_check_text(card) is None
    assert judge_card_check(card, card, card, "FASTER").text == ""


# ---------------------------------------------------------------------------------------------
# effective vs executed FLOPs


def _with_ratio(ratio: float | None, role: str = "trial") -> Card:
    return _measured([_kernel()], role=role, variant={} if ratio is None else {"executed_over_nominal": ratio})


@pytest.mark.parametrize("before, after, time, verdict", [
    (1.0, 1.0, "FASTER", YES),
    (1.25, 1.0, "FASTER", YES),
    (1.0, 1.094, "FASTER", NO),  # faster, but by executing more than the card's nominal work
    (1.0, 1.0, "SLOWER", NO),
    (1.0, 1.0, "SAME", NO),
    (1.0, 1.0, "UNCONFIRMED", NOT_MEASURABLE),
    (1.0, 1.0, None, NOT_MEASURABLE),
    (1.0, 1.094, None, NO),
    (None, None, "FASTER", NOT_MEASURABLE),
    (1.0, None, "FASTER", NOT_MEASURABLE),
])
def test_effective_vs_executed(before, after, time, verdict):
    report = _report_card(COMPUTE_BOUND)
    result = judge_card_check(report, _with_ratio(before, "baseline"), _with_ratio(after), time)
    assert result.name == "effective_vs_executed"
    assert result.verdict == verdict, result.detail


def test_effective_vs_executed_against_a_plain_op_without_an_executed_figure():
    report = _report_card(COMPUTE_BOUND)
    plain = _with_ratio(None, role="baseline")
    assert judge_card_check(report, plain, _with_ratio(1.0), "FASTER").verdict == YES
    assert judge_card_check(report, report, _with_ratio(1.0), "FASTER").verdict == YES  # report card: plain op
    padded = judge_card_check(report, plain, _with_ratio(1.2), "FASTER")
    assert padded.verdict == NOT_MEASURABLE and "1.200" in padded.detail
    # A before that is itself a variant is not the plain op: its padding is unknown.
    assert judge_card_check(report, _with_ratio(None), _with_ratio(1.0), "FASTER").verdict == NOT_MEASURABLE


def test_executed_flops_from_ncu_counters_win_over_the_launch_arithmetic():
    counters = {"smsp__sass_thread_inst_executed_op_ffma_pred_on.sum": 1e8,  # 2e8 FLOPs
                "smsp__sass_thread_inst_executed_op_fadd_pred_on.sum": 1e8,
                "sm__ops_path_tensor_src_bf16_dst_fp32.sum": 1e9,
                "sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_off.sum": 1e9,  # a half of the above
                "stall_wait": 3.0}
    before = _with_ratio(1.0, "baseline")
    after = _measured([_kernel(extra={"ncu_counters": counters})], variant={"executed_over_nominal": 1.0})
    result = judge_card_check(_report_card(COMPUTE_BOUND), before, after, "FASTER")
    assert result.verdict == NO and "1.300 (ncu instruction counters)" in result.detail


# ---------------------------------------------------------------------------------------------
# waves and duration


def _waves_card(waves: float | None, estimated: bool = False, **kw) -> Card:
    extra = {"estimated_fields": ["waves"]} if estimated else {}
    return _measured([_kernel(extra=extra, waves=waves)], **kw)


@pytest.mark.parametrize("before, after, time, verdict", [
    (0.61, 0.98, "FASTER", YES),   # tail waste 39% -> 2%
    (0.61, 0.98, "SAME", NO),
    (0.61, 1.22, "FASTER", NO),    # more waves, but the last one is 61% idle
    (0.61, None, "FASTER", NOT_MEASURABLE),
])
def test_waves_and_duration(before, after, time, verdict):
    result = judge_card_check(_report_card(PARTIAL_WAVE_TAIL), _waves_card(before), _waves_card(after), time)
    assert result.name == "waves_and_duration" and result.verdict == verdict, result.detail


def test_estimated_waves_are_not_measurable_but_shown():
    result = judge_card_check(_report_card(PARTIAL_WAVE_TAIL), _waves_card(0.61),
                              _waves_card(0.98, estimated=True, source="torch_cuda_trace"), "FASTER")
    assert result.verdict == NOT_MEASURABLE_ESTIMATED
    assert "0.61 -> 0.98" in result.detail and "trace estimate" in result.detail


def test_waves_from_a_planted_launch_on_132_sms():
    # 128 threads, 128 registers: 4 warps per sub-partition -> 16 warps -> 4 blocks by registers;
    # 64 KiB dynamic + 1 KiB reserved = 66560 B -> floor(233472 / 66560) = 3 blocks by shared memory.
    facts = {"tiles": 200, "tile": {"num_warps": 4}, "regs_per_thread": 128, "smem_bytes_compiled": 65536}
    value, basis = launch_waves(facts)
    assert value == pytest.approx(200 / (3 * 132))
    assert "132 SMs" in basis and "3 blocks per SM" in basis
    assert tail_waste(value) == pytest.approx(1 - 200 / 396)
    missing, why = launch_waves({"grid": 1280, "block_size": 128})  # the CuPy GEMV records no registers
    assert missing is None and "registers per thread" in why
    after = _measured([_kernel()], variant=facts)  # no kernel waves: the launch gives them
    result = judge_card_check(_report_card(PARTIAL_WAVE_TAIL), _waves_card(0.6), after, "FASTER")
    assert result.verdict == NO and "0.51" in result.detail  # tail waste 40% -> 49%
    result = judge_card_check(_report_card(PARTIAL_WAVE_TAIL), _waves_card(0.2), after, "FASTER")
    assert result.verdict == YES  # 80% -> 49%


# ---------------------------------------------------------------------------------------------
# lts bytes, DRAM bytes


def _lts_card(mb: float | None, estimated: bool = False) -> Card:
    extra = {} if mb is None else {"ncu_counters": {"lts_mb": mb}}
    if estimated:
        extra["estimated_fields"] = ["lts_mb"]
    return _measured([_kernel(extra=extra, lts_mb=mb if estimated else None)])


@pytest.mark.parametrize("before, after, time, estimated, verdict", [
    (100.0, 60.0, "FASTER", False, YES),
    (100.0, 120.0, "FASTER", False, NO),
    (100.0, 60.0, "SLOWER", False, NO),
    (100.0, None, "FASTER", False, NOT_MEASURABLE),
    (100.0, 60.0, "FASTER", True, NOT_MEASURABLE_ESTIMATED),
])
def test_lts_bytes(before, after, time, estimated, verdict):
    report = _report_card(L2_BANDWIDTH_BOUND)
    result = judge_card_check(report, _lts_card(before), _lts_card(after, estimated), time)
    assert result.name == "lts_bytes" and result.verdict == verdict, result.detail


def _dram_card(read: float | None, write: float | None, source: str = "ncu", calls: int = 1) -> Card:
    extra = {"estimated_fields": ["dram_read_mb", "dram_write_mb"]} if source == "cpu_roofline_estimate" else {}
    return _measured([_kernel(extra=extra, dram_read_mb=read, dram_write_mb=write)], source=source,
                     variant={"calls": calls})


@pytest.mark.parametrize("after, time, verdict", [
    (_dram_card(200.0, 10.0), "FASTER", YES),
    (_dram_card(400.0, 40.0, calls=4), "FASTER", YES),  # 110 MB per original call of a batched GEMM
    (_dram_card(300.0, 20.0), "FASTER", NO),
    (_dram_card(200.0, 10.0), "INCONCLUSIVE", NOT_MEASURABLE),
    (_dram_card(None, None), "FASTER", NOT_MEASURABLE),
])
def test_bytes_and_time_fall(after, time, verdict):
    before = _dram_card(300.0, 20.0)
    result = judge_card_check(_report_card(DRAM_BANDWIDTH_BOUND), before, after, time)
    assert result.name == "bytes_and_time_fall" and result.verdict == verdict, result.detail


def test_a_cpu_roofline_estimate_of_dram_bytes_is_not_a_measurement():
    report = _report_card(DRAM_BANDWIDTH_BOUND)
    report.kernels[0].metrics.update(dram_read_mb=300.0, dram_write_mb=20.0)
    after = _dram_card(100.0, 5.0, source="cpu_roofline_estimate")
    result = judge_card_check(report, report, after, "FASTER")
    assert result.verdict == NOT_MEASURABLE_ESTIMATED
    assert "320.000 -> 105.000 MB" in result.detail and "cpu estimate" in result.detail


# ---------------------------------------------------------------------------------------------
# stall reasons


@pytest.mark.parametrize("stalls, verdict", [
    ({"dominant": "long_scoreboard", "share": 0.62, "decisive": True, "meaning": "memory latency"}, YES),
    ({"dominant": "wait", "share": 0.31, "decisive": False}, NO),
    ({"dominant": None, "note": "no warp-stall counters: only ncu collects them"}, NOT_MEASURABLE),
    (None, NOT_MEASURABLE),  # an estimate has no stall figures at all, so no "(estimated)" case exists
])
def test_stall_breakdown(stalls, verdict):
    report = _report_card(UNRESOLVED)
    after = _measured([_kernel(extra={"ncu_counters": {"lts_mb": 12.5}})], primary=UNRESOLVED)
    if stalls is not None:
        after.extra["stalls"] = stalls
    result = judge_card_check(report, report, after, "SAME")
    assert result.name == "stall_breakdown" and result.verdict == verdict
    assert "lts_mb 12.500" in result.detail


# ---------------------------------------------------------------------------------------------
# Labels


def _cpu_card(primary: str = COMPUTE_BOUND, host: str = "cpu-1", **metrics) -> Card:
    kernel = _kernel(name="aten::mm", extra={"metrics_source": "cpu_roofline_estimate",
                                             "estimated_fields": ["sm_pct", "dram_pct"]}, **metrics)
    return _measured([kernel], source="cpu_roofline_estimate", host=host, device="Intel Xeon", primary=primary)


def test_class_source_and_label():
    report = _report_card(COMPUTE_BOUND)
    assert class_source(report) == "ncu" and class_label(report) == COMPUTE_BOUND
    assert class_label(_cpu_card()) == "compute_bound (cpu estimate)"
    trace = _measured([_kernel()], source="torch_cuda_trace", primary=DRAM_BANDWIDTH_BOUND)
    assert class_source(trace) == "trace estimate" and class_label(trace) == "dram_bandwidth_bound (trace estimate)"
    assert class_label(_measured([_kernel()], source="ncu")) == COMPUTE_BOUND
    assert class_label(_report_card(None)) == "none"
    unprofiled = _measured([], source=None, primary=None)
    assert class_source(unprofiled) == "not profiled"


def test_evaluable_rules_on_an_estimate():
    # sm_pct 80 decides compute_bound whatever tensor_pct is, and rules out the quiet latency class;
    # dram_pct is known; L2 and the tail need GPU fields the CPU has not.
    high = _cpu_card(sm_pct=80.0, dram_pct=10.0)
    assert evaluable_rules(high) == [COMPUTE_BOUND, DRAM_BANDWIDTH_BOUND, LATENCY_OR_OCCUPANCY_LIMITED]
    assert evaluable_rules(_cpu_card(sm_pct=30.0, dram_pct=10.0)) == [DRAM_BANDWIDTH_BOUND]
    full = _kernel(sm_pct=10.0, tensor_pct=0.0, dram_pct=10.0, l2_pct=10.0, warps_active_pct=50.0, waves=2.0,
                   sm_cycles_active=90.0, cycles_elapsed=100.0)
    assert evaluable_rules(_card([full])) == [COMPUTE_BOUND, DRAM_BANDWIDTH_BOUND, L2_BANDWIDTH_BOUND,
                                              PARTIAL_WAVE_TAIL, LATENCY_OR_OCCUPANCY_LIMITED]
    lost = _report_card(COMPUTE_BOUND)
    lost.dominant_kernel = "not listed"
    assert evaluable_rules(lost) == []


def test_flag_over_peak():
    flags = flag_over_peak(_cpu_card(sm_pct=132.9, dram_pct=40.0))
    assert len(flags) == 1 and flags[0].startswith("sm_pct 132.9 > 100: an estimate above peak, not a measurement")
    measured = _card([_kernel(dram_pct=104.0, l2_hit_pct=101.3)])
    flags = flag_over_peak(measured)
    assert len(flags) == 1 and flags[0].startswith("dram_pct 104.0 > 100") and "not a reading" in flags[0]
    assert flag_over_peak(_card([_kernel(sm_pct=99.0)])) == []


def test_transition_draws_one_arrow_only_within_one_source_and_machine():
    report_a, report_b = _report_card(COMPUTE_BOUND), _report_card(PARTIAL_WAVE_TAIL)
    assert transition(report_a, report_b) == "compute_bound -> partial_wave_tail"
    here = _cpu_card(primary=DRAM_BANDWIDTH_BOUND)
    assert transition(report_a, here, "H200") == ("report: compute_bound (ncu, H200); "
                                                  "here: dram_bandwidth_bound (cpu estimate, Intel Xeon on cpu-1)")
    # The report's device is what the report says (harness.cards.reproduce.reported_device), never assumed.
    assert transition(report_a, here, None).startswith("report: compute_bound (ncu, the report names no device); ")
    assert transition(here, _cpu_card()) == "dram_bandwidth_bound -> compute_bound (cpu estimate)"
    other_host = transition(here, _cpu_card(host="cpu-2"))
    assert "->" not in other_host and "cpu-1" in other_host and "cpu-2" in other_host
    ncu = _measured([_kernel()], source="ncu", host="gpu-1")
    trace = _measured([_kernel()], source="torch_cuda_trace", host="gpu-1")
    assert transition(ncu, trace) == ("before: compute_bound (ncu, NVIDIA H200 on gpu-1); "
                                      "after: compute_bound (trace estimate, NVIDIA H200 on gpu-1)")
    assert transition(ncu, _measured([_kernel()], source="ncu", host="gpu-1")) == "compute_bound -> compute_bound"
