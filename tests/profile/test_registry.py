"""One profiler registry for the run and its worker (harness.profile.registry)."""

import pytest

from harness.profile import registry
from harness.profile.cpu import CpuProfiler


def test_auto_on_a_cpu_is_the_cpu_profiler_without_notes():
    assert registry.resolve({"name": "auto"}, "cpu") == ("cpu", [])
    assert isinstance(registry.make("cpu", {}), CpuProfiler)


def test_a_named_backend_is_kept_and_an_unknown_one_names_the_known():
    assert registry.resolve({"name": "torch_cuda"}, "cpu") == ("torch_cuda", [])
    with pytest.raises(registry.UnknownProfiler, match="profiler='nsys': choose auto, cpu, torch_cuda, ncu"):
        registry.resolve({"name": "nsys"}, "cuda")
    with pytest.raises(registry.UnknownProfiler, match="choose cpu, torch_cuda, ncu"):
        registry.make("auto", {})  # make takes a resolved name
