"""A card's Optuna study on the run's page: read once, drawn, and its Search section.

The page must render whatever state the storage is in (no storage, a locked or foreign database, a
study fANOVA refuses), so every failure to read becomes a note on the page, never a crash, and a
card without a variant says why: a failed search is told from a baseline-only experiment by its trials.
It reads cards and gives a `StudyView` per card; harness.report.html puts them on its card views.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

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


@dataclass
class StudyView:
    """A card's Optuna study, read once; `note` says why there is none."""

    name: str | None
    trials: list[optuna.trial.FrozenTrial]
    importances: dict[str, float] | None
    importance_note: str
    note: str = ""


def _importances(study: optuna.Study, done: list[optuna.trial.FrozenTrial]) -> tuple[dict[str, float] | None, str]:
    varying = [p for p in {k for t in done for k in t.params} if len({repr(t.params.get(p)) for t in done}) > 1]
    if len(done) < 2 or not varying:
        return None, (f"not enough trials for parameter importances: {len(done)} completed, "
                      f"{len(varying)} parameter(s) varying (needs >= 2 completed trials with a varying parameter)")
    try:
        values = optuna.importance.get_param_importances(study)
    except Exception as exc:  # fANOVA refuses some conditional spaces; the page must still render
        return None, f"parameter importances not computable ({type(exc).__name__}: {exc})"
    note = " (the only parameter: importance 1 by construction)" if len(values) == 1 else ""
    return dict(values), f"fANOVA over {len(done)} completed trials{note}"


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
    try:
        study = optuna.load_study(study_name=name, storage=storage)
        trials = study.get_trials(deepcopy=False)
        done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
        importances, note = _importances(study, done)
        return StudyView(name, trials, importances, note)
    except Exception as exc:
        return StudyView(name, [], None, "", note=f"study {name} unreadable ({type(exc).__name__}: {exc})")


def missing_reason(study: StudyView | None) -> str:
    """Why a card has no variant tried: its study tells a failed search from a baseline-only experiment."""
    trials = study.trials if study else []
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


def history_svg(trials: list[optuna.trial.FrozenTrial]) -> str:
    """Objective per trial, the best so far as a step line; pruned trials marked on the floor."""
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
    values = [_objective(t) for t in done]
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
    ax.set_xlabel("importance (optuna.importance, fANOVA)")
    ax.set_xlim(0, 1.05)
    return svg(fig)


def study_block(s: StudyView) -> str:
    """The card's Search section: the history and importance plots, and every trial with its status."""
    if not s.trials:
        return f'<p class="note">Optuna: {esc(s.note or "the study has no trials")}</p>'
    figures = [f'<figure>{history_svg(s.trials)}<figcaption>Optimization history of study '
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
    return f'<div class="plots">{"".join(figures)}</div><details><summary>trials</summary>{table}</details>'
