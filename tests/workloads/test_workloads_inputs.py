"""Captured inputs (found by hash, verified, sliced) and seeded synthetic inputs."""

from __future__ import annotations

import hashlib

import pytest
import torch
from safetensors.torch import save_file

from harness.workloads import (
    WorkloadError,
    build_workload,
    file_sha256,
    find_captured,
    load_captured,
    tensor_sha256,
)

CONV = {
    "input": [1, 16, 3, 60, 104],
    "weight": [16, 16, 1, 1, 1],
    "output": [1, 16, 3, 60, 104],
    "stride": [1, 1, 1],
    "padding": [0, 0, 0],
    "dilation": [1, 1, 1],
    "groups": 1,
}
LINEAR = {"M": 3, "N": 256, "K": 64}


def _captured(shape, seed=7, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


def test_tensor_hash_is_over_raw_contiguous_bytes():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    assert tensor_sha256(t) == hashlib.sha256(t.numpy().tobytes()).hexdigest()
    assert tensor_sha256(t.t()) == hashlib.sha256(t.t().contiguous().numpy().tobytes()).hexdigest()
    b = torch.ones(4, dtype=torch.bfloat16)  # numpy has no bfloat16: hashed through a uint8 view
    assert tensor_sha256(b) == hashlib.sha256(bytes([0x80, 0x3F] * 4)).hexdigest()


def test_captured_safetensors_by_tensor_hash(tmp_path):
    x = _captured(CONV["input"])
    digest = tensor_sha256(x)
    save_file({"input": x}, str(tmp_path / f"{digest}.safetensors"))
    w = build_workload("conv3d", CONV, inputs_dir=tmp_path, input_sha256=digest)
    assert w.input_source == f"captured:{tmp_path / (digest + '.safetensors')}"
    assert w.input_hash["over"] == "tensor:input"
    assert torch.equal(w.inputs["input"], x)
    assert any("synthetic(seed=0): weight, bias" in n for n in w.notes)


def test_captured_file_hash_and_scaled_slice(tmp_path):
    params = {"M": 1000, "N": 256, "K": 64}
    x = _captured((1, 1000, 64))  # [B, L, K] activation, seen as [M, K]
    scratch = tmp_path / "scratch.safetensors"
    save_file({"hidden_states": x}, str(scratch))
    digest = file_sha256(scratch)
    target = tmp_path / f"sha256-{digest[:16]}.safetensors"
    scratch.rename(target)
    assert find_captured(tmp_path, digest) == target
    w = build_workload("linear", params, inputs_dir=tmp_path, input_sha256=digest, scale=0.1)
    assert w.input_hash == {"sha256": digest, "path": str(target), "over": "file", "tensors": ["x"], "sliced": ["x"]}
    assert w.shape["M"] == 100
    assert torch.equal(w.inputs["x"], x.reshape(1000, 64)[:100])
    assert any("sliced from [1000, 64] to [100, 64]" in n for n in w.notes)
    assert w.shape["N"] == 64  # 256 * 0.1, held at the floor of 64
    assert tuple(w.run().shape) == (100, 64)


def test_captured_pt_file_and_dtype_conversion(tmp_path):
    x = _captured((3, 64), dtype=torch.float32)
    digest = tensor_sha256(x)
    torch.save(x, tmp_path / f"{digest}.pt")
    w = build_workload("linear", LINEAR, inputs_dir=tmp_path, input_sha256=digest, dtype="bfloat16")
    assert w.input_hash["over"] == "tensor:input"
    assert w.inputs["x"].dtype == torch.bfloat16
    assert torch.equal(w.inputs["x"], x.to(torch.bfloat16))
    assert any("converted from float32 to bfloat16" in n for n in w.notes)


def test_hash_mismatch_is_an_error(tmp_path):
    x = _captured((3, 64))
    digest = tensor_sha256(x)
    save_file({"x": x + 1}, str(tmp_path / f"{digest}.safetensors"))
    with pytest.raises(WorkloadError, match="SHA-256 mismatch") as info:
        build_workload("linear", LINEAR, inputs_dir=tmp_path, input_sha256=digest)
    assert "\n" not in str(info.value)
    with pytest.raises(WorkloadError, match="SHA-256 mismatch"):
        load_captured(tmp_path / f"{digest}.safetensors", digest)


def test_captured_with_wrong_shape_is_an_error(tmp_path):
    x = _captured((4, 64))
    digest = tensor_sha256(x)
    save_file({"x": x}, str(tmp_path / f"{digest}.safetensors"))
    with pytest.raises(WorkloadError, match=r"shape \[4, 64\], the card says \[3, 64\]"):
        build_workload("linear", LINEAR, inputs_dir=tmp_path, input_sha256=digest)


def test_corrupt_file_is_an_error(tmp_path):
    digest = "ab" * 32
    (tmp_path / f"{digest}.safetensors").write_bytes(b"not a safetensors file")
    with pytest.raises(WorkloadError, match="not a readable safetensors file"):
        build_workload("linear", LINEAR, inputs_dir=tmp_path, input_sha256=digest)


def test_missing_capture_falls_back_to_synthetic_with_a_note(tmp_path):
    w = build_workload("linear", LINEAR, inputs_dir=tmp_path, input_sha256="cd" * 32)
    assert w.input_source == "synthetic(seed=0)"
    assert w.input_hash is None
    assert any("no captured input for cdcdcdcdcdcd" in n for n in w.notes)
    with pytest.raises(WorkloadError, match="is not a directory"):
        build_workload("linear", LINEAR, inputs_dir=tmp_path / "nope", input_sha256="cd" * 32)
    with pytest.raises(WorkloadError, match="64 hex digits"):
        build_workload("linear", LINEAR, inputs_dir=tmp_path, input_sha256="xyz")


def test_short_prefix_is_not_a_match(tmp_path):
    digest = "ef" * 32
    (tmp_path / f"{digest[:8]}.safetensors").write_bytes(b"")
    assert find_captured(tmp_path, digest) is None


def test_attention_capture_in_flash_layout(tmp_path):
    params = {"role": "self", "valid_keys": 20, "allocated_keys": 32, "queries": 24}
    from harness.workloads import AttentionConfig

    cfg = AttentionConfig(heads=2, head_dim=8)
    q = _captured((1, 24, 2, 8))  # flash-attn [B, L, H, D]
    k = _captured((1, 2, 32, 8), seed=8)
    save_file({"q": q, "k": k}, str(tmp_path / "scratch.safetensors"))
    digest = tensor_sha256(k)
    (tmp_path / "scratch.safetensors").rename(tmp_path / f"{digest}.safetensors")
    w = build_workload("attention", params, attention=cfg, inputs_dir=tmp_path, input_sha256=digest)
    assert w.input_hash["over"] == "tensor:k"
    assert torch.equal(w.inputs["q"], q.transpose(1, 2))
    assert torch.equal(w.inputs["k"], k)
    assert any("synthetic(seed=0): v" in n for n in w.notes)


@pytest.mark.parametrize("kind,params,extra", [
    ("linear", LINEAR, {}),
    ("conv3d", CONV, {}),
    ("attention", {"role": "cross", "valid_keys": 16, "allocated_keys": 16}, {"resolution": "64x64"}),
    ("cast", {}, {"resolution": "32x48"}),
])
def test_synthetic_inputs_are_deterministic_per_seed(kind, params, extra):
    a = build_workload(kind, params, seed=3, **extra)
    b = build_workload(kind, params, seed=3, **extra)
    c = build_workload(kind, params, seed=4, **extra)
    assert a.input_source == "synthetic(seed=3)"
    for name in a.inputs:
        assert torch.equal(a.inputs[name], b.inputs[name]), name
        assert not torch.equal(a.inputs[name], c.inputs[name]), name
    assert torch.equal(a.run(), b.run())


def test_synthetic_weights_keep_outputs_order_one():
    w = build_workload("linear", {"M": 64, "N": 64, "K": 5120}, dtype="bfloat16")
    out = w.run().float()
    assert 0.5 < out.std().item() < 2.0
