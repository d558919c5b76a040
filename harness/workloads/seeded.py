"""Seeded values: the tensors a workload draws when it has no captured one, and the spread each is drawn from.

`synthetic(name, shape, seed)` draws from a CPU `torch.Generator` seeded from (seed, tensor name), so each
tensor is the same for a seed on every device and independent of the others; values are float32 and cast to
the workload's dtype afterwards. A `Spread` is how a tensor's values are spread (a builder's choice, or a
captured tensor's own, measured): another draw of an activation (`Workload.redraw`) comes from it.

Below harness.workloads.inputs, which takes these for the tensors a file does not hold, and
harness.workloads.base, whose `Draws` keep each activation's spread.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import torch


def derived_seed(seed: int, name: str) -> int:
    """The seed of the tensor `name` under the workload's `seed`: every tensor its own, the same on every device."""
    return (int(seed) * 0x9E3779B1 + zlib.crc32(name.encode())) % (1 << 63)


def synthetic(
    name: str,
    shape: tuple[int, ...] | list[int],
    seed: int,
    *,
    std: float = 1.0,
    uniform: tuple[float, float] | None = None,
) -> torch.Tensor:
    """Seeded float32 CPU tensor: normal(0, std), or uniform in [low, high) when `uniform` is given."""
    generator = torch.Generator(device="cpu").manual_seed(derived_seed(seed, name))
    size = tuple(int(s) for s in shape)
    if uniform is not None:
        low, high = uniform
        out = torch.rand(size, generator=generator, dtype=torch.float32)
        return out.mul_(high - low).add_(low)
    out = torch.randn(size, generator=generator, dtype=torch.float32)
    return out.mul_(std) if std != 1.0 else out


@dataclass(frozen=True)
class Spread:
    """How a tensor's values are spread: normal(mean, std), or uniform in [low, high) when `uniform` is set."""

    mean: float = 0.0
    std: float = 1.0
    uniform: tuple[float, float] | None = None

    @classmethod
    def measured(cls, tensor: torch.Tensor, uniform: bool) -> Spread:
        """A captured tensor's own spread: its range (uniform) or its mean and standard deviation."""
        values = tensor.detach().double()
        if uniform:
            return cls(uniform=(float(values.min()), float(values.max())))
        std = float(values.std()) if values.numel() > 1 else 0.0
        return cls(mean=float(values.mean()), std=std or 1.0)  # a constant tensor: unit std, not a constant

    def draw(self, name: str, shape: tuple[int, ...], seed: int) -> torch.Tensor:
        """Seeded float32 CPU values of this spread (`synthetic` of the tensor named `name`)."""
        values = synthetic(name, shape, seed, std=self.std, uniform=self.uniform)
        return values.add_(self.mean) if self.uniform is None and self.mean else values
