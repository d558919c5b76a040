"""The self-contained HTML report: a real (tiny) run, edge cases of studies and bests, the CLI, a browser."""

from __future__ import annotations

import copy
import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import optuna
import pytest

from harness.cards.diff import diff_reports
from harness.cards.lint import normalize
from harness.cards.model import Report, load_report, save_report
from harness.cards.rules import classify_card
from harness.report.cli import main
from harness.report.html import render_diff_html, render_run_html, write_run_html
from harness.report.roofline import device_roofs
from harness.search import make_storage
from tests.app.test_run import _run
from tests.cards.test_verdict_rows import _batched_pair, _pair

CARD = "vae-480-conv3d-16to16k111t3-9507c7"
VAE_WITH_TRANSPOSES = "vae-704-conv3d-96to96k333t6-b28294"
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "outputs" / "test_artifacts"

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)"
)


def external_loads(page: str) -> list[str]:
    """Every attribute or CSS rule that would make a browser fetch something: src/href to a URL, url(), @import."""
    found = re.findall(r"""\b(?:src|href|xlink:href|srcset|action|data)\s*=\s*["']?\s*(?:[a-z]+:)?//[^"'\s>]*""",
                       page, flags=re.IGNORECASE)
    found += re.findall(r"url\(\s*['\"]?(?!#)[^)]*\)|@import", page, flags=re.IGNORECASE)
    return found


# ---------------------------------------------------------------------------------------------
# A real run at tiny size, once per session


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("html_run")
    proc = _run(out, "experiment=vae_channels_last", f"cards=[{CARD}]", "workload.cpu_scale=0.05",
                "timing.min_repeats=3")
    assert proc.returncode == 0, proc.stderr[-2000:]
    return out


@pytest.fixture(scope="session")
def run_page(run_dir: Path) -> Path:
    return write_run_html(run_dir)


@pytest.mark.slow
def test_the_run_writes_its_own_page_with_the_run_facts(run_dir: Path) -> None:
    """The app's last page is written after run.json: the device and wall time are on it."""
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    run = json.loads((run_dir / "run.json").read_text(encoding="utf-8"))
    assert html.escape(run["environment"]["device_name"]) in page and "wall_s" in page


@pytest.mark.slow
def test_run_page_is_written_atomically_and_self_contained(run_dir: Path, run_page: Path) -> None:
    assert run_page == run_dir / "report.html"
    assert not list(run_dir.glob(".report.html.*"))  # no temporary left behind
    page = run_page.read_text(encoding="utf-8")
    assert page.startswith("<!DOCTYPE html>")
    assert "<script" not in page.lower()
    assert external_loads(page) == []
    assert all(h.startswith("#") for h in re.findall(r'\bhref="([^"]*)"', page))  # links stay on the page
    assert "Content-Security-Policy" in page and "default-src 'none'" in page
    # The control: the scanner does see a load when there is one.
    assert external_loads('<img src="https://cdn.example/x.png"><link href="//fonts.example/a.css">')


@pytest.mark.slow
def test_run_page_has_a_section_per_card_with_plots_and_facts(run_dir: Path, run_page: Path) -> None:
    page = run_page.read_text(encoding="utf-8")
    baseline = load_report(run_dir / "baseline.json")
    diff = json.loads((run_dir / "diff.json").read_text())
    assert page.count('<section class="card"') == len(baseline.cards) == 1
    assert f'id="card-{CARD}"' in page and f'href="#card-{CARD}"' in page
    # the forest plot at a glance, kernel bars, roofline, optimization history: four inline SVGs, no <img>
    assert page.count("<svg") >= 4 and "<img" not in page
    assert "Roofline: achieved FLOP/s" in page and "no device peaks" not in page  # the CPU run records its peaks
    assert "Optimization history of study" in page and f"vae_channels_last:{CARD}" in page
    # One parameter varies (the variant): no importance bar, "1 by construction", but the reason.
    assert "no parameter importances" in page and "1 parameter(s) varying (variant" in page
    d = diff["cards"][0]
    assert d["timing_verdict"] in page and d["verdict"] in page
    assert html.escape(d["class_transition"]) in page and " -> " in d["class_transition"]  # one source, one machine
    assert "max_rel" in page  # the best card's correctness record
    for family in d["kernels_removed"]:
        assert re.search(rf'<tr class="removed"><td><code>{re.escape(family)}</code>', page), family
        assert f"{family}  [removed]" in page  # the bar label inside the SVG
    for family in d["kernels_added"]:
        assert re.search(rf'<tr class="added"><td><code>{re.escape(family)}</code>', page), family
    assert "summary.md" in page


@pytest.mark.slow
def test_the_page_and_the_summary_open_on_the_run_at_a_glance(run_dir: Path, run_page: Path) -> None:
    """What won, by how much, how sure and what next, first: before any table, and in summary.md's first lines."""
    body = run_page.read_text(encoding="utf-8").split("<body>", 1)[1]
    assert body.index('<section id="at-a-glance">') < body.index("<table")
    glance = body.split('<section id="at-a-glance">', 1)[1].split("</section>", 1)[0]
    row = json.loads((run_dir / "diff.json").read_text())["cards"][0]
    assert f"<code>{CARD}</code>" in glance and f">{row['timing_verdict']}<" in glance
    assert '<div id="noise"' in glance and "<svg" in glance  # the noise verdict and the forest plot
    assert "<pre><code>python -m harness experiment=vae_channels_last" in glance
    assert "device=cuda profiler=ncu" in glance  # the GPU run that measures what this CPU cannot
    assert '<details id="run">' in body and body.index("</section>") < body.index('<details id="run">')
    head = (run_dir / "summary.md").read_text().splitlines()[:15]
    assert any(line.startswith(f"- `{CARD}`: ") and row["timing_verdict"] in line for line in head), head
    # Unknown is never zero: on a CPU no saving is projected, and none reads 0.
    summary = (run_dir / "summary.md").read_text().split("## End to end")[1]
    saves = [line.split("|")[-2].strip() for line in summary.splitlines() if line.startswith("| `")]
    stages = [line.split("|")[5:8] for line in summary.splitlines() if line.startswith("| 480x832 |")]
    assert saves and all(cell.startswith("n/a (not projected: measured on ") for cell in saves)
    assert stages and all(cell.strip().startswith("n/a") for cells in stages for cell in cells)
    assert '<section id="end-to-end">' in body and '<section id="recipe">' in body  # rendered, not raw Markdown
    glance_file = json.loads((run_dir / "glance.json").read_text())
    assert glance_file["rows"][0]["saving_us"] is None and glance_file["rows"][0]["saving_why"]
    # search.n_trials (16 by default) cut to the space's 3 variants: said once, in the run's log
    assert (run_dir / "__main__.log").read_text().count("search.n_trials=16 cut to 3 per card") == 1


@pytest.mark.slow
def test_card_without_variant_and_without_storage_keeps_its_baseline(run_dir: Path, tmp_path: Path) -> None:
    copy_dir = tmp_path / "run"
    shutil.copytree(run_dir, copy_dir)
    save_report(Report(cards=[]), copy_dir / "tried.json")
    (copy_dir / "diff.json").write_text(json.dumps({"cards": [], "only_before": [CARD], "only_after": []}))
    (copy_dir / "optuna.log").unlink()
    (copy_dir / "run.json").unlink()
    page = render_run_html(copy_dir)
    assert page.count('<section class="card"') == 1
    assert "No variant for this card" in page and "baseline only" in page
    assert "no Optuna storage" in page
    assert page.count("<svg") >= 2  # the baseline's kernels and roofline still show


# ---------------------------------------------------------------------------------------------
# Studies: empty, too small, all pruned (a synthetic run dir from the shipped report, no app run)


def _synthetic_run(tmp_path: Path, seed_report: Report) -> tuple[Path, str]:
    card = copy.deepcopy(seed_report.card(VAE_WITH_TRANSPOSES))
    card.extra["harness"] = {"experiment": "exp", "variant": "ncdhw", "params": {}, "role": "baseline"}
    save_report(Report(cards=[card]), tmp_path / "baseline.json")
    return tmp_path, f"exp:{card.id}"


def _trial(state: optuna.trial.TrialState, variant: str, value: float | None = None) -> optuna.trial.FrozenTrial:
    dist = {"variant": optuna.distributions.CategoricalDistribution(["a", "b"])}
    attrs = {"variant": variant, "status": "infeasible" if state == optuna.trial.TrialState.PRUNED else "complete"}
    return optuna.trial.create_trial(state=state, value=value, params={"variant": variant}, distributions=dist,
                                     user_attrs=attrs)


@pytest.mark.parametrize(
    "trials, expected",
    [
        ([], ["the study has no trials", "baseline only"]),
        ([("COMPLETE", "a", 5.0)], ["no parameter importances", "1 completed"]),
        ([("COMPLETE", "a", 5.0), ("COMPLETE", "a", 6.0)], ["no parameter importances", "0 parameter(s) varying"]),
        ([("PRUNED", "a", None), ("PRUNED", "b", None)],
         ["no feasible variant (2 infeasible)", "no parameter importances"]),
        ([("COMPLETE", "a", 5.0), ("COMPLETE", "b", 4.0)], ["no parameter importances", "1 parameter(s) varying"]),
    ],
)
def test_studies_of_every_size_render(tmp_path: Path, seed_report: Report, trials, expected) -> None:
    run_dir, name = _synthetic_run(tmp_path, seed_report)
    study = optuna.create_study(study_name=name, storage=make_storage(str(run_dir / "optuna.log")))
    for state, variant, value in trials:
        study.add_trial(_trial(getattr(optuna.trial.TrialState, state), variant, value))
    page = render_run_html(run_dir)
    assert page.count('<section class="card"') == 1
    for text in expected:
        assert text in page, text
    if trials:
        assert "Optimization history of study" in page


def test_a_folder_made_before_the_journal_shows_its_sqlite_studies(tmp_path: Path, seed_report: Report) -> None:
    run_dir, name = _synthetic_run(tmp_path, seed_report)
    study = optuna.create_study(study_name=name, storage=f"sqlite:///{run_dir / 'optuna.db'}")
    study.add_trial(_trial(optuna.trial.TrialState.COMPLETE, "a", 5.0))
    page = render_run_html(run_dir)
    assert "no parameter importances" in page and "1 completed" in page and "optuna.db" in page


@pytest.mark.parametrize("name, text", [("optuna.db", "not a database"), ("optuna.log", "not\na journal\n")])
def test_unreadable_storage_is_a_note_not_a_crash(tmp_path: Path, seed_report: Report, name: str, text: str) -> None:
    run_dir, _ = _synthetic_run(tmp_path, seed_report)
    (run_dir / name).write_text(text)
    page = render_run_html(run_dir)
    assert "unreadable" in page and page.count('<section class="card"') == 1


def test_run_page_needs_a_baseline(tmp_path: Path) -> None:
    from harness.cards.model import ReportError

    with pytest.raises(ReportError, match="baseline.json: no such file"):
        render_run_html(tmp_path)


# ---------------------------------------------------------------------------------------------
# Building blocks without a run


def _transposes_removed(seed_report: Report) -> tuple[Report, Report]:
    before = classify_card(normalize(seed_report).card(VAE_WITH_TRANSPOSES))
    after = copy.deepcopy(before)
    after.kernels = [k for k in after.kernels if "To" not in k.name]
    after.summed_kernel_us = sum(k.metric("dur_us") for k in after.kernels)
    return Report(cards=[before], source="before.json"), Report(cards=[classify_card(after)], source="after.json")


def test_diff_page_marks_removed_transposes(seed_report: Report) -> None:
    before, after = _transposes_removed(seed_report)
    after.cards[0].kernels[0].name = "</svg><script>alert(1)</script>$x$"  # reaches a plot label and a table
    page = render_diff_html(diff_reports(before, after), before, after, title="a <b> & c")
    assert "<title>a &lt;b&gt; &amp; c</title>" in page  # text is escaped, in HTML and inside the SVGs
    assert "<script" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    for family in ("nchwToNhwcKernel", "nhwcToNchwKernel"):
        assert re.search(rf'<tr class="removed"><td><code>{family}</code>', page)
        assert f"{family}  [removed]" in page
    assert "before us" in page and "after us" in page
    assert "no device peaks recorded" in page  # the shipped report carries no peaks: no roofline, no crash
    assert external_loads(page) == [] and "<script" not in page


def test_diff_page_labels_the_timing_per_call_and_the_kernel_sums_per_invocation(seed_report: Report) -> None:
    """A batched variant (20 calls per invocation): its time per call, its kernels per invocation and per call."""
    base, tried = _batched_pair(seed_report)
    tried.extra["variant"]["per_call_us"] = 777.7  # the search's per-call time, before confirm rounds re-timed it
    before, after = Report(cards=[base]), Report(cards=[tried])
    page = render_diff_html(diff_reports(before, after), before, after, title="batched")
    assert ("<th>before us (timing median per original call)</th><th>after us (timing median per original call)</th>"
            in page)
    assert f'<td class="num">5400.0</td><td class="num">{14452.0 / 20:.1f}</td>' in page
    assert ("<th>before us (kernel-duration sum per invocation)</th><th>after us (kernel-duration sum per "
            "invocation)</th><th>before us per original call (/ 1)</th><th>after us per original call (/ 20)</th>"
            in page)
    assert (f'<td class="num">5190.67</td><td class="num">14451.64</td><td class="num">5190.67</td>'
            f'<td class="num">{14451.64 / 20:.2f}</td>') in page
    assert (f"kernel-duration sum per invocation: 5190.67 -&gt; 14451.64 us; per original call: 5190.67 -&gt; "
            f"{14451.64 / 20:.2f} us") in page
    assert "777.7" not in page  # one time per card: the stale search time is not shown beside it


def test_diff_page_rows_name_the_interval_and_the_band(seed_report: Report) -> None:
    _, base, tried, verdict = _pair(seed_report, 2.0)
    before, after = Report(cards=[base]), Report(cards=[tried])
    page = render_diff_html(diff_reports(before, after), before, after, title="confirmed")
    lo, hi = verdict.ci
    assert f'<td class="num">{verdict.speedup:.2f}x [{lo:.2f}, {hi:.2f}]</td>' in page
    assert ('<span class="FASTER">FASTER</span> <small>(whole 95% CI above the SAME band [0.952, 1.05])</small>'
            in page)


def test_gpu_peaks_layout_gives_roofs(seed_report: Report) -> None:
    from harness.hardware.gpu_peaks import lookup

    peaks = lookup("NVIDIA H200")
    compute, dram = peaks.peak("bf16_tflops"), peaks.peak("dram_tbps")
    card = copy.deepcopy(seed_report.card(VAE_WITH_TRANSPOSES))
    card.extra["peaks"] = {**peaks.to_dict(), "compute_peak": "bf16_tflops",
                           "used": {"compute": compute.to_dict(), "dram": dram.to_dict()}}
    roofs = device_roofs(card)
    assert roofs is not None
    assert roofs.compute_flops_s == pytest.approx(compute.value * 1e12)
    assert roofs.bandwidth_bytes_s == pytest.approx(dram.value * 1e12)
    card.extra["peaks"] = {"kind": "cpu", "flops_per_s": {"float32": 1e11}, "mem_bw_bytes_per_s": 1e10}
    assert (device_roofs(card).compute_flops_s, device_roofs(card).bandwidth_bytes_s) == (1e11, 1e10)
    card.extra["peaks"] = None
    assert device_roofs(card) is None


# ---------------------------------------------------------------------------------------------
# CLI


def test_cli_diff_html_leaves_markdown_unchanged(tmp_path: Path, seed_report: Report, capsys) -> None:
    before, after = _transposes_removed(seed_report)
    save_report(before, tmp_path / "before.json")
    save_report(after, tmp_path / "after.json")
    args = ["diff", str(tmp_path / "before.json"), str(tmp_path / "after.json")]
    assert main(args + ["--out", str(tmp_path / "plain.md")]) == 0
    plain = capsys.readouterr().out
    out = tmp_path / "sub" / "diff.html"
    assert main(args + ["--out", str(tmp_path / "diff.md"), "--html", str(out)]) == 0
    assert capsys.readouterr().out == plain
    markdown = (tmp_path / "diff.md").read_text()
    assert markdown == (tmp_path / "plain.md").read_text()
    assert not re.search(r"<(html|svg|table|div|span|img|br|section)\b", markdown)
    page = out.read_text()
    assert page.count('<section class="card"') == 1 and "<svg" in page and external_loads(page) == []


@pytest.mark.parametrize("which", ["before", "html_dir", "html_under_file"])
def test_cli_diff_html_bad_paths_exit_2_with_one_line(tmp_path: Path, seed_report: Report, capsys, which) -> None:
    before, after = _transposes_removed(seed_report)
    save_report(before, tmp_path / "before.json")
    save_report(after, tmp_path / "after.json")
    first = tmp_path / ("missing.json" if which == "before" else "before.json")
    target = {"before": tmp_path / "x.html", "html_dir": tmp_path,
              "html_under_file": tmp_path / "after.json" / "x.html"}[which]
    assert main(["diff", str(first), str(tmp_path / "after.json"), "--html", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


# ---------------------------------------------------------------------------------------------
# A real browser: the page loads from file:// without console errors and draws its plots


def _chromium(tmp_path: Path, url: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'chromium-profile'}", *flags, url],
        capture_output=True, text=True, timeout=180,
    )


def console_errors(stderr: str, url: str) -> list[str]:
    """Chromium's logged console messages raised by this page: JS errors, CSP-refused loads, bad resources.

    With --enable-logging=stderr each one is a line like
    `[..:INFO:CONSOLE:0] "Loading the image 'http://…' violates … Content Security Policy …",
    source: file:///…/report.html (0)` (one line); the page has no script, so any console message
    from it is an error. Chromium's own noise (dbus, vaapi, sandbox) names no page source.
    """
    return [line for line in stderr.splitlines() if ":CONSOLE" in line and f"source: {url}" in line]


@pytest.mark.slow
@needs_chromium
def test_headless_chromium_renders_the_page(run_page: Path, tmp_path: Path) -> None:
    url = run_page.resolve().as_uri()
    shot = tmp_path / "report.png"
    proc = _chromium(tmp_path, url, "--enable-logging=stderr", "--v=0", f"--screenshot={shot}",
                     "--window-size=1280,4000", "--hide-scrollbars")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert console_errors(proc.stderr, url) == []
    from PIL import Image

    with Image.open(shot) as image:
        assert image.size == (1280, 4000)
        assert len(image.convert("RGB").getcolors(maxcolors=1 << 20) or []) > 50  # drawn, not blank
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(shot, ARTIFACTS / "report.png")

    dom = _chromium(tmp_path, url, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    source = run_page.read_text(encoding="utf-8")
    assert dom.stdout.count("<svg") == source.count("<svg") >= 4
    assert dom.stdout.count('<section class="card"') == 1
    assert re.search(r"<svg[^>]*>.*?<path", dom.stdout, flags=re.DOTALL)  # the plots parsed as SVG, with shapes


@pytest.mark.slow
@needs_chromium
def test_console_check_catches_an_external_load(run_page: Path, tmp_path: Path) -> None:
    """The control for the check above: the same page with one CDN image is caught by its policy."""
    broken = tmp_path / "broken.html"
    broken.write_text(run_page.read_text(encoding="utf-8").replace(
        "</body>", '<img src="https://cdn.example.invalid/logo.png"></body>'), encoding="utf-8")
    url = broken.resolve().as_uri()
    proc = _chromium(tmp_path, url, "--enable-logging=stderr", "--v=0", f"--screenshot={tmp_path / 'b.png'}",
                     "--window-size=800,600")
    errors = console_errors(proc.stderr, url)
    assert errors and "Content Security Policy" in errors[0]
