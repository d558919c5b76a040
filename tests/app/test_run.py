"""The Hydra app end to end on the CPU, at a tiny scale."""

import json
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from harness.cards.model import load_report
from harness.cards.rules import NOT_ENOUGH
from harness.search import default_storage, make_storage
from harness.trial import torch_state

TINY = ["workload.cpu_scale=0.08", "timing.budget_s=0.05", "timing.drift_budget_s=0.02", "timing.confirm_rounds=1"]


def _run(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harness", f"hydra.run.dir={tmp_path}", *TINY, *overrides],
        capture_output=True, text=True, timeout=600,
    )


@pytest.mark.slow
def test_channels_last_end_to_end(tmp_path):
    proc = _run(tmp_path, "cards=[vae-480-conv3d-96to3k333t3-842ecd]")
    assert proc.returncode == 0, proc.stderr[-2000:]
    for name in ("baseline.json", "best.json", "diff.md", "diff.json", "summary.md", "optuna.log", "run.json",
                 "report.html"):
        assert (tmp_path / name).exists(), name
    best = load_report(tmp_path / "best.json")
    card = best.cards[0]
    assert card.id == "vae-480-conv3d-96to3k333t3-842ecd"
    assert card.extra["workload"]["scale"] == 0.08
    assert card.extra["correctness"]["feasible"] and card.extra["correctness"]["max_rel"] < 1e-4
    assert card.extra["memory"]["peak_bytes"] >= 0
    assert card.extra["metrics_source"] == "cpu_roofline_estimate"
    assert card.extra["torch_state"] == {**card.extra["torch_state"], **torch_state.PINNED}  # as pinned
    # A CPU roofline estimate has sm_pct and dram_pct only: a class when they settle it, else it says why not.
    assert card.kernels and (card.primary is not None or card.primary_rule.startswith(NOT_ENOUGH))
    diff = json.loads((tmp_path / "diff.json").read_text())["cards"][0]
    assert diff["speedup"] > 0 and diff["verdict"] in {"yes", "no", "not measurable"}
    trials = sorted((tmp_path / "trials" / card.id).glob("trial_*.json"))
    assert len(trials) == 3  # the exhaustive sampler covered the three variants once each
    study = optuna.load_study(study_name=f"vae_channels_last:{card.id}", storage=make_storage(f"{tmp_path}/optuna.log"))
    assert len(study.trials) == 3
    assert "outside measurement" in proc.stdout and str(tmp_path) in proc.stdout
    assert not (tmp_path / "worker.pid").exists()  # the worker ended with the run: no stale pid file
    assert "\r" not in proc.stderr  # no progress-bar redraws in a redirected log: plain lines instead
    # Lint finds no defect in the after-report: it is valid input for the next round.
    lint = subprocess.run([sys.executable, "-m", "harness.report", "lint", str(tmp_path / "best.json"), "--json"],
                          capture_output=True, text=True)
    assert json.loads(lint.stdout) == []

    resumed = _run(tmp_path, "cards=[vae-480-conv3d-96to3k333t3-842ecd]", "search.resume=true")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    study = optuna.load_study(study_name=f"vae_channels_last:{card.id}", storage=make_storage(f"{tmp_path}/optuna.log"))
    assert len(study.trials) == 3  # the space was covered: resume adds nothing and loses nothing


@pytest.mark.slow
def test_an_infeasible_variant_is_never_best(tmp_path):
    # A bound of 1e-9 x max(e_b, 2^-8) is below any rounding error a float32 or bf16 result can have
    # against the float64 reference, whatever bf16 math this CPU has: every variant is infeasible.
    space = "{dtype_layout: {compute_dtype: [float32], weight_layout: [kn]}, blas_library: {library: [cublas]}}"
    proc = _run(tmp_path, "experiment=dit_gemm_tiles", "cards=[dit-480-linear-m3n5120k256-ff7b7c]",
                "experiment.correctness.same_factor=1e-9", "~experiment.space", f"+experiment.space={space}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = (tmp_path / "summary.md").read_text()
    assert "no feasible variant" in summary
    assert "infeasible" in summary and "not drawn: blas_library (needs CUDA; device is cpu)" in summary
    kept = load_report(tmp_path / "best.json").cards
    assert len(kept) == 1 and kept[0].extra["harness"]["role"] == "baseline"  # the baseline is kept


@pytest.mark.slow
def test_bf16_conv_is_not_drawn_with_its_reason_on_a_cpu_without_bf16_math(tmp_path):
    import torch

    if torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported():
        pytest.skip("this CPU has bf16 math: the bf16 variants run here")
    proc = _run(tmp_path, "experiment=vae_bf16", "cards=[vae-480-conv3d-96to3k333t3-842ecd]")
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = (tmp_path / "summary.md").read_text()
    assert "- not drawn: low_precision (this CPU has no bf16 math" in summary and "no fast CPU kernel" in summary
    assert "no variant of the space can run on this device (not drawn): baseline kept" in summary
    assert not list((tmp_path / "trials" / "vae-480-conv3d-96to3k333t3-842ecd").glob("trial_*.json"))


@pytest.mark.slow
def test_a_new_run_keeps_its_studies_in_a_journal_and_an_older_folder_its_sqlite(tmp_path):
    """The storage of search.storage null: optuna.log (Optuna's journal) in a new run folder; optuna.db in a
    folder made before 2026-12-07 (when that was the default), which a resume keeps using."""
    new = tmp_path / "new"
    assert default_storage(new) == f"journal://{new.resolve()}/optuna.log"
    older = tmp_path / "older"
    older.mkdir()  # an explicit storage is opened before Hydra makes the run folder
    card = "vae-480-conv3d-96to3k333t3-842ecd"
    made = _run(older, f"cards=[{card}]", f"search.storage=sqlite:///{older}/optuna.db")  # as the old default did
    assert made.returncode == 0, made.stderr[-2000:]
    assert default_storage(older) == f"sqlite:///{older.resolve()}/optuna.db"
    resumed = _run(older, f"cards=[{card}]", "search.resume=true")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert not (older / "optuna.log").exists()
    study = optuna.load_study(study_name=f"vae_channels_last:{card}", storage=f"sqlite:///{older}/optuna.db")
    assert len(study.trials) == 3  # its studies found: the covered space adds nothing, loses nothing
    assert json.loads((older / "run.json").read_text())["storage"] == f"sqlite:///{older.resolve()}/optuna.db"


@pytest.mark.slow
def test_with_fewer_trials_than_the_space_no_trial_is_spent_on_a_cuda_only_variant_on_a_cpu(tmp_path):
    # 2 trials, 4 configurations of which 2 need CUDA: the default exhaustive search (seed 0) queued
    # blas_library for one of the two before, a trial spent on a skip; now it is not drawn.
    space = ("{blas_library: {library: [cublas, cublaslt]}, "
             "dtype_layout: {compute_dtype: [float32], weight_layout: [nk, kn]}}")
    card = "dit-480-linear-m3n5120k256-ff7b7c"
    proc = _run(tmp_path, "experiment=dit_gemm_tiles", f"cards=[{card}]", "search.n_trials=2",
                "~experiment.space", f"+experiment.space={space}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    study = optuna.load_study(study_name=f"dit_gemm_tiles:{card}", storage=make_storage(f"{tmp_path}/optuna.log"))
    assert [t.params["variant"] for t in study.trials] == ["dtype_layout", "dtype_layout"]
    summary = (tmp_path / "summary.md").read_text()
    assert "- not drawn: blas_library (needs CUDA; device is cpu)" in summary
    assert "skipped" not in summary


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["experiment=nope"], "unknown experiment 'nope'"),
        (["cards={stage: dit}"], "applies to conv3d"),
        (["cards=[no-such-card]"], "no card with id"),
        (["workload.scale=2"], "workload.scale=2"),
        (["search.n_trials=0", "cards=[vae-480-conv3d-96to3k333t3-842ecd]"], "n_trials=0"),
        (["experiment.correctness.same_factor=-1"], "same_factor=-1"),
        (["report=/nonexistent.json"], "no such file"),
        (["device=cuda"], "no CUDA device"),
        (["profiler=ncu"], "ncu not on PATH"),
    ],
)
def test_bad_input_exits_2_with_one_line(tmp_path, overrides, message):
    proc = _run(tmp_path, *overrides)
    assert proc.returncode == 2, (proc.returncode, proc.stderr[-1500:])
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_batched_time_is_restated_per_original_call():
    """The one per-call rate formula (harness.trial.measure.variant_facts), which the confirm's restated cards use."""
    from types import SimpleNamespace

    from harness.api.experiment import Prepared
    from harness.profile.timing import TimingResult
    from harness.trial.measure import variant_facts

    timing = TimingResult.from_samples([800.0], warmup=0, method="test")  # per invocation of 4 calls
    facts = variant_facts(Prepared(lambda: None, calls=4), SimpleNamespace(flops=2e9), timing)
    assert facts["per_call_us"] == 200.0
    assert facts["achieved_tflops"] == pytest.approx(2e9 / 200e-6 / 1e12)  # 10 TFLOP/s
