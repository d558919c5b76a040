"""Check a run's configuration before anything is measured: types, ranges, unknown keys, output folder.

`validate_config` is called at the top of `harness.run.execute` (and, on the composed config, by
`python -m harness` before Hydra creates the run directory); `check_output_dir` makes sure a run
directory can be written. Both raise `ConfigError` with every problem found, on one line.

Hydra itself rejects an override of a key the config does not have (`search.foo=1`: "not in
struct"); what reaches us is what Hydra cannot know is wrong: a value of the wrong type or range
(`search.n_trials=abc`, `timing.budget_s=0`), and keys added with `+` (`+search.foo=1`) or by a config
file of one's own. The known keys of each section are those of the shipped config files, so a key
added there is known here without a change to this module.
"""

from __future__ import annotations

import difflib
import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping

from omegaconf import OmegaConf

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
SAMPLERS = ("auto", "bruteforce", "tpe", "random")


class ConfigError(ValueError):
    """A configuration that cannot run; the message (one line) says what to change."""


# A check returns None when the value is fine, else what it must be.
Check = Callable[[Any], "str | None"]


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # not NaN


def integer(minimum: int | None = None, nullable: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if value is None and nullable:
            return None
        if not _is_int(value) or (minimum is not None and value < minimum):
            what = "an integer" if minimum is None else f"an integer >= {minimum}"
            return what + (" or null" if nullable else "")
        return None
    return check


def number(low: float | None = None, high: float | None = None, low_open: bool = False,
           high_open: bool = False, nullable: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if value is None and nullable:
            return None
        bad = not _is_number(value)
        if not bad and low is not None:
            bad = value <= low if low_open else value < low
        if not bad and high is not None:
            bad = value >= high if high_open else value > high
        if not bad:
            return None
        if low is not None and high is not None:
            what = f"a number in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        elif low is not None:
            what = f"a number {'>' if low_open else '>='} {low:g}"
        else:
            what = "a number"
        return what + (" or null" if nullable else "")
    return check


def boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "true or false"


def one_of(*choices: str) -> Check:
    def check(value: Any) -> str | None:
        return None if value in choices else "one of " + ", ".join(choices)
    return check


def text(nullable: bool = False) -> Check:
    def check(value: Any) -> str | None:
        if value is None and nullable:
            return None
        return None if isinstance(value, str) and value else "a non-empty string" + (" or null" if nullable else "")
    return check


def mapping(value: Any) -> str | None:
    return None if isinstance(value, Mapping) else "a mapping"


# What the code needs of each value it reads. Keys of the shipped configs that are not listed here
# (another module's settings) are only checked for being known.
SCHEMA: dict[str, dict[str, Check]] = {
    "experiment": {
        "name": text(),
        "module": text(nullable=True),
        "correctness": mapping,
        "space": lambda v: None if v is None or isinstance(v, Mapping) else "a mapping of variants or null",
        "default_cards": lambda v: None if v is None or isinstance(v, (list, tuple, Mapping))
        else "a list of card ids, a rule such as {costliest: 3, resolution: smallest_on_cpu}, or null",
    },
    # harness.correctness.Rule: a variant's bound is a factor times the baseline's error or the rounding of
    # the dtype it lowers to; 0 or less would reject every variant, a baseline-exact one too.
    "experiment.correctness": {"same_factor": number(0, low_open=True), "lowered_factor": number(0, low_open=True)},
    "search": {
        "sampler": one_of(*SAMPLERS),
        "exhaustive_max": integer(1),
        "n_trials": integer(1),
        "timeout": number(0, low_open=True, nullable=True),
        "storage": text(nullable=True),
        "resume": boolean,
        "seed": integer(0, nullable=True),
        "heartbeat_interval_s": integer(1, nullable=True),
        "grace_period_s": integer(1, nullable=True),
        "max_retry": integer(0, nullable=True),
        "trial_deadline_s": number(0, low_open=True, nullable=True),
        "worker_memory_limit_gb": number(0, low_open=True, nullable=True),
        "worker": lambda v: None if v is None or isinstance(v, (int, str)) and not isinstance(v, bool)
        else "an integer, a string or null",
    },
    "timing": {
        "warmup": integer(0, nullable=True),
        "min_repeats": integer(1),
        "budget_s": number(0, low_open=True),
        "drift_budget_s": number(0, low_open=True),
        "confirm_rounds": integer(0),
        "cuda_graph": boolean,
        "same_band": mapping,
        "cpu_threads": integer(1, nullable=True),
    },
    "auto": {"plan_only": boolean},
    "timing.same_band": {"cpu": number(0, 1, low_open=True, high_open=True),
                         "cuda": number(0, 1, low_open=True, high_open=True)},
    "workload": {
        "scale": number(0, 1, low_open=True, nullable=True),
        "cpu_scale": number(0, 1, low_open=True),
        "seed": integer(0),
        "attention": mapping,
        "cast": mapping,
    },
}
# Sections whose keys must all be known (the shipped configs' keys, plus SCHEMA's).
CLOSED = ("auto", "experiment", "experiment.correctness", "search", "timing", "timing.same_band", "workload", "workload.attention",
          "workload.cast", "inputs", "profiler")


def _section(cfg: Mapping[str, Any], dotted: str) -> Any:
    node: Any = cfg
    for part in dotted.split("."):
        if not isinstance(node, Mapping):
            return None
        node = node.get(part)
    return node


@lru_cache(maxsize=4)
def known_keys(conf_dir: Path = CONF_DIR) -> dict[str, frozenset[str]]:
    """Each closed section's keys (and the top level's, under ""), as the shipped config files have them.

    All options of a group count together: a key of any conf/experiment/*.yaml is a known experiment key.
    """
    found: dict[str, set[str]] = {name: set(SCHEMA.get(name, {})) for name in CLOSED}
    found[""] = {"experiment", "profiler", "search", "rules"}  # the config groups

    def collect(node: Any, top_level: bool) -> None:
        for name in CLOSED:
            sub = _section(node, name)
            if isinstance(sub, Mapping):
                found[name].update(str(k) for k in sub)
        if top_level and isinstance(node, Mapping):
            found[""].update(str(k) for k in node if k != "defaults")

    def load(path: Path) -> Any:
        return OmegaConf.to_container(OmegaConf.load(path), resolve=False)

    if (conf_dir / "config.yaml").exists():
        collect(load(conf_dir / "config.yaml"), top_level=True)
    for path in sorted((conf_dir / "experiment").glob("*.yaml")):
        collect(load(path), top_level=True)  # `# @package _global_`: the file holds `experiment: {...}`
    for path in sorted((conf_dir / "search").glob("*.yaml")):
        collect({"search": load(path)}, top_level=False)
    for path in sorted((conf_dir / "profiler").glob("*.yaml")):
        collect({"profiler": load(path)}, top_level=False)
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


def problems(cfg: Mapping[str, Any], conf_dir: Path = CONF_DIR) -> list[str]:
    """Every problem with `cfg`, each as `key=value: must be ...` or `unknown key ...`."""
    found: list[str] = []
    known = known_keys(conf_dir)
    for key in sorted(str(k) for k in cfg if str(k) not in known[""] and str(k) != "hydra"):
        found.append(unknown_key_message(key, conf_dir))
    for name in CLOSED:
        node = _section(cfg, name)
        if node is None:
            if name == "experiment.correctness":
                found.append(f"{name}: missing; give {{same_factor: 4, lowered_factor: 4}} (see harness.correctness)")
            elif name in SCHEMA:
                found.append(f"{name}: missing section")
            continue
        if not isinstance(node, Mapping):
            found.append(f"{name}={node!r}: must be a mapping")
            continue
        unknown = sorted(str(k) for k in node if str(k) not in known[name])
        for key in unknown:
            found.append(unknown_key_message(f"{name}.{key}", conf_dir))
    for name, checks in SCHEMA.items():
        node = _section(cfg, name)
        if not isinstance(node, Mapping):
            continue
        for key, check in checks.items():
            if key not in node:
                if name == "experiment.correctness":
                    found.append(f"{name}.{key}: missing; give a number > 0")
                continue
            why = check(node[key])
            if why:
                found.append(f"{name}.{key}={_show(node[key])}: must be {why}")
    search = _section(cfg, "search")
    if isinstance(search, Mapping):
        interval, grace = search.get("heartbeat_interval_s"), search.get("grace_period_s")
        if _is_int(interval) and _is_int(grace) and grace < interval:
            found.append(f"search.grace_period_s={grace}: must be at least search.heartbeat_interval_s={interval}")
    return found


def _show(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)


def validate_config(cfg: Mapping[str, Any], conf_dir: Path = CONF_DIR) -> None:
    """Raise ConfigError listing every problem of `cfg` (one line), or return."""
    found = problems(cfg, conf_dir)
    if found:
        raise ConfigError("; ".join(found))


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
