"""ncu's own rule results (its guided analysis), as a kernel keeps them: `ncu_rules`.

Each result is `{id, name, section, title, message_type, speedup, speedup_type}`: the rule's identifier
and display name, the section it belongs to, its message's title, the message's type (`ok`,
`optimization`, `warning`, `error`, `none`), and, where the rule estimates one, the speedup as ncu
states it (a percent of the kernel's time, or of the whole run's for `global`) and its type (`local`
or `global`). The message text itself is left out: ncu's UI shows it, and the card keeps what a
prediction is scored against.

A `.ncu-rep` is read through the `ncu_report` module's `rule_results_as_dicts()`, its message and
speedup types named by the module's own enums (`MsgType_*`, `SpeedupType_*`); ncu's details-page CSV
carries the same results as rows with a "Rule Name", its type abbreviated (OPT, WRN, ERR, INF).
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any

RULE_KEYS = ("id", "name", "section", "title", "message_type", "speedup", "speedup_type")
ERROR = "error"

# The details page's abbreviations. INF is ncu's OK type: the roofline rule (SOLFPRoofline), MsgType_OK in
# every .ncu-rep read here, prints INF on the details page.
_CSV_TYPES = {"OPT": "optimization", "WRN": "warning", "ERR": ERROR, "INF": "ok", "OK": "ok"}


def _enum_names(module: ModuleType, prefix: str) -> dict[Any, str]:
    """The module's enum values of one kind by value: MsgType_OPTIMIZATION -> "optimization"."""
    names = {}
    for attribute in dir(module):
        if attribute.startswith(prefix):
            value = getattr(module, attribute)
            if isinstance(value, int):
                names[value] = attribute[len(prefix):].lower()
    return names


def _number(value: Any) -> float | None:
    """A speedup as a float; some ncu versions hand the payload over as text ("81.25", "1,024.5")."""
    if isinstance(value, str):
        try:
            value = float(value.replace(",", ""))
        except ValueError:
            return None
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def rule(id: str, name: str, section: str, title: str | None, message_type: str | None,
         speedup: float | None, speedup_type: str | None) -> dict[str, Any]:
    """One rule result in the kernel's `ncu_rules` shape; a speedup without a known type keeps none."""
    return dict(zip(RULE_KEYS, (id, name, section, title or None, message_type, speedup,
                                speedup_type if speedup is not None else None)))


def from_module(action: Any, module: ModuleType) -> tuple[list[dict[str, Any]], list[str]]:
    """A profiled kernel's rule results through the ncu_report module (an `IAction`), and the messages of
    those that failed (type `error`: "Rule Launch Configuration returned an error: Metric launch__block_size
    not found"), which say what ncu could not collect."""
    messages = {value: ERROR if name == "err" else name for value, name in _enum_names(module, "MsgType_").items()}
    speedups = _enum_names(module, "SpeedupType_")
    out, errors = [], []
    for result in action.rule_results_as_dicts():
        message = result.get("rule_message")
        if isinstance(message, dict):
            title, kind = message.get("title"), messages.get(message.get("type"), str(message.get("type")))
            if kind == ERROR and message.get("message"):
                errors.append(str(message["message"]))
        else:  # a version whose message is the text alone: no title, no type
            title, kind = None, None
        estimate = result.get("speedup_estimation") or {}
        speedup_kind = speedups.get(estimate.get("type")) if isinstance(estimate, dict) else None
        out.append(rule(str(result.get("rule_identifier", "")), str(result.get("name", "")),
                        str(result.get("section_identifier", "")), title, kind,
                        _number(estimate.get("speedup")) if isinstance(estimate, dict) else None,
                        None if speedup_kind == "unknown" else speedup_kind))
    return out, errors


def from_details_row(row: dict[str, str]) -> dict[str, Any]:
    """One details-page rule row (its "Rule Name", "Rule Type", "Section Name", speedup columns)."""
    kind = row.get("Rule Type", "").strip()
    speedup_type = row.get("Estimated Speedup Type", "").strip().lower() or None
    return rule(row["Rule Name"], row["Rule Name"], row.get("Section Name", ""), None,
                _CSV_TYPES.get(kind, kind.lower() or None), _number(row.get("Estimated Speedup", "")),
                speedup_type)
