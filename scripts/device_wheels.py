"""The wheels the GPU machine lacks: derive them, fetch them into .whl/, check the set, check an install.

    python scripts/device_wheels.py fill          # .whl/ = exactly the lock's wheels, then `check`
    python scripts/device_wheels.py check         # the set in .whl/ is complete, pinned, small, installable
    python scripts/device_wheels.py lock [--write]   # derive the lock from the project's requirements
    python scripts/device_wheels.py standins      # the preinstalled packages the carried wheels need
    python scripts/device_wheels.py verify-installed  # run on the target: every requirement met there

The GPU machine (CPython 3.12, x86-64 manylinux, no network) already has the packages listed in
scripts/gpu_machine_preinstalled.txt (a copy of shared/gpu_machine/preinstalled.txt, names only).
What it lacks of the project's requirements (pyproject's dependencies and the extras in EXTRAS,
less NOT_CARRIED) and of their requirements, transitively, is pinned in scripts/device_wheels.lock,
one version each; `lock` derives that list (the versions installed here, which the tests ran with,
else the newest), `fill` downloads the wheels for the target's tags (`pip download --no-deps
--only-binary=:all: --python-version 3.12 --implementation cp --platform manylinux...`) and builds a
source-only package (antlr4-python3-runtime) with `pip wheel --no-deps`, which must give a pure wheel.

On the target: `python3 -m pip install --no-index --no-deps --target DIR .whl/*.whl`, then
`PYTHONPATH=DIR python3 scripts/device_wheels.py verify-installed` checks every requirement of the
carried wheels and of the project against what that interpreter sees (versions included), since
`--no-deps` checks nothing. Standard library only (plus pip's own vendored `packaging` where the
`packaging` distribution is absent), so it runs before anything is installed.
"""

from __future__ import annotations

import argparse
import email.parser
import importlib.metadata
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

try:
    from packaging.requirements import Requirement
except ImportError:  # pip always carries a copy
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "scripts" / "device_wheels.lock"
PREINSTALLED = ROOT / "scripts" / "gpu_machine_preinstalled.txt"
WHEELS = ROOT / ".whl"
MAX_BYTES = 30 * 2**20

# The extras of pyproject the GPU check needs besides the dependencies.
EXTRAS = ("test", "gpu-cu13", "ncu")  # gpu-cu13: the machine's torch is +cu130 (its cupy-cuda13x is preinstalled)
# Requirements not carried, and why.
NOT_CARRIED = {
    "psycopg2-binary": "only the PostgreSQL scale-out test needs it, and it skips without a server",
    "ncu-report": "every ncu installation ships the ncu_report module (extras/python); the wheel is ~50 MB",
    "ruff": "CI's lint (.ci/run), not a test: nothing on the GPU machine runs it",
    "mypy": "CI's type check (.ci/run), not a test: nothing on the GPU machine runs it",
}
# The target's interpreter and platform, for markers and wheel tags.
TARGET_ENV = {
    "implementation_name": "cpython",
    "implementation_version": "3.12.3",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "platform_python_implementation": "CPython",
    "platform_release": "",
    "platform_system": "Linux",
    "platform_version": "",
    "python_full_version": "3.12.3",
    "python_version": "3.12",
    "sys_platform": "linux",
    "extra": "",
}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
_PY_TAGS = {"py3", "py312", "cp312", "cp3"}
_ABI_TAGS = {"none", "abi3", "cp312"}
_LEGACY_MANYLINUX = {"manylinux1_x86_64": 5, "manylinux2010_x86_64": 12, "manylinux2014_x86_64": 17}
MAX_GLIBC_MINOR = 28  # the newest manylinux_2_N the target is asked for


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_lock(path: Path = LOCK) -> dict[str, str]:
    """Normalized name -> pinned version."""
    pins: dict[str, str] = {}
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep or not version.strip():
            raise SystemExit(f"{path}:{number}: expected NAME==VERSION, got {raw!r}")
        key = normalize(name.strip())
        if key in pins:
            raise SystemExit(f"{path}:{number}: {name} pinned twice")
        pins[key] = version.strip()
    return pins


def read_preinstalled(path: Path = PREINSTALLED) -> set[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return {normalize(line.split("#", 1)[0].strip()) for line in lines if line.split("#", 1)[0].strip()}


def project_requirements() -> list[Requirement]:
    """pyproject's dependencies and the EXTRAS' requirements."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        from pip._vendor import tomli as tomllib  # type: ignore[no-redef]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    texts = list(project.get("dependencies", []))
    for extra in EXTRAS:
        texts += project.get("optional-dependencies", {}).get(extra, [])
    return [Requirement(text) for text in texts]


# ---------------------------------------------------------------------------------------------
# Wheel files


def wheel_info(path: Path) -> tuple[str, str, list[str]]:
    """(normalized name, version, tags "py-abi-platform") from a wheel's file name."""
    parts = path.name[: -len(".whl")].split("-")
    if len(parts) not in (5, 6):
        raise ValueError(f"{path.name}: not a wheel file name")
    name, version = parts[0], parts[1]
    py, abi, plat = parts[-3], parts[-2], parts[-1]
    tags = [f"{p}-{a}-{q}" for p in py.split(".") for a in abi.split(".") for q in plat.split(".")]
    return normalize(name), version, tags


def _platform_fits(plat: str) -> bool:
    if plat == "any":
        return True
    if plat in _LEGACY_MANYLINUX:
        return True
    match = re.fullmatch(r"manylinux_2_(\d+)_x86_64", plat)
    return bool(match) and int(match.group(1)) <= MAX_GLIBC_MINOR


def fits_target(tags: list[str]) -> bool:
    """Whether one of a wheel's tags installs on CPython 3.12, x86-64 manylinux (glibc <= 2.28)."""
    return any(
        py in _PY_TAGS and abi in _ABI_TAGS and _platform_fits(plat)
        for py, abi, plat in (tag.split("-") for tag in tags)
    )


def wheel_requires(path: Path) -> list[Requirement]:
    with zipfile.ZipFile(path) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        message = email.parser.Parser().parsestr(archive.read(meta).decode("utf-8"))
    return [Requirement(text) for text in message.get_all("Requires-Dist") or []]


def applies(req: Requirement, env: dict[str, str] | None = TARGET_ENV) -> bool:
    """Whether a requirement applies without extras on the target (or, env None, on this interpreter)."""
    if req.marker is None:
        return True
    if env is None:
        return req.marker.evaluate({"extra": ""})
    return req.marker.evaluate(env)


def wheels_in(folder: Path) -> dict[str, list[Path]]:
    found: dict[str, list[Path]] = {}
    for path in sorted(folder.glob("*.whl")):
        found.setdefault(wheel_info(path)[0], []).append(path)
    return found


# ---------------------------------------------------------------------------------------------
# check


def check(folder: Path = WHEELS, lock: Path = LOCK, quiet: bool = False) -> list[str]:
    """Problems with the set in `folder` (empty: none); prints a summary unless quiet."""
    pins, preinstalled = read_lock(lock), read_preinstalled()
    problems: list[str] = []
    if not folder.is_dir():
        return [f"{folder}: missing: run scripts/device_wheels.sh"]
    found = wheels_in(folder)
    versions: dict[str, str] = {}
    for name, paths in found.items():
        if len(paths) > 1:
            problems.append(f"{name}: {len(paths)} wheels ({', '.join(p.name for p in paths)}); one version each")
        _, version, tags = wheel_info(paths[0])
        versions[name] = version
        if name not in pins:
            problems.append(f"{paths[0].name}: not in {lock.name}")
        elif pins[name] != version:
            problems.append(f"{paths[0].name}: {lock.name} pins {name}=={pins[name]}")
        if not fits_target(tags):
            problems.append(f"{paths[0].name}: no tag for CPython 3.12 on manylinux x86-64")
        if name in preinstalled:
            problems.append(f"{paths[0].name}: the GPU machine already has {name}; carrying it shadows its copy")
    for name, version in pins.items():
        if name not in found:
            problems.append(f"{name}=={version}: pinned but no wheel in {folder.name}/")
    # Every requirement of a carried wheel is carried (at a version it accepts) or preinstalled.
    for name, paths in found.items():
        for req in wheel_requires(paths[0]):
            if not applies(req):
                continue
            key = normalize(req.name)
            if key in versions:
                if not req.specifier.contains(versions[key], prereleases=True):
                    problems.append(f"{name} needs {req}; carried {key}=={versions[key]}")
            elif key not in preinstalled:
                problems.append(f"{name} needs {req}: neither carried nor on the GPU machine")
    # The project's own requirements, the same way.
    for req in project_requirements():
        key = normalize(req.name)
        if not applies(req) or key in NOT_CARRIED or key in preinstalled:
            continue
        if key not in versions:
            problems.append(f"the project needs {req}: neither carried nor on the GPU machine")
        elif not req.specifier.contains(versions[key], prereleases=True):
            problems.append(f"the project needs {req}; carried {key}=={versions[key]}")
    total = sum(p.stat().st_size for paths in found.values() for p in paths)
    if total > MAX_BYTES:
        problems.append(f"{total / 2**20:.1f} MiB of wheels: over the {MAX_BYTES // 2**20} MiB budget")
    if not quiet:
        print(f"{folder.name}/: {sum(len(p) for p in found.values())} wheels, {total / 2**20:.2f} MiB "
              f"(budget {MAX_BYTES // 2**20} MiB): " + ", ".join(f"{n}=={v}" for n, v in sorted(versions.items())))
        for problem in problems:
            print(f"  problem: {problem}")
    return problems


# ---------------------------------------------------------------------------------------------
# fill


def _pip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True, check=False)


def download(specs: list[str], dest: Path) -> subprocess.CompletedProcess[str]:
    platforms = [arg for plat in PLATFORMS for arg in ("--platform", plat)]
    return _pip("download", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
                "--implementation", "cp", *platforms, "-d", str(dest), *specs)


def build(spec: str, dest: Path) -> Path:
    """A pure wheel built from the source archive (a package published only as one)."""
    with tempfile.TemporaryDirectory() as tmp:
        result = _pip("wheel", "--no-deps", "-w", tmp, spec)
        built = list(Path(tmp).glob("*.whl"))
        if result.returncode != 0 or len(built) != 1:
            raise SystemExit(f"{spec}: neither a wheel for the target nor a build from source:\n"
                             f"{result.stderr[-2000:]}")
        if not all(tag.endswith("-none-any") for tag in wheel_info(built[0])[2]):
            raise SystemExit(f"{spec}: the build gave {built[0].name}, not a pure wheel: it cannot be carried")
        target = dest / built[0].name
        shutil.move(str(built[0]), target)
        return target


def fill(folder: Path = WHEELS) -> int:
    pins = read_lock()
    folder.mkdir(exist_ok=True)
    have: dict[str, str] = {}
    for path in sorted(folder.glob("*.whl")):
        name, version, _ = wheel_info(path)
        if pins.get(name) != version or name in have:
            print(f"removing {path.name} (not pinned in {LOCK.name})")
            path.unlink()
        else:
            have[name] = version
    for stray in folder.iterdir():
        if stray.is_file() and not stray.name.endswith(".whl"):
            stray.unlink()
    missing = [f"{name}=={version}" for name, version in sorted(pins.items()) if name not in have]
    if missing:
        print(f"fetching {len(missing)}: {' '.join(missing)}")
        if download(missing, folder).returncode != 0:  # one at a time, building what has no wheel
            for spec in missing:
                result = download([spec], folder)
                if result.returncode != 0:
                    print(f"{spec}: no wheel for the target; building it from source")
                    print(f"  built {build(spec, folder).name}")
    problems = check(folder)
    if problems:
        print(f"device_wheels: {len(problems)} problem(s) with {folder}/", file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------------------------------------
# lock: derive the list


def derive(scratch: Path) -> dict[str, str]:
    """Name -> version of everything the project needs on the GPU machine that it lacks."""
    preinstalled = read_preinstalled()
    pending = [req for req in project_requirements() if applies(req)]
    chosen: dict[str, str] = {}
    while pending:
        req = pending.pop(0)
        key = normalize(req.name)
        if key in chosen or key in preinstalled or key in NOT_CARRIED:
            continue
        try:
            here = importlib.metadata.version(req.name)
        except importlib.metadata.PackageNotFoundError:
            here = None
        spec = f"{req.name}=={here}" if here and req.specifier.contains(here, prereleases=True) else str(
            Requirement(f"{req.name}{req.specifier}"))
        before = set(scratch.glob("*.whl"))
        if download([spec], scratch).returncode != 0:
            build(spec, scratch)
        (path,) = set(scratch.glob("*.whl")) - before
        chosen[key] = wheel_info(path)[1]
        pending += [r for r in wheel_requires(path) if applies(r)]
    return dict(sorted(chosen.items()))


def write_lock(pins: dict[str, str], path: Path = LOCK) -> None:
    header = [
        "# Wheels carried to the GPU machine: exactly what it lacks of the project's requirements",
        "# (pyproject dependencies and extras " + ", ".join(EXTRAS) + ", less "
        + ", ".join(sorted(NOT_CARRIED)) + ")",
        "# and of theirs, for CPython 3.12 x86-64 manylinux; what it has: scripts/gpu_machine_preinstalled.txt.",
        "# Derived by `python scripts/device_wheels.py lock --write` (versions installed here, else the newest);",
        "# scripts/device_wheels.sh fills .whl/ with exactly these. One version each.",
    ]
    path.write_text("\n".join(header + [f"{name}=={version}" for name, version in pins.items()]) + "\n",
                    encoding="utf-8")


def lock(write: bool) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        pins = derive(Path(tmp))
    current = read_lock() if LOCK.exists() else {}
    for name, version in pins.items():
        print(f"{name}=={version}" + ("" if current.get(name) == version else "   (changed)"))
    for name in sorted(set(current) - set(pins)):
        print(f"{name}: no longer needed")
    if write:
        write_lock(pins)
        print(f"wrote {LOCK.relative_to(ROOT)}")
    elif pins != current:
        print(f"{LOCK.relative_to(ROOT)} differs from the derived list: `lock --write` to update it", file=sys.stderr)
        return 1
    return 0


# ---------------------------------------------------------------------------------------------
# On the target


def standins(folder: Path = WHEELS) -> list[str]:
    """The preinstalled distributions the carried wheels require (a stand-in for the GPU machine's
    image in a scratch environment)."""
    preinstalled, needed = read_preinstalled(), set()
    for paths in wheels_in(folder).values():
        needed |= {normalize(r.name) for r in wheel_requires(paths[0])
                   if applies(r) and normalize(r.name) in preinstalled}
    return sorted(needed)


def verify_installed(folder: Path = WHEELS, strict_project: bool = True) -> dict[str, list[str]]:
    """What this interpreter (with the carried wheels on its path) lacks: {"problems": [...], "notes": [...]}.

    Every requirement of a carried wheel must be met, versions included; so must the project's own
    (`strict_project`; else a requirement the GPU machine has preinstalled is a note: a scratch
    environment stands in only for what the carried wheels need)."""
    preinstalled = read_preinstalled()
    problems: list[str] = []
    notes: list[str] = []

    def installed(name: str) -> str | None:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    def judge(owner: str, req: Requirement, soft: bool) -> None:
        version = installed(req.name)
        if version is None:
            (notes if soft and normalize(req.name) in preinstalled else problems).append(
                f"{owner} needs {req}: not installed here")
        elif req.specifier and not req.specifier.contains(version, prereleases=True):
            problems.append(f"{owner} needs {req}; found {req.name} {version}")

    for name, paths in sorted(wheels_in(folder).items()):
        version = installed(name)
        expected = wheel_info(paths[0])[1]
        if version != expected:
            problems.append(f"{name}: carried {expected}, this interpreter sees {version or 'none'}")
        for req in wheel_requires(paths[0]):
            if applies(req, None):
                judge(name, req, soft=False)
    for req in project_requirements():
        if applies(req, None) and normalize(req.name) not in NOT_CARRIED:
            judge("the project", req, soft=not strict_project)
    return {"problems": problems, "notes": notes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("fill")
    sub.add_parser("check")
    sub.add_parser("standins")
    locking = sub.add_parser("lock")
    locking.add_argument("--write", action="store_true")
    verify = sub.add_parser("verify-installed")
    verify.add_argument("--json", action="store_true")
    verify.add_argument("--stand-in", action="store_true",
                        help="a scratch environment: the project's preinstalled requirements may be absent")
    parser.add_argument("--wheels", type=Path, default=Path(os.environ.get("DEVICE_WHEELS", WHEELS)))
    args = parser.parse_args(argv)
    if args.command == "fill":
        return fill(args.wheels)
    if args.command == "check":
        return 1 if check(args.wheels) else 0
    if args.command == "lock":
        return lock(args.write)
    if args.command == "standins":
        print(" ".join(standins(args.wheels)))
        return 0
    found = verify_installed(args.wheels, strict_project=not args.stand_in)
    if args.json:
        print(json.dumps(found))
    else:
        for note in found["notes"]:
            print(f"note: {note}")
        for problem in found["problems"]:
            print(f"problem: {problem}")
        print(f"{len(found['problems'])} problem(s), {len(found['notes'])} note(s)")
    return 1 if found["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
