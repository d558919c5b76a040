"""Optuna storages: opened once per process, with a heartbeat, and recovery of dead processes' trials.

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
"""

from __future__ import annotations

import inspect
import os
import socket
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar, cast

import optuna
from optuna.storages import BaseStorage, JournalStorage, RDBStorage
from optuna.trial import FrozenTrial, TrialState

from harness.search.errors import SearchError

if TYPE_CHECKING:  # annotations only: the page (harness.report) opens storages without Hydra's schema
    from harness.config.schema import SearchConfig

# Trial system attributes written by the harness.
HEARTBEAT_KEY = "harness:heartbeat"      # journal storages: time.time() of the last beat
OWNER_KEY = "harness:owner"              # {host, pid} of the process running the trial

JOURNAL_PREFIX = "journal://"
JOURNAL_SUFFIX = ".log"
RDB_BACKENDS = ("sqlite", "postgresql", "mysql")


@dataclass(frozen=True)
class StorageSettings:
    """A storage's heartbeat and retries: the run's `search` settings, or UNMANAGED."""

    heartbeat_interval_s: int | None
    grace_period_s: int | None
    max_retry: int | None

    @classmethod
    def of(cls, search: SearchConfig) -> StorageSettings:
        return cls(search.heartbeat_interval_s, search.grace_period_s, search.max_retry)


# A storage opened without a run's search settings, to read its studies (the page, a check): no heartbeat
# of its own, no trial failed for its age, none re-queued.
UNMANAGED = StorageSettings(heartbeat_interval_s=None, grace_period_s=None, max_retry=0)


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


RUN_JOURNAL = "optuna.log"  # a run folder's studies when search.storage is null: Optuna's journal file
RUN_DATABASE = "optuna.db"  # the same, in a run folder made before 2026-12-07 (SQLite)


def default_storage(run_dir: Path) -> str:
    """The storage of a run whose search.storage is null: the journal file in its folder, or the SQLite database
    a run made before 2026-12-07 left there, so that resuming it (or reading its page) finds its studies.

    A journal because a run's studies are one process's short appends: SQLite cost a run's start the import
    of SQLAlchemy and Alembic and the database's creation, and every trial a transaction."""
    folder = run_dir.resolve()
    if (folder / RUN_DATABASE).is_file() and not (folder / RUN_JOURNAL).exists():
        return f"sqlite:///{folder / RUN_DATABASE}"
    return f"{JOURNAL_PREFIX}{folder / RUN_JOURNAL}"  # journal:///abs/path


def journal_path(url: str) -> Path | None:
    """The journal file a storage URL names, or None for a database URL."""
    if url.startswith(JOURNAL_PREFIX):
        return Path(url[len(JOURNAL_PREFIX):])
    if "://" not in url and url.endswith(JOURNAL_SUFFIX):
        return Path(url)
    return None


_STORAGES: dict[tuple[str, StorageSettings], BaseStorage] = {}


def make_storage(url: str, search: SearchConfig | None = None) -> BaseStorage:
    """Open (once per process) the Optuna storage `url` names, with the heartbeat and retries of the run's
    `search` settings; without them, the storage this process already opened for the URL, else UNMANAGED.

    Raises SearchError, naming the URL (password masked), when it is not a storage URL or cannot be
    opened (server unreachable, database missing, unwritable file).
    """
    if search is None:  # the storage this process already opened for the URL, whatever its settings
        for (cached_url, _), cached in _STORAGES.items():
            if cached_url == url:
                return cached
    settings = UNMANAGED if search is None else StorageSettings.of(search)
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

    backend: str | None
    driver: str | None
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


_Storage = TypeVar("_Storage", bound=BaseStorage)


def _with_retries(build: Callable[[], _Storage], attempts: int = 5) -> _Storage:
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
    # harness_settings: the StorageSettings make_storage attached to the storage it made
    return cast(StorageSettings,
                getattr(backend, "harness_settings", None) or getattr(storage, "harness_settings", UNMANAGED))


def _heartbeat_enabled(storage: BaseStorage) -> bool:
    return BaseHeartbeat is not None and isinstance(storage, BaseHeartbeat) and \
        storage.get_heartbeat_interval() is not None


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

