"""A run's progress a user can plan on: trials done of the run's, time spent, and an ETA from what a trial
and a card measured so far in this run; and the same costs in run.json, for the next plan's estimate.

The ETA is the trials left times the mean wall time of a trial so far (its measurement, checks, profile and
the drift re-timing before it), plus the cards left times a card's own cost (its baseline and confirm
rounds: a finished card's, else the current card's baseline so far). On a terminal it is a tqdm bar over
the run's trials; in a log (redirected), a line per trial and one per card.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from tqdm import tqdm

if TYPE_CHECKING:
    from harness.config.schema import HarnessConfig

log = logging.getLogger("harness")


def duration(seconds: float) -> str:
    """41 s, 3 min 05 s, 1 h 02 min: as precise as a plan needs."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest:02d} s"
    hours, rest = divmod(round(seconds / 60), 60)
    return f"{hours} h {rest:02d} min"


def cost_settings(cfg: HarnessConfig, device: str, profiler: str | None) -> dict[str, Any]:
    """What a trial's and a card's cost depend on besides the cards: the workload's scale on this device, the
    timing budgets and the profiler. run.json records them beside the costs, and a plan's estimate takes
    the costs of a run made with the same (harness.run.estimate): a test run at scale 0.05 says nothing of a
    default run's."""
    cuda = device.startswith("cuda")
    timing = cfg.timing
    scale = cfg.workload.scale if cfg.workload.scale is not None else (1.0 if cuda else cfg.workload.cpu_scale)
    return {"scale": scale, "warmup": timing.warmup, "min_repeats": timing.min_repeats, "budget_s": timing.budget_s,
            "drift_budget_s": timing.drift_budget_s, "confirm_rounds": timing.confirm_rounds,
            "cuda_graph": timing.cuda_graph if cuda else False, "profiler": profiler}


@dataclass
class RunProgress:
    """Counts and costs of one run's cards and trials; `clock` is injectable so a test plants the costs."""

    cards: int  # the run's cards
    trials: int  # the trials the run plans over all its cards (updated when a resumed card has fewer left)
    clock: Callable[[], float] = time.perf_counter
    card_index: int = 0  # cards started
    trials_done: int = 0
    trial_s: list[float] = field(default_factory=list)  # each finished trial's wall time
    card_s: list[float] = field(default_factory=list)  # each finished card's wall time outside its trials
    _started: float = 0.0
    _card_started: float = 0.0
    _card_trials_s: float = 0.0
    _last: float = 0.0
    _bar: Any = None

    def __post_init__(self) -> None:
        self._started = self._last = self.clock()

    def spent_s(self) -> float:
        return self.clock() - self._started

    def eta_s(self) -> float | None:
        """Seconds left, from the costs measured so far; None before the first trial or card has a cost."""
        trials_left = max(self.trials - self.trials_done, 0)
        cards_left = self.cards - self.card_index  # cards not started yet
        if self.card_s:
            card_cost = sum(self.card_s) / len(self.card_s)
            # The current card still has its confirm rounds: a finished card's cost less what this one spent.
            running = self.card_index > len(self.card_s)
            current = max(card_cost - self._card_overhead_so_far(), 0.0) if running else 0.0
        else:
            card_cost, current = self._card_overhead_so_far(), 0.0  # its baseline so far: a lower bound
        if trials_left and not self.trial_s:
            return None
        trial_cost = sum(self.trial_s) / len(self.trial_s) if self.trial_s else 0.0
        return trials_left * trial_cost + cards_left * card_cost + current

    def _card_overhead_so_far(self) -> float:
        return self.clock() - self._card_started - self._card_trials_s

    def line(self) -> str:
        """trial 5 of 27, card 2 of 3, 41 s spent, 4.1 s a trial, ETA 1 min 23 s"""
        parts = [f"trial {self.trials_done} of {self.trials}", f"card {self.card_index} of {self.cards}",
                 f"{duration(self.spent_s())} spent"]
        if self.trial_s:
            parts.append(f"{sum(self.trial_s) / len(self.trial_s):.1f} s a trial")
        eta = self.eta_s()
        parts.append(f"ETA {duration(eta)}" if eta is not None else "ETA after the first trial")
        return ", ".join(parts)

    def start_card(self, card_id: str) -> None:
        """A card starts (its baseline first)."""
        self.card_index += 1
        self._card_started = self._last = self.clock()
        self._card_trials_s = 0.0
        if self._bar is not None:
            self._bar.set_description_str(f"card {self.card_index}/{self.cards} {card_id}")

    def trials_left(self, planned: int, left: int) -> None:
        """The current card's study was counted at `planned` trials and has `left` (fewer on a resume)."""
        self.trials -= planned - left
        self._last = self.clock()
        if self._bar is not None:
            self._bar.total = self.trials
            self._bar.refresh()

    def trial_done(self, what: str) -> None:
        """A trial finished (its drift re-timing included): its cost counted, the progress shown."""
        now = self.clock()
        self.trial_s.append(now - self._last)
        self._card_trials_s += now - self._last
        self._last = now
        self.trials_done += 1
        if self._bar is not None:
            self._bar.set_postfix_str(self._postfix(), refresh=False)
            self._bar.update(1)
        else:
            log.info("%s: %s", what, self.line())

    def card_done(self, card_id: str) -> None:
        self.card_s.append(self._card_overhead_so_far())
        if self._bar is not None:
            self._bar.set_postfix_str(self._postfix())
        else:
            log.info("card %s done: %s", card_id, self.line())

    def _postfix(self) -> str:
        eta = self.eta_s()
        return f"{duration(self.spent_s())} spent, ETA {duration(eta) if eta is not None else '?'}"

    def costs(self, settings: dict[str, Any]) -> dict[str, Any]:
        """What run.json records for the next plan's estimate (harness.run.estimate), with the `settings` they
        were measured under (cost_settings)."""
        return {"trials": self.trials_done, "cards": len(self.card_s),
                "trial_s": sum(self.trial_s) / len(self.trial_s) if self.trial_s else None,
                "card_s": sum(self.card_s) / len(self.card_s) if self.card_s else None, "settings": settings}

    def open(self) -> RunProgress:
        """A tqdm bar over the run's trials on a terminal; log lines otherwise."""
        if sys.stderr.isatty() and self.trials:
            # tqdm's own remaining time counts trials only; the postfix is this ETA, cards' costs included.
            self._bar = tqdm(total=self.trials, unit="trial", leave=False, dynamic_ncols=True,
                             bar_format="{desc}: {percentage:3.0f}%|{bar}| {n_fmt}/{total_fmt} trials{postfix}")
        return self

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
