"""noise.py: the paired-rounds verdict on planted cases, its t interval by hand, and bad inputs.

Expected values come from what was planted (a 1.5x speedup, a 9% loss, an A/A pair) or from the
textbook formula (Student's t quantiles, the critical values of the t table), not from the code.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy.stats import t as student_t

from harness.cards.noise import MAX_MORE_ROUNDS, VERDICTS, paired_verdict, timing_verdict

BAND = 0.05


def rounds(rng: np.random.Generator, level_us: float, n: int, noise: float) -> list[float]:
    """n round medians around `level_us` with multiplicative log-normal noise of relative size `noise`."""
    return list(level_us * np.exp(rng.normal(0.0, noise, n)))


# --- planted changes -------------------------------------------------------------------------


def test_planted_speedup_is_faster_and_its_interval_holds_the_truth():
    rng = np.random.default_rng(1)
    v = paired_verdict(rounds(rng, 150.0, 8, 0.03), rounds(rng, 100.0, 8, 0.03), BAND)
    assert v.verdict == "FASTER"
    assert v.ci[0] <= 1.5 <= v.ci[1]
    assert v.rounds == 8 and v.confidence == 0.95 and v.more_rounds is None


def test_steady_nine_percent_loss_is_slower_where_the_old_rule_said_same():
    """A 9% loss (ratio 0.917): per-call jitter of 4% hid it from the IQR rule; the paired rounds see it."""
    rng = np.random.default_rng(2)
    n, calls = 8, 25
    before_calls = [100.0 * math.exp(rng.normal(0, 0.01)) * np.exp(rng.normal(0, 0.04, calls)) for _ in range(n)]
    after_calls = [100.0 / 0.917 * math.exp(rng.normal(0, 0.01)) * np.exp(rng.normal(0, 0.04, calls))
                   for _ in range(n)]
    v = paired_verdict([float(np.median(c)) for c in before_calls], [float(np.median(c)) for c in after_calls], BAND)
    assert v.verdict == "SLOWER"
    assert v.ci[0] <= 0.917 <= v.ci[1]

    def median_and_spread(samples: list[np.ndarray]) -> tuple[float, float]:
        pooled = np.concatenate(samples)
        q1, med, q3 = np.percentile(pooled, [25, 50, 75])
        return float(med), float((q3 - q1) / med)

    (b, sb), (a, sa) = median_and_spread(before_calls), median_and_spread(after_calls)
    assert sb + sa > (a - b) / b > BAND  # the summed IQRs swallow the 9% loss ...
    assert timing_verdict(b, a, sb, sa) == "SAME"  # ... so the old rule called it SAME


@pytest.mark.parametrize("seed", range(20))
def test_a_a_pairs_never_get_a_verdict(seed):
    rng = np.random.default_rng(100 + seed)
    v = paired_verdict(rounds(rng, 100.0, 8, 0.03), rounds(rng, 100.0, 8, 0.03), BAND)
    assert v.verdict in ("SAME", "INCONCLUSIVE")


def test_twice_the_work_is_slower():
    rng = np.random.default_rng(3)
    v = paired_verdict(rounds(rng, 100.0, 6, 0.05), rounds(rng, 200.0, 6, 0.05), BAND)
    assert v.verdict == "SLOWER"
    assert v.ci[0] <= 0.5 <= v.ci[1]


def test_quiet_a_a_is_same():
    rng = np.random.default_rng(4)
    v = paired_verdict(rounds(rng, 100.0, 8, 0.005), rounds(rng, 100.0, 8, 0.005), BAND)
    assert v.verdict == "SAME"
    assert 1 / 1.05 <= v.ci[0] <= v.ci[1] <= 1.05


def test_linear_drift_cancels_in_abba_rounds():
    """Both sides slow by 2% a round (1% a slot); A and B alternate which goes first."""
    n, drift_per_slot = 10, 0.01
    before, after = [], []
    for i in range(n):
        first, second = 100.0 * (1 + drift_per_slot * 2 * i), 100.0 * (1 + drift_per_slot * (2 * i + 1))
        a_time, b_time = (first, second) if i % 2 == 0 else (second, first)
        before.append(a_time)
        after.append(b_time)
    v = paired_verdict(before, after, BAND)
    assert v.verdict == "SAME"
    assert abs(math.log(v.speedup)) < 0.002  # the drift itself is 20% over the run
    assert before[-1] / before[0] > 1.15


def test_one_outlier_round_widens_the_interval_instead_of_deciding():
    rng = np.random.default_rng(5)
    before, after = rounds(rng, 100.0, 8, 0.02), rounds(rng, 100.0, 8, 0.02)
    clean = paired_verdict(before, after, BAND)
    before[3] *= 10.0
    spiked = paired_verdict(before, after, BAND)
    assert spiked.verdict == "INCONCLUSIVE"
    assert spiked.ci[0] < clean.ci[0] and spiked.ci[1] > clean.ci[1]
    assert spiked.ci[0] < 1.0 < spiked.ci[1]


def test_bimodal_rounds():
    """Each round lands in one of two modes 30% apart (a clock or cache state); the pairing still copes."""
    def bimodal(rng: np.random.Generator, level: float, n: int) -> list[float]:
        return list(level * np.where(rng.random(n) < 0.5, 1.0, 1.3) * np.exp(rng.normal(0, 0.01, n)))

    for seed in range(10):
        rng = np.random.default_rng(200 + seed)
        v = paired_verdict(bimodal(rng, 100.0, 8), bimodal(rng, 100.0, 8), BAND)
        assert v.verdict in ("SAME", "INCONCLUSIVE")
    rng = np.random.default_rng(6)
    faster = paired_verdict(bimodal(rng, 150.0, 8), bimodal(rng, 100.0, 8), BAND)
    assert faster.verdict == "FASTER"


# --- the interval by hand --------------------------------------------------------------------


def test_t_interval_by_hand():
    # log ratios 0.1, 0.2, 0.3, 0.4: mean 0.25, sd sqrt(0.05/3); t(0.975, df=3) = 3.182 (t table)
    logs = [0.1, 0.2, 0.3, 0.4]
    v = paired_verdict([100.0 * math.exp(x) for x in logs], [100.0] * 4, BAND)
    t3 = student_t.ppf(0.975, 3)
    assert t3 == pytest.approx(3.182, abs=1e-3)
    half = t3 * math.sqrt(0.05 / 3) / 2
    assert v.speedup == pytest.approx(math.exp(0.25))
    assert v.ci == pytest.approx((math.exp(0.25 - half), math.exp(0.25 + half)))
    # the lower end, 1.0456, is under 1.05: INCONCLUSIVE; with df=4 (t table 2.776) five rounds clear it
    assert v.verdict == "INCONCLUSIVE"
    assert 2.776 * math.sqrt(0.05 / 3) / math.sqrt(5) < 0.25 - math.log(1.05)
    assert v.more_rounds == 1


def test_confidence_level_sets_the_quantile():
    logs = [0.0, 0.1, -0.05, 0.02, 0.03]
    v90 = paired_verdict([100.0 * math.exp(x) for x in logs], [100.0] * 5, BAND, confidence=0.9)
    sd, mean = float(np.std(logs, ddof=1)), float(np.mean(logs))
    half = student_t.ppf(0.95, 4) * sd / math.sqrt(5)
    assert v90.ci == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
    assert v90.confidence == 0.9 and "90% CI" in v90.describe()


def test_identical_ratios_give_a_point_interval():
    v = paired_verdict([2.0, 4.0, 6.0], [1.0, 2.0, 3.0], BAND)
    assert v.speedup == pytest.approx(2.0)
    assert v.ci == pytest.approx((2.0, 2.0))
    assert v.verdict == "FASTER"


def test_swapping_the_sides_mirrors_the_verdict():
    rng = np.random.default_rng(7)
    before, after = rounds(rng, 130.0, 6, 0.03), rounds(rng, 100.0, 6, 0.03)
    forward, backward = paired_verdict(before, after, BAND), paired_verdict(after, before, BAND)
    assert (forward.verdict, backward.verdict) == ("FASTER", "SLOWER")
    assert backward.speedup == pytest.approx(1 / forward.speedup)
    assert backward.ci == pytest.approx((1 / forward.ci[1], 1 / forward.ci[0]))


# --- more rounds -----------------------------------------------------------------------------


def test_more_rounds_meets_the_half_width_formula():
    # mean log ratio 0.1, sd 0.2 over 4 rounds: the interval must shrink below 0.1 - log(1.05) = 0.0512;
    # with the normal quantile that takes (1.96 * 0.2 / 0.0512)^2 = 58.6 rounds, a few more with t
    logs = [0.1 + 0.2 * z for z in (-1.1619, -0.3873, 0.3873, 1.1619)]  # mean 0, sd 1 (z scores)
    assert np.std([z for z in (-1.1619, -0.3873, 0.3873, 1.1619)], ddof=1) == pytest.approx(1.0, abs=1e-4)
    v = paired_verdict([100.0 * math.exp(x) for x in logs], [100.0] * 4, BAND)
    assert v.verdict == "INCONCLUSIVE"
    total = 4 + v.more_rounds
    assert 59 <= total <= 66
    distance = 0.1 - math.log(1.05)

    def half(rounds_: int) -> float:
        return student_t.ppf(0.975, rounds_ - 1) * 0.2 / math.sqrt(rounds_)

    assert half(total) < distance <= half(total - 1) * 1.001


def test_a_mean_on_the_band_edge_never_decides():
    edge = math.log(1.05)
    v = paired_verdict([100.0 * math.exp(edge + d) for d in (0.1, -0.1)], [100.0, 100.0], BAND)
    assert v.verdict == "INCONCLUSIVE"
    assert v.more_rounds == MAX_MORE_ROUNDS


def test_inconclusive_always_asks_for_at_least_one_round():
    for seed in range(10):
        rng = np.random.default_rng(300 + seed)
        v = paired_verdict(rounds(rng, 104.0, 3, 0.05), rounds(rng, 100.0, 3, 0.05), BAND)
        assert (v.more_rounds is not None) == (v.verdict == "INCONCLUSIVE")
        if v.more_rounds is not None:
            assert 1 <= v.more_rounds <= MAX_MORE_ROUNDS


# --- output ----------------------------------------------------------------------------------


def test_describe_and_as_dict():
    v = paired_verdict([2.0, 4.0, 6.0], [1.0, 2.0, 3.0], BAND)
    assert v.describe() == "2.00x [2.00, 2.00] 95% CI over 3 paired rounds; SAME band +/-5%: FASTER"
    d = json.loads(json.dumps(v.as_dict()))
    assert d["verdict"] == "FASTER" and d["ci"] == pytest.approx([2.0, 2.0]) and d["rounds"] == 3
    assert d["band"] == BAND and d["more_rounds"] is None and "Student's t" in d["method"]
    assert set(VERDICTS) >= {"FASTER", "SLOWER", "SAME", "INCONCLUSIVE", "UNCONFIRMED"}


def test_describe_inconclusive_says_how_many_more():
    v = paired_verdict([100.0 * math.exp(x) for x in (0.1, 0.2, 0.3, 0.4)], [100.0] * 4, BAND)
    assert v.describe().endswith("INCONCLUSIVE (about 1 more rounds would likely decide)")


# --- bad inputs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "before, after, band, confidence",
    [
        ([1.0, 2.0], [1.0], BAND, 0.95),  # unequal lengths
        ([1.0], [1.0], BAND, 0.95),  # one round: no interval
        ([], [], BAND, 0.95),
        ([1.0, 0.0], [1.0, 1.0], BAND, 0.95),
        ([1.0, -1.0], [1.0, 1.0], BAND, 0.95),
        ([1.0, float("nan")], [1.0, 1.0], BAND, 0.95),
        ([1.0, 1.0], [1.0, float("inf")], BAND, 0.95),
        ([1.0, 1.0], [1.0, 1.0], 0.0, 0.95),
        ([1.0, 1.0], [1.0, 1.0], 1.0, 0.95),
        ([1.0, 1.0], [1.0, 1.0], BAND, 0.0),
        ([1.0, 1.0], [1.0, 1.0], BAND, 1.0),
    ],
)
def test_bad_inputs_raise_one_line(before, after, band, confidence):
    with pytest.raises(ValueError) as info:
        paired_verdict(before, after, band, confidence)
    assert "\n" not in str(info.value)
