"""Nothing said twice, nothing left out, nothing misleading: `report diff` on run folders, charts that say what
they are (importances named, none for one parameter, the baseline on the history, readable log axes), the sweep
folder and the log of library warnings in the config, the lint totals docs/report-files.md quotes, the diff's time
line."""

from __future__ import annotations

import copy
import json
import logging
import re
import warnings
from pathlib import Path

import optuna
import pytest
import yaml

from harness.cards.diff import diff_cards
from harness.cards.diff_markdown import render_markdown
from harness.cards.diff_rows import ReportDiff
from harness.cards.lint import normalize
from harness.cards.model import Report, load_report, save_report
from harness.report.cli import main
from harness.report.markdown_html import markdown_to_html
from harness.report.plots import log_ticks, roofline_svg
from harness.report.roofline import Roofs
from harness.report.studies import IMPORTANCE_METHOD, LIBRARY_LOG, history_svg, load_studies
from harness.run.execute import trials_cut
from harness.search import make_storage
from tests.cards.test_diff_and_cli import VAE, _run_best
from tests.cards.test_verdict_rows import _pair

ROOT = Path(__file__).resolve().parents[2]


# -- report diff takes run folders ----------------------------------------------------------------------


def _run_folder(seed_report, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    _run_best(seed_report, run, experiment="vae_channels_last", variant="channels_last_3d", params={},
              check="transposes_removed", hypothesis="h", median_us=1000.0)
    baseline = copy.deepcopy(Report(cards=[normalize(seed_report).card(VAE)]))
    baseline.cards[0].extra.update({"harness": {"experiment": "vae_channels_last", "variant": "ncdhw", "params": {},
                                                "role": "baseline", "run": str(run.resolve())},
                                    "timing": {"median_us": 2000.0, "spread": 0.01}})
    save_report(baseline, run / "baseline.json")
    return run


def test_a_run_folder_diffs_its_baseline_against_its_best_and_says_what_it_read(seed_report, tmp_path, capsys):
    run = _run_folder(seed_report, tmp_path)
    assert main(["diff", str(run), "--json"]) == 0
    out = capsys.readouterr()
    assert out.err.splitlines() == [f"before: {run / 'baseline.json'} (its baseline)",
                                    f"after: {run / 'best.json'} (its best: the adopted variants)"]
    result = json.loads(out.out)  # stdout stays one JSON document
    assert result["cards"][0]["timing_verdict"] == "FASTER" and result["comparison"].startswith("Cards of one run")
    assert main(["diff", str(run), str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["cards"] == result["cards"]


def test_a_folder_that_is_not_a_run_says_what_to_pass(seed_report, tmp_path, capsys):
    run = _run_folder(seed_report, tmp_path / "auto")
    assert main(["diff", str(tmp_path / "auto")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'auto'}: no baseline.json here, but in the runs it holds")
    assert str(run) in err and err.count("\n") == 1
    assert main(["diff", str(tmp_path / "auto" / "empty_dir_that_is_missing")]) == 2
    (tmp_path / "empty").mkdir()
    assert main(["diff", str(tmp_path / "empty"), str(run)]) == 2
    assert "a folder with no baseline.json: give a run folder" in capsys.readouterr().err
    assert main(["diff", str(run / "best.json")]) == 2  # one file alone: which run's baseline?
    assert "one argument must be a run folder" in capsys.readouterr().err


# -- charts ----------------------------------------------------------------------------------------------


def test_a_narrow_log_axis_gets_ticks_to_read_it_by():
    assert log_ticks(1e9, 1e13) == [1e9, 1e10, 1e11, 1e12, 1e13]  # wide: powers of ten only
    assert log_ticks(3e11, 9e11) == [3e11, 5e11, 7e11]
    assert len(log_ticks(0.952, 1.3)) >= 3
    svg = roofline_svg([Roofs(1e12, 1e11, "planted")], [("baseline", 5.0, 4e11), ("variant", 6.0, 5e11)])
    y_ticks = re.findall(r'<g id="ytick_\d+"', svg)
    assert len(y_ticks) >= 3  # was two, 10^11 and 10^12, for this span (one for a narrower one)


def _study_dir(tmp_path: Path, seed_report, params: list[dict]) -> Path:
    card = copy.deepcopy(normalize(seed_report).card(VAE))
    card.extra["harness"] = {"experiment": "exp", "variant": "v", "params": {}, "role": "baseline"}
    card.extra["search_timing"] = {"median_us": 900.0}
    card.extra["baseline_drift"] = [{"after_trial": 0, "median_us": 950.0}]
    save_report(Report(cards=[card]), tmp_path / "baseline.json")
    study = optuna.create_study(study_name=f"exp:{card.id}", storage=make_storage(str(tmp_path / "optuna.log")))
    for i, values in enumerate(params):
        dist = {k: optuna.distributions.CategoricalDistribution(sorted({p[k] for p in params if k in p}))
                for k in values}
        study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE, value=1000.0 - 10 * i,
                                                  params=values, distributions=dist, user_attrs={"variant": "v"}))
    return tmp_path


def test_one_varying_parameter_draws_no_importance(seed_report, tmp_path):
    run = _study_dir(tmp_path, seed_report, [{"variant": v} for v in ("a", "b", "c")])
    view = load_studies([load_report(run / "baseline.json").cards[0]],
                        str(run / "optuna.log"))[0]
    assert view.importances is None  # was: a full bar, "importance 1 by construction"
    assert "1 parameter(s) varying (variant: its importance would be 1 by construction)" in view.importance_note


def test_importances_are_named_as_computed_and_their_warnings_go_to_the_log(seed_report, tmp_path, caplog):
    # A conditional space, as the harness's are: `block` belongs to variant a; one trial of b leaves its inactive
    # regime a single trial, which PED-ANOVA warns about.
    grid = [{"variant": "a", "block": b} for b in ("16", "32", "64")] + [{"variant": "b"}]
    run = _study_dir(tmp_path, seed_report, grid)
    card = load_report(run / "baseline.json").cards[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning that escaped to the terminal would raise here
        with caplog.at_level(logging.WARNING, logger=LIBRARY_LOG.name):
            view = load_studies([card], str(run / "optuna.log"))[0]
    assert view.importances is not None and set(view.importances) == {"variant", "block"}
    assert view.importance_note.startswith(f"{IMPORTANCE_METHOD} over 4 completed trials")
    assert "PedAnovaImportanceEvaluator" in IMPORTANCE_METHOD and "fANOVA" not in view.importance_note
    said = [r.getMessage() for r in caplog.records if r.name == LIBRARY_LOG.name]
    prefix = f"optuna, parameter importances of exp:{VAE}: "
    assert all(m.startswith(prefix) and m.removeprefix(prefix) in view.importance_note for m in said)
    assert said and "Optuna warned: Some regimes for parameter `block`" in view.importance_note  # and on the page
    assert view.baseline_us == 900.0 and view.drift == [(0, 950.0)]


def test_the_history_draws_the_baseline(seed_report, tmp_path):
    run = _study_dir(tmp_path, seed_report, [{"variant": v} for v in ("a", "b")])
    card = load_report(run / "baseline.json").cards[0]
    view = load_studies([card], str(run / "optuna.log"))[0]
    svg = history_svg(view.trials, view.baseline_us, view.drift)
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert "baseline, 900.0 us" in labels and "baseline re-timed (drift check)" in labels
    assert "baseline, 900.0 us" not in history_svg(view.trials)


# -- config, docs, text ----------------------------------------------------------------------------------


def test_one_sweep_folder_whatever_the_sweep_and_library_warnings_to_the_log_file():
    hydra = yaml.safe_load((ROOT / "conf" / "config.yaml").read_text())["hydra"]
    # Hydra resolves the sweep folder per job: nothing a job sets may name it (the experiment did: one folder each).
    assert "hydra.runtime" not in hydra["sweep"]["dir"] and "hydra.job" not in hydra["sweep"]["dir"]
    assert hydra["job_logging"]["loggers"][LIBRARY_LOG.name] == {"handlers": ["file"], "propagate": False}


def test_the_docs_quote_the_lint_totals_the_tool_prints(capsys):
    main(["lint"])
    closing = next(line for line in capsys.readouterr().out.splitlines() if " findings: " in line)
    page = " ".join((ROOT / "docs" / "report-files.md").read_text().split())
    assert f"`{closing}` on the seed" in page


def test_the_diff_says_the_interval_once(seed_report):
    _, base, tried, verdict = _pair(seed_report, 2.0)
    text = render_markdown(ReportDiff([diff_cards(base, tried, adopted=True)], [], []))
    line = next(line for line in text.splitlines() if line.startswith("- Time ("))
    interval = f"{verdict.speedup:.2f}x [{verdict.ci[0]:.2f}, {verdict.ci[1]:.2f}]"
    assert line.count(interval) == 1 and f"us, {interval} 95% CI over 8 paired rounds" in line


def test_a_trial_count_cut_to_the_space_says_so():
    assert trials_cut(30, 3) == ("search.n_trials=30 cut to 3 per card: the drawable space has 3 configuration(s), "
                                 "each measured once")
    assert trials_cut(3, 3) is None and trials_cut(30, None) is None


def test_recipe_code_and_numbered_steps_render_as_such():
    html = markdown_to_html("1. **exp: v**: 1.30x, adopted.\n   Later rounds start from it.\n\n"
                            "   > x = x.contiguous()  # <once>\n   > y = f(x)\n\n2. second\n")
    assert html.startswith("<ol><li><strong>exp: v</strong>: 1.30x, adopted. Later rounds start from it.</li></ol>")
    assert "<pre>x = x.contiguous()  # &lt;once&gt;\ny = f(x)</pre>" in html and '<ol start="2"><li>second' in html


@pytest.mark.parametrize("name", ["summary.md", "recipe.md", "tried.json", "run.json", "trials/"])
def test_the_outputs_line_names_what_the_folder_holds(tmp_path, name):
    from harness.run.outputs import written_outputs

    (tmp_path / name.rstrip("/")).mkdir() if name.endswith("/") else (tmp_path / name).write_text("")
    assert written_outputs(tmp_path) == [name]
