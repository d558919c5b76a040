"""This CPU's cached peaks read without torch, for `predict --device cpu` (harness.profile.cpu_peaks.cached_here)."""

from __future__ import annotations

import json

from harness.profile import cpu_peaks
from harness.profile.cpu_peaks import SCHEMA, CpuPeaks, cached_here, cpu_model_name


def _cached(folder, name: str, threads: int, flops: float, schema: int = SCHEMA, model: str | None = None) -> None:
    peaks = CpuPeaks(flops_per_s={"float32": flops}, mem_bw_bytes_per_s=1e10, sources={}, cpu_model=model or
                     cpu_model_name(), logical_cores=cpu_peaks.os.cpu_count() or 1, torch_version="t",
                     torch_threads=threads, measured_at=f"2026-01-0{threads}")
    (folder / f"cpu_peaks-{name}.json").write_text(json.dumps({"schema": schema, "peaks": peaks.as_dict()}))


def test_the_cache_of_this_cpu_at_the_most_threads_is_read(monkeypatch, tmp_path):
    monkeypatch.setenv("HARNESS_CACHE_DIR", str(tmp_path))
    assert cached_here() is None
    _cached(tmp_path, "a", 1, 1e11)
    _cached(tmp_path, "b", 2, 2e11)
    _cached(tmp_path, "c", 4, 4e11, schema=SCHEMA - 1)  # an earlier schema: its peaks stopped short of the plateau
    _cached(tmp_path, "d", 8, 8e11, model="another CPU")
    (tmp_path / "cpu_peaks-e.json").write_text("not json")
    found = cached_here()
    assert found is not None and found.flops_per_s["float32"] == 2e11
