"""Factories the capture tests name as MODULE:FACTORY (tests.capture.models:...): real architectures at a
reduced size, and the bad inputs a user can give."""

from __future__ import annotations

import torch

WAN_LATENT = [1, 16, 3, 4, 3]  # a 3-frame chunk, as the report's, of a 4 x 3 latent slice
WAN_BLOCK = {"dim": 64, "ffn": 128, "heads": 4, "frames": 2, "height": 8, "width": 6, "text": 10}


def wan_vae_chunk() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    """diffusers' AutoencoderKLWan decoding a streaming chunk from the causal cache that 2 earlier frames
    primed, as the vae_decode workload builds it (harness.workloads.vae_decode.StreamingChunkDecoder)."""
    from harness.workloads.registry import build_workload

    workload = build_workload("vae_decode", {"latent": WAN_LATENT}, device="cpu", dtype="float32")
    assert workload.module is not None
    return workload.module, (workload.inputs["latent"],)


class _WanBlock(torch.nn.Module):
    def __init__(self, block: torch.nn.Module, rotary: tuple[torch.Tensor, torch.Tensor]):
        super().__init__()
        self.block = block
        self.rotary = rotary

    def forward(self, hidden: torch.Tensor, text: torch.Tensor, temb: torch.Tensor) -> torch.Tensor:
        return self.block(hidden, text, temb, self.rotary)


def wan_block() -> tuple[torch.nn.Module, tuple[torch.Tensor, ...]]:
    """diffusers' WanTransformerBlock (the Wan DiT block) at dim 64, FFN 128, 4 heads, over a 2-frame 8 x 6
    latent (2 x 4 x 3 = 24 tokens after the 1x2x2 patches) and 10 text tokens."""
    from diffusers.models.transformers import transformer_wan as wan

    c = WAN_BLOCK
    torch.manual_seed(0)
    block = wan.WanTransformerBlock(c["dim"], c["ffn"], c["heads"], "rms_norm_across_heads", True, 1e-6)
    rope = wan.WanRotaryPosEmbed(c["dim"] // c["heads"], (1, 2, 2), 1024)
    rotary = rope(torch.empty(1, 16, c["frames"], c["height"], c["width"]))
    tokens = c["frames"] * (c["height"] // 2) * (c["width"] // 2)
    inputs = (torch.randn(1, tokens, c["dim"]), torch.randn(1, c["text"], c["dim"]), torch.randn(1, 6, c["dim"]))
    return _WanBlock(block, rotary), inputs


class ConvStack(torch.nn.Module):
    """Two 3-D convolutions around a SiLU: a model whose layout a best.json can change."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv3d(8, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv3d(8, 4, 3, padding=1)

    def forward(self, clip: torch.Tensor) -> torch.Tensor:
        return self.conv2(torch.nn.functional.silu(self.conv1(clip)))


def conv_stack() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    return ConvStack(), (torch.randn(1, 8, 4, 12, 10),)


def raises() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    raise RuntimeError("the checkpoint is missing")


def not_a_pair() -> torch.nn.Module:
    return torch.nn.Linear(2, 2)


class NoOps(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def no_ops() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    return NoOps(), (torch.randn(3),)


class Varies(torch.nn.Module):
    """A forward whose calls change from one forward to the next (one relu more each time)."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 4)
        self.forwards = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.forwards += 1
        x = self.layer(x)
        for _ in range(self.forwards):
            x = torch.relu(x)
        return x


def varies() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    return Varies(), (torch.randn(2, 4),)


class _Residual3d(torch.nn.Module):
    """torchvision's r3d BasicBlock in small: Conv3d + BatchNorm3d + ReLU(inplace=True) twice, `out += identity`,
    and a last in-place ReLU (torchvision is not installable beside this torch: the block is written out)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv3d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = torch.nn.BatchNorm3d(channels)
        self.relu = torch.nn.ReLU(inplace=True)
        self.conv2 = torch.nn.Conv3d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = torch.nn.BatchNorm3d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class R3dLike(torch.nn.Module):
    """A stem (Conv3d, BatchNorm3d, in-place ReLU) and one residual layer, as torchvision's r3d_18 starts."""

    def __init__(self, channels: int = 8) -> None:
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv3d(3, channels, (3, 7, 7), padding=(1, 3, 3), bias=False),
                                        torch.nn.BatchNorm3d(channels), torch.nn.ReLU(inplace=True))
        self.layer1 = _Residual3d(channels)

    def forward(self, clip: torch.Tensor) -> torch.Tensor:
        return self.layer1(self.stem(clip))


def r3d_like() -> tuple[torch.nn.Module, tuple[torch.Tensor]]:
    torch.manual_seed(0)
    model = R3dLike()
    for norm in (model.stem[1], model.layer1.bn1, model.layer1.bn2):  # running statistics a trained model has
        torch.nn.init.uniform_(norm.running_mean, -0.5, 0.5)
        torch.nn.init.uniform_(norm.running_var, 0.5, 1.5)
    return model, (torch.randn(1, 3, 4, 16, 16),)
