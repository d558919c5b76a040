"""Captures of real architectures at a reduced size on the CPU: the Wan VAE decoding a streaming chunk, and
the Wan DiT block. What they must find comes from the shipped report and the models' configurations."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cards.lint import lint_report
from harness.cards.model import load_report
from harness.trial.chunks import add_chunk_cards
from tests.capture.models import WAN_BLOCK, WAN_LATENT

pytest.importorskip("diffusers")
ROOT = Path(__file__).resolve().parents[2]


def _capture(factory: str, out: Path, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "harness.capture", factory, "--out", str(out), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((out / "report.json").read_text())


def _signature(params: dict) -> tuple:
    """A conv3d's channels, kernel and input frames: what a decode at any spatial size keeps of a card."""
    return params["input"][1], params["weight"][0], tuple(params["weight"][2:]), params["input"][2]


@pytest.mark.slow
def test_wan_vae_streaming_chunk_finds_the_reports_steady_state_conv3d_cards(tmp_path):
    out = tmp_path / "vae"
    report = _capture("tests.capture.models:wan_vae_chunk", out, "--stage", "vae", "--top", "4")
    captured_cards = report["cards"]
    groups = json.loads((out / "groups.json").read_text())  # every recorded group; the kept ones are cards
    record = report["capture"]
    assert record["cards"] == len(captured_cards) == 4 and not record["unprofiled"]
    assert len(groups) == record["groups"] and sum(g["card"] is not None for g in groups) == 4
    signatures = {_signature(g["shape_parameters"]) for g in groups if g["op"] == "aten.conv3d.default"}
    for card in captured_cards:
        assert card["kernels"] and card["primary"], card["group"]

    shipped = add_chunk_cards(lint_report(load_report()).normalized)
    chunk = shipped.card("vae-480-chunk-decode")
    steady = {_signature(shipped.card(card_id).shape_parameters) for card_id in chunk.extra["contains"]}
    assert len(steady) == 11
    # The issue's own list among them: 96->96 3x3x3, 192->192, the 384->768 3x1x1 time conv, the 96->3 head.
    assert {(96, 96, (3, 3, 3), 6), (192, 192, (3, 3, 3), 6), (384, 768, (3, 1, 1), 3), (96, 3, (3, 3, 3), 6)} <= steady
    assert steady <= signatures, sorted(steady - signatures)
    first_frame = {_signature(c.shape_parameters) for c in shipped.cards
                   if c.op_kind == "conv3d" and c.resolution == "480x832"} - steady
    assert first_frame and not first_frame & signatures  # the stream's first frame is not what a chunk runs
    assert WAN_LATENT[2] == 3  # post_quant_conv over the chunk's 3 frames: the report's 16->16 T=3 card


@pytest.mark.slow
def test_wan_dit_block_linear_cards_carry_the_configurations_m_n_k(tmp_path):
    c = WAN_BLOCK
    report = _capture("tests.capture.models:wan_block", tmp_path / "block", "--no-profile")
    groups = json.loads((tmp_path / "block" / "groups.json").read_text())
    linear = {(g["shape_parameters"]["M"], g["shape_parameters"]["N"], g["shape_parameters"]["K"]): g
              for g in groups if g["op"] == "aten.linear.default"}
    tokens = c["frames"] * (c["height"] // 2) * (c["width"] // 2)  # 1x2x2 patches
    dim, ffn, text = c["dim"], c["ffn"], c["text"]
    # q, k, v, out of self-attention and q, out of cross-attention; k, v of the text; the FFN up and down.
    assert set(linear) == {(tokens, dim, dim), (text, dim, dim), (tokens, ffn, dim), (tokens, dim, ffn)}
    assert linear[(tokens, dim, dim)]["calls"] == 6
    assert linear[(text, dim, dim)]["calls"] == 2
    attention = [g["shape_parameters"] for g in groups if g["op_kind"] == "attention"]
    assert {(a["queries"], a["valid_keys"], a["heads"], a["head_dim"]) for a in attention} == {
        (tokens, tokens, c["heads"], dim // c["heads"]), (tokens, text, c["heads"], dim // c["heads"])}
    assert report["capture"]["cards"] == len(report["cards"]) >= 4
