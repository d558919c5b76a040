"""The worker's tensor files (harness.trial.tensor_files): what is saved loads back; a damaged file loads as
nothing, where torch.load alone hands back the wrong numbers."""

from __future__ import annotations

from pathlib import Path

import torch

from harness.trial.tensor_files import load_checked, save_checked


def _saved(tmp_path: Path) -> tuple[dict, Path]:
    obj = {"reference": torch.randn(100_000, dtype=torch.float64, generator=torch.Generator().manual_seed(0)),
           "baseline_error": 1.5e-7, "baseline_dtype": "float32"}
    path = tmp_path / "refs" / "reference.pt"  # its folder made on the way
    save_checked(obj, path)
    return obj, path


def test_what_is_saved_loads_back(tmp_path: Path):
    obj, path = _saved(tmp_path)
    loaded = load_checked(path, "cpu")
    assert loaded is not None and set(loaded) == set(obj)
    assert torch.equal(loaded["reference"], obj["reference"]) and loaded["baseline_error"] == 1.5e-7
    assert [p.name for p in path.parent.iterdir()] == ["reference.pt"]  # no temporary left behind


def test_a_flipped_byte_in_the_numbers_loads_as_nothing(tmp_path: Path):
    obj, path = _saved(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # inside the 800 kB of the tensor's record
    path.write_bytes(bytes(raw))
    unchecked = torch.load(path, weights_only=True)  # torch reads it without a word: the planted damage is real
    assert not torch.equal(unchecked["reference"], obj["reference"])
    assert load_checked(path, "cpu") is None


def test_a_partial_or_foreign_file_loads_as_nothing(tmp_path: Path):
    obj, path = _saved(tmp_path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert load_checked(path, "cpu") is None
    torch.save(obj, path)  # torch's own file, without the checksum: an older harness's
    assert load_checked(path, "cpu") is None
    assert load_checked(tmp_path / "absent.pt", "cpu") is None
