"""An experiment's own check, registered beside it in a torch-free module: a diff of two stored runs judges
by the check name and module recorded on the cards, without importing torch or the experiment."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cards.checks import CHECKS, CheckError, check_named, register_check
from harness.cards.model import Kernel, Report, load_report, save_report

ROOT = Path(__file__).resolve().parents[2]
CARD = "vae-480-conv3d-96to96k333t6-13c157"

# A user's checks module: it imports harness.cards only. Its judge answers from the kernel counts, so the
# expected verdict below follows from the planted cards (3 kernels before, 1 after), not from the code.
USER_CHECKS = '''
from harness.cards.checks import register_check

@register_check("fewer_kernels", "fewer kernels per call", metrics=("dur_us",))
def fewer_kernels(diff, before, after):
    b, a = len(before.kernels), len(after.kernels)
    return ("yes" if a < b else "no"), f"kernels {b} -> {a}"
'''


def _planted_runs(tmp_path: Path, module: str) -> tuple[Path, Path]:
    card = load_report().card(CARD)
    label = {"experiment": "mine", "variant": "x", "params": {}, "role": "trial", "check": "fewer_kernels",
             "check_module": module}
    sides = []
    for name, count in (("before", 3), ("after", 1)):
        side = load_report().card(CARD)
        side.kernels = [Kernel(name=f"kernel_{i}", metrics={"dur_us": 10.0}) for i in range(count)]
        side.summed_kernel_us = 10.0 * count
        side.extra = {**card.extra, "harness": label}
        path = tmp_path / f"{name}.json"
        save_report(Report(cards=[side]), path)
        sides.append(path)
    return sides[0], sides[1]


def _diff(tmp_path: Path, before: Path, after: Path) -> subprocess.CompletedProcess:
    script = ("import json, sys\nfrom harness.report.cli import main\ncode = main(sys.argv[1:])\n"
              "print('HEAVY ' + json.dumps([m for m in ('torch', 'optuna') if m in sys.modules]))\nsys.exit(code)")
    env = {"PYTHONPATH": f"{tmp_path}:{ROOT}", "PATH": "/usr/bin:/bin"}
    return subprocess.run([sys.executable, "-c", script, "diff", str(before), str(after), "--json"], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120, check=False)


def test_a_stored_diff_judges_by_the_registered_check_without_torch(tmp_path):
    (tmp_path / "my_checks.py").write_text(USER_CHECKS)
    before, after = _planted_runs(tmp_path, "my_checks")
    done = _diff(tmp_path, before, after)
    assert done.returncode == 0, done.stderr
    out, heavy = done.stdout.rsplit("HEAVY ", 1)
    assert json.loads(heavy) == []
    row = json.loads(out)["cards"][0]
    assert (row["check"], row["verdict"], row["verdict_detail"]) == ("fewer_kernels", "yes", "kernels 3 -> 1")


def test_a_check_module_that_cannot_be_imported_is_one_line_and_exit_2(tmp_path):
    before, after = _planted_runs(tmp_path, "nowhere_to_be_found")
    done = _diff(tmp_path, before, after)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: check 'fewer_kernels' is registered by nowhere_to_be_found, which cannot be imported here "
        "(No module named 'nowhere_to_be_found'); put it on PYTHONPATH"]


def test_one_name_registered_by_two_modules_is_refused():
    def judge(diff, before, after):
        return "yes", ""

    judge.__module__ = "somebody_else"
    with pytest.raises(CheckError, match="registered twice"):
        register_check("effective_flops", "another claim")(judge)
    assert CHECKS["effective_flops"].module is None  # the shipped one is untouched


def test_unknown_check_names_the_known_ones_and_how_to_add_one():
    with pytest.raises(CheckError, match="unknown check 'nope'; choose one of .*effective_flops.*register_check"):
        check_named("nope")
