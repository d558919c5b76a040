"""A small model to capture (`python -m harness.capture examples.capture_model:make --out captures/small`):
two pre-norm transformer blocks over a token sequence and a 3-D conv head over a short video clip, so
that its cards span the harness's workload families (linear, scaled-dot-product attention, conv3d, a cast)
and ops it replays as captured (layer norm, GELU, adds)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


class Block(torch.nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4, ffn: int = 256):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)
        self.up, self.down = torch.nn.Linear(dim, ffn), torch.nn.Linear(ffn, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, length, dim = x.shape
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q, k, v = (t.reshape(b, length, self.heads, dim // self.heads).transpose(1, 2) for t in (q, k, v))
        attended = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, length, dim)
        x = x + self.proj(attended)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class SmallModel(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.head = torch.nn.Conv3d(8, 16, 3)

    def forward(self, tokens: torch.Tensor, clip: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.blocks(tokens), self.head(clip).to(torch.float16)


def make() -> tuple[torch.nn.Module, tuple[torch.Tensor, torch.Tensor]]:
    torch.manual_seed(0)
    return SmallModel(), (torch.randn(2, 96, 64), torch.randn(1, 8, 5, 34, 26))
