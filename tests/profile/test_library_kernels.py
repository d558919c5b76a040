"""The reference kernels measured beside a CPU's peaks (harness.profile.library_kernels): planted products."""

from __future__ import annotations

import json
import time

import pytest
import torch
import torch.nn.functional as F

from harness.profile import library_kernels


def test_fewer_rows_never_take_longer_than_more_rows_by_the_same_weight():
    assert library_kernels._bounded({1: 5.0, 3: 2.0, 12: 3.0, 64: 2.5}) == {1: 2.0, 3: 2.0, 12: 2.5, 64: 2.5}


def test_a_disturbed_few_row_measurement_is_timed_again(monkeypatch):
    """Planted products: in the first pass 1 to 3 rows take 20 ms, 4 rows 2 ms (what one process once showed:
    fewer rows slower than more); in the second every count takes 2 ms or less. The disturbed counts keep the
    second pass's times, not the first's, and not merely the larger count's bound."""
    calls = {"n": 0}

    def linear(x, weight):  # noqa: ARG001 - the planted product
        calls["n"] += 1
        first_pass = calls["n"] <= 4 * (1 + library_kernels._FEW_ROW_REPEATS)
        time.sleep(0.02 if first_pass and x < 4 else 0.001 * (1 + x / 4))

    monkeypatch.setattr(F, "linear", linear)
    found, slowest = library_kernels._row_times(object(), {1: 1, 2: 2, 3: 3, 4: 4}, library_kernels._timer("cpu"))
    assert calls["n"] == 2 * 4 * (1 + library_kernels._FEW_ROW_REPEATS)  # timed twice
    assert found[1] < 0.01 and found[3] < 0.01  # the second pass's, far under the first's 20 ms
    assert found[1] <= found[2] <= found[3] <= found[4]
    assert all(found[m] <= slowest[m] < 0.01 for m in found)  # the kept pass's slowest repeat, not the first's


@pytest.mark.parametrize("llc", [None, 2**20])
def test_few_row_products_are_measured_in_dram_and_where_the_cache_size_is_known_in_it(llc):
    found = library_kernels.measure_few_rows(llc)
    assert set(found["float32"]) == ({"dram", "cache"} if llc else {"dram"})
    entry = found["float32"]["dram"]
    assert entry["n"] ** 2 * 4 >= library_kernels._DRAM_MIN_BYTES * 0.99
    times = [entry["seconds"][str(m)] for m in library_kernels.ROW_COUNTS]
    assert all(t > 0 for t in times) and times == sorted(times)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_gpus_reference_kernels_are_measured_once_and_cached(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    found = library_kernels.gpu_reference_kernels("cuda")
    assert {len(v) for v in found["conv_layouts"].values()} == {len(library_kernels.CONV_REFERENCES)}
    assert all(ref["seconds"] > 0 for ref in found["conv_references"])
    assert set(found["few_rows"]["bfloat16"]) == {"dram", "cache"}
    (cached,) = tmp_path.glob("gpu_references-*.json")
    monkeypatch.setattr(library_kernels, "measure_conv_layouts", None)  # a second call reads the cache
    assert library_kernels.gpu_reference_kernels("cuda") == json.loads(cached.read_text())["kernels"]
