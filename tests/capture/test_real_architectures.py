"""Captures of real architectures at a reduced size on the CPU: the Wan VAE decoding a streaming chunk, and
the Wan DiT block, each with `--top 200` (every replayable group a card: issue 31). Every group gets its own id,
every card replays on its captured inputs, and the shares add up to at most the forward; what they must find
comes from the shipped report and the models' configurations."""

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


# The forwards' and the re-profile's timing at their floor: these tests check what is captured and that each card
# replays, not its time.
FAST = ("--settle-s", "0", "--override", "timing.budget_s=0.02", "--override", "timing.min_repeats=3")


def _every_group_a_card_that_replays(out: Path, report: dict) -> list[dict]:
    """Distinct ids and groups, every kept card profiled on its captured inputs, shares of one forward."""
    record, cards = report["capture"], report["cards"]
    groups = json.loads((out / "groups.json").read_text())  # every recorded group; the kept ones are cards
    assert not record["unprofiled"], record["unprofiled"]
    assert record["cards"] == len(cards) == sum(g["card"] is not None for g in groups)
    assert len({c["group"] for c in cards}) == len({_id(c) for c in cards}) == len(cards)
    assert len({g["card"] for g in groups if g["card"]}) == len(cards)
    for card in cards:  # replayed, timed and classified; a tiny op may leave the CPU profiler no kernel event
        assert card["replay"]["median_us"] and card["status"] in ("classified", "unresolved"), card["group"]
        assert card["replay"]["input_source"].startswith("captured:"), card["group"]
        assert card["kernels"] or card.get("op_kind") == "replay", card["group"]
    assert sum(g["share_of_forward"] for g in groups) <= 1 + 1e-5 and record["ops_share_of_forward"] <= 1
    return groups


def _id(card: dict) -> str:
    from harness.cards.model import parse_report

    return parse_report({"cards": [card]}).cards[0].id


@pytest.mark.slow
def test_wan_vae_streaming_chunk_finds_the_reports_steady_state_conv3d_cards(tmp_path):
    out = tmp_path / "vae"
    report = _capture("tests.capture.models:wan_vae_chunk", out, "--stage", "vae", "--top", "200", *FAST)
    groups = _every_group_a_card_that_replays(out, report)
    assert report["capture"]["not_kept"]["groups"] == 0  # --top 200: every replayable group is a card
    signatures = {_signature(g["shape_parameters"]) for g in groups if g["op"] == "aten.conv3d.default"}
    carded = {_signature(c["shape_parameters"]) for c in report["cards"] if c["op"] == "aten.conv3d.default"}
    assert carded == signatures

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

    # experiment=auto plans every conv3d card of the capture (plan only: nothing measured).
    conv3d = {_id(c) for c in report["cards"] if c["op"] == "aten.conv3d.default"}
    plan = subprocess.run([sys.executable, "-m", "harness", "experiment=auto", "auto.plan_only=true",
                           f"report={out / 'report.json'}", f"inputs.dir={out / 'inputs'}",
                           f"cards=[{','.join(sorted(conv3d))}]", f"hydra.run.dir={tmp_path / 'plan'}"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert plan.returncode == 0, plan.stderr[-3000:]
    entries = json.loads((tmp_path / "plan" / "plan.json").read_text())["cards"]
    planned = {e["card"] for e in entries if e["experiments"] and e["selected"]}
    assert len(conv3d) >= 11 and conv3d <= planned, sorted(conv3d - planned)


@pytest.mark.slow
def test_wan_dit_block_cards_carry_the_configurations_m_n_k_and_all_replay(tmp_path):
    c = WAN_BLOCK
    report = _capture("tests.capture.models:wan_block", tmp_path / "block", "--top", "200", *FAST)
    groups = _every_group_a_card_that_replays(tmp_path / "block", report)
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
    assert {"linear", "attention"} <= {g["op_kind"] for g in groups if g["card"]}
