import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.cards.model import (
    ReportError,
    default_report_path,
    load_report,
    parse_report,
    save_report,
)


def test_round_trip_loses_nothing(tmp_path, seed_report):
    original = json.loads(default_report_path().read_text())
    # What the declaration beside the shipped report says (its GPU, its model's precision) is read with it.
    declared = json.loads(default_report_path().with_name(default_report_path().stem + ".declared.json").read_text())
    expected = {**original, "device": declared["device"], "precision": declared["precision"]}
    assert seed_report.to_dict() == expected
    out = save_report(seed_report, tmp_path / "copy.json")
    assert json.loads(out.read_text()) == expected


def test_a_report_without_a_declaration_reads_as_it_is(tmp_path):
    raw = {"cards": [{"group": "g", "stage": "dit", "op": "aten.linear.default",
                      "shape_parameters": {"M": 1, "N": 2, "K": 3}, "kernels": []}]}
    (tmp_path / "r.json").write_text(json.dumps(raw))
    assert load_report(tmp_path / "r.json").to_dict() == raw
    (tmp_path / "r.declared.json").write_text(json.dumps({"device": "H100", "precision": [{"dtype": "bf16"}]}))
    assert load_report(tmp_path / "r.json").extra == {"device": "H100", "precision": [{"dtype": "bf16"}]}
    (tmp_path / "r.declared.json").write_text("[1, 2]")
    with pytest.raises(ReportError, match="r.declared.json: a declaration is an object"):
        load_report(tmp_path / "r.json")


def test_unknown_fields_are_kept(tmp_path):
    raw = {
        "cards": [
            {
                "group": "g",
                "stage": "dit",
                "op": "aten.linear.default",
                "shape_parameters": {"M": 1, "N": 2, "K": 3},
                "kernels": [{"kernel": "k", "metrics": {"dur_us": 1.0}, "mystery": [1, 2]}],
                "brand_new": {"x": 1},
            }
        ],
        "top_level_extra": "kept",
    }
    report = parse_report(raw)
    assert report.to_dict() == raw


def test_attention_shape_parameters_decoded_and_written_back_as_string(seed_report):
    attention = [c for c in seed_report.cards if c.op_kind == "attention"]
    assert len(attention) == 10
    card = attention[0]
    assert card.shape_parameters["role"] in {"self", "cross"}
    assert isinstance(card.to_dict()["shape_parameters"], str)


def test_card_ids_are_unique_short_and_filename_safe(seed_report):
    ids = [c.id for c in seed_report.cards]
    assert len(set(ids)) == 69
    groups = [c.group for c in seed_report.cards]
    assert len(set(groups)) < 69  # group alone is not unique: the reason ids exist
    for card_id in ids:
        assert len(card_id) <= 64
        assert all(ch.isalnum() or ch in "-_" for ch in card_id)
    assert load_report().cards[5].id == ids[5]  # stable across loads


@pytest.mark.parametrize(
    "text, message",
    [
        ("not json", "not JSON"),
        ("[1, 2]", "must be a JSON object"),
        ('{"cards": 3}', "'cards' must be list"),
        ('{"cards": [{"stage": "x"}]}', "missing field 'kernels'"),
        ('{"cards": [{"group": 1, "stage": "x", "op": "y", "kernels": []}]}', "'group' must be str"),
        ('{"cards": [{"group": "g", "stage": "x", "op": "y", '
         '"kernels": [{"kernel": "k", "metrics": {"dur_us": "5"}}]}]}',
         "metric 'dur_us' must be a number"),
        ('{"cards": [], "summary": {"x": "1"}}', "must be an integer count"),
    ],
)
def test_bad_reports_give_one_line_errors(tmp_path, text, message):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(ReportError) as info:
        load_report(path)
    assert message in str(info.value)
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)


def test_unreadable_paths(tmp_path):
    with pytest.raises(ReportError, match="no such file"):
        load_report(tmp_path / "missing.json")
    with pytest.raises(ReportError, match="is a directory"):
        load_report(tmp_path)
    binary = tmp_path / "bin.json"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(ReportError):
        load_report(binary)


def test_unknown_card_id_names_alternatives(seed_report):
    with pytest.raises(ReportError, match="no card with id 'vae-nope'.*similar: vae-"):
        seed_report.card("vae-nope")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=20,
)
card_like = st.fixed_dictionaries(
    {"group": json_values | st.text(), "stage": json_values | st.text(), "op": json_values | st.text(),
     "kernels": st.lists(st.dictionaries(st.sampled_from(["kernel", "metrics", "evidence", "rule"]), json_values),
                         max_size=3) | json_values},
    optional={"shape_parameters": json_values | st.just('{"M": 1}') | st.just("{bad"),
              "summed_kernel_us": json_values},
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_values, st.fixed_dictionaries({"cards": st.lists(card_like, max_size=3) | json_values})))
def test_fuzzed_input_never_crashes_the_loader(obj):
    try:
        report = parse_report(obj, "fuzz.json")
    except ReportError as exc:
        assert str(exc).startswith("fuzz.json")
        return
    assert report.to_dict()["cards"] is not None


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64))
def test_fuzzed_bytes_never_crash_load(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "r.json"
    path.write_bytes(data)
    try:
        load_report(path)
    except ReportError:
        pass
