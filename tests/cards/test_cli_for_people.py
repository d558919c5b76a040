"""The traps a new user hit in `python -m harness.report` and in the app's config errors, one test each.

Expected numbers come from the report's JSON read here (or from the brief that reported the trap),
not from the code under test.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from pathlib import Path

import pytest

from harness.cards.findings import SEVERITY
from harness.cards.lint import lint_report
from harness.cards.model import default_report_path, parse_report
from harness.cards.selection_messages import no_card_message
from harness.report.cli import main

PACKAGE = Path(__file__).resolve().parents[2] / "harness"
RAW = json.loads(default_report_path().read_text(encoding="utf-8"))
CLEAN_CARD = "dit-480-linear-m4680n5120k5120-8f26a7"  # one GEMM kernel, no defect (its lint column is 0)
MS_CARD = "vae-480-conv3d-96to96k333t6-13c157"  # durations written in ms (docs/domain.md's unit defect)


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


def _raw_card(card_id: str) -> dict:
    """The stored card (raw JSON) with this id, found through the model only to map the id."""
    index = [c.id for c in parse_report(RAW).cards].index(card_id)
    return copy.deepcopy(RAW["cards"][index])


def _write(tmp_path: Path, cards: list[dict], name: str = "report.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"cards": cards}), encoding="utf-8")
    return path


# -- one `error:` prefix, lower case, one line, exit 2 ---------------------------------------------


def test_no_capitalised_error_prefix_in_the_package():
    offenders = [f"{p.relative_to(PACKAGE)}:{n}" for p in PACKAGE.rglob("*.py")
                 for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
                 if re.search(r"""["']Error: """, line)]
    assert offenders == []


def test_usage_errors_are_one_error_line_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["bogus"])
    assert info.value.code == 2
    assert "invalid choice: 'bogus'" in _one_error_line(capsys.readouterr().err)


def test_hydra_error_word_is_not_repeated():
    from harness.__main__ import _one_line

    assert _one_line(ValueError("Error merging override search.n_trials=x")) == "merging override search.n_trials=x"


# -- show: a path is a path, an id without its suffix, similar ids ---------------------------------


def test_show_a_missing_path_says_no_such_file(capsys):
    assert main(["show", "/nonexistent"]) == 2
    assert _one_error_line(capsys.readouterr().err) == "error: /nonexistent: no such file"
    assert main(["show", "missing-report.json"]) == 2
    assert _one_error_line(capsys.readouterr().err) == "error: missing-report.json: no such file"


def test_show_a_report_path_shows_its_table(tmp_path, capsys):
    path = _write(tmp_path, [_raw_card(CLEAN_CARD), _raw_card(MS_CARD)])
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"2 cards from {path}" in out and CLEAN_CARD in out and MS_CARD in out


def test_an_id_without_its_suffix_names_its_one_card(capsys):
    stem = MS_CARD.rsplit("-", 1)[0]
    assert sum(c.rsplit("-", 1)[0] == stem for c in (card.id for card in parse_report(RAW).cards)) == 1
    assert main(["show", stem]) == 0
    assert capsys.readouterr().out.startswith(f"card       {MS_CARD}\n")


def test_an_id_without_its_suffix_naming_two_cards_lists_both(capsys):
    # Two 384->384 3x3x3 T=3 convs at 480x832 in the report (different inputs): the suffix tells them apart.
    twins = [c for c in RAW["cards"] if c["resolution"] == "480x832" and c["op"] == "aten.conv3d.default"
             and isinstance(c["shape_parameters"], dict) and c["shape_parameters"]["weight"] == [384, 384, 3, 3, 3]
             and c["shape_parameters"]["input"][2] == 3]
    assert len(twins) == 2
    assert main(["show", "vae-480-conv3d-384to384k333t3"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.endswith("is 2 cards, give the full id: vae-480-conv3d-384to384k333t3-26704a, "
                         "vae-480-conv3d-384to384k333t3-4e4490")


def test_similar_ids_are_ranked_by_similarity(capsys):
    assert main(["show", "vae-480-conv3d-96to69k333t6"]) == 2  # 96 and 69 swapped
    line = _one_error_line(capsys.readouterr().err)
    assert line.split("most similar: ")[1].startswith(MS_CARD + ",")


# -- lint: severities, groups, counts that add up, exit status --------------------------------------


def test_lint_groups_repeated_findings_and_its_counts_add_up(capsys):
    assert main(["lint", "--json"]) == 3
    findings = json.loads(capsys.readouterr().out)
    assert main(["lint"]) == 3
    out = capsys.readouterr().out
    assert "xNone" not in out and not any("xNone" in f["detail"] for f in findings)
    rows = [line.split() for line in out.splitlines() if line[:8].rstrip() in ("error", "warning", "info")]
    pairs = Counter((f["code"], f["field"] or "-") for f in findings)
    assert sorted((r[1], r[2]) for r in rows) == sorted(pairs)  # one line per (code, field)
    for row in rows:
        assert int(row[3]) == pairs[(row[1], row[2])]
        assert row[0] == next(f["severity"] for f in findings if f["code"] == row[1])
    assert sum(int(r[3]) for r in rows if r[1] == "unit_scaled") == sum(f["code"] == "unit_scaled" for f in findings)
    by_severity = Counter(f["severity"] for f in findings)
    normalized = lint_report(parse_report(RAW)).normalized.to_dict()
    corrections = sum(len(c.get("normalization", [])) for c in normalized["cards"])
    expected = (f"{len(findings)} findings: {by_severity['error']} errors, {by_severity['warning']} warnings, "
                f"{by_severity['info']} info; {corrections} values corrected in the normalized view (each recorded "
                "under normalization: ")
    assert expected in out
    kinds = re.search(r"under normalization: (.*)\)", out).group(1)
    assert sum(int(part.split()[0]) for part in kinds.split(", ")) == corrections


def test_lint_severities_follow_the_domain_brief(capsys):
    assert main(["lint", "--json"]) == 3
    findings = json.loads(capsys.readouterr().out)
    assert {f["code"] for f in findings} <= set(SEVERITY)
    severity = {f["code"]: f["severity"] for f in findings}
    assert severity["damaged_entry"] == "error"
    assert severity["unit_scaled"] == "warning"
    assert severity["shape_parameters_encoded"] == "info"
    scaled = next(f for f in findings if f["code"] == "unit_scaled" and f["field"] == "dur_us")
    assert re.search(r"x1000 gives \d+ MHz", scaled["detail"])  # the warning carries its correction


def test_every_code_lint_can_emit_has_a_severity():
    source = (PACKAGE / "cards" / "lint.py").read_text(encoding="utf-8")
    emitted = set(re.findall(r'find\([^,]+, "(\w+)"', source))
    emitted |= set(re.findall(r'Finding\([^,()]+(?:\.\w+)?, None, "(\w+)"', source))
    assert emitted == set(SEVERITY)  # every code has a severity, and no severity is left for a code gone


def test_lint_verbose_prints_every_finding(capsys):
    assert main(["lint", "--json"]) == 3
    n = len(json.loads(capsys.readouterr().out))
    main(["lint", "--verbose"])
    out = capsys.readouterr().out
    assert sum(line.split()[0] in ("error", "warning", "info") for line in out.splitlines() if line.split()) == n


def test_lint_exit_status_by_severity(tmp_path, capsys):
    clean = _raw_card(CLEAN_CARD)
    assert main(["lint", str(_write(tmp_path, [clean], "clean.json"))]) == 0
    info = copy.deepcopy(clean)
    info["shape_parameters"] = json.dumps(info["shape_parameters"])
    assert main(["lint", str(_write(tmp_path, [info], "info.json"))]) == 0
    warning = tmp_path / "warning.json"  # a summary that disagrees with its card
    warning.write_text(json.dumps({"cards": [clean], "summary": {"dram_bandwidth_bound": 1}}), encoding="utf-8")
    assert main(["lint", str(warning)]) == 1
    error = copy.deepcopy(clean)
    del error["kernels"][0]["metrics"]  # a damaged entry
    assert main(["lint", str(_write(tmp_path, [error], "error.json"))]) == 3
    assert main(["lint", str(tmp_path / "absent.json")]) == 2  # could not read: not a severity
    capsys.readouterr()


# -- show marks corrected values, and a rebuilt shape ------------------------------------------------


def test_show_marks_values_corrected_from_the_report(capsys):
    stored = _raw_card(MS_CARD)["kernels"][0]["metrics"]["dur_us"]  # in ms, under a *_us name
    assert main(["show", MS_CARD]) == 0
    out = capsys.readouterr().out
    assert f"{stored * 1000:.1f}*" in out
    assert "* corrected from the report (see lint)" in out
    assert main(["show", CLEAN_CARD]) == 0
    out = capsys.readouterr().out
    assert "*" not in out and "corrected from the report" not in out


def test_show_displays_a_rebuilt_shape(tmp_path, capsys):
    cast = next(c for c in RAW["cards"] if c["op"] == "aten.to.dtype" and c["resolution"] == "704x1280")
    cast = copy.deepcopy(cast)
    why = "the report lost the shape; 12 frames of 3 channels at 704x1280 fit the durations"
    cast["shape_rebuilt"] = {"shape": [1, 3, 12, 704, 1280], "why": why}
    path = _write(tmp_path, [cast])
    card_id = parse_report(json.loads(path.read_text())).cards[0].id
    assert main(["show", str(path), card_id]) == 0
    assert f"rebuilt    [1, 3, 12, 704, 1280]: {why}" in capsys.readouterr().out


# -- classify: unresolved apart from no class ----------------------------------------------------------


def test_classify_counts_unresolved_apart_from_no_class(tmp_path, capsys):
    out = tmp_path / "classified.json"
    assert main(["classify", "--out", str(out)]) == 0
    line = capsys.readouterr().out
    cards = json.loads(out.read_text())["cards"]
    assert len(cards) == len(RAW["cards"]) == 69
    unresolved = sum(c.get("primary") == "unresolved_no_dominant_limiter" for c in cards)
    no_class = sum(c.get("primary") is None for c in cards)
    assert (unresolved, no_class) == (12, 8)  # as the user counted them
    assert f"unresolved_no_dominant_limiter {unresolved}," in line and f"no class {no_class} (" in line


# -- the message for a selection of the wrong op kind -------------------------------------------------


def test_no_card_message_says_what_was_selected():
    dit = [c for c in parse_report(RAW).cards if c.stage == "dit"]
    raw_dit = [c for c in RAW["cards"] if c["stage"] == "dit"]
    assert {c["op"] for c in raw_dit} == {"aten.linear.default"}
    text = no_card_message({"stage": "dit"}, dit, ("conv3d",), "vae_channels_last")
    assert text.startswith(f"cards={{stage: dit}} selects {len(raw_dit)} cards, none of them conv3d (they are linear); "
                           "experiment vae_channels_last applies to conv3d cards")
    nothing = no_card_message({"stage": "vea"}, [], ("conv3d",), "vae_channels_last",
                              all_cards=parse_report(RAW).cards)
    stages = ", ".join(sorted({c["stage"] for c in RAW["cards"]}))
    assert f"selects no card (no card has stage=vea; the report has stage {stages})" in nothing


# -- the app's unknown keys: the key most likely meant ---------------------------------------------------


def test_hydra_unknown_key_suggests_the_closest(tmp_path, capsys):
    from harness.__main__ import preflight

    with pytest.raises(SystemExit) as info:
        preflight(["search.ntrials=3", f"hydra.run.dir={tmp_path / 'run'}"])
    assert info.value.code == 2
    line = _one_error_line(capsys.readouterr().err)
    assert line.startswith("error: unknown key search.ntrials (did you mean search.n_trials? known: ")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("typed, meant", [("search.ntrials", "search.n_trials"), ("serch.n_trials", "search.n_trials"),
                                          ("timing.budget", "timing.budget_s"), ("n_trials", "search.n_trials"),
                                          ("search.zzz", None)])
def test_the_closest_known_key(typed, meant):
    from harness.config.validate import closest_key

    assert closest_key(typed) == meant


def test_validate_names_the_closest_key_of_a_key_added_with_plus():
    from harness.config.validate import problems

    cfg = {"search": {"ntrials": 3}, "timing": {}, "workload": {}, "experiment": {}}
    assert any(p.startswith("unknown key search.ntrials (did you mean search.n_trials? known: ") for p in problems(cfg))
