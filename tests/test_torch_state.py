"""Every worker request and phase starts from the pinned torch state, and leaves none of its own behind.

One case per setting: the block changes it and leaves it changed; `changed` must name it on the note,
and after the block it must be back. A setting this torch build or CPU lacks is skipped with the reason.
"""

from __future__ import annotations

import sys
import types
from typing import Any, Callable

import pytest
import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from harness.trial import torch_settings, torch_state
from harness.trial.torch_state import PINNED, StateNotRestored, changed, isolated, pinned, snapshot

# Objects a case must keep alive past its block (a leaked inference-mode guard undoes itself when freed).
_KEPT: list[Any] = []


def _same_keys(state: dict[str, Any], like: dict[str, Any]) -> dict[str, Any]:
    """`state` on the keys of `like` (a case may load Dynamo, whose cache limit then becomes readable)."""
    return {k: v for k, v in state.items() if k in like}


def _other(values: tuple[Any, ...], current: Any) -> Any:
    return next(v for v in values if v != current)


def _threads() -> None:
    torch.set_num_threads(_other((1, 2), torch.get_num_threads()))


def _leak_autocast(device: str) -> Callable[[], None]:
    return lambda: torch.set_autocast_enabled(device, True)


def _autocast_dtype(device: str) -> Callable[[], None]:
    dtypes = (torch.float16, torch.bfloat16)
    return lambda: torch.set_autocast_dtype(device, _other(dtypes, torch.get_autocast_dtype(device)))


def _leak_inference_mode() -> None:
    guard = torch.inference_mode()
    guard.__enter__()
    _KEPT.append(guard)


def _flush_denormal() -> None:
    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush denormals (torch.set_flush_denormal returned False)")


def _linalg_library() -> None:
    try:
        torch.backends.cuda.preferred_linalg_library("magma")
    except RuntimeError:
        pass  # a build without MAGMA refuses after storing the preference, which is the leak to catch


def _blas_library() -> None:
    current = torch.backends.cuda.preferred_blas_library().name.lower()
    for name in ("ck", "cublaslt", "cublas"):
        if name != current:
            try:
                torch.backends.cuda.preferred_blas_library(name)
                return
            except RuntimeError:
                continue  # a backend this build lacks
    pytest.skip("no other BLAS backend can be preferred in this build")


def _function_mode() -> None:
    mode = TorchFunctionMode()
    mode.__enter__()


class _PassThrough(TorchDispatchMode):
    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return func(*args, **(kwargs or {}))


def _dispatch_mode() -> None:
    _PassThrough().__enter__()


def _matmul_leaf() -> None:
    torch.backends.cuda.matmul.fp32_precision = "tf32"  # the new API alone: the legacy getters now raise


def _fp32_node(backend: str, op: str, precision: str) -> Callable[[], None]:
    return lambda: torch._C._set_fp32_precision_setter(backend, op, precision)


def _private(setter: str, value: Any) -> Callable[[], None]:
    return lambda: getattr(torch._C, setter)(value)


CASES: list[tuple[str, Callable[[], None]]] = [
    ("threads", _threads),
    ("autocast.cpu.enabled", _leak_autocast("cpu")),
    ("autocast.cuda.enabled", _leak_autocast("cuda")),
    ("autocast.cpu.dtype", _autocast_dtype("cpu")),
    ("autocast.cuda.dtype", _autocast_dtype("cuda")),
    ("autocast.cache_enabled", lambda: torch.set_autocast_cache_enabled(False)),
    ("autocast.nesting", lambda: torch.autocast_increment_nesting()),
    ("grad_enabled", lambda: torch.set_grad_enabled(False)),
    ("inference_mode", _leak_inference_mode),
    ("default_dtype", lambda: torch.set_default_dtype(torch.float64)),
    ("default_device", lambda: torch.set_default_device("meta")),
    ("torch_function_modes", _function_mode),
    ("torch_dispatch_modes", _dispatch_mode),
    ("flush_denormal", _flush_denormal),
    ("mkldnn.enabled", lambda: setattr(torch.backends.mkldnn, "enabled", False)),
    ("mkldnn.deterministic", lambda: setattr(torch.backends.mkldnn, "deterministic", True)),
    ("mkldnn.allow_tf32", lambda: setattr(torch.backends.mkldnn, "allow_tf32", True)),
    ("cudnn.enabled", lambda: setattr(torch.backends.cudnn, "enabled", False)),
    ("cudnn.benchmark", lambda: setattr(torch.backends.cudnn, "benchmark", True)),
    ("cudnn.deterministic", lambda: setattr(torch.backends.cudnn, "deterministic", True)),
    ("cudnn.allow_tf32", lambda: setattr(torch.backends.cudnn, "allow_tf32", False)),
    ("cudnn.benchmark_limit", lambda: setattr(torch.backends.cudnn, "benchmark_limit", 3)),
    ("float32_matmul_precision", lambda: torch.set_float32_matmul_precision("medium")),
    ("cuda.matmul.allow_tf32", lambda: setattr(torch.backends.cuda.matmul, "allow_tf32", True)),
    ("cuda.matmul.allow_fp16_reduced_precision_reduction",
     lambda: setattr(torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction", False)),
    ("cuda.matmul.allow_bf16_reduced_precision_reduction",
     lambda: setattr(torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction", False)),
    ("cuda.matmul.allow_fp16_accumulation",
     lambda: setattr(torch.backends.cuda.matmul, "allow_fp16_accumulation", True)),
    ("fp32_precision.generic.all", _fp32_node("generic", "all", "tf32")),
    ("fp32_precision.cuda.all", _fp32_node("cuda", "all", "ieee")),
    ("fp32_precision.cuda.matmul", _matmul_leaf),
    ("fp32_precision.cuda.conv", _fp32_node("cuda", "conv", "ieee")),
    ("fp32_precision.cuda.rnn", _fp32_node("cuda", "rnn", "ieee")),
    ("fp32_precision.mkldnn.all", _fp32_node("mkldnn", "all", "bf16")),
    ("fp32_precision.mkldnn.matmul", _fp32_node("mkldnn", "matmul", "bf16")),
    ("fp32_precision.mkldnn.conv", _fp32_node("mkldnn", "conv", "bf16")),
    ("fp32_precision.mkldnn.rnn", _fp32_node("mkldnn", "rnn", "bf16")),
    ("sdp.flash", lambda: torch.backends.cuda.enable_flash_sdp(False)),
    ("sdp.mem_efficient", lambda: torch.backends.cuda.enable_mem_efficient_sdp(False)),
    ("sdp.math", lambda: torch.backends.cuda.enable_math_sdp(False)),
    ("sdp.cudnn", lambda: torch.backends.cuda.enable_cudnn_sdp(False)),
    ("sdp.math_fp16_bf16_reduction",
     lambda: torch.backends.cuda.allow_fp16_bf16_reduction_math_sdp(True)),
    ("sdp.fa3", _private("_set_sdp_use_fa3", True)),
    ("sdp.overrideable", _private("_set_sdp_use_overrideable", False)),
    ("sdp.priority_order", _private("_set_sdp_priority_order", [4, 3, 2, 1, 0])),
    # torch._C's setter: the public one also imports Inductor's config (seconds), tested below.
    ("deterministic_algorithms", lambda: torch._C._set_deterministic_algorithms(True)),
    ("deterministic_algorithms.warn_only",
     lambda: torch._C._set_deterministic_algorithms(False, warn_only=True)),
    ("deterministic.fill_uninitialized_memory",
     lambda: setattr(torch.utils.deterministic, "fill_uninitialized_memory", False)),
    ("blas_library", _blas_library),
    ("linalg_library", _linalg_library),
]


@pytest.mark.parametrize("key, change", CASES, ids=[key for key, _ in CASES])
def test_a_setting_left_changed_is_named_and_restored(key: str, change: Callable[[], None]):
    outside = snapshot()
    if key not in outside:
        pytest.skip(f"{key}: not in this torch build (or not available on this machine)")
    note: list[str] = []
    try:
        with isolated(note) as start:
            change()
            assert snapshot()[key] != start[key], "the case must really change the setting"
        label = next(s.label for s in torch_state.SETTINGS if s.key == key)
        assert [line for line in note if line.startswith(f"left changed: {label} ")], note
        assert _same_keys(snapshot(), outside) == outside
    finally:
        _KEPT.clear()  # a kept inference-mode guard, once freed, undoes itself too
        torch_state.apply(outside)


def test_every_setting_of_this_build_has_a_case():
    covered = {key for key, _ in CASES} | {
        torch_state.INTEROP_THREADS,  # its own test below: torch cannot set it back
        "dynamo.cache_size_limit",  # its own test below, with a stand-in for Dynamo
        "inductor.deterministic",  # with a stand-in for Inductor's config, below
        "cuda.current_device", "cuda.current_stream",  # GPU tests
    }
    assert {s.key for s in torch_state.SETTINGS} <= covered


def test_a_change_of_the_inter_op_threads_is_reported_not_restorable():
    # This sets the test process's inter-op pool for good (torch allows nothing else); no test uses it.
    before = torch.get_num_interop_threads()
    note: list[str] = []
    with isolated(note):
        try:
            torch.set_num_interop_threads(_other((1, 2, 3), before))
        except RuntimeError as exc:  # torch allows it once per process, before any inter-op work
            pytest.skip(f"this process already set its inter-op threads ({exc})")
    [line] = [line for line in note if "torch.get_num_interop_threads()" in line]
    assert torch_state.NOT_RESTORABLE in line
    assert torch.get_num_interop_threads() != before  # and no StateNotRestored: nothing could be done


def test_dynamos_cache_limit_is_restored_once_dynamo_is_loaded(monkeypatch):
    # A stand-in: importing torch._dynamo costs seconds, and only its config and reset() are used.
    resets: list[int] = []
    fake = types.SimpleNamespace(config=types.SimpleNamespace(cache_size_limit=8), reset=lambda: resets.append(1))
    monkeypatch.setitem(sys.modules, "torch._dynamo", fake)
    note: list[str] = []
    with pinned(note):
        fake.config.cache_size_limit = 64
    assert fake.config.cache_size_limit == 8 and resets == [1]
    assert "left changed: torch._dynamo.config.cache_size_limit 8 -> 64" in note
    with isolated([]):
        pass
    assert resets == [1]  # a phase keeps the compiled graphs


def test_inductors_deterministic_flag_is_restored_once_inductor_is_loaded(monkeypatch):
    fake = types.SimpleNamespace(deterministic=False)  # a stand-in: importing Inductor costs seconds
    monkeypatch.setitem(sys.modules, "torch._inductor.config", fake)
    note: list[str] = []
    with isolated(note):
        fake.deterministic = True
    assert fake.deterministic is False and "left changed: torch._inductor.config.deterministic false -> true" in note


def test_the_autocast_leak_no_longer_reaches_the_next_baseline():
    """The leak issue 21 found: a variant's CPU autocast made the next card's fp32 baseline run in bf16."""
    a = torch.randn(8, 8)
    with pinned():
        torch.autocast("cpu", dtype=torch.bfloat16).__enter__()  # entered, never left
        assert (a @ a).dtype == torch.bfloat16
    with pinned():
        assert (a @ a).dtype == torch.float32


def test_threads_are_pinned_to_the_count_of_the_first_pin(monkeypatch):
    monkeypatch.setattr(torch_state, "_first_threads", None)  # as in a worker that has answered nothing yet
    worker_threads = torch.get_num_threads()
    try:
        with pinned():
            torch.set_num_threads(_other((1, 2), worker_threads))  # a variant's, left behind
        torch.set_num_threads(_other((1, 2), worker_threads))  # even if it leaked past the request
        with pinned() as next_request:
            assert next_request[torch_state.THREADS] == worker_threads
    finally:
        torch.set_num_threads(worker_threads)


def test_a_request_starts_pinned_and_restores_what_the_process_had():
    outside = snapshot()
    torch.backends.cudnn.deterministic = True  # something the process had before the request
    try:
        with pinned() as start:
            assert start == {**start, **PINNED}
            assert start["cudnn.deterministic"] is False
            torch.backends.cudnn.benchmark = True
        assert torch.backends.cudnn.deterministic is True and torch.backends.cudnn.benchmark is False
    finally:
        torch_state.apply(outside)


def test_a_block_inside_a_mode_of_the_harness_keeps_the_mode():
    from torch.utils._python_dispatch import _get_current_dispatch_mode

    with _PassThrough() as mode:  # as harness.trial.precision's evidence mode may be around a phase
        with isolated([]):
            assert _get_current_dispatch_mode() is mode
        assert _get_current_dispatch_mode() is mode


def test_a_failing_block_is_undone_too():
    before = snapshot()
    with pytest.raises(RuntimeError, match="variant failed"):
        with isolated([]):
            torch.backends.cudnn.benchmark = True
            raise RuntimeError("variant failed")
    assert _same_keys(snapshot(), before) == before


def test_a_mixed_tf32_state_is_recorded_unreadable_and_restored_readable():
    before = snapshot()
    with isolated([]):
        torch.backends.cuda.matmul.fp32_precision = "tf32"
        inside = snapshot()
        assert inside["cuda.matmul.allow_tf32"].startswith(torch_state.UNREADABLE)
        assert inside["float32_matmul_precision"].startswith(torch_state.UNREADABLE)
    assert _same_keys(snapshot(), before) == before and torch.backends.cuda.matmul.allow_tf32 is False


def test_a_setting_that_cannot_be_set_back_fails_the_block(monkeypatch):
    box = [1]
    stuck = torch_state.Setting("stuck", "a stuck setting", lambda: box[0], lambda value: None)
    monkeypatch.setattr(torch_state, "SETTINGS", (*torch_state.SETTINGS, stuck))
    with pytest.raises(StateNotRestored, match="a stuck setting 1 -> 2"):
        with isolated([]):
            box[0] = 2


def test_changed_names_each_difference_with_its_values():
    before = {"threads": 2, "autocast.cpu.dtype": "torch.bfloat16", "gone": 1, "old card key": "a"}
    after = {"threads": 1, "autocast.cpu.dtype": "torch.bfloat16", "new": 3, "old card key": "b"}
    assert changed(before, after) == ["torch.get_num_threads() 2 -> 1", "old card key a -> b"]
    assert changed({torch_state.INTEROP_THREADS: 2}, {torch_state.INTEROP_THREADS: 1}) == [
        f"torch.get_num_interop_threads() 2 -> 1 ({torch_state.NOT_RESTORABLE})"]


# ---------------------------------------------------------------------------------------------
# On a GPU


@pytest.mark.gpu
def test_a_side_stream_left_current_is_restored():
    torch.cuda.init()
    outside = snapshot()
    note: list[str] = []
    side = torch.cuda.Stream()
    with isolated(note):
        torch.cuda.set_stream(side)
    assert [line for line in note if line.startswith("left changed: torch.cuda.current_stream() ")], note
    assert torch.cuda.current_stream() == torch.cuda.default_stream() and snapshot() == outside


@pytest.mark.gpu
def test_the_default_stream_id_is_what_a_block_that_initializes_cuda_is_compared_with():
    torch.cuda.init()
    assert snapshot()["cuda.current_stream"] == torch_settings.stream_value(torch.cuda.default_stream(0))


def test_the_conv_tf32_permission_is_read_from_the_precision_tree_first():
    """A card's recorded state under an IEEE pin holds the legacy switch unreadable (torch >= 2.9 refuses to
    answer it once conv and RNN differ): the conv node decides; a state without the tree has the legacy switch,
    and one with neither has torch's default for cuDNN convolutions (TF32 allowed)."""
    from harness.api.numerics import cudnn_conv_tf32

    unreadable = "unreadable: RuntimeError: mix of the legacy and new APIs"
    assert cudnn_conv_tf32({"fp32_precision.cuda.conv": "ieee", "cudnn.allow_tf32": unreadable}) is False
    assert cudnn_conv_tf32({"fp32_precision.cuda.conv": "tf32", "cudnn.allow_tf32": unreadable}) is True
    assert cudnn_conv_tf32({"cudnn.allow_tf32": False}) is False
    assert cudnn_conv_tf32({"fp32_precision.cuda.conv": "none", "cudnn.allow_tf32": True}) is True
    assert cudnn_conv_tf32({}) is True
