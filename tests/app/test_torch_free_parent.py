"""The run's side of the worker boundary never imports torch (issue 23): what it needs of the torch side
comes from the worker (harness.describe), and the few facts it keeps a torch-free copy of are held equal
to the workloads' originals here."""

from __future__ import annotations

import dataclasses

import pytest

from harness.cards.ids import parse_resolution
from harness.chunk_breakdown import DIT_BLOCK, DIT_SCOPE
from harness.config_schema import AttentionSettings, CastSettings
from harness.workloads.attention import AttentionConfig
from harness.workloads.base import parse_resolution as workloads_parse_resolution
from harness.workloads.cast import CastConfig
from harness.workloads.dit_block import KIND, SCOPE

RESOLUTIONS = ["480x832", "704X1280", "480*832", " 480x832", "480x", "x832", "0x832", "-480x832", "480x832x3",
               "abc", "", None, 480, [480, 832], (704, 1280), ["a", 832], [480], {"h": 480}]


def _fields(cls: type) -> list[tuple[str, str, object]]:
    return [(f.name, str(f.type), f.default) for f in dataclasses.fields(cls)]


@pytest.mark.parametrize("copy, original", [(AttentionSettings, AttentionConfig), (CastSettings, CastConfig)])
def test_the_configs_workload_settings_are_the_workloads_own(copy, original):
    assert _fields(copy) == _fields(original)


@pytest.mark.parametrize("value", RESOLUTIONS)
def test_both_sides_parse_a_resolution_alike(value):
    assert parse_resolution(value) == workloads_parse_resolution(value)


def test_the_dit_blocks_kind_and_scope_are_the_workloads_own():
    assert (DIT_BLOCK, DIT_SCOPE) == (KIND, SCOPE)
