"""`python -m harness experiment=NAME [overrides]`: the Hydra app that runs a counter-experiment.

Exit status: 0 done; 2 bad input (one `error: ...` line on stderr, nothing measured); 130 stopped by
SIGINT (Ctrl-C), 143 by SIGTERM (140 by submitit's SIGUSR2 in a cluster job): all stop the same way,
with one line saying where the outputs are and the command that resumes the run
(`search.resume=true hydra.run.dir=<the same folder>`). See docs/scale-out.md. A signal is only recorded
where it lands (harness.signals); the run stops at its next checkpoint: start-up's, the wait for the
worker's reply, between trials, between cards, around the outputs. One that arrives once the outputs are
written still makes the exit status 128 + the signal.
"""

from __future__ import annotations

import signal
import sys

from harness import signals


def _not_started(signum: int) -> str:
    return f"interrupted ({signals.name(signum)}) before the run started: nothing was measured"


if __name__ == "__main__":
    signals.install()  # from here on a stop signal is recorded, and start-up stops at its next check
    from harness.run.worker import spawn_ahead

    signals.exit_if_pending(_not_started)
    spawn_ahead(sys.argv[1:])  # the worker child imports torch while this process imports Hydra and Optuna below

import logging
import os
import shlex
import shutil
from pathlib import Path
from typing import NoReturn

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from harness.cards.measures import card_time_us
from harness.config.schema import HarnessConfig, plain, typed
from harness.config.validate import ConfigError, check_creatable, compose_checked, plain_config, validate_config
from harness.config.validate import hydra_error_line as _one_line
from harness.errors import HarnessError
from harness.run.provenance import check_run_dir, claim_run_dir, resumable
from harness.run.worker import close_worker, worker_for
from harness.search import make_storage

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
EXIT_BAD_INPUT = 2
log = logging.getLogger("harness")
_finished_in: list[Path] = []  # the folder of the run this process finished, for a signal after its last file


def _fail(message: str, run_dir: Path | None = None) -> NoReturn:
    """One `error:` line and exit 2; `run_dir`, a folder Hydra made for the run, is removed when the run left
    nothing in it but Hydra's own files (its .hydra/ and log): a failed start leaves no empty folder behind."""
    print(f"error: {message}", file=sys.stderr)
    if run_dir is not None and run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= {".hydra", "__main__.log"}:
        shutil.rmtree(run_dir, ignore_errors=True)
    sys.exit(EXIT_BAD_INPUT)


def install_signal_handlers() -> None:
    """SIGINT and SIGTERM; in a job of Hydra's submitit launcher also submitit's time-limit signal.

    submitit ignores SIGTERM in its jobs and, on its signal (USR2 unless SUBMITIT_PREEMPT_SIGNAL says
    otherwise; SLURM sends it `signal_delay_s` before the time limit), raises wherever the job is.
    Here all of them are recorded (harness.signals) and stop the run at its next checkpoint, the trial
    in flight back in the queue.
    """
    stops = list(signals.STOP_SIGNALS)
    if "submitit" in sys.modules:
        name = "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
        if hasattr(signal, name):
            stops.append(getattr(signal, name))
    signals.install(tuple(stops))


def _stopped(run_dir: Path | None, stop: BaseException | None = None) -> NoReturn:
    """Say where the outputs are and how to resume; mark the run's files as stopped (harness.run.stopping).

    A folder whose run never started (no run identity recorded: stopped during set-up) holds nothing
    to resume: the line says so, and the run is started again rather than resumed.
    """
    signum = signals.pending() or signal.SIGINT
    name = signals.name(signum)
    if run_dir is None or not resumable(run_dir):
        print(_not_started(signum), file=sys.stderr)
    else:
        from harness.run.stopping import record_stop

        command = resume_command(run_dir)
        try:
            record_stop(run_dir, stop or KeyboardInterrupt(), name, command)
        except OSError as exc:  # a full or vanished disk: the line below still says how to resume
            print(f"warning: the stop could not be recorded in {run_dir} ({exc})", file=sys.stderr)
        print(f"interrupted ({name}): what finished is in {run_dir}; resume with: {command}", file=sys.stderr)
    sys.exit(128 + signum)


def resume_command(run_dir: Path) -> str:
    """The resume line docs/experiments.md documents: `python -m harness experiment=NAME [the run's other overrides]
    search.resume=true hydra.run.dir=DIR`; the experiment is always named (the folder's identity is checked
    against it), and a `hydra.searchpath` that found it is kept."""
    try:
        hydra_cfg = HydraConfig.get()
        overrides = list(hydra_cfg.overrides.task)
        searchpath = [o for o in hydra_cfg.overrides.hydra if o.lstrip("+~").startswith("hydra.searchpath=")]
        experiment = hydra_cfg.runtime.choices.get("experiment")
    except ValueError:  # outside a Hydra run
        overrides, searchpath, experiment = [], [], None
    own = ("hydra.run.dir", "search.resume", "experiment")
    kept = [o for o in overrides if o.lstrip("+~").partition("=")[0] not in own]
    args = [*([f"experiment={experiment}"] if experiment else []), *kept, *searchpath,
            "search.resume=true", f"hydra.run.dir={run_dir}"]
    return "python -m harness " + " ".join(shlex.quote(a) for a in args)


@hydra.main(version_base=None, config_path=str(CONF_DIR), config_name="config")
def app(cfg: DictConfig) -> float | None:
    install_signal_handlers()  # again: a launcher (submitit) may run this function without main()
    # Imported here, not with this module: preflight has started the worker by now, and these imports
    # (Optuna's study, the report's plots) run while it imports torch.
    from harness.run.auto import run_auto
    from harness.run.execute import execute
    from harness.run.outputs import written_outputs
    from harness.run.state import reference_folder

    signals.exit_if_pending(_not_started)  # Hydra set the run up in its folder: nothing of the run's yet
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    config = typed(cfg)  # the one conversion: every part of the run reads the typed config
    if config.experiment is None:  # experiment=auto
        try:  # auto's own identity; each sub-run claims its folder <run>/<experiment>/ in execute
            claim_run_dir(run_dir, plain(config), device=config.device,
                          profiler=str((config.profiler or {}).get("name")),
                          cards=config.cards or config.auto.default_cards)
            summary = run_auto(config, run_dir, _compose_experiment, known_experiments([]))
        except HarnessError as exc:
            _fail(str(exc), run_dir)
        except KeyboardInterrupt as stop:
            _stopped(run_dir, stop)
        print(summary)
        made = ("plan.json, plan.md; nothing measured" if config.auto.plan_only
                else "summary.md, and one sub-run folder per experiment")
        print(f"outputs: {run_dir}  ({made})")
        _ended(run_dir)
        return None
    if config.auto.plan_only:  # any experiment: its cards, trials and ETA, nothing measured
        from harness.run.plan_run import plan_run

        try:
            print(plan_run(config, run_dir))
        except HarnessError as exc:
            _fail(str(exc), run_dir)
        except KeyboardInterrupt as stop:
            _stopped(run_dir, stop)
        print(f"outputs: {run_dir}  (plan.json, plan.md; nothing measured)")
        _ended(run_dir)
        return None
    try:
        ctx, outcomes = execute(config, run_dir)
    except HarnessError as exc:
        _fail(str(exc), run_dir)
    except KeyboardInterrupt as stop:
        _stopped(run_dir, stop)
    phases = ctx.phases
    outside = phases["outside_measurement_s"]
    computed = phases.get("references_s", 0.0)
    once = (f"; {computed:.1f} s of set-up and checks computed float64 references, kept for later runs in "
            f"{reference_folder(config, run_dir)}" if computed >= 0.05 else "")
    print(f"\n{ctx.experiment.name}: {len(outcomes)} card(s) on {ctx.device} in {phases['wall_s']:.1f} s; "
          f"{outside:.1f} s ({100 * outside / max(phases['wall_s'], 1e-9):.0f}%) outside measurement "
          f"(set-up {phases['setup_s']:.1f} s, correctness checks {phases.get('checks_s', 0.0):.1f} s, "
          f"profiling {phases['profiling_s']:.1f} s, predictions {phases.get('predictions_s', 0.0):.1f} s (a machine's "
          "first run measures its peaks and reference kernels there, once), "
          f"rest bookkeeping{once}; "
          "measurement: the trials' timing, the baseline's drift re-times and the confirm rounds)")
    print((run_dir / "summary.md").read_text(encoding="utf-8"))
    print(f"outputs: {run_dir}  ({', '.join(written_outputs(run_dir))})")
    speedups: list[float] = []
    for o in outcomes:
        if o.best is not None:
            before, after = card_time_us(o.baseline), card_time_us(o.best)
            assert before is not None and after is not None  # measured cards: each has its timing median
            speedups.append(before / after)
    _ended(run_dir)
    return min(speedups) if speedups else None


def _ended(run_dir: Path) -> None:
    """Every output of the run is written: a signal received since stopped nothing, but still sets the exit
    status (128 + the signal), so that no interrupted process exits 0."""
    _finished_in.append(run_dir)
    signals.exit_if_pending(_after_the_run)


def _searchpath_overrides(args: list[str]) -> list[str]:
    """The `hydra.searchpath=[...]` overrides among `args`: where a user's own experiment configs live."""
    return [a for a in args if a.lstrip("+~").startswith("hydra.searchpath=")]


def known_experiments(args: list[str]) -> list[str]:
    """The options of the experiment group: conf/experiment/ plus every folder `hydra.searchpath` adds."""
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    searchpath = _searchpath_overrides(args)
    if GlobalHydra.instance().is_initialized():  # inside the app: Hydra's own search path, as composed
        searchpath = _searchpath_overrides(list(HydraConfig.get().overrides.hydra)) or searchpath
        return GlobalHydra.instance().config_loader().get_group_options(
            "experiment", config_name="config", overrides=searchpath)
    with initialize_config_dir(version_base=None, config_dir=str(CONF_DIR), job_name="harness"):
        return GlobalHydra.instance().config_loader().get_group_options(
            "experiment", config_name="config", overrides=searchpath)


def _compose_experiment(name: str) -> HarnessConfig:
    """Experiment `name`'s config with this run's overrides (auto's sub-runs): what `experiment=name` gives,
    checked as that run would check it (ConfigError, the experiment named)."""
    from hydra import compose
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    own = ("experiment=", "experiment.", "cards=", "hydra.")
    overrides = [o for o in HydraConfig.get().overrides.task if not o.lstrip("+~").startswith(own)]
    searchpath = _searchpath_overrides(list(HydraConfig.get().overrides.hydra))
    try:
        cfg = compose(config_name="config", overrides=[*searchpath, *overrides, f"experiment={name}"])
        validate_config(plain_config(cfg))
    except (HydraException, OmegaConfBaseException) as exc:  # a user's experiment file the schema rejects
        raise ConfigError(f"experiment={name}: {_one_line(exc)}") from None
    except ConfigError as exc:
        raise ConfigError(f"experiment={name}: {exc}") from None
    return typed(cfg)


def preflight(args: list[str]) -> None:
    """Compose the config as Hydra will and check it, before Hydra creates the run directory.

    Hydra's own errors (an unknown key, a bad override, a value of the wrong type) and an uncreatable
    run directory would otherwise end in several lines or a traceback; here they are one `error:` line
    and exit 2. Options (`--multirun`, `--cfg`, `--help`, ...) are left to Hydra. A good config starts the
    worker child.
    """
    if any(arg.startswith("-") for arg in args):
        return
    try:
        config, run_dir = compose_checked(args)
        check_creatable(run_dir, "hydra.run.dir")
        # Before Hydra writes into the folder: not another run's, and with resume, a run to resume.
        check_run_dir(Path(run_dir), config)
        checked = typed(config)
        if checked.search.storage:  # the default lives in the run directory, not made yet
            make_storage(checked.search.storage, checked.search)
    except HarnessError as exc:
        _fail(str(exc))
    # The config is good: the worker child starts importing torch (seconds) while this process imports the
    # rest of the run and Hydra sets it up; the run finds it started (harness.run.worker.worker_for).
    worker_for(checked).spawn()


def _check_experiment(args: list[str]) -> None:
    """An `experiment=NAME` that names no experiment config: one `error:` line listing those there are."""
    for arg in args:
        key, _, value = arg.partition("=")
        if key.lstrip("+~") == "experiment" and value and "," not in value:
            try:
                experiments = known_experiments(args)
            except Exception as exc:  # a malformed hydra.searchpath: Hydra's own message, on one line
                _fail(_one_line(exc))
            if value not in experiments:
                _fail(f"unknown experiment {value!r}; choose one of: {', '.join(experiments)} "
                      "(a config folder of your own joins with hydra.searchpath=[file://DIR])")


def _after_the_run(signum: int) -> str:
    if not _finished_in:  # a Hydra option (--cfg, --help): no run
        return f"interrupted ({signals.name(signum)}) as the command ended"
    return f"interrupted ({signals.name(signum)}) after the run finished: every output is in {_finished_in[-1]}"


def main() -> None:
    args = sys.argv[1:]
    install_signal_handlers()
    try:
        signals.check()
        _check_experiment(args)
        signals.check()
        preflight(args)
        signals.check()
        app()
    except KeyboardInterrupt:  # a stop before the app's own checks (start-up, Hydra still starting)
        _stopped(None)
    except SystemExit as exc:
        # Hydra reports its own config errors (bad override, unknown key) and exits 1: make it 2.
        if exc.code not in (0, None):
            sys.exit(EXIT_BAD_INPUT if exc.code == 1 else exc.code)
    close_worker()  # it may take seconds (the worker is let go): before the last word on the exit status
    signals.finish()  # from here on a signal ends the process by that signal; before, it was recorded
    signals.exit_if_pending(_after_the_run)


if __name__ == "__main__":
    main()
