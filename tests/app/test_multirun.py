"""One summary over a Hydra multirun (harness.run.multirun): the sweep folder gets summary.md and report.html."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.run.multirun import find_jobs, first_table, write_multirun_summary
from tests.app.test_run import TINY

CARD = "vae-480-conv3d-96to3k333t3-842ecd"
TABLE = ["| card | baseline us | outcome |", "|---|---:|---|", "| `c1` | 10.0 | adopted |"]


def _job(sweep: Path, folder: str, overrides: list[str], experiment: str, summary: str | None = None,
         run: dict | None = None) -> None:
    job = sweep / folder
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    (job / ".hydra" / "config.yaml").write_text(f"experiment:\n  name: {experiment}\n")
    if summary is not None:
        (job / "summary.md").write_text(summary)
        (job / "report.html").write_text("<html></html>")
    if run is not None:
        (job / "run.json").write_text(json.dumps(run))


def test_the_sweep_summary_lists_every_job_in_order_with_its_overrides_status_and_rows(tmp_path):
    summary = "# vae_bf16\n\nHypothesis: h\n\n" + "\n".join(TABLE) + "\n\n- `c1` note\n\n| other | table |\n|---|---|\n"
    for n in (0, 1, 10, 2):
        _job(tmp_path, str(n), [f"search.seed={n}", "experiment=vae_bf16"], "vae_bf16", summary)
    _job(tmp_path, "3", ["search.seed=3", "experiment=vae_bf16"], "vae_bf16")  # failed before writing
    _job(tmp_path, "4", ["search.seed=4", "experiment=vae_bf16"], "vae_bf16", summary,
         {"stopped": {"resume": "python -m harness search.resume=true hydra.run.dir=x/4"}})
    (tmp_path / "0" / "trials" / ".hydra").mkdir(parents=True)  # inside a job: never a job of its own
    assert [p.as_posix() for p in find_jobs(tmp_path)] == ["0", "1", "2", "3", "4", "10"]

    text = write_multirun_summary(tmp_path)
    assert text == (tmp_path / "summary.md").read_text()
    assert "Overrides of every job: `experiment=vae_bf16`" in text
    assert ("| `2` | vae_bf16 | `search.seed=2` | done | [report.html](2/report.html), [summary.md](2/summary.md) |"
            in text)
    assert ("| `3` | vae_bf16 | `search.seed=3` | no summary.md: the job failed or stopped before writing it | none |"
            in text)
    assert "stopped; resume with `python -m harness search.resume=true hydra.run.dir=x/4`" in text
    assert text.count("| `c1` | 10.0 | adopted |") == 5 and "| other | table |" not in text  # its first table only
    assert "## Job 10: vae_bf16" in text and "No summary table" in text
    page = (tmp_path / "report.html").read_text()
    assert '<a href="10/report.html">report.html</a>' in page and "<table>" in page and "<pre>" not in page


def test_first_table_is_the_header_separator_and_rows():
    assert first_table("# t\n\ntext | not a table\n\n" + "\n".join(TABLE) + "\n\nafter\n") == TABLE
    assert first_table("# no table\n") == []


@pytest.mark.slow
def test_a_multirun_over_two_experiments_gets_one_summary_in_the_sweep_folder(tmp_path):
    # docs/outputs.md's example with the default sweep folder (no hydra.sweep.dir): a folder named by the swept
    # experiment put each job elsewhere, and the sweep's page listed one of the two.
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "--multirun", "experiment=vae_channels_last,vae_bf16", f"cards=[{CARD}]",
         *TINY],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    sweeps = list((tmp_path / "multirun").iterdir())
    assert len(sweeps) == 1, sweeps  # one sweep, one folder
    tmp_path = sweeps[0]
    for job in ("0", "1"):
        assert (tmp_path / job / "summary.md").exists() and (tmp_path / job / "report.html").exists()
    summary = (tmp_path / "summary.md").read_text()
    assert "| `0` | vae_channels_last | `experiment=vae_channels_last` | done |" in summary
    assert "| `1` | vae_bf16 | `experiment=vae_bf16` | done |" in summary
    assert f"`cards=[{CARD}]`" in summary.split("| job |")[0]  # shared by both jobs: said once
    assert "[summary.md](1/summary.md)" in summary
    rows = [line for line in summary.splitlines() if line.startswith(f"| `{CARD}` |")]
    assert len(rows) == 2  # each job's summary row
    page = (tmp_path / "report.html").read_text()
    assert '<a href="0/report.html">report.html</a>' in page and '<a href="1/report.html">report.html</a>' in page
    assert f"<td><code>{CARD}</code></td>" in page
    assert f"multirun summary: {tmp_path.resolve() / 'summary.md'}" in proc.stdout
    # Both jobs at a glance, first: a row each, linking to its job's page.
    glance = page.split('<section id="at-a-glance">')[1].split("</section>")[0]
    assert page.index('<section id="at-a-glance">') < page.index("<table>")
    assert '<a href="0/report.html">0</a>' in glance and '<a href="1/report.html">1</a>' in glance
    assert "vae_channels_last" in glance and "vae_bf16" in glance
