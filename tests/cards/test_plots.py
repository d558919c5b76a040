"""Log axes of report.html's plots are labelled in plain text (harness.report.plots): powers of ten as 10ⁿ."""

from __future__ import annotations

import re

import pytest

from harness.report.plots import power_label, roofline_svg
from harness.report.roofline import Roofs


@pytest.mark.parametrize("value, label", [(1e11, "10¹¹"), (1e-3, "10⁻³"), (1.0, "10⁰"), (2.5e9, "2.5e+09"),
                                          (0.0, "")])
def test_a_power_of_ten_reads_as_one(value, label):
    assert power_label(value) == label


def test_the_roofline_labels_its_decades_as_text():
    # A CPU roof of 300 GFLOP/s and 20 GB/s, both points near 260 GFLOP/s at 480 FLOP/byte: the y axis spans
    # 260e9 / 5 to 300e9 * 4, so 10¹¹ and 10¹² are its decades.
    page = roofline_svg([Roofs(3e11, 2e10, "planted CPU")], [("baseline", 480.0, 2.6e11), ("variant", 480.0, 2.8e11)])
    labels = set(re.findall(r">(10[⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+)<", page))
    assert {"10¹¹", "10¹²"} <= labels
    assert "$" not in page  # no mathtext left to parse
