"""A run's progress and ETA (harness.run.progress), from planted per-trial and per-card costs: no timing."""

from __future__ import annotations

import logging

import pytest

from harness.run.progress import RunProgress, duration


class Clock:
    """A planted clock: each step the test takes advances it by what the step is said to cost."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("seconds, shown", [(0.4, "0 s"), (41.2, "41 s"), (185, "3 min 05 s"),
                                            (3720, "1 h 02 min"), (-3, "0 s")])
def test_durations_read_as_a_plan_needs_them(seconds, shown):
    assert duration(seconds) == shown


def test_the_eta_is_trials_left_times_a_trial_plus_cards_left_times_a_card():
    clock = Clock()
    run = RunProgress(cards=3, trials=9, clock=clock)  # 3 cards of 3 trials
    run.start_card("a")
    clock.now += 6.0  # its baseline
    run.trials_left(3, 3)
    assert run.eta_s() is None  # nothing measured of a trial yet
    assert run.line().endswith("ETA after the first trial")
    for cost in (4.0, 5.0, 6.0):
        clock.now += cost
        run.trial_done("a")
    clock.now += 4.0  # its confirm rounds
    run.card_done("a")
    # 6 trials left at 5 s, 2 cards left at 10 s (6 s baseline + 4 s confirm)
    assert run.eta_s() == pytest.approx(6 * 5.0 + 2 * 10.0)
    assert run.line() == "trial 3 of 9, card 1 of 3, 25 s spent, 5.0 s a trial, ETA 50 s"
    run.start_card("b")
    clock.now += 7.0  # b's baseline: the 3 s of a card's cost it has left (10 - 7) still count
    run.trials_left(3, 3)
    assert run.eta_s() == pytest.approx(6 * 5.0 + 1 * 10.0 + 3.0)
    assert run.costs({"scale": 0.25}) == {"trials": 3, "cards": 1, "trial_s": 5.0, "card_s": 10.0,
                                         "settings": {"scale": 0.25}}


def test_a_resumed_card_with_fewer_trials_left_shortens_the_run():
    clock = Clock()
    run = RunProgress(cards=2, trials=8, clock=clock)
    run.start_card("a")
    run.trials_left(4, 1)  # 3 of its trials were done by the stopped run
    assert run.trials == 5
    clock.now += 2.0
    run.trial_done("a")
    # 4 trials left at 2 s; the first card's baseline took no time on this clock: no card cost yet
    assert run.eta_s() == pytest.approx(4 * 2.0)


def test_in_a_log_each_trial_and_card_is_one_line(caplog):
    clock = Clock()
    run = RunProgress(cards=1, trials=2, clock=clock).open()  # pytest's stderr is no terminal
    with caplog.at_level(logging.INFO, logger="harness"):
        run.start_card("c1")
        run.trials_left(2, 2)
        clock.now += 3.0
        run.trial_done("c1 [bruteforce]")
        clock.now += 3.0
        run.trial_done("c1 [bruteforce]")
        run.card_done("c1")
    run.close()
    assert [r.getMessage() for r in caplog.records] == [
        "c1 [bruteforce]: trial 1 of 2, card 1 of 1, 3 s spent, 3.0 s a trial, ETA 3 s",
        "c1 [bruteforce]: trial 2 of 2, card 1 of 1, 6 s spent, 3.0 s a trial, ETA 0 s",
        "card c1 done: trial 2 of 2, card 1 of 1, 6 s spent, 3.0 s a trial, ETA 0 s",
    ]
