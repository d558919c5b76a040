"""The report model: Report, Card and Kernel, read and written without loss.

Known fields become typed attributes; unknown fields are kept verbatim in `extra`, and each object
remembers which keys it was read with, so that an absent key stays absent and a null stays null on
the way back out.
"""

from __future__ import annotations

import copy
import json
import math
import os
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, TypeGuard

from harness.cards.atomic import write_text_atomic
from harness.cards.fields import METRIC_FIELDS
from harness.cards.ids import derive_card_id, id_stem, op_kind, similar_ids
from harness.errors import HarnessError

DEFAULT_REPORT_NAME = "lingbot_world_realtime_ncu_20260908.json"
PRECISION_KEY = "precision"  # a report's declaration of what its model ran in (harness.cards.dtype)
DEVICE_KEY = "device"  # the GPU a report declares it was profiled on (harness.cards.reproduce)
# A capture's own account (harness.capture): on the report, the model, its device and forward; on a card, its calls,
# its time and share of the forward (harness.cards.measures.time_in_model).
CAPTURE_KEY = "capture"


class ReportError(HarnessError):
    """A report that cannot be read or used; the message is one line naming the file."""


Number = float | int


def _is_number(value: Any) -> TypeGuard[int | float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class Kernel:
    name: str
    metrics: dict[str, float | None] | None = None
    classification: str | None = None
    rule: str | None = None
    evidence: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    keys: tuple[str, ...] = ()

    _KNOWN = ("kernel", "metrics", "classification", "rule", "evidence")

    @property
    def damaged(self) -> bool:
        """A kernel whose metrics were lost (see docs/domain.md: text between `<` and `>` was cut)."""
        return self.metrics is None

    def metric(self, name: str) -> float | None:
        if self.metrics is None:
            return None
        value = self.metrics.get(name)
        return float(value) if _is_number(value) else None

    def to_dict(self) -> dict[str, Any]:
        values = {
            "kernel": self.name,
            "metrics": self.metrics,
            "classification": self.classification,
            "rule": self.rule,
            "evidence": self.evidence,
        }
        return _emit(values, self.extra, self.keys)


@dataclass
class Card:
    group: str
    resolution: str | None
    stage: str
    op: str
    shape_parameters: dict[str, Any]
    kernels: list[Kernel]
    input_sha256: str | None = None
    nominal_mac_flops: float | None = None
    summed_kernel_us: float | None = None
    dominant_kernel: str | None = None
    primary: str | None = None
    primary_rule: str | None = None
    alternative_explanation: str | None = None
    counter_experiment: str | None = None
    status: str | None = None
    shape_parameters_encoded: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    keys: tuple[str, ...] = ()

    _KNOWN = (
        "group",
        "resolution",
        "stage",
        "op",
        "shape_parameters",
        "input_sha256",
        "nominal_mac_flops",
        "summed_kernel_us",
        "kernels",
        "dominant_kernel",
        "primary",
        "primary_rule",
        "alternative_explanation",
        "counter_experiment",
        "status",
    )

    @property
    def id(self) -> str:
        """Stable, short, filename-safe id; `group` alone is not unique (the cast cards share one)."""
        explicit = self.extra.get("id")
        if isinstance(explicit, str) and explicit:
            return explicit
        return derive_card_id(self)

    @property
    def op_kind(self) -> str:
        """The workload family: the card's own `op_kind` field where it has one (a captured op replayed as
        captured: `replay`), else the family of its op name."""
        explicit = self.extra.get("op_kind")
        if isinstance(explicit, str) and explicit:
            return explicit
        return op_kind(self.op)

    def kernel(self, name: str) -> Kernel | None:
        return next((k for k in self.kernels if k.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        shape: Any = self.shape_parameters
        if self.shape_parameters_encoded:
            shape = json.dumps(self.shape_parameters)
        values = {
            "group": self.group,
            "resolution": self.resolution,
            "stage": self.stage,
            "op": self.op,
            "shape_parameters": shape,
            "input_sha256": self.input_sha256,
            "nominal_mac_flops": self.nominal_mac_flops,
            "summed_kernel_us": self.summed_kernel_us,
            "kernels": [k.to_dict() for k in self.kernels],
            "dominant_kernel": self.dominant_kernel,
            "primary": self.primary,
            "primary_rule": self.primary_rule,
            "alternative_explanation": self.alternative_explanation,
            "counter_experiment": self.counter_experiment,
            "status": self.status,
        }
        return _emit(values, self.extra, self.keys, always=("group", "stage", "op", "kernels"),
                     made=("kernels",))


@dataclass
class Report:
    cards: list[Card]
    generated_at: str | None = None
    rules: str | None = None
    summary: dict[str, int] | None = None
    by_stage: dict[str, dict[str, int]] | None = None
    scope: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    keys: tuple[str, ...] = ()
    source: str = "<memory>"

    def card(self, card_id: str) -> Card:
        """The card with this id, or with this id plus its `-xxxxxx` hash suffix when exactly one has it.

        The suffix only tells apart cards of one group (docs/domain.md: `group` is not unique), so an id
        typed without it is accepted when it names one card, and answered with the candidates when it
        names several; any other miss lists the most similar ids first.
        """
        for card in self.cards:
            if card.id == card_id:
                return card
        same_stem = [c for c in self.cards if id_stem(c.id) == card_id]
        if len(same_stem) == 1:
            return same_stem[0]
        if same_stem:
            raise ReportError(f"{self.source}: {card_id!r} is {len(same_stem)} cards, give the full id: "
                              + ", ".join(c.id for c in same_stem))
        near = similar_ids(card_id, [c.id for c in self.cards])
        hint = f"; most similar: {', '.join(near)}" if near else "; list them with `python -m harness.report show`"
        raise ReportError(f"{self.source}: no card with id {card_id!r}{hint}")

    def to_dict(self) -> dict[str, Any]:
        values = {
            "generated_at": self.generated_at,
            "rules": self.rules,
            "cards": [c.to_dict() for c in self.cards],
            "summary": self.summary,
            "by_stage": self.by_stage,
            "scope": self.scope,
        }
        return _emit(values, self.extra, self.keys, always=("cards",), made=("cards",))


def _emit(
    values: dict[str, Any], extra: dict[str, Any], keys: tuple[str, ...], always: tuple[str, ...] = (),
    made: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Write known values and extras in the order they were read; new non-null values go last. Every value is
    a copy; those in `made` were just made by their own to_dict (a card's kernels, a report's cards), so they
    are not copied again."""
    out: dict[str, Any] = {}
    merged = {**values, **extra}
    for key in keys:
        if key in merged:
            out[key] = merged[key]
    for key, value in merged.items():
        if key not in out and (value is not None or key in always):
            out[key] = value
    return {key: value if key in made and value is values.get(key) else copy.deepcopy(value)
            for key, value in out.items()}


# ---------------------------------------------------------------------------------------------
# Parsing


class _Shape:
    """Type checks that name the place of a bad value."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, what: str) -> ReportError:
        return ReportError(f"{self.where}: {what}")

    def get(self, obj: dict[str, Any], key: str, kinds: tuple[type, ...], required: bool = True) -> Any:
        if key not in obj:
            if required:
                raise self.fail(f"missing field {key!r}")
            return None
        value = obj[key]
        if value is None:
            if required:
                raise self.fail(f"field {key!r} is null")
            return None
        if float in kinds and _is_number(value):
            if isinstance(value, float) and not math.isfinite(value):
                raise self.fail(f"field {key!r} is not a finite number")
            return value
        if not isinstance(value, kinds) or isinstance(value, bool) and bool not in kinds:
            names = "/".join(k.__name__ for k in kinds)
            raise self.fail(f"field {key!r} must be {names}, got {type(value).__name__}")
        return value


def _parse_kernel(obj: Any, where: str) -> Kernel:
    shape = _Shape(where)
    if not isinstance(obj, dict):
        raise shape.fail(f"kernel entry must be an object, got {type(obj).__name__}")
    name = shape.get(obj, "kernel", (str,))
    metrics = shape.get(obj, "metrics", (dict,), required=False)
    if metrics is not None:
        for key, value in metrics.items():
            if value is not None and not _is_number(value):
                raise shape.fail(f"metric {key!r} must be a number or null, got {type(value).__name__}")
            if _is_number(value) and not math.isfinite(value):
                raise shape.fail(f"metric {key!r} is not a finite number")
    evidence = shape.get(obj, "evidence", (dict,), required=False)
    return Kernel(
        name=name,
        metrics=metrics,
        classification=shape.get(obj, "classification", (str,), required=False),
        rule=shape.get(obj, "rule", (str,), required=False),
        evidence=evidence,
        extra={k: v for k, v in obj.items() if k not in Kernel._KNOWN},
        keys=tuple(obj),
    )


def _parse_card(obj: Any, where: str) -> Card:
    shape = _Shape(where)
    if not isinstance(obj, dict):
        raise shape.fail(f"card must be an object, got {type(obj).__name__}")
    raw_shape = shape.get(obj, "shape_parameters", (dict, str), required=False)
    encoded = isinstance(raw_shape, str)
    if encoded:
        try:
            parameters = json.loads(raw_shape)
        except json.JSONDecodeError as exc:
            raise shape.fail(f"shape_parameters is a string but not JSON ({exc.msg})") from None
        if not isinstance(parameters, dict):
            raise shape.fail("shape_parameters must encode an object")
    else:
        parameters = raw_shape if raw_shape is not None else {}
    kernels_raw = shape.get(obj, "kernels", (list,))
    group = shape.get(obj, "group", (str,))
    kernels = [_parse_kernel(k, f"{where} ({group}), kernel {i}") for i, k in enumerate(kernels_raw)]
    return Card(
        group=group,
        resolution=shape.get(obj, "resolution", (str,), required=False),
        stage=shape.get(obj, "stage", (str,)),
        op=shape.get(obj, "op", (str,)),
        shape_parameters=parameters,
        shape_parameters_encoded=encoded,
        kernels=kernels,
        input_sha256=shape.get(obj, "input_sha256", (str,), required=False),
        nominal_mac_flops=shape.get(obj, "nominal_mac_flops", (float,), required=False),
        summed_kernel_us=shape.get(obj, "summed_kernel_us", (float,), required=False),
        dominant_kernel=shape.get(obj, "dominant_kernel", (str,), required=False),
        primary=shape.get(obj, "primary", (str,), required=False),
        primary_rule=shape.get(obj, "primary_rule", (str,), required=False),
        alternative_explanation=shape.get(obj, "alternative_explanation", (str,), required=False),
        counter_experiment=shape.get(obj, "counter_experiment", (str,), required=False),
        status=shape.get(obj, "status", (str,), required=False),
        extra={k: v for k, v in obj.items() if k not in Card._KNOWN},
        keys=tuple(obj),
    )


def _parse_counts(value: Any, shape: _Shape, key: str, nested: bool) -> Any:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise shape.fail(f"field {key!r} must be an object")
    for name, inner in value.items():
        if nested:
            _parse_counts(inner, shape, f"{key}.{name}", nested=False)
        elif not isinstance(inner, int) or isinstance(inner, bool):
            raise shape.fail(f"field {key}.{name} must be an integer count")
    return value


ID_RENAMED = "id_renamed"  # a card's note: the id it was read with, and the earlier card that has it too


def _unique_ids(cards: list[Card]) -> None:
    """A card whose id an earlier card already has gets `<id>-2` (`-3`, ...) and a note under ID_RENAMED:
    one duplicate is a lint finding (duplicate_id), never a refused report, and the renaming depends only on
    the cards' order, so every process reading the report (a run, its worker, the ncu child) names them alike."""
    taken = {card.id for card in cards}
    first: dict[str, int] = {}
    for i, card in enumerate(cards):
        stored = card.id
        if stored not in first:
            first[stored] = i
            continue
        n = 2
        while f"{stored}-{n}" in taken:
            n += 1
        card.extra["id"] = f"{stored}-{n}"
        card.extra[ID_RENAMED] = {"stored_id": stored, "card": i, "same_as_card": first[stored]}
        taken.add(card.extra["id"])


def renamed_id_lines(report: Report) -> list[str]:
    """One Markdown line per card the loader renamed: what summary.md and plan.md say about it."""
    return [f"- card {note['card']} has the id `{note['stored_id']}` of card {note['same_as_card']}: read as "
            f"`{card.id}` (duplicate_id)" for card in report.cards
            if isinstance(note := card.extra.get(ID_RENAMED), dict)]


def parse_report(obj: Any, source: str = "<memory>") -> Report:
    """Build a Report from decoded JSON; every problem is a ReportError naming `source`."""
    shape = _Shape(source)
    if not isinstance(obj, dict):
        raise shape.fail(f"a report must be a JSON object with a 'cards' list, got {type(obj).__name__}")
    cards_raw = shape.get(obj, "cards", (list,))
    cards = [_parse_card(c, f"{source}: card {i}") for i, c in enumerate(cards_raw)]
    _unique_ids(cards)
    known = ("generated_at", "rules", "cards", "summary", "by_stage", "scope")
    return Report(
        cards=cards,
        generated_at=shape.get(obj, "generated_at", (str,), required=False),
        rules=shape.get(obj, "rules", (str,), required=False),
        summary=_parse_counts(obj.get("summary"), shape, "summary", nested=False),
        by_stage=_parse_counts(obj.get("by_stage"), shape, "by_stage", nested=True),
        scope=shape.get(obj, "scope", (str,), required=False),
        extra={k: v for k, v in obj.items() if k not in known},
        keys=tuple(obj),
        source=source,
    )


def default_report_path() -> Path:
    return Path(str(resources.files("harness") / "data" / DEFAULT_REPORT_NAME))


def load_report(path: str | os.PathLike[str] | None = None) -> Report:
    """Read a report file (the shipped baseline when `path` is None)."""
    target = Path(path) if path is not None else default_report_path()
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ReportError(f"{target}: no such file") from None
    except IsADirectoryError:
        raise ReportError(f"{target}: is a directory, not a report file") from None
    except PermissionError:
        raise ReportError(f"{target}: permission denied") from None
    except UnicodeDecodeError:
        raise ReportError(f"{target}: not a text file (expected JSON)") from None
    except OSError as exc:
        raise ReportError(f"{target}: cannot read ({exc.strerror or exc})") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{target}: not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise ReportError(f"{target}: JSON nested too deeply") from None
    if isinstance(obj, dict):
        obj = {**_declared_beside(target), **obj}
    return parse_report(obj, str(target))


def _declared_beside(target: Path) -> dict[str, Any]:
    """What `<report>.declared.json` beside a report says of it: the GPU it was profiled on (`device`) and what
    its model ran in (`precision`, harness.cards.dtype); {} without one. The report's own keys win, and a
    harness-written report carries what it was read with."""
    sidecar = target.with_name(f"{target.stem}.declared.json")
    try:
        declared = json.loads(sidecar.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReportError(f"{sidecar}: not a readable declaration ({exc})") from None
    if not isinstance(declared, dict):
        raise ReportError(f"{sidecar}: a declaration is an object with '{DEVICE_KEY}' and '{PRECISION_KEY}'")
    return {k: declared[k] for k in (DEVICE_KEY, PRECISION_KEY) if k in declared}


def save_report(report: Report, path: str | os.PathLike[str]) -> Path:  # standard JSON: a NaN raises ValueError
    return write_text_atomic(path, json.dumps(report.to_dict(), indent=1, allow_nan=False) + "\n")


def empty_metrics() -> dict[str, float | None]:
    return {name: None for name in METRIC_FIELDS}
