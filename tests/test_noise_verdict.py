"""The run's noise verdict (harness.run.noise) from planted probe and confirm figures, the load it reads
(harness.hardware.cpu_load) from planted /proc figures, and times printed to the digits their noise allows."""

from __future__ import annotations

import pytest

from harness.cards.cells import fmt_noisy
from harness.hardware import cpu_load
from harness.hardware.cpu_load import CpuLoad, CpuSnapshot, load_between, process_ticks
from harness.run.noise import judge_noise

QUIET_PROBE = {"verdict": "SAME", "rounds": 8, "rounds_dropped": 0, "competing": False,
               "disturbed_samples": 40, "samples": 1600, "worker_threads": 2,
               "load": {"other_cores": 0.02, "steal_share": 0.0}}


def _confirmation(rounds: int, dropped: int, disturbed: int = 0, samples: int = 100,
                  competing: int = 0) -> dict:
    flags = [True] * competing + [False] * (rounds - competing)
    return {"verdict": "SAME", "rounds_run": rounds, "disturbed_rounds": list(range(dropped)),
            "before_rounds": {"competing": flags}, "after_rounds": {"competing": [False] * rounds},
            "disturbed_samples": disturbed, "samples": samples}


def test_a_quiet_probe_and_quiet_rounds_are_quiet():
    verdict = judge_noise(QUIET_PROBE, [_confirmation(8, 0, 5), None])
    assert verdict.verdict == "quiet" and verdict.reasons == []
    assert verdict.as_dict()["confirm"] == {"rounds": 8, "rounds_dropped": 0, "competing_side_rounds": 0,
                                            "side_rounds": 16, "disturbed_samples": 5, "samples": 100}
    assert verdict.line().startswith("Machine: quiet (A/A probe SAME")


@pytest.mark.parametrize("probe, confirmations, why", [
    ({**QUIET_PROBE, "verdict": "SLOWER"}, [], "the A/A probe read SLOWER"),
    ({**QUIET_PROBE, "rounds_dropped": 3}, [], "dropped 3 of 8 rounds"),  # 37.5% > 25%
    ({**QUIET_PROBE, "competing": True}, [], "the worker's threads waited for a CPU"),
    (QUIET_PROBE, [_confirmation(8, 3)], "3 of 8 confirm rounds dropped"),  # 37.5% > 25%
    (QUIET_PROBE, [_confirmation(8, 0, competing=5)], "5 of 16 confirm side-rounds"),  # 31% > 25%
    (QUIET_PROBE, [_confirmation(8, 0, disturbed=34)], "34 of 100 of the confirm rounds' samples (34%)"),
])
def test_each_figure_past_its_threshold_makes_the_run_noisy_and_says_so(probe, confirmations, why):
    verdict = judge_noise(probe, confirmations)
    assert verdict.verdict == "noisy" and any(why in reason for reason in verdict.reasons), verdict.reasons
    assert "timing.cpu_threads=1" in verdict.as_dict()["advice"]  # the worker used 2 threads


def test_at_the_thresholds_the_run_stays_quiet_and_one_thread_is_not_advised_again():
    # The probe's own share of disturbed samples is a figure, not a criterion (a tiny call's jitter).
    assert judge_noise({**QUIET_PROBE, "disturbed_samples": 1500}, []).verdict == "quiet"
    # 2 of 8 rounds dropped (25%) and 33 of 99 samples (a third) are at, not over, the thresholds.
    at_edges = judge_noise({**QUIET_PROBE, "rounds_dropped": 2}, [_confirmation(8, 2, disturbed=33, samples=99)])
    assert at_edges.verdict == "quiet"
    one_thread = judge_noise({**QUIET_PROBE, "worker_threads": 1, "verdict": "INCONCLUSIVE"}, [])
    assert one_thread.verdict == "noisy" and "cpu_threads" not in one_thread.as_dict()["advice"]


def test_competition_is_the_time_this_process_waited_for_a_cpu():
    # 2 CPUs over 1 s: 1.6 s busy, 0.5 s of it this process's, 0.2 s of 2.0 stolen, its threads waiting 0.15 s.
    before = CpuSnapshot(10.0, 100.0, 5.0, 400.0, 20.0, 3.0)
    after = CpuSnapshot(11.0, 101.6, 5.2, 402.0, 20.5, 3.15)
    load = load_between(before, after)
    assert load.other_cores == pytest.approx(1.1) and load.steal_share == pytest.approx(0.1)
    assert load.waited_cores == pytest.approx(0.15) and load.competing(cores_in_use=1)  # waited > 0.1 of a core
    # Others busy on the core left free, this process never waiting: no competition, whatever the others took.
    assert not CpuLoad(1.0, 1.0, 0.0, 2, waited_cores=0.001).competing(cores_in_use=1)
    assert CpuLoad(1.0, 0.0, 0.11, 2, waited_cores=0.0).competing(cores_in_use=1)  # a tenth of the time stolen


def test_without_wait_times_competition_is_judged_from_the_tick_counts():
    two_cpus = CpuLoad(1.0, 1.1, 0.0, 2)
    # More than half a core beyond what the measurement leaves free, less a tick per CPU and one more (3 ticks).
    assert two_cpus.competing(cores_in_use=2) and not two_cpus.competing(cores_in_use=1)
    edge = 0.5 + 3 * cpu_load._TICK_S / 1.0
    assert CpuLoad(1.0, edge + 0.01, 0.0, 2).competing(cores_in_use=2)
    assert not CpuLoad(1.0, edge - 0.01, 0.0, 2).competing(cores_in_use=2)
    # Over an interval of 1.25 ticks, a single stray tick (0.8 of a core) is not competition.
    assert not CpuLoad(1.25 * cpu_load._TICK_S, 0.8, 0.0, 2).competing(cores_in_use=2)
    off_linux = load_between(CpuSnapshot(0.0, None, None, None, None, None), CpuSnapshot(1.0, *[None] * 5))
    assert off_linux.other_cores is None and off_linux.waited_cores is None and not off_linux.competing(1)


def test_a_process_s_ticks_are_read_past_a_name_with_spaces_and_parentheses():
    line = "1234 (my (odd) name) S 1 1234 1234 0 -1 4194304 100 0 0 0 250 75 0 0 20 0 3 0 12345"
    assert process_ticks(line) == 325  # utime 250 + stime 75, fields 14 and 15 of proc(5)


@pytest.mark.parametrize("value, uncertainty, text", [
    (15497.8, 4649.0, "15500"),  # the uncertainty's second significant digit is the hundreds
    (22957.3, 7460.0, "23000"),
    (15497.8, 0.2, "15497.8"),  # never finer than 0.1
    (2004.37, 31.0, "2004"),
    (123.45, None, "123.5"),
    (None, 1.0, "n/a"),
])
def test_a_time_reads_to_the_digits_its_noise_allows(value, uncertainty, text):
    assert fmt_noisy(value, uncertainty) == text
