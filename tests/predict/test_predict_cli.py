"""`python -m harness.report predict` on the shipped report, and the facts it reads without importing experiments."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from harness.cards.lint import lint_report
from harness.cards.model import load_report
from harness.cards.rules import classify_report
from harness.hardware.gpu_peaks import lookup
from harness.predict.command import predict_report, print_rows
from harness.predict.device import DeviceError, gpu_device
from harness.predict.plan import shipped_experiments
from harness.report.cli import main


@pytest.fixture(scope="module")
def h200_rows() -> list[dict]:
    out = io.StringIO()
    print_rows(predict_report(None, "H200"), out, as_json=True)
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def report():
    return classify_report(lint_report(load_report(None)).normalized)


def test_every_conv3d_card_and_every_m3_linear_gets_its_rows_with_interval_and_basis(h200_rows, report):
    conv3d = {c.id for c in report.cards if c.op_kind == "conv3d"}
    m3 = {c.id for c in report.cards if c.op_kind == "linear" and c.shape_parameters.get("M") == 3}
    assert len(conv3d) == 34 and len(m3) == 3
    for experiment, configs in (("vae_channels_last", 3), ("vae_bf16", 4)):
        rows = [r for r in h200_rows if r["experiment"] == experiment]
        assert {r["card"] for r in rows} == conv3d and len(rows) == configs * len(conv3d)
    batched = [r for r in h200_rows if r["experiment"] == "dit_small_m_batching" and r["variant"] == "batched"
               and r["card"] in m3]
    assert len(batched) == 5 * len(m3)  # k = 2, 4, 5, 8, 20
    for r in [*batched, *(r for r in h200_rows if r["experiment"] in ("vae_channels_last", "vae_bf16"))]:
        assert r["device"] == "H200" and r["speedup"] > 0 and r["basis"]
        low, high = r["interval"]
        assert low <= r["speedup"] <= high and r["interval_from"]


def test_a_row_without_a_number_says_why_and_has_no_interval(h200_rows):
    nulls = [r for r in h200_rows if r["speedup"] is None]
    assert nulls and all(r["interval"] is None and r["saving_us"] is None and r["basis"] for r in nulls)


def test_the_report_device_is_the_default_and_the_answer_is_the_report_cards_arithmetic(h200_rows, report):
    """842ecd's conversions are the report's 70.3 + 3.2 + 6.5 us of its 284.0: channels_last_3d removes them all."""
    card = report.card("vae-480-conv3d-96to3k333t3-842ecd")
    conversions = sum(k.metric("dur_us") or 0 for k in card.kernels if "Nhwc" in k.name or "Nchw" in k.name)
    row = next(r for r in h200_rows if r["card"] == card.id and r["variant"] == "channels_last_3d")
    assert row["speedup"] == pytest.approx(card.summed_kernel_us / (card.summed_kernel_us - conversions))
    default = predict_report(None, None)
    assert {r.device for r in default} == {"H200"}


@pytest.mark.parametrize(("argv", "message"), [(["predict", "--device", "B9000"], "not in the GPU peak table"),
                                               (["predict", "no/such/report.json"], "no/such/report.json")])
def test_bad_input_is_one_error_line_and_exit_2(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0]


def test_cpu_without_measured_peaks_says_how_to_get_them(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    assert main(["predict", "--device", "cpu"]) == 2
    assert "run `python -m harness` once" in capsys.readouterr().err


def test_the_text_table_lists_the_numbers_and_counts_the_rest():
    proc = subprocess.run([sys.executable, "-m", "harness.report", "predict"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "configurations predicted on H200" in proc.stdout and "without a number" in proc.stdout


def test_a_gpu_peak_range_spans_its_practical_and_datasheet_values():
    h200 = gpu_device("NVIDIA H200")
    table = lookup("H200")
    assert h200.compute["bf16_tflops"].value == table.practical["bf16_tflops"] * 1e12
    assert h200.compute["bf16_tflops"].high == table.datasheet["bf16_tflops"] * 1e12
    # fp16 runs on bf16's tensor pipe at its datasheet rate: the table's practical bf16 value stands for it.
    assert h200.compute["fp16_tflops"].value == h200.compute["bf16_tflops"].value
    assert h200.bandwidth.low == 4.3e12 and h200.bandwidth.high == 4.8e12
    with pytest.raises(DeviceError):
        gpu_device("RTX nothing")


def test_experiment_facts_read_from_source_are_the_experiments_own():
    """op kinds, classes and workload dtype as `auto` gets them from the imported module (harness.api.experiment)."""
    from harness.api.experiment import load_experiment

    for plan in shipped_experiments():
        module = {"dit_gemm_tiles": "experiments.dit_gemm_tiles"}.get(plan.name, f"experiments.{plan.name}")
        experiment = load_experiment(module)
        assert (plan.op_kinds, plan.classes, plan.workload_dtype) == (
            tuple(experiment.op_kinds), tuple(experiment.classes), experiment.workload_dtype), plan.name


def test_the_batching_skip_rule_is_the_experiments():
    from experiments import dit_small_m_batching
    from harness.predict import batching

    assert batching.MIN_WEIGHT_SHARE == dit_small_m_batching.MIN_WEIGHT_SHARE
