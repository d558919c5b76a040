"""A variant's parameter values, declared by its annotations (`typing.Literal[...]`, int, float, str, bool): a space
that gives another is refused in one line before anything is measured, and so is a prepare with one."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal, get_args

import pytest
import yaml

from harness.api.experiment import Experiment, ExperimentError, load_experiment
from harness.boundary.framing import read_reply, reply_line
from harness.boundary.outcomes import TrialStatus
from harness.boundary.replies import Described, ExperimentFacts, ParamDomain

if TYPE_CHECKING:
    from harness.workloads.base import Workload as OnlyTyped

REPO = Path(__file__).resolve().parents[1]
Mode = Literal["eager", "fused"]


def _experiment(calls: list[dict]) -> Experiment:
    experiment = Experiment(name="e", op_kinds=("linear",), hypothesis="h", check="effective_flops")

    @experiment.baseline
    def base(w):
        return lambda: None

    @experiment.variant
    def tuned(w, mode: Mode = "eager", block: int = 64, ratio: float = 0.5, pinned: bool = False,
              label: str = "x", hint: OnlyTyped | None = None, free=3):
        calls.append({"mode": mode, "block": block})
        return lambda: None

    return experiment


def test_the_annotations_declare_values_and_types_and_nothing_else():
    domains = _experiment([]).domains["tuned"]
    assert domains == {"mode": ParamDomain(values=["eager", "fused"]), "block": ParamDomain(kind="int"),
                       "ratio": ParamDomain(kind="float"), "pinned": ParamDomain(kind="bool"),
                       "label": ParamDomain(kind="str")}  # `hint` only a type checker resolves; `free` has none
    assert _experiment([]).domains["base"] == {}


@pytest.mark.parametrize("space, message", [
    ({"tuned": {"mode": ["eager", "fusd"]}}, "experiment.space.tuned.mode: 'fusd' is not one of eager, fused "
                                             "(e's variant tuned)"),
    ({"tuned": {"mode": {"low": 0, "high": 1}}}, "mode: takes one of eager, fused: give them as a list"),
    ({"tuned": {"block": [64, "128"]}}, "block: '128' is not an int"),
    ({"tuned": {"block": [64.0]}}, "block: 64.0 is not an int"),
    ({"tuned": {"block": {"low": 16, "high": 128.5}}}, "block: takes an int: a range of it needs integer low"),
    ({"tuned": {"pinned": [True, 1]}}, "pinned: 1 is not a bool"),
    ({"tuned": {"label": {"low": 1, "high": 2}}}, "label: takes a str: give a list of choices"),
])
def test_a_space_outside_the_declared_values_is_one_line(space, message):
    with pytest.raises(ExperimentError, match=message.replace("(", r"\(").replace(")", r"\)")):
        _experiment([]).check_space(space)


def test_a_space_inside_them_passes():
    _experiment([]).check_space({"tuned": {"mode": ["eager", "fused"], "block": {"low": 16, "high": 128, "step": 16},
                                           "ratio": [1, 0.25], "pinned": [True, False], "label": ["a"],
                                           "hint": ["anything"], "free": [1, "two"]}})


def test_prepare_refuses_an_undeclared_value_before_the_variant_runs():
    calls: list[dict] = []
    experiment = _experiment(calls)
    with pytest.raises(ExperimentError, match="e: variant tuned's mode: 'fused ' is not one of eager, fused"):
        experiment.prepare("tuned", None, {"mode": "fused "})
    assert calls == []
    experiment.prepare("tuned", None, {"mode": "fused", "block": 32})
    assert calls == [{"mode": "fused", "block": 32}]


def test_a_default_outside_its_own_annotation_is_refused_at_registration():
    experiment = Experiment(name="e", op_kinds=("linear",), hypothesis="h", check="effective_flops")
    with pytest.raises(ExperimentError, match="variant odd's default mode='batched': 'batched' is not one of eager"):
        @experiment.variant
        def odd(w, mode: Mode = "batched"):
            return lambda: None


def test_the_domains_cross_the_pipe_typed():
    facts = ExperimentFacts(name="e", module="m", op_kinds=("linear",), classes=(), hypothesis="h",
                            check="effective_flops", check_module=None, baseline_name="base",
                            variants={"tuned": ["mode"]}, unmet={}, metric_set=None, workload_dtype="float32",
                            domains=_experiment([]).domains)
    line = reply_line(Described(TrialStatus.COMPLETE, experiments={"run": facts}))
    again = read_reply(line, Described).experiments["run"]
    assert again == facts
    with pytest.raises(ExperimentError, match="'fusd' is not one of eager, fused"):
        again.check_space({"tuned": {"mode": ["fusd"]}})


SHIPPED = {path.stem: section for path in sorted((REPO / "conf" / "experiment").glob("*.yaml"))
           if (section := yaml.safe_load(path.read_text()).get("experiment") or {}).get("module")}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_space_gives_values_its_variants_declare(name: str):
    section = SHIPPED[name]
    load_experiment(section["module"]).check_space(section.get("space") or {})


def test_a_bad_value_on_the_command_line_is_one_line_and_measures_nothing(tmp_path: Path):
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "harness", "experiment=vae_bf16",
                           "experiment.space.low_precision.dtype=[bfloat16,int8]", f"hydra.run.dir={run_dir}"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert errors == ["error: experiment.space.low_precision.dtype: 'int8' is not one of bfloat16, float16 "
                      "(vae_bf16's variant low_precision)"], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr and not (run_dir / "trials").exists()


@pytest.mark.parametrize("module, table, values", [
    ("experiments.attention_backends", "BACKENDS", "SdpaBackend"),
    ("experiments.attention_backends", "FLASH_ATTN_MODULES", "FlashAttnVersion"),
    ("experiments.vae_bf16", "_DTYPES", "LowPrecision"),
    ("experiments.vae_bf16", "_FORMATS", "LowPrecisionFormat"),
    ("experiments.vae_decode_chunk", "_DTYPES", "LowPrecision"),
    ("experiments.vae_conv_kernels", "FORMATS", "ConvFormat"),
    ("experiments.output_cast", "FORMATS", "CastFormat"),
])
def test_each_lookup_table_has_exactly_the_values_its_parameter_declares(module: str, table: str, values: str):
    """A value the annotation lets through must be one the variant can look up, and the other way round."""
    loaded = importlib.import_module(module)
    assert set(getattr(loaded, table)) == set(get_args(getattr(loaded, values)))
