"""One summary over a Hydra multirun (`python -m harness --multirun experiment=vae_channels_last,vae_bf16`).

Hydra runs each job of a sweep in a folder of its own under `hydra.sweep.dir` (`0/`, `1/`, ...), each
with its own summary.md and report.html, and leaves nothing that shows them together. `MultirunSummary`,
a Hydra callback registered under `hydra.callbacks` in conf/config.yaml, writes `summary.md` and
`report.html` in the sweep folder once every job has returned: per job its folder, its overrides, its
experiment and the rows of its summary table, with links to the job's summary.md and report.html.

Hydra calls `on_multirun_end` in the process that started the sweep, whatever the launcher (with
submitit the jobs run elsewhere), so the summary is read from the jobs' folders on disk: a job is a
folder holding `.hydra/overrides.yaml`, which Hydra writes before the job's code runs.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from harness.cards.atomic import write_text_atomic
from harness.report.glance import Glance, gathered, gathered_noise
from harness.report.glance_html import glance_section
from harness.report.html import render_index_html
from harness.report.next_steps import GPU, multirun_gpu_step
from harness.run.provenance import run_name

_SEPARATOR_ROW = re.compile(r"^\|(\s*:?-+:?\s*\|)+\s*$")
OUTPUT_FILES = ("report.html", "summary.md")  # what each job's line links to, when the job wrote it


@dataclass
class Job:
    folder: Path  # relative to the sweep folder
    overrides: list[str]
    experiment: str
    status: str  # "done", or what became of a job whose outputs are missing or incomplete
    table: list[str]  # the first table of its summary.md: header, separator, rows


def _code(text: str) -> str:
    """`text` as a Markdown code span, whatever backticks it holds."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * (longest + 1)
    return f"{fence} {text} {fence}" if longest else f"`{text}`"


def _href(folder: Path, name: str) -> str:
    return quote(f"{folder.as_posix()}/{name}")


def first_table(markdown: str) -> list[str]:
    """The lines of the first pipe table of `markdown` (header, separator, rows); [] when there is none."""
    lines = markdown.splitlines()
    for i in range(len(lines) - 1):
        if lines[i].startswith("|") and _SEPARATOR_ROW.match(lines[i + 1].strip()):
            end = i + 2
            while end < len(lines) and lines[end].startswith("|"):
                end += 1
            return lines[i:end]
    return []


def find_jobs(sweep_dir: Path) -> list[Path]:
    """Every job folder under `sweep_dir` (any `hydra.sweep.subdir`, nested ones included), in job order:
    numbered folders by number, then the others by name. A job's own sub-folders are not searched."""
    found: list[Path] = []
    for folder, subfolders, _ in os.walk(sweep_dir):
        if (Path(folder) / ".hydra" / "overrides.yaml").is_file():
            found.append(Path(folder).relative_to(sweep_dir))
            subfolders.clear()  # trials/, an auto run's sub-runs: never jobs of this sweep
    return sorted(found, key=lambda p: [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in p.parts])


def read_job(sweep_dir: Path, folder: Path) -> Job:
    job_dir = sweep_dir / folder
    overrides = [str(o) for o in OmegaConf.load(job_dir / ".hydra" / "overrides.yaml")]
    config_path = job_dir / ".hydra" / "config.yaml"
    config: Any = OmegaConf.to_container(OmegaConf.load(config_path)) if config_path.is_file() else None  # a job's YAML
    experiment = run_name(config) if isinstance(config, dict) and "experiment" in config else "?"
    summary_path = job_dir / "summary.md"
    try:
        run = json.loads((job_dir / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        run = {}
    if not summary_path.is_file():
        status = "no summary.md: the job failed or stopped before writing it"
    elif run.get("stopped"):
        status = f"stopped; resume with {_code(str((run['stopped'] or {}).get('resume', '?')))}"
    else:
        status = "done"
    table = first_table(summary_path.read_text(encoding="utf-8")) if summary_path.is_file() else []
    return Job(folder, overrides, experiment, status, table)


def render_multirun_summary(sweep_dir: Path, jobs: list[Job], glance: Glance | None = None) -> str:
    """summary.md of the sweep: its jobs at a glance, a table of the jobs, then per job the rows of its own summary
    table."""
    # Overrides every job shares are said once; the table shows what sets each job apart.
    common = [o for o in jobs[0].overrides if all(o in job.overrides for job in jobs)] if len(jobs) > 1 else []
    lines = [f"# multirun: {len(jobs)} job(s)", "",
             (f"Sweep folder {_code(str(sweep_dir))}. Each job is a run of its own, in its own folder with its own "
              "outputs; below, each job's summary table (its times are that run's, measured apart from the other "
              "jobs')."), "", *(glance.markdown() if glance else [])]
    if common:
        lines += ["Overrides of every job: " + " ".join(_code(o) for o in common), ""]
    lines += ["| job | experiment | overrides | status | outputs |", "|---|---|---|---|---|"]
    for job in jobs:
        own = [o for o in job.overrides if o not in common]
        outputs = ", ".join(f"[{name}]({_href(job.folder, name)})" for name in OUTPUT_FILES
                            if (sweep_dir / job.folder / name).is_file())
        lines.append(f"| {_code(job.folder.as_posix())} | {job.experiment} | "
                     f"{' '.join(_code(o) for o in own) or 'none'} | {job.status} | {outputs or 'none'} |")
    for job in jobs:
        lines += ["", f"## Job {job.folder.as_posix()}: {job.experiment}", ""]
        lines += job.table or ["No summary table (see its status above)."]
    return "\n".join(lines) + "\n"


def sweep_overrides(sweep_dir: Path) -> list[str]:
    """The sweep's own overrides as given (`experiment=a,b`), from the multirun.yaml Hydra writes in the folder."""
    try:
        found = OmegaConf.load(sweep_dir / "multirun.yaml").hydra.overrides.task
    except Exception:  # absent or not Hydra's: the GPU step then names only the settings every run has
        return []
    return [str(o) for o in found]


def write_multirun_summary(sweep_dir: Path) -> str:
    """Write summary.md and report.html over the sweep's jobs into `sweep_dir`; return the summary."""
    jobs = [read_job(sweep_dir, folder) for folder in find_jobs(sweep_dir)]
    folders = {job.folder.as_posix(): sweep_dir / job.folder for job in jobs}
    glance = gathered(folders)  # each job's glance.json, its rows linking to the job's page
    if any(step.kind == GPU for step in glance.next):  # one GPU sweep for the jobs' GPU runs
        glance.next = [s for s in glance.next if s.kind != GPU] + [multirun_gpu_step(sweep_overrides(sweep_dir))]
    text = render_multirun_summary(sweep_dir, jobs, glance)
    write_text_atomic(sweep_dir / "summary.md", text)
    head = glance_section(glance, gathered_noise(folders))
    write_text_atomic(sweep_dir / "report.html", render_index_html(f"harness multirun: {sweep_dir}", text, head))
    return text


class MultirunSummary(Callback):
    """Hydra callback: after the last job of a `--multirun`, the combined summary in the sweep folder.
    A single run (no --multirun) never calls it."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        # The launcher made the job folders under this same path: `now` in it resolves once per config.
        sweep_dir = Path(str(config.hydra.sweep.dir))
        if sweep_dir.is_dir():  # a sweep with no job (all stopped before starting) has nothing to show
            write_multirun_summary(sweep_dir)
            print(f"multirun summary: {sweep_dir.resolve() / 'summary.md'} (and report.html)")
