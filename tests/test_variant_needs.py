"""A variant's needs (`@EXPERIMENT.variant(needs=...)`): the search never draws a variant this device cannot run."""

import importlib

import optuna
import pytest

from harness.api.experiment import Experiment, ExperimentError
from harness.search import drawable, open_study, plan_search, suggest
from tests.search_settings import search_config


def _experiment() -> Experiment:
    experiment = Experiment(name="e", op_kinds=("linear",), hypothesis="h", check="effective_flops")

    @experiment.baseline
    def base(w):
        return lambda: None

    @experiment.variant  # the plain form still registers, with no needs
    def anywhere(w, x=1):
        return lambda: None

    @experiment.variant(needs="cuda")
    def gpu_only(w, tile=16):
        return lambda: None

    @experiment.variant(needs=lambda device: None if device == "cpu" else "a CPU-only library")
    def cpu_only(w):
        return lambda: None

    return experiment


def test_plain_and_needs_registrations_both_register_and_needs_name_what_is_unmet():
    experiment = _experiment()
    assert list(experiment.variants) == ["base", "anywhere", "gpu_only", "cpu_only"]
    assert experiment.baseline_name == "base"
    assert experiment.unmet_needs("cpu") == {"gpu_only": "needs CUDA; device is cpu"}
    assert experiment.unmet_needs("cuda:1") == {"cpu_only": "a CPU-only library"}
    experiment.check_space({"gpu_only": {"tile": [16]}})  # the registered function keeps its signature


def test_an_unknown_need_is_an_error_at_registration():
    experiment = Experiment(name="e", op_kinds=("linear",), hypothesis="h", check="effective_flops")
    with pytest.raises(ExperimentError, match="needs='tpu'"):
        experiment.variant(needs="tpu")


def test_drawable_leaves_out_the_unmet_variants_of_the_space_only():
    space = {"anywhere": {"x": [1, 2]}, "gpu_only": {"tile": [16, 32]}}
    kept, left_out = drawable(space, {"gpu_only": "needs CUDA; device is cpu", "cpu_only": "not in the space"})
    assert kept == {"anywhere": {"x": [1, 2]}}
    assert left_out == {"gpu_only": "needs CUDA; device is cpu"}


@pytest.mark.parametrize("sampler", ["bruteforce", "random", "tpe"])
def test_with_fewer_trials_than_the_space_no_trial_goes_to_a_cuda_only_variant_on_a_cpu(sampler, tmp_path):
    # 2 runnable configurations and 4 CUDA-only ones: before, n_trials=2 could spend both on CUDA-only skips.
    experiment = _experiment()
    space = {"anywhere": {"x": [1, 2]}, "gpu_only": {"tile": [16, 32, 64, 128]}}
    kept, _ = drawable(space, experiment.unmet_needs("cpu"))
    plan = plan_search(kept, search_config(n_trials=2, sampler=sampler, seed=3))
    study = open_study("s", f"sqlite:///{tmp_path}/optuna.db", plan.sampler, resume=False)
    drawn: list[str] = []

    def objective(trial: optuna.Trial) -> float:
        variant, _ = suggest(trial, kept)
        drawn.append(variant)
        return 1.0

    study.optimize(objective, n_trials=10)  # stops when the shared budget of 2 is spent
    assert drawn == ["anywhere", "anywhere"]


def test_needs_of_several_kinds_are_all_required_and_each_unmet_one_is_named(monkeypatch):
    from harness.api import optional

    experiment = Experiment(name="e", op_kinds=("linear",), hypothesis="h", check="effective_flops")

    @experiment.variant(needs=("cuda", "triton", lambda device: "no tiles"))
    def kernel(w):
        return lambda: None

    monkeypatch.setattr(optional, "is_importable", lambda module: module != "triton")
    assert experiment.unmet_needs("cpu") == {
        "kernel": "needs CUDA; device is cpu; needs triton: pip install -e '.[triton]'; no tiles"}
    monkeypatch.setattr(optional, "is_importable", lambda module: True)
    assert experiment.unmet_needs("cuda") == {"kernel": "no tiles"}
    with pytest.raises(ExperimentError, match="needs='tpu'"):
        experiment.variant(needs=("cuda", "tpu"))


def test_is_importable_asks_without_importing_and_a_refusing_import_hook_counts_as_missing(monkeypatch):
    import importlib.util

    from harness.api import optional

    assert optional.is_importable("json") and not optional.is_importable("no_such_module_anywhere")
    assert not optional.is_importable("no_such_parent.child")  # find_spec raises for a missing parent
    assert optional.missing("json") is None
    assert optional.missing("cupy_not_here") == "needs cupy_not_here: pip install cupy_not_here"

    def refuse(name, package=None):
        raise ModuleNotFoundError(name)

    monkeypatch.setattr(importlib.util, "find_spec", refuse)  # an import hook that refuses the name
    assert not optional.is_importable("json")


def test_the_shipped_variants_that_need_an_optional_package_are_not_drawn_without_it(monkeypatch):
    from harness.api import optional

    monkeypatch.setattr(optional, "is_importable", lambda module: False)
    expected = {
        "dit_gemm_tiles": {"triton_matmul": "needs triton: pip install -e '.[triton]'"},
        "vae_conv_kernels": {"triton_implicit_gemm": "needs triton: pip install -e '.[triton]'"},
        "dit_output_fusion": {"triton_fused": "needs triton: pip install -e '.[triton]'"},
        "output_cast": {"vectorized_kernel": "needs triton: pip install -e '.[triton]'"},
        "dit_small_m_batching": {"gemv": "needs cupy: pip install -e '.[gpu-cu12]' or -e '.[gpu-cu13]'"},
        "attention_backends": {"flash_attn": "needs one of flash_attn, flash_attn_interface: pip install flash-attn"},
    }
    for module, unmet in expected.items():
        experiment = importlib.import_module(f"experiments.{module}").EXPERIMENT
        on_gpu = {name: why for name, why in experiment.unmet_needs("cuda").items()
                  if name not in ("native_cpu", "im2col_gemm")}  # vae_conv_kernels' CPU-only variants
        assert set(on_gpu) == set(unmet), module
        for name, why in unmet.items():
            assert on_gpu[name].startswith(why), (module, on_gpu[name])
            assert experiment.unmet_needs("cpu")[name] == f"needs CUDA; device is cpu; {on_gpu[name]}"


def test_the_shipped_cuda_only_variants_declare_it(monkeypatch):
    from harness.api import optional

    monkeypatch.setattr(optional, "is_importable", lambda module: True)  # every extra installed
    cuda_only = {"dit_gemm_tiles": {"blas_library", "triton_matmul"}, "dit_small_m_batching": {"gemv"},
                 "output_cast": {"vectorized_kernel"}, "attention_backends": {"flash_attn"}}
    for module, variants in cuda_only.items():
        experiment = importlib.import_module(f"experiments.{module}").EXPERIMENT
        assert set(experiment.unmet_needs("cpu")) == variants, module
        assert experiment.unmet_needs("cuda") == {}, module
    vae_bf16 = importlib.import_module("experiments.vae_bf16")
    assert vae_bf16.EXPERIMENT.unmet_needs("cuda") == {}
    # Both kinds of CPU, whichever this one is: drawn where it has bf16 math, left out where it has none.
    monkeypatch.setattr(vae_bf16, "_cpu_has_bf16_math", lambda: True)
    assert vae_bf16.EXPERIMENT.unmet_needs("cpu") == {}
    monkeypatch.setattr(vae_bf16, "_cpu_has_bf16_math", lambda: False)
    assert set(vae_bf16.EXPERIMENT.unmet_needs("cpu")) == {"low_precision"}
    assert "no bf16 math" in vae_bf16.EXPERIMENT.unmet_needs("cpu")["low_precision"]
