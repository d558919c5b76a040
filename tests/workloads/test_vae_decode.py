"""The vae_decode chunk workload: the Wan 2.1 decoder streaming one chunk, checked against diffusers itself."""

from __future__ import annotations

import sys

import pytest
import torch

from harness.workloads import build_workload, plan_workload
from harness.workloads.params import WorkloadError
from harness.workloads.vae_decode import decoder_layers

TINY = {"latent": [1, 16, 1, 1, 1]}  # one latent frame of one latent pixel: 8x8 pixels, 4 frames


def test_plan_needs_no_diffusers_and_follows_the_vae_factors():
    plan = plan_workload("vae_decode", {"latent": [1, 16, 3, 60, 26]})
    # The Wan VAE decodes a latent frame into 4 frames and a latent pixel into 8x8 (480 / 60 = 8).
    assert plan.output_shape == (1, 3, 12, 480, 208)
    assert plan.reduction_length == 384 * 27  # the widest 3x3x3 convs: 384 channels
    scaled = plan_workload("vae_decode", {"latent": [1, 16, 3, 60, 26]}, scale=0.04)
    assert scaled.shape["latent"] == [1, 16, 1, 2, 1]  # round(3 x 0.04) would be 0 frames: one is kept
    with pytest.raises(WorkloadError, match="16 channels"):
        plan_workload("vae_decode", {"latent": [1, 4, 1, 2, 2]})
    with pytest.raises(WorkloadError, match="primed_frames"):
        plan_workload("vae_decode", {"latent": [1, 16, 1, 2, 2], "primed_frames": 1})


def test_without_diffusers_the_build_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "diffusers.models.autoencoders", None)  # import then raises ImportError
    with pytest.raises(WorkloadError, match=r"pip install -e '\.\[chunk\]'"):
        build_workload("vae_decode", TINY)


@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("diffusers", reason="the chunk extra (pip install -e '.[chunk]') is not installed")
    return build_workload("vae_decode", TINY, seed=3)


def test_it_builds_runs_and_matches_its_float64_reference(tiny):
    out = tiny.run()
    assert tuple(out.shape) == tiny.output_shape == (1, 3, 4, 8, 8)
    ref = tiny.reference()
    assert ref.dtype == torch.float64
    # fp32 rounding through about 34 convolutions, each summing at most 10368 terms: a few 1e-6 of max|ref|.
    assert (out.double() - ref).abs().max() / ref.abs().max() < 1e-4
    assert torch.equal(tiny.run(), out)  # every call starts from the same primed cache


def test_the_chunk_is_what_diffusers_decodes_after_the_primed_frames(tiny):
    from diffusers import AutoencoderKLWan

    vae = AutoencoderKLWan().eval()
    vae.post_quant_conv.load_state_dict(tiny.module.post_quant_conv.state_dict())
    vae.decoder.load_state_dict(tiny.module.decoder.state_dict())
    stream = torch.cat([tiny.inputs["primed_latent"], tiny.inputs["latent"]], dim=2)
    with torch.no_grad():
        whole = vae.decode(stream).sample
    new_frames = whole[:, :, -tiny.output_shape[2]:]  # diffusers decodes all frames from an empty cache
    assert torch.allclose(tiny.run(), new_frames, rtol=0, atol=1e-5)


def test_decoder_layers_are_the_modules_diffusers_builds(tiny):
    modules = dict(tiny.module.named_modules())
    convs = {name for name, m in modules.items() if isinstance(m, (torch.nn.Conv3d, torch.nn.Conv2d))}
    layers = decoder_layers()
    assert {layer.name for layer in layers} == convs
    for layer in layers:
        m = modules[layer.name]
        assert (m.in_channels, m.out_channels, tuple(m.kernel_size)) == (layer.cin, layer.cout, layer.kernel)


def test_flops_are_what_torch_counts_plus_the_attention(tiny):
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as counter:
        tiny.run()
    # torch counts the convolutions; the mid block's attention on a CPU is a math path it does not count:
    # Q K^T and P V over 1 token of 384 channels, 4 * 384 * 1 FLOPs.
    assert tiny.flops == counter.get_total_flops() + 4 * 384


def test_a_redraw_decodes_another_latent_from_the_same_primed_state(tiny):
    from diffusers import AutoencoderKLWan

    assert tiny.activations == ("latent",)
    one = tiny.redraw(1)
    assert one.module is tiny.module and one.inputs["primed_latent"] is tiny.inputs["primed_latent"]
    assert not torch.equal(one.inputs["latent"], tiny.inputs["latent"])
    # diffusers decoding the primed frames then the redrawn latent, from an empty cache
    vae = AutoencoderKLWan().eval()
    vae.post_quant_conv.load_state_dict(tiny.module.post_quant_conv.state_dict())
    vae.decoder.load_state_dict(tiny.module.decoder.state_dict())
    with torch.no_grad():
        whole = vae.decode(torch.cat([tiny.inputs["primed_latent"], one.inputs["latent"]], dim=2)).sample
    out = one.run()
    assert torch.allclose(out, whole[:, :, -tiny.output_shape[2]:], rtol=0, atol=1e-5)
    assert not torch.allclose(out, tiny.run(), rtol=0, atol=1e-3)
    ref = one.reference()
    assert (out.double() - ref).abs().max() / ref.abs().max() < 1e-4
    with pytest.raises(WorkloadError, match="vae_decode: batching calls does not apply"):
        tiny.calls(2)
