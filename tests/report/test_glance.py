"""The run at a glance: savings never read 0 where unknown, the rows and their Markdown, the next commands, the
forest plot, glance.json. Cards and verdicts are planted; expected numbers come from the plants and the formula."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from harness.cards.diff import diff_cards
from harness.cards.measures import time_in_model
from harness.report.forest import forest_svg
from harness.report.glance import Glance, GlanceRow, gathered, glance_rows, read_glance, write_glance
from harness.report.glance_html import glance_section
from harness.report.next_steps import GPU, MORE_ROUNDS, next_steps, run_overrides
from harness.report.overview import CardResult
from harness.report.savings import Saving, card_saving, total
from tests.cards.test_verdict_rows import _pair

ID = "dit-480-linear-m1170n5120k13824-ffde6a"  # tests.cards.test_verdict_rows' planted card


def _result(seed_report, ratio: float, adopted: bool, **where) -> tuple[CardResult, float]:
    report_card, base, tried, _ = _pair(seed_report, ratio, **where)
    row = diff_cards(base, tried, adopted=adopted)
    found = time_in_model(report_card)
    assert found is not None
    return CardResult(report_card, "planted", "once(k=2)", row, measured=base), found.us


ON_H200 = {"device": "NVIDIA H200", "scale": 1.0, "source": "ncu"}


# -- savings ---------------------------------------------------------------------------------------------


def test_a_confirmed_win_on_the_reports_gpu_saves_its_share_by_the_formula(seed_report):
    result, us = _result(seed_report, 2.0, adopted=True, **ON_H200)
    saving = card_saving(result, us, "H200")
    assert result.diff is not None and result.diff.timing_verdict == "FASTER"
    assert saving.us == pytest.approx(us * (1 - 1 / result.diff.speedup)) and saving.why == ""


def test_a_decided_loss_on_the_reports_gpu_saves_zero_and_that_is_known(seed_report):
    result, us = _result(seed_report, 0.8, adopted=False, **ON_H200)
    assert result.diff is not None and result.diff.timing_verdict == "SLOWER"
    assert card_saving(result, us, "H200") == Saving(0.0)


def test_an_undecided_verdict_and_a_cpu_measurement_are_unknown_never_zero(seed_report):
    undecided, us = _result(seed_report, 1.0, adopted=False, **ON_H200)
    undecided.diff.timing_verdict = "INCONCLUSIVE"  # planted: the pair's interval straddled a band edge
    saving = card_saving(undecided, us, "H200")
    assert saving.us is None and saving.why == "time verdict INCONCLUSIVE: undecided"
    assert saving.text() == "n/a (time verdict INCONCLUSIVE: undecided)" and saving.share(us, ".1%") == "n/a"
    on_cpu, us = _result(seed_report, 2.0, adopted=True)  # the planted CPU of test_verdict_rows, at scale 0.25
    saving = card_saving(on_cpu, us, "H200")
    assert saving.us is None and saving.why == "not projected: measured on Planted CPU, not the report's H200"
    assert card_saving(on_cpu, None, "H200").why.endswith("the report gives no time for this card")


def test_a_sum_with_unknown_cards_is_a_lower_bound_and_one_with_none_known_is_unknown():
    assert total([Saving(10.0), Saving(None, "x"), Saving(2.5)]).text() == "at least 12.5 (1 of 3 cards n/a)"
    assert total([Saving(10.0), Saving(None, "x")]).share(100.0, ".1%") == "at least 10.0%"
    assert total([Saving(None, "x"), Saving(None, "y")]).text() == "n/a (2 of 2 cards n/a)"
    assert total([]).text() == "n/a (no card of it run)"
    assert total([Saving(1.0), Saving(0.0)]).text() == "1.0"


# -- rows, Markdown, glance.json -------------------------------------------------------------------------


def _row(**kw) -> GlanceRow:
    base = dict(card="c-1", experiment="exp", outcome="baseline kept (best tried v)", variant="v", adopted=False,
                speedup=1.0, ci=[0.77, 1.28], verdict="INCONCLUSIVE", band=0.05, saving_us=None,
                saving_why="time verdict INCONCLUSIVE: undecided", rounds=8, rounds_run=8, more_rounds=167)
    return GlanceRow(**{**base, **kw})


def test_rows_say_the_outcome_interval_verdict_and_saving(seed_report):
    won, _ = _result(seed_report, 2.0, adopted=True)
    lost, _ = _result(seed_report, 0.8, adopted=False)
    confirmation = {ID: {"rounds": 8, "rounds_run": 9, "more_rounds": None}}
    rows = glance_rows([won, lost], confirmation, "H200")
    assert [r.outcome for r in rows] == ["adopted once(k=2)", "baseline kept (best tried once(k=2))"]
    assert [r.verdict for r in rows] == ["FASTER", "SLOWER"] and rows[0].adopted and not rows[1].adopted
    assert rows[0].rounds == 8 and rows[0].rounds_run == 9
    lines = Glance(rows).markdown()
    assert lines[2].startswith(f"- `{ID}`: adopted once(k=2): 2.00x [") and lines[2].endswith(
        "FASTER; saving n/a (not projected: measured on Planted CPU, not the report's H200)")
    no_variant = glance_rows([CardResult(won.card, "planted", None, None, measured=won.measured)], {}, "H200")[0]
    assert no_variant.outcome == "baseline kept: no feasible variant" and no_variant.speedup is None


def test_glance_json_keeps_an_unknown_saving_as_null(tmp_path):
    glance = Glance([_row(), _row(card="c-2", saving_us=12.5, saving_why="")])
    write_glance(tmp_path, glance)
    stored = json.loads((tmp_path / "glance.json").read_text())
    assert [r["saving_us"] for r in stored["rows"]] == [None, 12.5]
    assert read_glance(tmp_path) == glance and read_glance(tmp_path / "nowhere") is None


def test_several_runs_rows_name_their_folder(tmp_path):
    write_glance(tmp_path / "a", Glance([_row()]))
    write_glance(tmp_path / "b", Glance([_row(experiment="other")]))
    found = gathered({"a": tmp_path / "a", "b": tmp_path / "b", "c": tmp_path / "c"})
    assert [(r.run, r.experiment) for r in found.rows] == [("a", "exp"), ("b", "other")]
    assert "- `c-1` (other): " in "\n".join(found.markdown())  # two experiments: each line names its own


# -- next commands ---------------------------------------------------------------------------------------


def test_more_rounds_for_an_inconclusive_card_is_its_run_again_with_the_exact_override():
    overrides = ["workload.cpu_scale=0.08", "timing.confirm_rounds=3", "cards=[a,b]", "hydra.run.dir=x"]
    steps = next_steps([_row(), _row(card="c-2", verdict="FASTER")], "exp", "cpu", overrides)
    assert [s.kind for s in steps] == [MORE_ROUNDS, GPU]
    more, gpu = steps
    # 8 rounds kept + about 167 more would likely decide: 175 rounds, on that card alone, the run's settings kept
    assert more.command == ("python -m harness experiment=exp workload.cpu_scale=0.08 'cards=[c-1]' "
                            "timing.confirm_rounds=175")
    assert "about 167 more rounds" in more.why
    assert gpu.command == ("python -m harness experiment=exp timing.confirm_rounds=3 'cards=[a,b]' device=cuda "
                           "profiler=ncu")
    assert [s.kind for s in next_steps([_row(verdict="SAME")], "exp", "cuda", overrides)] == []
    too_few = next_steps([_row(more_rounds=None, rounds=None, rounds_run=6)], "exp", "cuda", [])[0]
    assert too_few.command.endswith("timing.confirm_rounds=12") and "too few rounds" in too_few.why


def test_a_speedup_on_the_band_edge_is_sent_to_a_gpu_not_to_a_thousand_rounds():
    # harness.cards.noise caps `more_rounds` at 1000: a mean on a band edge never decides (a 1.05x [1.04, 1.06]
    # against the CPU's 5% band read "about 1000 more rounds", the page then suggesting timing.confirm_rounds=1008).
    overrides = ["workload.cpu_scale=0.08", "timing.confirm_rounds=3", "cards=[a,b]"]
    edge, gpu = next_steps([_row(more_rounds=1000)], "exp", "cpu", overrides)
    assert edge.kind == GPU and "no number of rounds" in edge.why
    assert edge.command == ("python -m harness experiment=exp timing.confirm_rounds=3 'cards=[c-1]' device=cuda "
                            "profiler=ncu")
    assert next_steps([_row(more_rounds=1000)], "exp", "cuda", overrides) == []  # a GPU's band is the narrow one


def test_the_runs_overrides_are_read_from_its_folder_or_the_auto_run_above_it(tmp_path):
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("- experiment=auto\n- cards=[x]\n- timing.budget_s=0.5\n")
    assert run_overrides(tmp_path) == ["experiment=auto", "cards=[x]", "timing.budget_s=0.5"]
    assert run_overrides(tmp_path / "vae_bf16") == run_overrides(tmp_path)  # a sub-run: the auto run's
    assert run_overrides(tmp_path / "a" / "b") == []


# -- the forest plot and the section ---------------------------------------------------------------------


def test_the_forest_draws_each_timed_row_and_cuts_a_huge_interval(seed_report):
    rows = [_row(), _row(card="c-2", speedup=2.1, ci=[1.8, 2.5], verdict="FASTER", adopted=True),
            _row(card="c-3", speedup=0.25, ci=[0.0005, 136.0]), _row(card="c-4", speedup=None, ci=None)]
    svg = forest_svg(rows)
    assert svg is not None and svg.startswith("<svg")
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert sum("c-" in t for t in labels if "  " in t) == 3  # one row per timed card; c-4 has no speedup
    ticks = [t for t in labels if t.endswith("x") and t[:-1].replace(".", "").isdigit()]
    assert ticks and min(float(t[:-1]) for t in ticks) >= 0.05 and max(float(t[:-1]) for t in ticks) <= 20
    assert "2.10x [1.80, 2.50] FASTER, adopted" in labels
    assert forest_svg([_row(speedup=None, ci=None)]) is None


def test_the_section_holds_the_noise_rows_plot_and_commands_in_that_order():
    glance = Glance([_row()], next_steps([_row()], "exp", "cpu", []))
    noise = {"verdict": "noisy", "reasons": ["the A/A probe read INCONCLUSIVE, not SAME"],
             "advice": "run where nothing else does"}
    html = glance_section(glance, noise)
    assert html.startswith('<section id="at-a-glance"><h2>At a glance</h2><div id="noise" role="alert">')
    order = [html.index(s) for s in ("Machine: noisy", "<table>", "<svg", "<h3>Next</h3>", "timing.confirm_rounds=")]
    assert order == sorted(order)
    assert "<td>n/a (1)</td>" in html and "Saving n/a: (1) time verdict INCONCLUSIVE: undecided." in html
    assert ">0.0<" not in html
    assert "<pre><code>python -m harness experiment=exp device=cuda profiler=ncu</code></pre>" in html
    empty = glance_section(None, None)
    assert "No card finished yet" in empty and "Next" not in empty


def test_a_page_over_runs_links_each_row_to_its_run(tmp_path: Path):
    html = glance_section(Glance([_row(run="vae_bf16")]))
    assert '<a href="vae_bf16/report.html">vae_bf16</a>' in html
