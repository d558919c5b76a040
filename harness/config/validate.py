"""Check a run's configuration before anything is measured: types, ranges, unknown keys, output folder.

What a key must be is read from the dataclasses of harness.config.schema: its type, and the range or
choices in its field metadata. `compose_checked` composes the config as `python -m harness` does and
turns what Hydra and OmegaConf reject while composing (`search.n_trials=abc` against an int field, a
key the schema lacks) into the same messages as `problems`, which checks the composed config (and
`harness.run.execute.execute` checks each config it runs). Every problem found is raised at once as
`ConfigError`, on one line; an unknown key comes with the key most likely meant.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import tempfile
import types
import typing
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Mapping, TypeGuard, cast

from omegaconf import MISSING, DictConfig, OmegaConf

from harness.config.schema import AUTO, BOUNDS, CHOICES, OPEN_SECTIONS, Bounds, HarnessConfig
from harness.errors import HarnessError

CONF_DIR = Path(__file__).resolve().parents[2] / "conf"


class ConfigError(HarnessError):
    """A configuration that cannot run; the message (one line) says what to change."""


@dataclasses.dataclass(frozen=True)
class Setting:
    """One key of the schema: its type (Optional taken off), whether null is allowed, its range or choices."""

    kind: Any
    nullable: bool
    bounds: Bounds | None = None
    choices: tuple[str, ...] = ()


def _is_union(hint: Any) -> bool:
    return typing.get_origin(hint) in (typing.Union, types.UnionType)  # Optional[int] and `int | None`


def _setting(hint: Any, metadata: Mapping[str, Any]) -> Setting:
    members = typing.get_args(hint) if _is_union(hint) else ()
    nullable = type(None) in members
    if nullable:
        rest = tuple(m for m in members if m is not type(None))
        hint = rest[0] if len(rest) == 1 else typing.Union[rest]  # noqa: UP007 (built from a tuple at run time)
    return Setting(hint, nullable, metadata.get(BOUNDS), tuple(metadata.get(CHOICES, ())))


@cache
def settings_of(schema: type) -> dict[str, Setting]:
    """Each field of a schema dataclass by name."""
    hints = typing.get_type_hints(schema)
    return {f.name: _setting(hints[f.name], f.metadata) for f in dataclasses.fields(schema)}


@lru_cache(maxsize=1)
def sections() -> dict[str, type]:
    """Each dataclass of the schema by its dotted place in the config ("" for the top level)."""
    found: dict[str, type] = {}

    def walk(prefix: str, schema: type) -> None:
        found[prefix] = schema
        for name, setting in settings_of(schema).items():
            if isinstance(setting.kind, type) and dataclasses.is_dataclass(setting.kind):
                walk(f"{prefix}.{name}" if prefix else name, setting.kind)

    walk("", HarnessConfig)
    return found


def setting_at(dotted: str) -> Setting | None:
    """The schema's setting of a dotted key; None outside the typed sections (profiler, rules, extras)."""
    section, _, key = dotted.rpartition(".")
    schema = sections().get(section)
    return settings_of(schema).get(key) if schema is not None else None


# -- what a value must be -----------------------------------------------------------------------------

def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # not NaN


def _range_text(bounds: Bounds | None) -> str:
    if bounds is None or (bounds.low is None and bounds.high is None):
        return ""
    if bounds.low is not None and bounds.high is not None:
        return (f" in {'(' if bounds.low_open else '['}{bounds.low:g}, {bounds.high:g}"
                f"{')' if bounds.high_open else ']'}")
    if bounds.low is not None:
        return f" {'>' if bounds.low_open else '>='} {bounds.low:g}"
    return f" {'<' if bounds.high_open else '<='} {bounds.high:g}"


def _kind_text(kind: Any, bounds: Bounds | None) -> str:
    if _is_union(kind):
        return ", ".join(_kind_text(member, None) for member in typing.get_args(kind))
    if kind is bool:
        return "true or false"
    if kind is int:
        return "an integer" + _range_text(bounds)
    if kind is float:
        return "a number" + _range_text(bounds)
    if kind is str:
        return "a non-empty string"
    return "a mapping"  # a dataclass or Dict[str, Any]


def requirement(setting: Setting) -> str:
    """What a value of `setting` must be, in words: "an integer >= 1", "one of ...", "... or null"."""
    text = "one of " + ", ".join(setting.choices) if setting.choices else _kind_text(setting.kind, setting.bounds)
    return text + (" or null" if setting.nullable else "")


def _kind_admits(kind: Any, value: Any, bounds: Bounds | None) -> bool:
    if _is_union(kind):
        return any(_kind_admits(member, value, None) for member in typing.get_args(kind))
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return _is_int(value) and (bounds is None or bounds.admits(value))
    if kind is float:
        return _is_number(value) and (bounds is None or bounds.admits(value))
    if kind is str:
        return isinstance(value, str) and bool(value)
    if kind is Any:
        return True
    return isinstance(value, Mapping)


def admits(setting: Setting, value: Any) -> bool:
    if value is None:
        return setting.nullable or setting.kind is Any
    if setting.choices:
        return value in setting.choices
    return _kind_admits(setting.kind, value, setting.bounds)


def _show(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))  # as typed: `timing.budget_s=0` is stored as 0.0
    return repr(value) if isinstance(value, str) else str(value)


def value_problem(dotted: str, value: Any) -> str | None:
    """`key=value: must be ...` when the schema's `dotted` key does not admit `value`; None when it does."""
    setting = setting_at(dotted)
    if setting is None:
        return None
    if value == MISSING:  # "???": a required key no config file gave
        return f"{dotted}: missing; give {requirement(setting)}"
    return None if admits(setting, value) else f"{dotted}={_show(value)}: must be {requirement(setting)}"


def plain_config(cfg: DictConfig) -> dict[str, Any]:
    """`cfg` as plain dicts and lists, interpolations resolved (OmegaConf types the result as any container;
    a DictConfig's is a dict with str keys)."""
    return cast("dict[str, Any]", OmegaConf.to_container(cfg, resolve=True))


# -- unknown keys ---------------------------------------------------------------------------------------

def _load(path: Path) -> Any:
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)


@lru_cache(maxsize=4)
def known_keys(conf_dir: Path = CONF_DIR) -> dict[str, frozenset[str]]:
    """The keys each checked section may hold (the top level's under ""): the schema's fields; in the open
    sections also the keys a shipped experiment file declares there; the profiler's, its files' keys."""
    found = {name: set(settings_of(schema)) for name, schema in sections().items()}
    for path in sorted((conf_dir / "experiment").glob("*.yaml")):
        declared = _load(path) or {}  # `# @package _global_`: the file holds `experiment: {...}`
        for name in OPEN_SECTIONS:
            if isinstance(declared.get(name), Mapping):
                found[name].update(str(k) for k in declared[name])
    found["profiler"] = {str(k) for path in sorted((conf_dir / "profiler").glob("*.yaml")) for k in _load(path) or {}}
    return {name: frozenset(keys) for name, keys in found.items()}


def closest_key(dotted: str, conf_dir: Path = CONF_DIR) -> str | None:
    """The known key a mistyped dotted key most likely meant (`search.ntrials` -> `search.n_trials`), or None.

    Each part is matched (difflib) among the known keys of its section, so a typo in a section's name
    is mended too (`serch.n_trials`); parts under a section that is not checked are kept as typed.
    A key put in the wrong section (`n_trials`) is then looked for by its last part in every section.
    """
    known = known_keys(conf_dir)
    parts = dotted.split(".")
    fixed: list[str] = []
    for index, part in enumerate(parts):
        section = ".".join(fixed)
        if section not in known:
            fixed += parts[index:]
            break
        if part not in known[section]:
            match = difflib.get_close_matches(part, sorted(known[section]), n=1, cutoff=0.6)
            if not match:
                return _key_elsewhere(parts[-1], known)
            part = match[0]
        fixed.append(part)
    guess = ".".join(fixed)
    return guess if guess != dotted else None


def _key_elsewhere(leaf: str, known: Mapping[str, frozenset[str]]) -> str | None:
    """The one dotted key, in any section, whose last part is (nearly) `leaf`; None when none or several."""
    homes: dict[str, list[str]] = {}
    for name, keys in known.items():
        for key in keys:
            homes.setdefault(key, []).append(f"{name}.{key}" if name else key)
    match = difflib.get_close_matches(leaf, sorted(homes), n=1, cutoff=0.8)
    return homes[match[0]][0] if match and len(homes[match[0]]) == 1 else None


def unknown_key_message(dotted: str, conf_dir: Path = CONF_DIR) -> str:
    """`unknown key K (did you mean ...? known: ...)`: the likely key first, then the section's keys."""
    guess = closest_key(dotted, conf_dir)
    section = known_keys(conf_dir).get(dotted.rpartition(".")[0])
    hints = [f"did you mean {guess}?"] if guess else []
    if section:
        hints.append(f"known: {', '.join(sorted(section))}")
    return f"unknown key {dotted}" + (f" ({' '.join(hints)})" if hints else "")


# -- the whole config ---------------------------------------------------------------------------------

def _section(cfg: Mapping[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split(".") if dotted else ():
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


def problems(cfg: Mapping[str, Any], conf_dir: Path = CONF_DIR) -> list[str]:
    """Every problem with `cfg`, each as `key=value: must be ...` or `unknown key ...`."""
    found: list[str] = []
    known = known_keys(conf_dir)
    for name in known:
        node = _section(cfg, name)
        if not isinstance(node, Mapping):
            continue  # absent, null where allowed (experiment=auto), or a wrong type named by its parent
        prefix = f"{name}." if name else ""
        for key in sorted(str(k) for k in node if str(k) not in known[name] and not (name == "" and k == "hydra")):
            found.append(unknown_key_message(prefix + key, conf_dir))
        for key in settings_of(sections()[name]) if name in sections() else ():
            problem = value_problem(prefix + key, node[key]) if key in node else None
            if problem:
                found.append(problem)
    search = _section(cfg, "search")
    if isinstance(search, Mapping):
        interval, grace = search.get("heartbeat_interval_s"), search.get("grace_period_s")
        if _is_int(interval) and _is_int(grace) and grace < interval:
            found.append(f"search.grace_period_s={grace}: must be at least search.heartbeat_interval_s={interval}")
    return found


def validate_config(cfg: Mapping[str, Any], conf_dir: Path = CONF_DIR) -> None:
    """Raise ConfigError listing every problem of `cfg` (one line), or return."""
    found = problems(cfg, conf_dir)
    if found:
        raise ConfigError("; ".join(found))


# -- the config `python -m harness` composes ----------------------------------------------------------

def hydra_error_line(exc: BaseException) -> str:
    """A Hydra/OmegaConf error message on one line (without the config search path).

    Hydra's own "Error merging override ..." / "Error loading ..." lose their leading "Error": the line
    already starts with `error: `, once, in lower case, like every error of the harness.
    """
    parts: list[str] = []
    for line in str(exc).splitlines():
        if line.startswith(("Config search path", "See https://hydra.cc")):
            break
        if line.strip():
            joiner = ", " if line.startswith("\t") and parts and not parts[-1].endswith(":") else " "
            parts.append((joiner if parts else "") + line.strip())
    text = "".join(parts).removeprefix("Error ")
    cause = exc.__cause__
    if cause is not None and str(cause).strip():
        text += f" ({str(cause).strip().splitlines()[0]})"
    return text


def _override_key(override: str) -> str:
    return override.lstrip("+~").partition("=")[0]


def _override_problem(exc: BaseException, overrides: list[str], conf_dir: Path) -> tuple[str, str] | None:
    """(the problem, the override that caused it) for a composition error one override caused: a value the
    schema's type rejects, or a key the config lacks; None for any other error."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    cause = exc.__cause__
    dotted = str(getattr(cause, "full_key", None) or "")
    # The override of that very key, else the one of a section above it (profiler=cpu before profiler.deadline_s).
    culprit = next((o for o in overrides if dotted == _override_key(o)), None) or next(
        (o for o in overrides if dotted.startswith(_override_key(o) + ".")), None)
    if culprit is None:
        return None
    if isinstance(cause, ValidationError):
        problem = value_problem(dotted, cause.value)
        return (problem, culprit) if problem else None
    if not isinstance(cause, (ConfigAttributeError, ConfigKeyError)):
        return None
    # Hydra's "Could not override 'K'" for a key the config lacks. A key that another choice of its group
    # has (profiler.deadline_s with profiler=auto) may be added with `+`; elsewhere, in a checked section
    # or near a known key, Hydra's advice to add it would only move the error to `problems`.
    section, _, leaf = dotted.rpartition(".")
    known = known_keys(conf_dir)
    if leaf in known.get(section, ()) and section not in sections():
        return f"{dotted}: not in the {section} config chosen (add it with +{culprit.lstrip('+~')})", culprit
    if section in known or closest_key(dotted, conf_dir):
        return unknown_key_message(dotted, conf_dir), culprit
    return None


def _auto_strays(overrides: list[str]) -> list[str]:
    """`experiment.*` overrides given with experiment=auto, whose config has no experiment to set."""
    if not any(_override_key(o) == "experiment" and o.partition("=")[2] == AUTO for o in overrides):
        return []
    return [o for o in overrides if _override_key(o).startswith("experiment.")]


def compose_checked(overrides: list[str], conf_dir: Path = CONF_DIR) -> tuple[dict[str, Any], str]:
    """The config `python -m harness <overrides>` runs with (the hydra node dropped) and its run directory.

    Raises ConfigError naming every problem: an override the schema rejects while composing is named
    as `problems` would name it and left out, so that the rest is composed and checked too.
    """
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf import open_dict
    from omegaconf.errors import OmegaConfBaseException

    strays = _auto_strays(overrides)
    found = [f"{_override_key(o)}: experiment=auto has no experiment settings: each experiment it picks runs with "
             "its own (auto's card rule is auto.default_cards, or pass cards=)" for o in strays]
    remaining = [o for o in overrides if o not in strays]
    with initialize_config_dir(version_base=None, config_dir=str(conf_dir), job_name="harness"):
        while True:
            try:
                cfg = compose(config_name="config", overrides=remaining, return_hydra_config=True)
                run_dir = str(cfg.hydra.run.dir)
                with open_dict(cfg):
                    del cfg["hydra"]
                config = plain_config(cfg)
                break
            except (HydraException, OmegaConfBaseException) as exc:
                known = _override_problem(exc, remaining, conf_dir)
                if known is None:
                    raise ConfigError("; ".join([*found, hydra_error_line(exc)])) from None
                found.append(known[0])
                remaining.remove(known[1])
    found += problems(config, conf_dir)
    if found:
        raise ConfigError("; ".join(found))
    return config, run_dir


# -- the output folder ------------------------------------------------------------------------------

def check_output_dir(path: str | os.PathLike[str], what: str = "output directory") -> Path:
    """Create `path` if needed and prove it writable (a probe file, removed); ConfigError if not."""
    target = Path(path)
    try:
        target.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=target)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"{what} {target} is not writable ({reason}); pass hydra.run.dir=<a writable folder>") \
            from None
    return target


def check_creatable(path: str | os.PathLike[str], what: str = "output directory") -> None:
    """Without creating `path`: it is a writable folder, or can be made in its nearest existing ancestor.

    The proof is a probe folder made and removed in that ancestor (os.access alone says yes to root
    on a read-only or pseudo file system). `check_output_dir` later writes in the folder itself.
    """
    target = Path(path).absolute()
    node = target
    while not node.exists() and node != node.parent:
        node = node.parent
    if not node.is_dir():
        raise ConfigError(f"{what}={target}: {node} is not a folder; pass a writable folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".write-probe-", dir=node))
    except OSError as exc:
        raise ConfigError(f"{what}={target}: cannot write in {node} ({exc.strerror or type(exc).__name__}); "
                          "pass a writable folder") from None
