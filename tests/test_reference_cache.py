"""Float64 references cached by their inputs' hash (harness.trial.reference_cache): computed once, reused by
a new worker (a resume, a later run beside it), and never served for other inputs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from harness.boundary.outcomes import TrialStatus
from harness.boundary.requests import Measure
from harness.boundary.spec import CardSpec, CorrectnessRule, TimingSettings
from harness.cards.lint import lint_report
from harness.cards.model import load_report
from harness.trial.handlers import measure, on_card
from harness.trial.reference_cache import ReferenceCache, load_reference_file, save_reference_file
from harness.trial.server import Server
from harness.workloads.registry import build_for_card

CARD = "dit-480-linear-m3n5120k256-ff7b7c"  # a small linear: K=256


@pytest.fixture(scope="module")
def card():
    return lint_report(load_report()).normalized.card(CARD)


def _built(card, seed: int = 0):
    return build_for_card(card, device="cpu", scale=0.05, seed=seed)


def _counted(workload):
    """The workload with its reference counting its calls (a planted counter; the numbers are the op's)."""
    calls = []

    def reference(dtype):
        calls.append(dtype)
        return original(dtype)

    original = workload._reference
    reference.__qualname__ = f"counted.{getattr(original, '__qualname__', '')}"
    return dataclasses.replace(workload, _reference=reference), calls


def test_a_second_cache_on_the_folder_reads_what_the_first_computed(tmp_path: Path, card):
    workload, calls = _counted(_built(card))
    first = ReferenceCache(str(tmp_path))
    computed = first.reference(workload, workload)
    assert len(calls) == 1 and first.computed == 1
    (stored,) = tmp_path.glob("*.pt")
    mtime = stored.stat().st_mtime_ns
    again = ReferenceCache(str(tmp_path))  # a new worker: a resume, or a later run beside this one
    loaded = again.reference(workload, workload)
    assert len(calls) == 1 and again.computed == 0 and again.loaded == 1
    assert stored.stat().st_mtime_ns == mtime
    assert torch.equal(loaded, computed) and loaded.dtype == torch.float64
    # The cached numbers are the op's own float64 result on these inputs (computed here independently).
    x, w = workload.inputs["x"].double(), workload.inputs["weight"].double()
    expected = x @ w.T + (workload.inputs["bias"].double() if "bias" in workload.inputs else 0)
    assert torch.allclose(loaded, expected, rtol=1e-12, atol=1e-12)


def test_other_inputs_get_their_own_reference(tmp_path: Path, card):
    cache = ReferenceCache(str(tmp_path))
    built = _built(card)
    keys = {cache.key(built, built)}
    drawn = built.redraw(1)
    keys.add(cache.key(drawn, built))  # the second draw's activations
    other = _built(card, seed=1)
    keys.add(cache.key(other, other))  # another seed: other weights
    keys.add(cache.key(built, built, torch.float32))
    assert len(keys) == 4
    # The same numbers in another memory layout are the same inputs: the same key.
    strided = built.inputs["weight"].t().contiguous().t()
    transposed = dataclasses.replace(built, inputs={**built.inputs, "weight": strided})
    assert not transposed.inputs["weight"].is_contiguous()
    assert cache.key(transposed, transposed) == cache.key(built, built)
    # One value changed in one input changes the key.
    bumped = built.inputs["x"].clone()
    bumped.view(-1)[0] += 1
    changed = dataclasses.replace(built, inputs={**built.inputs, "x": bumped})
    assert cache.key(changed, changed) != cache.key(built, built)


def test_without_a_folder_every_reference_is_computed(card):
    workload, calls = _counted(_built(card))
    cache = ReferenceCache(None)
    cache.reference(workload, workload)
    cache.reference(workload, workload)
    assert len(calls) == 2 and cache.computed == 2


def test_a_new_worker_measuring_the_baseline_again_reuses_the_references(tmp_path: Path, card):
    """A resumed run measures each card's baseline again: its reference, and the second draw's a trial is
    judged on, come from the cache; the judgement is the same."""
    references = tmp_path / "references"
    spec = CardSpec(card=card.to_dict(), experiment_module="experiments.dit_gemm_tiles", device="cpu", scale=0.05,
                    correctness=CorrectnessRule(4, 4),
                    timing=TimingSettings(warmup=1, min_repeats=3, budget_s=0.01), profiler={"name": "none"},
                    reference_path=str(tmp_path / "run1" / "reference.pt"), reference_cache=str(references))

    def run(folder: str) -> tuple[Server, list]:
        server = Server()
        answer = on_card(server, measure)
        at = dataclasses.replace(spec, reference_path=str(tmp_path / folder / "reference.pt"))
        base = answer(Measure(spec=at, variant="linear", baseline=True, card_path=str(tmp_path / folder / "b.json")))
        trial = answer(Measure(spec=at, variant="dtype_layout", params={"weight_layout": "kn"},
                               card_path=str(tmp_path / folder / "t.json")))
        return server, [base, trial]

    first, replies = run("run1")
    assert all(r.status is TrialStatus.COMPLETE for r in replies), [r.reason for r in replies]
    cache = first.reference_cache(spec)
    assert cache.computed == 2 and cache.loaded == 0  # the card's reference and the second draw's
    # What computing them took is said in the replies (the baseline's reference, the trial's second draw's).
    assert all(r.seconds["references_s"] > 0 for r in replies)
    assert sum(r.seconds["references_s"] for r in replies) == pytest.approx(cache.computing_s)
    second, again = run("run2")
    cache = second.reference_cache(spec)
    assert cache.computed == 0 and cache.loaded == 2
    assert [r.seconds["references_s"] for r in again] == [0.0, 0.0] and cache.computing_s == 0.0
    assert [r.judgement.max_rel for r in again] == [r.judgement.max_rel for r in replies]


def test_a_new_child_reads_the_trials_reference_from_the_folder_not_the_run_folder(tmp_path: Path, card):
    """With a references folder, trials/<card>/reference.pt keeps the baseline's standard without a copy of the
    reference; a new child (after a crash) judges a trial on the folder's reference as the first child did."""
    references = tmp_path / "references"
    spec = CardSpec(card=card.to_dict(), experiment_module="experiments.dit_gemm_tiles", device="cpu", scale=0.05,
                    correctness=CorrectnessRule(4, 4),
                    timing=TimingSettings(warmup=1, min_repeats=3, budget_s=0.01), profiler={"name": "none"},
                    reference_path=str(tmp_path / "run" / "reference.pt"), reference_cache=str(references))
    trial = Measure(spec=spec, variant="dtype_layout", params={"weight_layout": "kn"},
                    card_path=str(tmp_path / "run" / "t.json"))
    first = Server()
    base = on_card(first, measure)(Measure(spec=spec, variant="linear", baseline=True,
                                           card_path=str(tmp_path / "run" / "b.json")))
    assert base.status is TrialStatus.COMPLETE, base.reason
    judged = on_card(first, measure)(trial)
    saved = load_reference_file(tmp_path / "run" / "reference.pt", "cpu")
    assert saved is not None and "reference" not in saved and saved["baseline_error"] == base.judgement.max_rel
    restarted = Server()  # a new child: nothing kept
    again = on_card(restarted, measure)(trial)
    assert again.status is TrialStatus.COMPLETE, again.reason
    cache = restarted.reference_cache(spec)
    assert cache.computed == 0 and cache.loaded == 2  # the card's reference and the second draw's
    assert again.judgement.max_rel == judged.judgement.max_rel
    assert again.judgement.baseline_error == base.judgement.max_rel
    # Without a folder the run's file keeps the reference itself (tests/app/test_fault_injection.py reads it back).
    alone = dataclasses.replace(spec, reference_cache=None, reference_path=str(tmp_path / "alone" / "reference.pt"))
    assert on_card(Server(), measure)(Measure(spec=alone, variant="linear", baseline=True,
                                              card_path=str(tmp_path / "alone" / "b.json"))).ok
    kept = load_reference_file(tmp_path / "alone" / "reference.pt", "cpu")
    assert kept is not None and isinstance(kept["reference"], torch.Tensor)


def test_a_damaged_cache_file_is_computed_again_not_served(tmp_path: Path, card):
    workload, calls = _counted(_built(card))
    computed = ReferenceCache(str(tmp_path)).reference(workload, workload)
    (stored,) = tmp_path.glob("*.pt")
    raw = bytearray(stored.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    stored.write_bytes(bytes(raw))
    again = ReferenceCache(str(tmp_path))
    assert torch.equal(again.reference(workload, workload), computed)
    assert len(calls) == 2 and again.computed == 1 and again.loaded == 0


# The reference files themselves: what is saved loads back; a damaged file loads as nothing, where torch.load
# alone hands back the wrong numbers.

def _saved(tmp_path: Path) -> tuple[dict, Path]:
    obj = {"reference": torch.randn(100_000, dtype=torch.float64, generator=torch.Generator().manual_seed(0)),
           "baseline_error": 1.5e-7, "baseline_dtype": "float32"}
    path = tmp_path / "refs" / "reference.pt"  # its folder made on the way
    save_reference_file(obj, path)
    return obj, path


def test_what_is_saved_loads_back(tmp_path: Path):
    obj, path = _saved(tmp_path)
    loaded = load_reference_file(path, "cpu")
    assert loaded is not None and set(loaded) == set(obj)
    assert torch.equal(loaded["reference"], obj["reference"]) and loaded["baseline_error"] == 1.5e-7
    assert [p.name for p in path.parent.iterdir()] == ["reference.pt"]  # no temporary left behind


def test_a_flipped_byte_in_the_numbers_loads_as_nothing(tmp_path: Path):
    obj, path = _saved(tmp_path)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # inside the 800 kB of the tensor's record
    path.write_bytes(bytes(raw))
    unchecked = torch.load(path, weights_only=True)  # torch reads it without a word: the planted damage is real
    assert not torch.equal(unchecked["reference"], obj["reference"])
    assert load_reference_file(path, "cpu") is None


def test_a_partial_or_foreign_file_loads_as_nothing(tmp_path: Path):
    obj, path = _saved(tmp_path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    assert load_reference_file(path, "cpu") is None
    torch.save(obj, path)  # torch's own file, without the checksum: an older harness's
    assert load_reference_file(path, "cpu") is None
    assert load_reference_file(tmp_path / "absent.pt", "cpu") is None


def test_a_kept_card_serves_each_request_with_that_requests_settings(tmp_path: Path, card):
    """The child keeps a card for every request that builds the same workload; what judges and times a trial
    (its references folder, its timing) is the trial request's own, not the first request's."""
    spec = CardSpec(card=card.to_dict(), experiment_module="experiments.dit_gemm_tiles", device="cpu", scale=0.05,
                    correctness=CorrectnessRule(4, 4),
                    timing=TimingSettings(warmup=1, min_repeats=3, budget_s=0.0), profiler={"name": "none"},
                    reference_path=str(tmp_path / "reference.pt"), reference_cache=str(tmp_path / "first"))
    later = dataclasses.replace(spec, reference_cache=str(tmp_path / "later"),
                                timing=TimingSettings(warmup=1, min_repeats=9, budget_s=0.0))
    assert later.workload_key() == spec.workload_key()  # one kept card serves both
    server = Server()
    answer = on_card(server, measure)
    assert answer(Measure(spec=spec, variant="linear", baseline=True, card_path=str(tmp_path / "b.json"))).ok
    trial = answer(Measure(spec=later, variant="dtype_layout", params={"weight_layout": "kn"},
                           card_path=str(tmp_path / "t.json")))
    assert trial.status is TrialStatus.COMPLETE, trial.reason
    # The trial's second draw was judged on a reference kept in the trial's folder; the first folder holds
    # only the card's own.
    assert server.reference_cache(later).computed == 1 and server.reference_cache(spec).computed == 1
    assert len(list((tmp_path / "later").rglob("*.pt"))) == 1 and len(list((tmp_path / "first").rglob("*.pt"))) == 1
    timing = load_report(str(tmp_path / "t.json")).cards[0].extra["timing"]
    assert len(timing["samples_us"]) >= 9
