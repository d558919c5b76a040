"""A card's Optuna study on the run's page: read once, drawn, and its Search section.

The page must render whatever state the storage is in (no storage, a locked or foreign database, a
study the importance evaluator refuses), so every failure to read becomes a note on the page, never a crash,
and a card without a variant says why: a failed search is told from a baseline-only experiment by its trials.
It reads cards and gives a `StudyView` per card; harness.report.html puts them on its card views.

Parameter importances are Optuna's PED-ANOVA (`PedAnovaImportanceEvaluator`, Optuna's default evaluator, named
explicitly so the page says what computed them), drawn only where at least two parameters vary: with one, its
share is 1 by construction. What Optuna warns while computing them (too few trials in a region) goes to the run's
log file (the `harness.library` logger: conf/config.yaml keeps it off the terminal) and onto the page's note.
"""

from __future__ import annotations

import json
import logging
import warnings
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import matplotlib
import optuna
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from optuna.storages import BaseStorage

from harness.cards.cells import fmt
from harness.cards.model import Card
from harness.report.html_parts import Num, esc, html_table
from harness.report.plots import BEFORE_COLOR, plain, svg
from harness.search.errors import SearchError
from harness.search.storage import make_storage
from harness.search.study import REPEAT_KEY

LIBRARY_LOG = logging.getLogger("harness.library")  # what a library warns: the run's log file, not the terminal
IMPORTANCE_METHOD = "PED-ANOVA (optuna.importance.PedAnovaImportanceEvaluator, Optuna's default)"
OPEN_TRIALS = 12  # a card's trial table of at most this many rows is shown open


@dataclass
class StudyView:
    """A card's Optuna study, read once; `note` says why there is none. `baseline_us`, the baseline's search
    timing (the trials' objective is the same timing), and `drift`, its re-times between trials
    (after trial, us), come from the card."""

    name: str | None
    trials: list[optuna.trial.FrozenTrial]
    importances: dict[str, float] | None
    importance_note: str
    note: str = ""
    baseline_us: float | None = None
    drift: list[tuple[int, float]] = field(default_factory=list)


def _importances(study: optuna.Study, done: list[optuna.trial.FrozenTrial]) -> tuple[dict[str, float] | None, str]:
    varying = [p for p in {k for t in done for k in t.params} if len({repr(t.params.get(p)) for t in done}) > 1]
    if len(done) < 2 or len(varying) < 2:
        one = f" ({varying[0]}: its importance would be 1 by construction)" if len(varying) == 1 else ""
        return None, (f"no parameter importances: {len(done)} completed trials, {len(varying)} parameter(s) "
                      f"varying{one}; they need >= 2 completed trials and >= 2 varying parameters")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            values = optuna.importance.get_param_importances(
                study, evaluator=optuna.importance.PedAnovaImportanceEvaluator())
        except Exception as exc:  # the evaluator refuses some conditional spaces; the page must still render
            return None, f"parameter importances not computable ({type(exc).__name__}: {exc})"
    said = list(dict.fromkeys(str(w.message) for w in caught))
    for message in said:
        LIBRARY_LOG.warning("optuna, parameter importances of %s: %s", study.study_name, message)
    return dict(values), (f"{IMPORTANCE_METHOD} over {len(done)} completed trials"
                          + (f"; Optuna warned: {' '.join(said)}" if said else ""))


def load_studies(cards: list[Card], storage: str | None) -> list[StudyView]:
    """Each card's study (`<experiment>:<card id>`), in the cards' order; every failure becomes a note, never a
    crash."""
    if storage is None:
        return [StudyView(None, [], None, "", note="no Optuna storage in this run directory") for _ in cards]
    try:
        opened = make_storage(storage)  # the search's own factory: sqlite, server URLs and journal files alike
    except SearchError as exc:  # not a storage, locked, unreachable: say so on the page
        return [StudyView(None, [], None, "", note=str(exc)) for _ in cards]
    names = set(optuna.study.get_all_study_names(opened))
    return [_study_of(card, names, opened) for card in cards]


def _study_of(card: Card, names: set[str], storage: BaseStorage) -> StudyView:
    experiment = (card.extra.get("harness") or {}).get("experiment")
    name: str | None = f"{experiment}:{card.id}"
    if name not in names:
        matches = [n for n in names if n.endswith(f":{card.id}")]
        name = matches[0] if len(matches) == 1 else None
    if name is None:
        return StudyView(None, [], None, "", note="no study for this card (nothing was searched)")
    baseline = (card.extra.get("search_timing") or {}).get("median_us")
    drift = [(int(d["after_trial"]), float(d["median_us"])) for d in card.extra.get("baseline_drift") or []
             if isinstance(d, dict) and isinstance(d.get("median_us"), (int, float))]
    try:
        study = optuna.load_study(study_name=name, storage=storage)
        trials = study.get_trials(deepcopy=False)
        done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
        importances, note = _importances(study, done)
        return StudyView(name, trials, importances, note,
                         baseline_us=float(baseline) if isinstance(baseline, (int, float)) else None, drift=drift)
    except Exception as exc:
        return StudyView(name, [], None, "", note=f"study {name} unreadable ({type(exc).__name__}: {exc})")


def missing_reason(study: StudyView | None) -> str:
    """Why a card has no variant tried: its study tells a failed search from a baseline-only experiment."""
    # A repeat was answered from its earlier trial (harness.search.repeats): it is not a try of its own.
    trials = [t for t in study.trials if REPEAT_KEY not in t.system_attrs] if study else []
    if not trials:
        return "baseline only: no variant was searched for this card"
    counts: dict[str, int] = {}
    for t in trials:
        key = t.user_attrs.get("status") or t.state.name.lower()
        counts[key] = counts.get(key, 0) + 1
    if any(t.state == optuna.trial.TrialState.COMPLETE for t in trials):
        return "no variant recorded for this card"
    return "no feasible variant (" + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) + ")"


def _objective(trial: optuna.trial.FrozenTrial) -> float:
    """A completed trial's value (history_svg keeps only the trials that have one)."""
    assert trial.value is not None
    return trial.value


def history_svg(trials: list[optuna.trial.FrozenTrial], baseline_us: float | None = None,
                drift: Sequence[tuple[int, float]] = ()) -> str:
    """Objective per trial, the best so far as a step line; pruned trials marked on the floor; the baseline's
    search timing as a dashed line (a trial below it ran faster than the baseline), its drift re-times between
    trials as ticks."""
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None]
    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    variants = sorted({str(t.user_attrs.get("variant", t.params.get("variant", "?"))) for t in done})
    palette = matplotlib.colormaps["tab10"]
    for i, variant in enumerate(variants):
        mine = [t for t in done if str(t.user_attrs.get("variant", t.params.get("variant", "?"))) == variant]
        ax.plot([t.number for t in mine], [_objective(t) for t in mine], "o", color=palette(i % 10),
                label=plain(variant))
    if done:
        best, xs, ys = float("inf"), [], []
        for t in sorted(done, key=lambda t: t.number):
            best = min(best, _objective(t))
            xs.append(t.number)
            ys.append(best)
        ax.step(xs, ys, where="post", color="#c0392b", label="best so far")
    numbers = {t.number for t in done}
    others = [t for t in trials if t.number not in numbers]
    if others:
        floor = min((_objective(t) for t in done), default=1.0) * 0.9
        ax.plot([t.number for t in others], [floor] * len(others), "x", color="#7f7f7f",
                label="pruned / failed (no value)")
    if baseline_us is not None:
        ax.axhline(baseline_us, color="#333333", linestyle="--", linewidth=1.2,
                   label=f"baseline, {fmt(baseline_us, 1)} us")
    if drift:
        ax.plot([after + 0.5 for after, _ in drift], [us for _, us in drift], "_", color="#333333", markersize=12,
                markeredgewidth=2, label="baseline re-timed (drift check)")
    values = [_objective(t) for t in done] + ([baseline_us] if baseline_us is not None else []) + [
        us for _, us in drift]
    if values and min(values) > 0 and max(values) / min(values) > 50:
        ax.set_yscale("log")  # one pathological trial would flatten the others onto the floor
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("trial")
    ax.set_ylabel("objective (us per call, search timing)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return svg(fig)


def importance_svg(importances: Mapping[str, float]) -> str:
    names = list(importances)[::-1]
    fig = Figure(figsize=(7, 0.45 * len(names) + 1.2))
    ax = fig.subplots()
    ax.barh(range(len(names)), [importances[n] for n in names], 0.6, color=BEFORE_COLOR)
    ax.set_yticks(range(len(names)), [plain(n) for n in names])
    ax.set_xlabel("importance (PED-ANOVA, normalized to sum 1)")
    ax.set_xlim(0, 1.05)
    return svg(fig)


def study_block(s: StudyView) -> str:
    """The card's Search section: the history and importance plots, and every trial with its status."""
    if not s.trials:
        return f'<p class="note">Optuna: {esc(s.note or "the study has no trials")}</p>'
    figures = [f'<figure>{history_svg(s.trials, s.baseline_us, s.drift)}<figcaption>Optimization history of study '
               f"<code>{esc(s.name)}</code> ({len(s.trials)} trials).</figcaption></figure>"]
    if s.importances:
        figures.append(f"<figure>{importance_svg(s.importances)}<figcaption>Parameter importances: "
                       f"{esc(s.importance_note)}.</figcaption></figure>")
    else:
        figures.append(f'<p class="note">{esc(s.importance_note)}</p>')
    rows = []
    for t in s.trials:
        value = Num(fmt(t.value, 3) if t.value is not None else "n/a")
        status = t.user_attrs.get("status") or t.state.name.lower()
        reason = t.user_attrs.get("reason") or ""
        rows.append([str(t.number), esc(t.user_attrs.get("variant", "")), esc(json.dumps(t.params)), value,
                     esc(f"{status} {reason}".strip())])
    table = html_table(["trial", "variant", "params", "objective us", "status"], rows)
    shown = " open" if len(s.trials) <= OPEN_TRIALS else ""  # what was tried, in sight where it is short
    return (f'<div class="plots">{"".join(figures)}</div><details{shown}><summary>trials ({len(s.trials)})</summary>'
            f"{table}</details>")
