"""Which rows a prediction has: every card, every experiment that applies to it as `experiment=auto` plans (its op
kinds, the card's class among its classes, the card within its `default_cards` scope), every configuration of
that experiment's space; and the rows themselves, each from the experiment's predictor.

The experiments are read without importing them (their modules import torch): the space, module and default
cards from `conf/experiment/<name>.yaml`, as Hydra composes them; the op kinds, classes and workload dtype
from the `Experiment(...)` call in the module's source, where they are literal (names of
harness.cards.fields' classes included). An experiment whose space is empty (reprofile, stall_breakdown:
baseline only) has nothing to predict.
"""

from __future__ import annotations

import ast
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from harness.cards import fields
from harness.cards.fields import UNRESOLVED
from harness.cards.ids import CHUNK_OP_KINDS
from harness.cards.model import Card
from harness.predict.context import Context
from harness.predict.prediction import PREDICTORS, Prediction, Unpredictable, row
from harness.predict.uncertainty import predict_one
from harness.run.selection import in_scope
from harness.search.space import configurations

CONF_DIR = Path(__file__).resolve().parents[2] / "conf" / "experiment"


@dataclass(frozen=True)
class ExperimentPlan:
    """What the predictions need of one experiment."""

    name: str
    op_kinds: tuple[str, ...]
    classes: tuple[str, ...]
    space: Mapping[str, Any]
    scope: Any = None  # its default_cards: the scope filters auto applies
    workload_dtype: str = "float32"

    def applies(self, card: Card) -> bool:
        """As harness.run.auto.plan_auto: its op kind, the card's class (none: unresolved) among its classes, in
        its scope; a chunk card takes its kind's experiments."""
        if card.op_kind not in self.op_kinds:
            return False
        chunk = card.op_kind in CHUNK_OP_KINDS
        return (chunk or (card.primary or UNRESOLVED) in self.classes) and in_scope(card, self.scope)

    def configurations(self) -> list[tuple[str, dict[str, Any]]]:
        """Every (variant, params) of the space (a continuous range has none: SearchError)."""
        out = []
        for config in configurations(self.space):
            variant = config.pop("variant")
            out.append((variant, {key.split(".", 1)[1]: value for key, value in config.items()}))
        return out


def shipped_experiments(conf_dir: Path = CONF_DIR) -> list[ExperimentPlan]:
    """The experiments of `conf_dir` with a space to predict, in name order."""
    from omegaconf import OmegaConf

    found = []
    for path in sorted(conf_dir.glob("*.yaml")):
        section = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
        experiment = section.get("experiment") if isinstance(section, dict) else None
        if not isinstance(experiment, dict) or not experiment.get("space"):
            continue
        facts = module_facts(str(experiment["module"]))
        if facts is not None:
            found.append(ExperimentPlan(str(experiment["name"]), *facts[:2], experiment["space"],
                                        experiment.get("default_cards"), facts[2]))
    return found


def module_facts(module: str) -> tuple[tuple[str, ...], tuple[str, ...], str] | None:
    """(op_kinds, classes, workload_dtype) of the module's `Experiment(...)`; None where they are not literal."""
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        return None
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Experiment":
            given = {k.arg: k.value for k in node.keywords}
            try:
                kinds, classes = (tuple(_literal(given[k])) if k in given else () for k in ("op_kinds", "classes"))
                dtype = _literal(given["workload_dtype"]) if "workload_dtype" in given else "float32"
            except ValueError:
                return None
            return tuple(map(str, kinds)), tuple(map(str, classes)), str(dtype)
    return None


def _literal(node: ast.expr) -> Any:
    """A literal, or a tuple of literals and names of harness.cards.fields' constants."""
    if isinstance(node, ast.Name):
        value = getattr(fields, node.id, None)
        if not isinstance(value, str):
            raise ValueError(node.id)
        return value
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_literal(item) for item in node.elts)
    if isinstance(node, ast.Constant):
        return node.value
    raise ValueError(ast.dump(node))


ContextOf = Callable[[Card, ExperimentPlan], "Context | str"]  # a card's context, or why there is none


def predict_rows(cards: Iterable[Card], experiments: Iterable[ExperimentPlan], context_of: ContextOf,
                 time_in_model_of: Callable[[Card], float | None], *, every_card: bool = True) -> list[Prediction]:
    """One row per card, applying experiment (every one given, without `every_card`) and configuration."""
    rows = []
    for card in cards:
        for experiment in experiments:
            if every_card and not experiment.applies(card):
                continue
            found = context_of(card, experiment)
            device = found.device.name if isinstance(found, Context) else "?"
            for variant, params in experiment.configurations():
                predictor = PREDICTORS.get(experiment.name)
                if isinstance(found, str):
                    result: Any = Unpredictable(found)
                elif predictor is None:
                    result = Unpredictable(f"no predictor for {experiment.name}: the model covers "
                                           f"{', '.join(sorted(PREDICTORS))}")
                else:
                    result = predict_one(predictor, found, variant, params)
                in_model = time_in_model_of(card) if isinstance(found, Context) and found.measured_here else None
                rows.append(row(card.id, experiment.name, variant, params, device, result, in_model))
    return rows
