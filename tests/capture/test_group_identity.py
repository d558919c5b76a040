"""A group's identity is everything that groups it: groups that differ in one field alone (a layout, a dtype, a
keyword argument, a scalar) get distinct group strings and card ids, the same in every process (issue 31)."""

import subprocess
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

from harness.capture.calls import describe_call
from harness.capture.recorder import Group
from harness.capture.writer import card_of

ROOT = Path(__file__).resolve().parents[2]
SAME_FILE = "0" * 64  # every card on one input file: the two cat groups saved identical bytes


def _call(func, *args, **kwargs):
    return describe_call(func, args, kwargs, func(*args, **kwargs), set())


def _planted() -> dict[str, list]:
    """Pairs of calls alike in all but the field each is named by."""
    a = torch.zeros(1, 16, 1, 8, 8)
    strided = torch.zeros(1, 16, 2, 8, 8)[:, :, :1]  # [1, 16, 1, 8, 8], one frame of a cache: strided
    assert strided.shape == a.shape and not strided.is_contiguous()
    x, w = torch.randn(1, 4, 3, 6, 5), torch.randn(4, 4, 3, 3, 3)
    m, lw = torch.randn(6, 8), torch.randn(5, 8)
    return {
        # The case: torch.cat along dim 2, the second input contiguous or strided.
        "layout (replay)": [_call(torch.cat, [a, a.clone()], dim=2), _call(torch.cat, [a, strided], dim=2)],
        "layout (conv3d)": [_call(torch.conv3d, x, w, None, 1, 1),
                            _call(torch.conv3d, x.contiguous(memory_format=torch.channels_last_3d), w, None, 1, 1)],
        "dtype (replay)": [_call(torch.sigmoid, a), _call(torch.sigmoid, a.double())],
        "dtype (linear)": [_call(F.linear, m, lw), _call(F.linear, m.double(), lw.double())],
        "kwarg": [_call(F.normalize, m, dim=1), _call(F.normalize, m, dim=1, eps=1e-6)],
        "scalar": [_call(torch.Tensor.__mul__, m, 2.0), _call(torch.Tensor.__mul__, m, 3.0)],
        "aliasing": [_call(torch.Tensor.__mul__, m, m), _call(torch.Tensor.__mul__, m, m.clone())],
        # The Wan VAE's clones of a slice and of a transpose: one shape, both strided, other strides.
        "strides": [_call(torch.Tensor.clone, torch.zeros(1, 4, 3, 6, 5)[:, :, :2]),
                    _call(torch.Tensor.clone, torch.zeros(1, 2, 4, 6, 5).transpose(1, 2))],
    }


def _ids() -> dict[str, list[tuple[str, str]]]:
    out = {}
    for field, shapes in _planted().items():
        cards = [card_of(Group(shape, "vae", "decoder"), "8x8", SAME_FILE, 1.0) for shape in shapes]
        out[field] = [(card.id, card.group) for card in cards]
    return out


def test_groups_that_differ_in_one_field_get_distinct_groups_and_ids():
    shapes = _planted()
    for field, (first, second) in shapes.items():
        assert first.key() != second.key(), field  # the recorder groups them apart ...
    for field, ((id1, group1), (id2, group2)) in _ids().items():
        assert group1 != group2 and id1 != id2, (field, group1, id1)  # ... and the report tells them apart
    (_, cat1), (_, cat2) = _ids()["layout (replay)"]
    assert "dim=2" in cat1 and cat2.endswith("arg1:1x16x1x8x8 float32 strided(2048,128,64,8,1)], dim=2)"), cat2


def test_ids_are_the_same_in_another_process():
    code = "from tests.capture.test_group_identity import _ids; print(repr(_ids()))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == repr(_ids())
