"""`python -m harness.capture` end to end on the CPU: bad input, a capture whose cards the harness runs on
their captured inputs, and --apply."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from harness.capture.profiling import reprofile_command
from harness.cards.model import load_report, save_report
from harness.workloads.inputs import find_and_load

ROOT = Path(__file__).resolve().parents[2]


def _capture(*args: str, cwd: Path = ROOT, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "harness.capture", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


@pytest.mark.parametrize("factory, message", [
    ("no_such_module_xyz:make", "cannot import 'no_such_module_xyz': ModuleNotFoundError"),
    ("tests.capture.models:nope", "has no function 'nope'"),
    ("tests.capture.models:raises", "raised RuntimeError: the checkpoint is missing at models.py:"),
    ("tests.capture.models:not_a_pair", "must return (model, example_inputs)"),
    ("tests.capture.models:no_ops", "called no torch operator"),
    ("tests.capture.models:varies", "the capture needs a forward that repeats"),
    ("tests.capture.models", "give MODULE:FACTORY"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, factory, message):
    proc = _capture(factory, "--out", str(tmp_path / "out"), "--no-profile")
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_usage_mistakes_are_one_line(tmp_path):
    for args in (["tests.capture.models:conv_stack"], ["tests.capture.models:conv_stack", "--out", str(tmp_path),
                                                      "--top", "0"]):
        proc = _capture(*args)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_the_reprofile_command_names_the_backend_and_captured_inputs(tmp_path):
    command = reprofile_command(tmp_path / "captured.json", tmp_path / "inputs", ["a-1", "b-2"], tmp_path / "rp",
                                "cuda", "ncu")
    assert command[1:4] == ["-m", "harness", "experiment=reprofile"]
    assert f"inputs.dir={tmp_path / 'inputs'}" in command and "profiler=ncu" in command and "device=cuda" in command
    assert "cards=[a-1,b-2]" in command and "workload.scale=1.0" in command  # captured inputs, never sliced


@pytest.mark.slow
def test_a_captured_model_runs_through_the_harness_on_its_captured_inputs(tmp_path):
    """docs/capture.md's three commands on a model outside the package: capture, then auto on the cards."""
    out = tmp_path / "small"
    proc = _capture("examples.capture_model:make", "--out", str(out), "--top", "6")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = load_report(out / "report.json")
    written = json.loads((out / "report.json").read_text())
    record = written["capture"]
    assert "device" not in written  # captured on a CPU: it declares no GPU for a run's baselines to reproduce it on
    assert record["groups"] >= 10 and record["cards"] == len(report.cards) == 6 and not record["unprofiled"]
    assert 0 < record["cards_share_of_forward"] <= record["ops_share_of_forward"] <= 1  # shares of one forward
    groups = json.loads((out / "groups.json").read_text())
    assert sum(g["share_of_forward"] for g in groups) <= 1 + 1e-5  # each rounded to 6 digits
    assert "How the shares are measured" in (out / "capture.md").read_text()
    linear = {(c.shape_parameters["M"], c.shape_parameters["N"], c.shape_parameters["K"])
              for c in report.cards if c.op_kind == "linear"}
    # examples/capture_model.py: 2 x 96 tokens of width 64, QKV 192, FFN 256.
    assert linear <= {(192, 192, 64), (192, 64, 64), (192, 256, 64), (192, 64, 256)} and linear
    for card in report.cards:
        # Profiled and classified by the rules; a card whose dominant kernel the rules cannot settle (time missing
        # from its kernel list under a loaded CPU, say) has no primary, as the shipped report's such cards do.
        assert card.kernels and card.counter_experiment and card.status in ("classified", "unresolved"), (
            card.id, card.primary, card.extra.get("classification_note"), [k.name for k in card.kernels])
        assert card.extra["metrics_source"] == "cpu_roofline_estimate"  # estimates on a CPU, labelled so
        captured, why = find_and_load(out / "inputs", card.input_sha256)  # hash-verified by the loader
        assert captured is not None, why
        assert card.extra["replay"]["input_source"].startswith("captured:")
    lint = subprocess.run([sys.executable, "-m", "harness.report", "lint", str(out / "report.json")],
                          capture_output=True, text=True, cwd=ROOT)
    assert lint.returncode in (0, 1), lint.stdout + lint.stderr
    assert "capture.md" in {p.name for p in out.iterdir()} and "cards cover" in proc.stdout

    run = subprocess.run(
        [sys.executable, "-m", "harness", "experiment=auto", f"report={out / 'report.json'}",
         f"inputs.dir={out / 'inputs'}", f"cards=[{','.join(c.id for c in report.cards)}]",
         f"hydra.run.dir={tmp_path / 'auto'}", "search.n_trials=2",
         "timing.budget_s=0.05", "timing.drift_budget_s=0.02", "timing.confirm_rounds=2", "workload.cpu_scale=1.0"],
        capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = (tmp_path / "auto" / "summary.md").read_text()
    assert all(f"| `{card.id}` |" in summary for card in report.cards)  # each card planned: experiments or why not
    measured = [load_report(path).cards[0] for path in (tmp_path / "auto").glob("*/trials/*/baseline.json")]
    assert measured and all(c.extra["workload"]["input_source"].startswith("captured:") for c in measured)
    # What the capture said of each card stays on its measured cards: a replayed op stays one (a round 2 from
    # best.json builds it again), and `capture --apply` predicts from its share of the forward.
    for card in measured:
        captured_card = report.card(card.id)
        assert card.op_kind == captured_card.op_kind and card.extra["capture"] == captured_card.extra["capture"]
    assert any(card.op_kind == "replay" for card in measured)


def _best_with(report_path: Path, out: Path, carries: dict, share: float, speedup: float) -> Path:
    """A planted best.json: the first card adopted a variant carrying `carries` at `speedup`, the second a kernel
    choice that carries nothing."""
    report = load_report(report_path)
    first, second = report.cards[0], report.cards[1]
    first.extra["capture"]["share_of_forward"] = share
    first.extra["applied"] = [{"experiment": "vae_channels_last", "module": "experiments.vae_channels_last",
                               "variant": "channels_last_3d", "params": {}, "carries": carries, "speedup": speedup}]
    second.extra["applied"] = [{"experiment": "vae_conv_kernels", "module": "experiments.vae_conv_kernels",
                                "variant": "native_cpu", "params": {}, "carries": {}, "speedup": 1.3}]
    path = out / "best.json"
    save_report(report, path)
    return path


@pytest.mark.slow
def test_apply_times_the_whole_forward_before_and_after(tmp_path):
    out = tmp_path / "conv"
    proc = _capture("tests.capture.models:conv_stack", "--out", str(out), "--no-profile", "--top", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    carries = {"input": {"memory_format": "channels_last_3d"}, "weight": {"memory_format": "channels_last_3d"}}
    best = _best_with(out / "report.json", tmp_path, carries, share=0.6, speedup=1.5)
    applied = _capture("tests.capture.models:conv_stack", "--out", str(out), "--apply", str(best), "--rounds", "3",
                       "--budget-s", "0.05")
    assert applied.returncode == 0, applied.stderr[-2000:]
    result = json.loads((out / "applied.json").read_text())
    assert result["memory_formats"] == ["channels_last_3d"] and len(result["applied"]) == 1
    assert "native_cpu" in result["not_applicable"][0] and "not a property of the model" in result["not_applicable"][0]
    # Amdahl over the one applied card: 60% of the forward at 1.5x.
    assert math.isclose(result["predicted_speedup"], 1 / (0.4 + 0.6 / 1.5))
    assert result["verdict"] in {"FASTER", "SLOWER", "SAME", "INCONCLUSIVE"}
    # The confirm rounds' loop and rule: at least the 3 rounds asked for, each side's lower quartile per round.
    rounds, before, after = result["rounds_run"], result["before_rounds"], result["after_rounds"]
    assert 3 <= rounds <= 9 and len(before["low_us"]) == len(after["low_us"]) == rounds
    assert result["max_rel_output_change"] < 1e-5  # a layout change leaves the output as it was
    assert "whole forward:" in applied.stdout and "predicted" in applied.stdout


def test_apply_refuses_conflicting_dtypes(tmp_path):
    from harness.capture.apply import model_change
    from harness.capture.factory import CaptureError
    from harness.cards.model import Card, Report

    cards = [Card(group=f"g{i}", resolution=None, stage="s", op="aten.conv3d.default", shape_parameters={},
                  kernels=[], extra={"applied": [{"experiment": "vae_bf16", "module": "m", "variant": "low_precision",
                                                  "carries": {"input": {"dtype": dtype}}}]})
             for i, dtype in enumerate(("bfloat16", "float16"))]
    with pytest.raises(CaptureError, match="different dtypes"):
        model_change(Report(cards=cards))


@pytest.mark.gpu
def test_a_capture_on_a_gpu_declares_that_gpu(tmp_path):
    """A run's baselines reproduce a captured report only on the GPU it was captured on (harness.cards.reproduce)."""
    import torch

    out = tmp_path / "conv"
    proc = _capture("tests.capture.models:conv_stack", "--out", str(out), "--device", "cuda", "--no-profile",
                    "--top", "2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads((out / "report.json").read_text())["device"] == torch.cuda.get_device_name(0)


@pytest.mark.slow
def test_a_cpu_capture_runs_through_auto_as_captured_and_judged_on_its_own_device(tmp_path):
    """The issue's done-when on an r3d-like model: its in-place calls are cards, the printed next: command runs its
    cards at scale 1 with the capture's thread setting, the hottest card by share is measured, and no summary or
    diff names an H200 (a CPU capture names its CPU)."""
    out = tmp_path / "r3d"
    proc = _capture("tests.capture.models:r3d_like", "--out", str(out), "--top", "8", "--threads", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = load_report(out / "report.json")
    ops = {c.op for c in report.cards}
    assert {"aten.relu_.default", "aten.add_.Tensor"} <= ops  # ReLU(inplace=True) and out += identity
    record = report.extra["capture"]
    assert record["threads"] == 1 and record["forwards"] >= 3 and "device" not in json.loads(
        (out / "report.json").read_text())
    command = next(line for line in proc.stdout.splitlines() if line.startswith("next: "))[len("next: "):]
    assert command.endswith("timing.cpu_threads=1") and "scale" not in command
    run = subprocess.run([*command.replace("python", sys.executable, 1).split(), f"hydra.run.dir={tmp_path / 'auto'}",
                          "search.n_trials=2", "timing.budget_s=0.05", "timing.drift_budget_s=0.02",
                          "timing.confirm_rounds=2"], capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    hottest = max(report.cards, key=lambda c: c.extra["capture"]["share_of_forward"])
    measured = [load_report(path).cards[0] for path in (tmp_path / "auto").glob("*/trials/*/baseline.json")]
    assert hottest.id in {c.id for c in measured}
    assert all(c.extra["workload"]["scale"] == 1.0 for c in measured)
    pages = [*(tmp_path / "auto").glob("**/summary.md"), *(tmp_path / "auto").glob("**/diff.md")]
    assert pages and not [p for p in pages if "H200" in p.read_text()]
