"""The measured-card record: one writer, and the one split of a card's extras into the harness's own
keys and the experiment's evidence that summary.md and report.html both show."""

from __future__ import annotations

from harness.cards.measured import MeasuredRecord, experiment_evidence, facts_not_in_tables
from harness.cards.model import load_report

CARD = "dit-480-linear-m3n5120k5120-d55d81"


def _record() -> MeasuredRecord:
    return MeasuredRecord(
        harness={"experiment": "x", "variant": "v", "role": "trial"}, timing={"median_us": 10.0},
        correctness={"feasible": True}, memory={"peak_bytes": 0, "method": "rss"}, workload={"dtype": "bfloat16"},
        environment={"device": "cpu"}, metrics_source="cpu_roofline_estimate", profiler="cpu", peaks=None,
        profiler_settings=None, profiler_notes=[],
        variant={"calls": 5, "per_call_us": 2.0, "recipe": "r", "k": 5}, torch_state={"threads": 1})


def test_the_record_round_trips_and_a_report_card_has_none():
    card = load_report().card(CARD)
    assert MeasuredRecord.read(card) is None
    _record().write(card)
    assert MeasuredRecord.read(card) == _record()


def test_evidence_is_what_the_harness_did_not_write():
    card = load_report().card(CARD)
    _record().write(card)
    card.extra.update(confirmation={"rounds": 8}, weight_stream={"per_call_us": 2.0}, applied=[])
    assert experiment_evidence(card) == {"weight_stream": {"per_call_us": 2.0}}
    # per_call_us (the search's time) and the recipe are shown elsewhere; the configuration is not.
    assert facts_not_in_tables(card) == {"calls": 5, "k": 5}
