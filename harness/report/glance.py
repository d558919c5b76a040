"""The run at a glance: per card what won, by how much, how sure, what it saves in the model; and what to run next.

One `Glance` per run folder, made where the run writes its outputs and kept beside them as glance.json (a saving
that is not known is null there, with why), so that summary.md's first lines, the page's first section
(harness.report.glance_html) and the pages over several runs (`experiment=auto`, a multirun) say the same thing.
A row per card and experiment: the variant adopted, or the baseline kept with the best variant tried; its speedup
with the 95% interval of the paired confirm rounds and the time verdict; the saving in the model where it is known
(harness.report.savings), else why not. The commands are harness.report.next_steps'.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.cards.atomic import write_json_atomic
from harness.cards.diff_markdown import interval_text
from harness.cards.measures import time_in_model
from harness.report.next_steps import GPU, NextStep, gpu_step, run_overrides
from harness.report.overview import CardResult
from harness.report.savings import NOT_APPLICABLE, card_saving

GLANCE_FILE = "glance.json"
AUTO = "auto"  # the experiment option of an auto run
BASELINE_ONLY = "baseline only"  # harness.run.outputs.card_results' variant for an experiment with nothing to search
HEADER = ("At a glance (speedup = baseline / variant time per original call, with the 95% interval of the paired "
          "confirm rounds; report.html draws them):")


@dataclass(frozen=True)
class GlanceRow:
    card: str
    experiment: str
    outcome: str  # "adopted X", "baseline kept (best tried X)", "baseline kept: no feasible variant", ...
    variant: str | None  # the best variant tried, 'name(k=v)'; None: none was measured
    adopted: bool
    speedup: float | None
    ci: list[float] | None
    verdict: str | None  # the time verdict; None without a variant
    band: float | None  # the SAME band the verdict was judged against (0.05: [1/1.05, 1.05])
    saving_us: float | None  # in the model; None: not known (saving_why says why)
    saving_why: str = ""
    rounds: int | None = None  # paired confirm rounds kept
    rounds_run: int | None = None
    more_rounds: int | None = None  # INCONCLUSIVE: about how many more rounds would likely decide
    run: str = ""  # the row's run folder relative to the page's ('' for the page's own run)

    def saving_text(self) -> str:
        return (f"saves {self.saving_us:.1f} us in the model" if self.saving_us is not None
                else f"saving {NOT_APPLICABLE} ({self.saving_why})")

    def line(self, with_experiment: bool = False) -> str:
        """One Markdown line: card, outcome, speedup [95% CI] and verdict, saving."""
        who = f"`{self.card}`" + (f" ({self.experiment})" if with_experiment else "")
        timed = f": {interval_text(self.speedup, self.ci)} {self.verdict or ''}".rstrip() if self.speedup else ""
        return f"- {who}: {self.outcome}{timed}; {self.saving_text()}"


@dataclass
class Glance:
    rows: list[GlanceRow]
    next: list[NextStep] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"rows": [asdict(r) for r in self.rows], "next": [s.as_dict() for s in self.next]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Glance:
        return cls([GlanceRow(**r) for r in data.get("rows") or []], [NextStep(**s) for s in data.get("next") or []])

    def several_experiments(self) -> bool:
        return len({r.experiment for r in self.rows}) > 1

    def markdown(self) -> list[str]:
        """summary.md's first lines after the noise verdict: a line per row, then the next commands."""
        lines = [HEADER, "", *[r.line(self.several_experiments()) for r in self.rows], ""]
        if self.next:
            lines += ["Next:", "", *[f"- {step.why}: `{step.command}`" for step in self.next], ""]
        return lines


def _outcome(result: CardResult) -> str:
    d = result.diff
    if d is None:
        return ("baseline only (the experiment measures the baseline)" if result.variant == BASELINE_ONLY
                else "baseline kept: no feasible variant")
    label = (d.variant or {}).get("label") or result.variant or "?"
    if d.adopted is None:  # a baseline-only run's row: the report's card against its re-profile
        return f"{BASELINE_ONLY}: the experiment's check {d.verdict}"
    return f"adopted {label}" if d.adopted else f"baseline kept (best tried {label})"


def glance_rows(results: Sequence[CardResult], confirmations: Mapping[str, Mapping[str, Any] | None],
                report_device: str | None) -> list[GlanceRow]:
    """A row per result, in their order; `confirmations`, each card's confirm record (rounds, more rounds)."""
    rows = []
    for result in results:
        found = time_in_model(result.card)
        saving = card_saving(result, found.us if found is not None else None, report_device)
        confirmed = confirmations.get(result.card.id) or {}
        d = result.diff if result.diff is not None and result.diff.adopted is not None else None  # a timed pair
        rows.append(GlanceRow(
            card=result.card.id, experiment=result.experiment, outcome=_outcome(result),
            variant=((d.variant or {}).get("label") or result.variant) if d else None, adopted=bool(d and d.adopted),
            speedup=d.speedup if d else None, ci=list(d.speedup_ci) if d and d.speedup_ci else None,
            verdict=d.timing_verdict if d else None, band=d.same_band if d else None,
            saving_us=saving.us, saving_why=saving.why, rounds=confirmed.get("rounds"),
            rounds_run=confirmed.get("rounds_run"), more_rounds=confirmed.get("more_rounds")))
    return rows


def write_glance(run_dir: Path, glance: Glance) -> Path:
    return write_json_atomic(Path(run_dir) / GLANCE_FILE, glance.as_dict())


def read_glance(run_dir: Path) -> Glance | None:
    """The run folder's glance.json; None when it has none (a run stopped before its first card, an older run)."""
    try:
        return Glance.from_dict(json.loads((Path(run_dir) / GLANCE_FILE).read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def gathered(folders: Mapping[str, Path]) -> Glance:
    """The rows and steps of several runs' glance.json (an auto run's sub-runs, a multirun's jobs), each row naming
    its folder (the keys: relative to the page over them)."""
    rows: list[GlanceRow] = []
    steps: list[NextStep] = []
    for relative, folder in folders.items():
        found = read_glance(folder)
        if found is None:
            continue
        rows += [replace(r, run=relative) for r in found.rows]
        steps += [s for s in found.next if s not in steps]
    return Glance(rows, steps)


def auto_glance(run_dir: Path, sub_runs: Sequence[str], device: str) -> Glance:
    """An `experiment=auto` run's: its sub-runs' rows and more-rounds steps; on a CPU one GPU step, auto's own."""
    glance = gathered({name: Path(run_dir) / name for name in sub_runs})
    glance.next = [s for s in glance.next if s.kind != GPU]
    if not device.startswith("cuda"):
        glance.next.append(gpu_step(AUTO, run_overrides(Path(run_dir))))
    return glance


def gathered_noise(folders: Mapping[str, Path]) -> dict[str, Any] | None:
    """One noise verdict over several runs (their run.json's): noisy where any was, with each noisy run's reasons
    under its folder's name; None where none recorded one."""
    verdicts = {}
    for relative, folder in folders.items():
        try:
            noise = json.loads((Path(folder) / "run.json").read_text(encoding="utf-8")).get("noise")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(noise, dict) and noise.get("verdict"):
            verdicts[relative] = noise
    if not verdicts:
        return None
    noisy = {name: n for name, n in verdicts.items() if n["verdict"] != "quiet"}
    if not noisy:
        return {"verdict": "quiet", "summary": f"in each of {len(verdicts)} runs"}
    return {"verdict": "noisy", "advice": next(iter(noisy.values())).get("advice") or "",
            "reasons": [f"{name}: {reason}" for name, n in noisy.items() for reason in n.get("reasons") or []]}
