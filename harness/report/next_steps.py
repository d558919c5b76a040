"""What to run next, as commands to copy: resume a stopped run, more confirm rounds for an undecided card, and the
GPU run that measures what a CPU cannot.

Each command keeps the run's own overrides (as Hydra recorded them in the run folder's `.hydra/overrides.yaml`, or
an `experiment=auto` run's, for its sub-runs) except those the step sets itself, so that it measures what this run
measured, the same way, with the one change it names.
"""

from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from omegaconf import OmegaConf

from harness.cards.noise import MAX_MORE_ROUNDS

if TYPE_CHECKING:
    from harness.report.glance import GlanceRow

RESUME, MORE_ROUNDS, GPU = "resume", "more_rounds", "gpu"
UNDECIDED = "INCONCLUSIVE"
# Overrides a step sets itself (exact keys, and key prefixes ending in "."), never carried over from the run.
_SET_BY_EVERY_STEP = ("experiment", "search.resume", "hydra.", "auto.")
_SET_BY = {MORE_ROUNDS: ("cards", "timing.confirm_rounds"),
           GPU: ("device", "profiler", "profiler.", "workload.cpu_scale")}


@dataclass(frozen=True)
class NextStep:
    kind: str  # RESUME, MORE_ROUNDS or GPU
    why: str
    command: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def run_overrides(run_dir: Path) -> list[str]:
    """The overrides the run was started with: Hydra's record in the run folder, else in the folder above it (an
    `experiment=auto` run's sub-run); [] when neither has one."""
    for folder in (run_dir, run_dir.parent):
        path = folder / ".hydra" / "overrides.yaml"
        if not path.is_file():
            continue
        try:
            found = OmegaConf.to_container(OmegaConf.load(path))
        except Exception:  # not Hydra's record (OmegaConf raises several types): no overrides to carry
            return []
        return [str(o) for o in found] if isinstance(found, list) else []
    return []


def _kept(overrides: Iterable[str], kind: str, keep: Sequence[str] = ()) -> list[str]:
    own = [o for o in (*_SET_BY_EVERY_STEP, *_SET_BY.get(kind, ())) if o not in keep]

    def set_here(override: str) -> bool:
        key = override.lstrip("+~").partition("=")[0]
        return any(key.startswith(o) if o.endswith(".") else key == o for o in own)

    return [o for o in overrides if not set_here(o)]


def harness_command(args: Sequence[str], multirun: bool = False) -> str:
    return "python -m harness " + ("--multirun " if multirun else "") + " ".join(shlex.quote(a) for a in args)


def more_rounds_step(row: GlanceRow, overrides: Sequence[str], device: str) -> NextStep | None:
    """For an INCONCLUSIVE card: its run again with as many confirm rounds as would likely decide it (the rounds
    kept plus the more the interval asked for; twice the rounds run where too few were kept to estimate it). Where
    its speedup sits on a band edge no number of rounds decides (harness.cards.noise.MAX_MORE_ROUNDS): on a CPU, the
    card on a GPU, whose band is narrower; on a GPU, nothing."""
    if row.verdict != UNDECIDED:
        return None
    if row.more_rounds is not None and row.more_rounds >= MAX_MORE_ROUNDS:
        if device.startswith("cuda"):
            return None
        why = (f"`{row.card}` ({row.experiment}) is INCONCLUSIVE with its speedup on the SAME band's edge: no number "
               "of rounds would likely decide it here; a GPU judges a change this small against its narrower band")
        run_cards = [o for o in _kept(overrides, GPU) if o.lstrip("+~").partition("=")[0] != "cards"]
        args = [f"experiment={row.experiment}", *run_cards, f"cards=[{row.card}]", "device=cuda", "profiler=ncu"]
        return NextStep(GPU, why, harness_command(args))
    if row.more_rounds is not None and row.rounds:
        rounds = row.rounds + row.more_rounds
        why = f"about {row.more_rounds} more rounds would likely decide it"
    else:
        rounds = 2 * max(row.rounds_run or 0, 4)
        why = "too few rounds were left undisturbed to estimate how many would decide it"
    args = [f"experiment={row.experiment}", *_kept(overrides, MORE_ROUNDS), f"cards=[{row.card}]",
            f"timing.confirm_rounds={rounds}"]
    return NextStep(MORE_ROUNDS, f"`{row.card}` ({row.experiment}) is INCONCLUSIVE: {why}", harness_command(args))


GPU_WHY = ("on a machine with an NVIDIA GPU and Nsight Compute: ncu measures the checks that read 'not measurable' "
           "on a CPU, and savings are projected from the report's GPU at workload scale 1")


def gpu_step(experiment: str, overrides: Sequence[str]) -> NextStep:
    """The same run (its cards, its settings but the CPU's) on an NVIDIA GPU under Nsight Compute: what a CPU run
    cannot measure."""
    args = [f"experiment={experiment}", *_kept(overrides, GPU), "device=cuda", "profiler=ncu"]
    return NextStep(GPU, GPU_WHY, harness_command(args))


def multirun_gpu_step(sweep_overrides: Sequence[str]) -> NextStep:
    """The same sweep (its swept experiments and values kept) on an NVIDIA GPU under Nsight Compute."""
    args = [*_kept(sweep_overrides, GPU, keep=("experiment",)), "device=cuda", "profiler=ncu"]
    return NextStep(GPU, GPU_WHY, harness_command(args, multirun=True))


def resume_step(run: Mapping[str, Any]) -> NextStep | None:
    """A stopped run's resume line, as run.json records it (harness.run.stopping)."""
    stopped = run.get("stopped")
    command = stopped.get("resume") if isinstance(stopped, dict) else None
    if not command:
        return None
    return NextStep(RESUME, "the run was stopped before its last card: resume it in its folder", str(command))


def next_steps(rows: Sequence[GlanceRow], experiment: str, device: str, overrides: Sequence[str]) -> list[NextStep]:
    """More rounds for each INCONCLUSIVE row, then, on a CPU, the GPU run of the same cards."""
    steps = [step for row in rows if (step := more_rounds_step(row, overrides, device)) is not None]
    if not device.startswith("cuda"):
        steps.append(gpu_step(experiment, overrides))
    return steps
