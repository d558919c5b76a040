"""Optuna around an experiment's variant space: one study per (experiment, card), shareable by processes.

A space maps each variant name to its own parameters; a parameter is a list of choices or a range
`{low, high, step?, log?}`. Variants are suggested first, then that variant's parameters (named
`<variant>.<param>`), so the space is conditional; an exhaustive search ("bruteforce") enumerates it
(`configurations`) and queues every configuration once.

Storage (`make_storage`): `sqlite:///PATH`, `postgresql[+driver]://...`, `mysql[+driver]://...`, or an
Optuna journal file, written `journal:///abs/path` / `journal://rel/path` or as a path ending in `.log`.
Every storage gets a heartbeat: a running trial records one every `search.heartbeat_interval_s`, and a
trial whose process died (no heartbeat for `search.grace_period_s`) is failed and re-queued once per
`search.max_retry` by the next process that starts a trial or resumes the study. RDB storages use
Optuna's own heartbeat; Optuna's JournalStorage has none, so journals use `_HeartbeatJournalStorage`
below (the same protocol, the beat kept as a trial system attribute). With the heartbeat turned off
(`heartbeat_interval_s: null`), resuming fails and re-queues the trials left RUNNING for longer than
`grace_period_s` (none when that is null too): set it above the longest trial when processes share
the study.

Shared budget (`SharedBudgetSampler`, `open_study`): several processes may run one study (same
storage, `search.resume=true`). `search.n_trials` is the study's total, not each process's: the
process that creates the study puts that many trials in Optuna's queue (WAITING; the configurations
themselves for an exhaustive search, in an order seeded by `search.seed`), and every process takes
trials from that queue, which the storage hands out once each, and stops when it is empty. A trial
created past the queue by a race between two processes is recorded as `surplus` (pruned before it
measures, never counted). Each trial's sampler is seeded from `search.seed` and the trial number, so
processes with the same seed do not draw the same parameters and a trial's draw does not depend on
which process ran it.

Interruption: `note_interrupt` (called from the SIGINT/SIGTERM handler) makes the trial that was
running when the process stopped go back in the queue as it fails, so a resumed run measures it again.
"""

from __future__ import annotations

import inspect
import itertools
import json
import math
import os
import random
import socket
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.trial import FrozenTrial, TrialState

Space = Mapping[str, Mapping[str, Any]]

# Trial system attributes written by the harness.
HEARTBEAT_KEY = "harness:heartbeat"      # journal storages: time.time() of the last beat
INTERRUPTED_KEY = "harness:interrupted"  # the signal that stopped the process while this trial ran
SURPLUS_KEY = "harness:surplus"          # created past the queue by a race; not measured, not counted
OWNER_KEY = "harness:owner"              # {host, pid} of the process running the trial
# Study user attribute: the n_trials the queue was filled to (absent while the creator is filling it).
BUDGET_ATTR = "budget_n_trials"

JOURNAL_PREFIX = "journal://"
JOURNAL_SUFFIX = ".log"
RDB_BACKENDS = ("sqlite", "postgresql", "mysql")


class SearchError(ValueError):
    """A search configuration that cannot work; the message says what to change."""


def validate_space(space: Space, known_variants: list[str], experiment: str) -> None:
    if not space:
        raise SearchError(f"experiment {experiment}: experiment.space is empty; name at least one variant")
    for variant, params in space.items():
        if variant not in known_variants:
            raise SearchError(
                f"experiment {experiment}: space names variant {variant!r}; registered: {', '.join(known_variants)}"
            )
        for name, choices in (params or {}).items():
            if isinstance(choices, (list, tuple)):
                if not choices:
                    raise SearchError(f"experiment.space.{variant}.{name}: empty list of choices")
            elif isinstance(choices, Mapping):
                if "low" not in choices or "high" not in choices or choices["low"] > choices["high"]:
                    raise SearchError(f"experiment.space.{variant}.{name}: a range needs low <= high")
            else:
                raise SearchError(f"experiment.space.{variant}.{name}: give a list of choices or {{low, high}}")


def _is_int_range(choices: Mapping[str, Any]) -> bool:
    return all(isinstance(choices[k], int) for k in ("low", "high")) and isinstance(choices.get("step", 1), int)


def discrete_size(space: Space) -> int | None:
    """How many configurations a discrete space has (None when a parameter is a continuous range)."""
    total = 0
    for params in space.values():
        count = 1
        for choices in (params or {}).values():
            if isinstance(choices, Mapping):
                step = choices.get("step", 1 if _is_int_range(choices) else None)
                if step is None or choices.get("log"):
                    return None
                count *= int(math.floor((choices["high"] - choices["low"]) / step)) + 1
            else:
                count *= len(choices)
        total += count
    return total


def configurations(space: Space) -> list[dict[str, Any]]:
    """Every configuration of a discrete space, as the Optuna parameters `suggest` would record."""
    out: list[dict[str, Any]] = []
    for variant, params in space.items():
        names, values = [], []
        for name, choices in (params or {}).items():
            names.append(f"{variant}.{name}")
            if isinstance(choices, Mapping):
                low, high = choices["low"], choices["high"]
                step = choices.get("step", 1 if _is_int_range(choices) else None)
                if step is None or choices.get("log"):
                    raise SearchError(f"experiment.space.{variant}.{name}: a continuous range has no enumeration")
                count = int(math.floor((high - low) / step)) + 1
                values.append([low + i * step if _is_int_range(choices) else float(low + i * step)
                               for i in range(count)])
            else:
                values.append(list(choices))
        for combo in itertools.product(*values):
            out.append({"variant": variant, **dict(zip(names, combo))})
    return out


def suggest(trial: optuna.Trial, space: Space) -> tuple[str, dict[str, Any]]:
    variant = trial.suggest_categorical("variant", list(space))
    params: dict[str, Any] = {}
    for name, choices in (space[variant] or {}).items():
        key = f"{variant}.{name}"
        if isinstance(choices, Mapping):
            low, high = choices["low"], choices["high"]
            if _is_int_range(choices):
                params[name] = trial.suggest_int(key, low, high, step=choices.get("step", 1),
                                                 log=bool(choices.get("log", False)))
            else:
                params[name] = trial.suggest_float(key, float(low), float(high), step=choices.get("step"),
                                                   log=bool(choices.get("log", False)))
        else:
            params[name] = trial.suggest_categorical(key, list(choices))
    return variant, params


# --------------------------------------------------------------------------------------------------
# Interruption


_interrupt: dict[str, str | None] = {"signal": None}


def note_interrupt(signal_name: str | None) -> None:
    """Record that the process is being stopped (SIGINT/SIGTERM); None clears it (tests)."""
    _interrupt["signal"] = signal_name


def interrupted() -> str | None:
    return _interrupt["signal"]


def _objective_call() -> tuple[Any, int | None]:
    """The code of Optuna's _run_trial and the line where it calls the objective."""
    from optuna.study import _optimize

    code = _optimize._run_trial.__code__
    try:
        lines, start = inspect.getsourcelines(_optimize._run_trial)
    except OSError:
        return code, None
    line = next((start + i for i, text in enumerate(lines) if "func(trial)" in text), None)
    return code, line


_RUN_TRIAL, _OBJECTIVE_LINE = _objective_call()
_UNSAFE_PATHS = (f"{os.sep}optuna{os.sep}storages{os.sep}", f"{os.sep}optuna{os.sep}study{os.sep}_tell.py",
                 f"{os.sep}sqlalchemy{os.sep}", str(Path(__file__).resolve()))


def safe_to_interrupt(frame: Any) -> bool:
    """Whether raising KeyboardInterrupt in `frame` (a signal handler's) leaves every study consistent.

    Not while a storage call, Optuna's tell or this module runs (a trial would stay RUNNING, a queue
    half filled), and inside Optuna's trial loop only while the objective runs: there Optuna records
    the trial as failed and re-raises, and `SharedBudgetSampler.after_trial` puts it back in the queue.
    Outside the trial loop (baseline, confirm rounds, output files) any point is safe.
    """
    node = frame
    while node is not None:
        filename = node.f_code.co_filename
        if any(part in filename for part in _UNSAFE_PATHS):
            return False
        if node.f_code is _RUN_TRIAL:
            return _OBJECTIVE_LINE is not None and node.f_lineno == _OBJECTIVE_LINE
        node = node.f_back
    return True


# --------------------------------------------------------------------------------------------------
# Storage


@dataclass(frozen=True)
class StorageSettings:
    heartbeat_interval_s: int | None = 60
    grace_period_s: int | None = 180
    max_retry: int | None = 1

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> "StorageSettings":
        cfg = cfg or {}
        defaults = cls()

        def pick(key: str) -> int | None:
            value = cfg.get(key, getattr(defaults, key))
            return None if value is None else int(value)

        return cls(pick("heartbeat_interval_s"), pick("grace_period_s"), pick("max_retry"))


class RetryStale:
    """Re-queue a failed trial (its process died or was interrupted): a WAITING copy with its parameters.

    Like Optuna's RetryHeartbeatStaleTrialCallback (same `failed_trial` / `retry_history` attributes),
    but the copy drops the harness's own marks and the old user attributes (the rerun writes its own).
    `max_retry` bounds the retries of trials whose process died; interrupted trials always go back.
    """

    def __init__(self, max_retry: int | None) -> None:
        self.max_retry = max_retry

    def __call__(self, study: optuna.Study, trial: FrozenTrial, interrupted: bool = False) -> None:
        history = [*trial.system_attrs.get("retry_history", []), trial.number]
        if not interrupted and self.max_retry is not None and len(history) > self.max_retry:
            return
        attrs = {k: v for k, v in trial.system_attrs.items() if not k.startswith("harness:")}
        attrs.update(failed_trial=history[0], retry_history=history)
        study.add_trial(optuna.create_trial(state=TrialState.WAITING, params=trial.params,
                                            distributions=trial.distributions, system_attrs=attrs))


try:  # the heartbeat protocol Optuna's optimize loop drives (a private base class, stable since 2.x)
    from optuna.storages._heartbeat import BaseHeartbeat
except ImportError:  # pragma: no cover - journals then fall back to the resume-time rule
    BaseHeartbeat = None  # type: ignore[assignment,misc]


if BaseHeartbeat is not None:

    class _HeartbeatJournalStorage(JournalStorage, BaseHeartbeat):
        """A journal storage with a heartbeat (Optuna's JournalStorage has none).

        The beat is a trial system attribute holding time.time(); a RUNNING trial whose last beat
        (or start, before its first) is older than the grace period is stale. Processes sharing a
        journal over a network filesystem therefore need synchronized clocks.
        """

        def __init__(self, backend: Any, interval: int, grace: int, callback: Callable[..., None]) -> None:
            super().__init__(backend)
            self._interval, self._grace, self._callback = interval, grace, callback

        def record_heartbeat(self, trial_id: int) -> None:
            self.set_trial_system_attr(trial_id, HEARTBEAT_KEY, time.time())

        def _get_stale_trial_ids(self, study_id: int) -> list[int]:
            now = time.time()
            stale = []
            for trial in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,)):
                last = trial.system_attrs.get(HEARTBEAT_KEY)
                if last is None and trial.datetime_start is not None:
                    last = trial.datetime_start.timestamp()
                if last is not None and now - float(last) > self._grace:
                    stale.append(trial._trial_id)
            return stale

        def get_heartbeat_interval(self) -> int | None:
            return self._interval

        def get_heartbeat_stale_trial_callback(self) -> Callable[..., None] | None:
            return self._callback

        def get_failed_trial_callback(self) -> Callable[..., None] | None:  # Optuna < 4.9 asks this
            return self._callback


def describe_url(url: str) -> str:
    """The URL with its password masked, for messages and run.json."""
    if "://" in url and "@" in url and not url.startswith(JOURNAL_PREFIX):
        try:
            from sqlalchemy.engine import make_url

            return make_url(url).render_as_string(hide_password=True)
        except Exception:  # not a SQLAlchemy URL: leave it
            return url
    return url


def journal_path(url: str) -> Path | None:
    """The journal file a storage URL names, or None for a database URL."""
    if url.startswith(JOURNAL_PREFIX):
        return Path(url[len(JOURNAL_PREFIX):])
    if "://" not in url and url.endswith(JOURNAL_SUFFIX):
        return Path(url)
    return None


_STORAGES: dict[tuple[str, StorageSettings], BaseStorage] = {}


def make_storage(url: str, cfg: Mapping[str, Any] | None = None) -> BaseStorage:
    """Open (once per process) the Optuna storage `url` names, with heartbeat and retry from `cfg`.

    Raises SearchError, naming the URL (password masked), when it is not a storage URL or cannot be
    opened (server unreachable, database missing, unwritable file).
    """
    if cfg is None:  # the storage this process already opened for the URL, whatever its settings
        for (cached_url, _), cached in _STORAGES.items():
            if cached_url == url:
                return cached
    settings = StorageSettings.from_config(cfg)
    key = (url, settings)
    if key in _STORAGES:
        return _STORAGES[key]
    shown = describe_url(url)
    retry = RetryStale(settings.max_retry)
    path = journal_path(url)
    try:
        with warnings.catch_warnings():  # heartbeat_interval is "experimental" in Optuna
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            if path is not None:
                storage = _journal_storage(path, settings, retry)
            else:
                storage = _rdb_storage(url, shown, settings, retry)
        storage.get_all_studies()  # a round trip: the server answers, the file is readable
    except SearchError:
        raise
    except Exception as exc:  # SQLAlchemy, driver and OS errors: one line, naming the storage
        detail = " ".join(str(exc).split("\n")[0].split())[:300]
        raise SearchError(f"search.storage={shown!r} cannot be opened ({type(exc).__name__}: {detail})") from None
    storage.harness_settings = settings  # type: ignore[attr-defined]
    _STORAGES[key] = storage
    return storage


def _journal_storage(path: Path, settings: StorageSettings, retry: RetryStale) -> BaseStorage:
    from optuna.storages import journal

    if not path.parent.is_dir():
        raise SearchError(f"search.storage={str(path)!r}: the journal's folder {path.parent} does not exist")
    backend_cls = getattr(journal, "JournalFileBackend", None) or optuna.storages.JournalFileStorage
    # The open(O_CREAT|O_EXCL) lock works on NFS too; the default symlink lock needs symlink support.
    lock = journal.JournalFileOpenLock(str(path))
    backend = backend_cls(str(path), lock_obj=lock)
    if settings.heartbeat_interval_s is not None and BaseHeartbeat is not None:
        grace = settings.grace_period_s or 2 * settings.heartbeat_interval_s
        return _HeartbeatJournalStorage(backend, settings.heartbeat_interval_s, grace, retry)
    return JournalStorage(backend)


def _rdb_storage(url: str, shown: str, settings: StorageSettings, retry: RetryStale) -> BaseStorage:
    from sqlalchemy.engine import make_url

    try:
        parsed = make_url(url)
        backend, driver = parsed.get_backend_name(), parsed.get_driver_name()
    except Exception:
        backend = driver = None
    if backend not in RDB_BACKENDS:
        raise SearchError(
            f"search.storage={shown!r}: use sqlite:///PATH, postgresql://..., mysql://..., "
            f"or a journal file (journal:///PATH or a path ending in {JOURNAL_SUFFIX})"
        )
    if backend == "sqlite":
        # Processes sharing one SQLite file wait for each other's writes instead of failing at once.
        engine_kwargs: dict[str, Any] = {"connect_args": {"timeout": 60}}
    else:
        engine_kwargs = {"pool_pre_ping": True}
        if driver in ("psycopg2", "psycopg", "mysqldb", "pymysql"):  # an unreachable host fails in 10 s
            engine_kwargs["connect_args"] = {"connect_timeout": 10}
    kwargs: dict[str, Any] = {"engine_kwargs": engine_kwargs}
    if settings.heartbeat_interval_s is not None:
        callback_arg = ("heartbeat_stale_trial_callback"
                        if "heartbeat_stale_trial_callback" in inspect.signature(RDBStorage).parameters
                        else "failed_trial_callback")  # Optuna < 4.9
        kwargs.update(heartbeat_interval=settings.heartbeat_interval_s, grace_period=settings.grace_period_s,
                      **{callback_arg: retry})
    storage = _with_retries(lambda: RDBStorage(url, **kwargs))
    if backend == "sqlite":
        _serialize_sqlite(storage.engine)
    return storage


def _with_retries(build: Callable[[], BaseStorage], attempts: int = 5) -> BaseStorage:
    """Build an RDB storage, retrying when another process is creating the same schema right now."""
    import sqlalchemy.exc

    for attempt in range(attempts):
        try:
            return build()
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError) as exc:
            text = str(exc)
            racing = "already exists" in text or "UNIQUE constraint" in text or "database is locked" in text
            if not racing or attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def _serialize_sqlite(engine: Any) -> None:
    """Make each SQLite transaction take the write lock when it begins (BEGIN IMMEDIATE).

    pysqlite runs a transaction's SELECTs before its BEGIN, so two processes could both read a
    WAITING trial and both claim it (Optuna's SELECT ... FOR UPDATE is a no-op in SQLite). With the
    lock taken at BEGIN, a read-then-write is atomic across processes; others wait (timeout 60 s).
    The recipe is SQLAlchemy's "Serializable isolation / Savepoints / Transactional DDL" for pysqlite.
    """
    from sqlalchemy import event

    @event.listens_for(engine, "connect")
    def _no_pysqlite_begin(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None

    @event.listens_for(engine, "begin")
    def _begin_immediate(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN IMMEDIATE")

    engine.dispose()  # connections opened while creating the schema predate the hooks


def _settings(storage: BaseStorage) -> StorageSettings:
    backend = getattr(storage, "_backend", storage)  # a study wraps an RDB storage in a cache
    return getattr(backend, "harness_settings", None) or getattr(storage, "harness_settings", StorageSettings())


def _heartbeat_enabled(storage: BaseStorage) -> bool:
    return BaseHeartbeat is not None and isinstance(storage, BaseHeartbeat) and \
        storage.get_heartbeat_interval() is not None


# --------------------------------------------------------------------------------------------------
# Sampler and budget


def _trial_seed(seed: int | None, number: int) -> int | None:
    return None if seed is None else (int(seed) * 1_000_003 + number) % (2**32)


def _from_queue(trial: FrozenTrial) -> bool:
    return "fixed_params" in trial.system_attrs or "failed_trial" in trial.system_attrs


def _stop(study: optuna.Study) -> None:
    try:
        study.stop()
    except RuntimeError:  # outside study.optimize (ask/tell): nothing to stop
        pass


class SharedBudgetSampler(optuna.samplers.BaseSampler):
    """The search's sampler (bruteforce, tpe or random) plus the budget shared by every process.

    Delegates sampling to a fresh inner sampler per trial, seeded from (seed, trial number). Stops
    the optimize loop when the study's queue is empty; a trial created past the queue (two processes
    raced for its last entry) is marked surplus and pruned at its first sampled parameter.
    """

    # An exhaustive search is the queue itself (every configuration queued once); its inner sampler
    # only fills parameters a re-queued trial of an older study lacks. Optuna's BruteForceSampler is
    # not used: it fails on finished trials without parameters (a trial interrupted before its first
    # suggestion, a surplus trial), and it cannot keep two processes off the same configuration.
    _FACTORIES: dict[str, Callable[..., optuna.samplers.BaseSampler]] = {
        "bruteforce": optuna.samplers.RandomSampler,
        "tpe": optuna.samplers.TPESampler,
        "random": optuna.samplers.RandomSampler,
    }

    def __init__(self, name: str, seed: int | None, space: Space, n_trials: int, exhaustive: bool) -> None:
        self.name, self.seed, self.space, self.n_trials, self.exhaustive = name, seed, space, n_trials, exhaustive
        self.inner = self._new_inner(seed)
        self._surplus: set[int] = set()

    def _new_inner(self, seed: int | None) -> optuna.samplers.BaseSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return self._FACTORIES[self.name](seed=seed)

    def reseed_rng(self) -> None:
        self.inner.reseed_rng()

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, Any]:
        return self.inner.infer_relative_search_space(study, trial)

    def sample_relative(self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, Any]) -> dict[str, Any]:
        if trial._trial_id in self._surplus:
            return {}
        return self.inner.sample_relative(study, trial, search_space)

    def sample_independent(self, study: optuna.Study, trial: FrozenTrial, param_name: str,
                           param_distribution: optuna.distributions.BaseDistribution) -> Any:
        if trial._trial_id in self._surplus:
            raise optuna.TrialPruned("surplus trial: the study's n_trials are all taken by other processes")
        return self.inner.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.inner = self._new_inner(_trial_seed(self.seed, trial.number))
        study._storage.set_trial_system_attr(trial._trial_id, OWNER_KEY,
                                             {"host": socket.gethostname(), "pid": os.getpid()})
        if not _from_queue(trial) and BUDGET_ATTR in study.user_attrs:
            self._surplus.add(trial._trial_id)
            study._storage.set_trial_system_attr(trial._trial_id, SURPLUS_KEY, True)
            _stop(study)
            return
        self.inner.before_trial(study, trial)

    def after_trial(self, study: optuna.Study, trial: FrozenTrial, state: TrialState,
                    values: Any) -> None:
        if trial._trial_id in self._surplus:
            return
        if state == TrialState.FAIL and interrupted():
            study._storage.set_trial_system_attr(trial._trial_id, INTERRUPTED_KEY, interrupted())
            RetryStale(None)(study, study._storage.get_trial(trial._trial_id), interrupted=True)
        self.inner.after_trial(study, trial, state, values)
        if BUDGET_ATTR in study.user_attrs and not study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
            _stop(study)


@dataclass(frozen=True)
class SearchPlan:
    sampler: optuna.samplers.BaseSampler
    sampler_name: str
    n_trials: int


def plan_search(space: Space, cfg: Mapping[str, Any]) -> SearchPlan:
    n_trials = int(cfg.get("n_trials", 16))
    if n_trials < 1:
        raise SearchError(f"search.n_trials={n_trials}: must be at least 1")
    size = discrete_size(space)
    choice = cfg.get("sampler", "auto")
    seed = cfg.get("seed", 0)
    if choice == "auto":
        choice = "bruteforce" if size is not None and size <= int(cfg.get("exhaustive_max", 64)) else "tpe"
    if choice == "bruteforce":
        if size is None:
            raise SearchError("search.sampler=bruteforce needs a discrete space (ranges with a step)")
        n_trials = min(n_trials, size)
    elif choice not in ("tpe", "random"):
        raise SearchError(f"search.sampler={choice!r}: choose auto, bruteforce, tpe or random")
    sampler = SharedBudgetSampler(choice, seed, space, n_trials, exhaustive=choice == "bruteforce")
    return SearchPlan(sampler, choice, n_trials)


def open_study(name: str, storage: str | BaseStorage, sampler: optuna.samplers.BaseSampler,
               resume: bool) -> optuna.Study:
    """Create the study, or join/continue it when `resume`; a clash without resume is an error.

    `storage` is a storage object or a URL (opened with `make_storage`, default settings unless
    `make_storage` already opened it with the run's). With a SharedBudgetSampler the study's trial
    queue is filled to its n_trials, and on resume trials left RUNNING by a dead process are failed
    and re-queued.
    """
    store = make_storage(storage) if isinstance(storage, str) else storage
    shown = describe_url(storage) if isinstance(storage, str) else type(storage).__name__
    try:
        existing = optuna.study.get_all_study_names(store)
    except Exception as exc:  # Optuna wraps SQLAlchemy/journal errors in several types
        raise SearchError(f"search.storage={shown!r} cannot be opened ({type(exc).__name__}: {exc})") from None
    clash = SearchError(
        f"study {name!r} already exists in {shown}; pass search.resume=true to continue it, or another storage"
    )
    if name in existing and not resume:
        raise clash
    created = False
    if name not in existing:
        try:
            study = optuna.create_study(study_name=name, storage=store, sampler=sampler, direction="minimize")
            created = True
        except optuna.exceptions.DuplicatedStudyError:  # another process created it a moment ago
            if not resume:
                raise clash from None
    if not created:
        study = optuna.load_study(study_name=name, storage=store, sampler=sampler)
        recover_trials(study)
    if isinstance(sampler, SharedBudgetSampler):
        fill_queue(study, sampler, created)
    return study


def recover_trials(study: optuna.Study) -> list[int]:
    """Fail (and re-queue, per search.max_retry) the trials a dead process left RUNNING; their numbers.

    With a heartbeat: Optuna's stale-trial check (no beat for the grace period). Without: trials
    RUNNING for longer than search.grace_period_s, if that is set.
    """
    storage = study._storage
    before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    if not before:
        return []
    settings = _settings(storage)
    retry = RetryStale(settings.max_retry)
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        if _dead_here(trial.system_attrs.get(OWNER_KEY)):  # its process, on this host, is gone
            _fail_and_retry(study, trial, retry)
    if _heartbeat_enabled(storage):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
    elif settings.grace_period_s is not None:
        now = time.time()
        for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            started = trial.datetime_start.timestamp() if trial.datetime_start else now
            if now - started > settings.grace_period_s:
                _fail_and_retry(study, trial, retry)
    after = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
    return sorted(before - after)


def _dead_here(owner: Any) -> bool:
    """Whether `owner` ({host, pid}) names a process of this host that no longer exists."""
    if not isinstance(owner, Mapping) or owner.get("host") != socket.gethostname():
        return False
    try:
        os.kill(int(owner["pid"]), 0)
    except ProcessLookupError:
        return True
    except (PermissionError, ValueError, TypeError, KeyError):  # alive (another user's), or malformed
        return False
    return False


def _fail_and_retry(study: optuna.Study, trial: FrozenTrial, retry: RetryStale) -> None:
    storage = study._storage
    try:
        if not storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
            return
    except optuna.exceptions.UpdateFinishedTrialError:  # another process got there first
        return
    retry(study, storage.get_trial(trial._trial_id))


def budget_trials(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The trials that count against n_trials: all but surplus ones and failed ones since retried."""
    retried = {n for t in trials for n in t.system_attrs.get("retry_history", [])}
    return [t for t in trials if not t.system_attrs.get(SURPLUS_KEY) and t.number not in retried]


def _config_key(params: Mapping[str, Any]) -> str:
    return json.dumps(sorted(params.items()), default=str)


def fill_queue(study: optuna.Study, sampler: SharedBudgetSampler, created: bool, wait_s: float = 60.0) -> int:
    """Queue trials until the study's budget (queued, running and finished) is `sampler.n_trials`.

    Only one process fills a fresh study: its creator. A process joining a study that has no trials
    and no budget mark yet waits (up to `wait_s`) for the creator to finish filling it. On resume
    with a larger n_trials the queue is topped up (start one process first when raising n_trials,
    two processes topping up at once would both add). Returns how many trials it queued.
    """
    if not created:
        # Nothing but queued trials and no budget mark: the creator is filling the queue right now.
        deadline = time.monotonic() + wait_s
        while BUDGET_ATTR not in study.user_attrs and time.monotonic() < deadline and all(
                t.state == TrialState.WAITING for t in study.get_trials(deepcopy=False)):
            time.sleep(0.2)
        if BUDGET_ATTR in study.user_attrs and int(study.user_attrs[BUDGET_ATTR]) >= sampler.n_trials:
            return 0
    budget = budget_trials(study.get_trials(deepcopy=False))
    deficit = sampler.n_trials - len(budget)
    queued = 0
    if deficit > 0:
        if sampler.exhaustive:
            taken = {_config_key(t.system_attrs.get("fixed_params") or t.params) for t in budget}
            todo = [c for c in configurations(sampler.space) if _config_key(c) not in taken]
            random.Random(sampler.seed).shuffle(todo)
            todo = todo[:deficit]
        else:
            todo = [{} for _ in range(deficit)]
        for params in todo:
            study.enqueue_trial(params)
        queued = len(todo)
    study.set_user_attr(BUDGET_ATTR, max(sampler.n_trials, int(study.user_attrs.get(BUDGET_ATTR, 0))))
    return queued


def completed(study: optuna.Study) -> list[FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]


def best_feasible(study: optuna.Study) -> FrozenTrial | None:
    """Only completed trials count: infeasible and skipped ones are pruned, failed ones failed."""
    done = completed(study)
    return min(done, key=lambda t: t.value) if done else None


def remaining_trials(study: optuna.Study, n_trials: int) -> int:
    """How many trials of the study's n_trials no process has started yet (the queue, normally)."""
    started = [t for t in budget_trials(study.get_trials(deepcopy=False)) if t.state != TrialState.WAITING]
    return max(n_trials - len(started), 0)


def study_name(experiment: str, card_id: str) -> str:
    """The study of one (experiment, card)."""
    return f"{experiment}:{card_id}"


def check_new_studies(storage: BaseStorage, names: list[str], resume: bool, shown: str) -> None:
    """Before anything is measured: without resume, none of the run's studies may exist yet."""
    if resume:
        return
    existing = set(optuna.study.get_all_study_names(storage))
    clash = [name for name in names if name in existing]
    if clash:
        raise SearchError(f"study {clash[0]!r} already exists in {shown}; pass search.resume=true to continue it, "
                          "or another storage")
