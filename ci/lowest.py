"""Install the lowest versions of the direct dependencies that pyproject.toml allows.

The floors are read from pyproject.toml itself (every direct dependency must have a ``>=``
floor), so a wrong floor there fails CI instead of being copied into a second list that drifts.

    python ci/lowest.py check                  every direct dependency has a >= floor
    python ci/lowest.py install all  VENV_PY   every extra; each direct dependency at its floor,
                                               raised only where another dependency demands more
    python ci/lowest.py install core VENV_PY   core dependencies at exactly their floors, with the
                                               extras whose floors fit beside them

Two runs because the extras cannot all sit at the core floors: ``mcp>=2`` needs pydantic>=2.12
while the core works from pydantic 2.7. ``all`` is "lowest-direct" resolution (the lowest
version of each direct dependency that installs with the others: pydantic then comes out at
the lowest version that mcp accepts); ``core`` tests the core floors exactly, and writes the
import names of the left-out extras (their distributions' names) to ``VENV/absent-modules``,
whose test modules ``ci/absent_extras.py`` then reports as skipped instead of errors.
Transitive dependencies resolve normally (newest). Only pip is used: ``pip install --dry-run
--report`` gives the metadata that the lowest-direct computation needs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_FLOOR = re.compile(r">=\s*([0-9][^,;\s]*)")


def _name(requirement: str) -> str:
    match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    if match is None:
        raise SystemExit(f"unreadable requirement: {requirement!r}")
    return re.sub(r"[-_.]+", "-", match.group(1)).lower()


def direct() -> dict[str, list[str]]:
    """Direct requirements by group: "" for the core, else the extra's name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    groups = {"": list(project.get("dependencies", []))}
    groups.update(project.get("optional-dependencies", {}))
    return groups


def floors() -> dict[str, dict[str, str]]:
    """Floor of every direct requirement, by group; exits naming any requirement without one."""
    result: dict[str, dict[str, str]] = {}
    missing = []
    for group, requirements in direct().items():
        result[group] = {}
        for requirement in requirements:
            match = _FLOOR.search(requirement.split(";")[0])
            if match is None:
                missing.append(requirement)
            else:
                result[group][_name(requirement)] = match.group(1)
    if missing:
        raise SystemExit(f"direct dependencies without a >= floor in pyproject.toml: {missing}")
    return result


def _pip(python: str, *args: str) -> None:
    print("+ pip", " ".join(args), flush=True)
    subprocess.run([python, "-m", "pip", *args], check=True)


def _resolve(python: str, requirements: list[str], quiet: bool = False) -> list[dict]:
    """pip's resolution of ``requirements`` (nothing installed): each package's metadata.
    ``quiet``: pip's complaint about a conflict is not printed (the caller expects some)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run(
            [
                python,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--dry-run",
                "--ignore-installed",
                "--report",
                str(report),
                *requirements,
            ],
            check=True,
            capture_output=quiet,
        )
        return [item["metadata"] for item in json.loads(report.read_text("utf-8"))["install"]]


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:4])


def _demanded(packages: list[dict], names: set[str]) -> dict[str, str]:
    """The highest ``>=``/``==``/``~=`` lower bound that ``packages`` put on each of ``names``."""
    from packaging.requirements import Requirement  # the dev group's (pytest needs it too)

    requires = {_name(meta["name"]): meta.get("requires_dist") or [] for meta in packages}
    # The extras each package is asked for (fastmcp needs fastmcp-slim[client,server]): their
    # requirements count too.
    asked: dict[str, set[str]] = {name: {""} for name in requires}
    for texts in requires.values():
        for requirement in map(Requirement, texts):
            asked.setdefault(_name(requirement.name), {""}).update(requirement.extras)
    bounds: dict[str, str] = {}
    for package, texts in requires.items():
        for requirement in map(Requirement, texts):
            name = _name(requirement.name)
            marker = requirement.marker
            if name not in names:
                continue
            if marker is not None and not any(
                marker.evaluate({"extra": e}) for e in asked[package]
            ):
                continue
            for spec in requirement.specifier:
                if spec.operator not in (">=", "==", "~=") or "*" in spec.version:
                    continue
                if name not in bounds or _version(spec.version) > _version(bounds[name]):
                    bounds[name] = spec.version
    return bounds


def lowest_direct(python: str, groups: list[str]) -> dict[str, str]:
    """Each direct dependency of ``groups`` at the lowest version that installs with the others:
    its floor, or the highest lower bound another package of the resolution puts on it."""
    wanted = {name: floor for group in groups for name, floor in floors()[group].items()}
    specs = {_name(r): r.split(";")[0] for g in groups for r in direct()[g]}
    pins: dict[str, str] = {}
    requirements = list(specs.values())  # round 0: pip's newest resolution
    for _ in range(4):  # each round re-resolves at the pins: lower bounds can only drop
        demanded = _demanded(_resolve(python, requirements), set(wanted))
        new = {
            name: max(floor, demanded.get(name, floor), key=_version)
            for name, floor in wanted.items()
        }
        if new == pins:
            return pins
        pins = new
        requirements = [f"{name}=={version}" for name, version in pins.items()]
    raise SystemExit(f"lowest-direct resolution did not settle: {pins}")


def install(profile: str, python: str) -> None:
    groups = list(direct())
    if profile == "all":
        pins = lowest_direct(python, groups)
        extras = [g for g in groups if g]
        raised = {n: v for n, v in pins.items() if all(f.get(n) != v for f in floors().values())}
        print(f"lowest-direct pins: {pins}")
        if raised:
            print(f"raised above the floor by other dependencies: {raised}")
    elif profile == "core":
        core = [f"{name}=={version}" for name, version in floors()[""].items()]
        extras, absent = [], []
        for extra in (g for g in groups if g):
            pins_extra = [f"{name}=={version}" for name, version in floors()[extra].items()]
            try:
                _resolve(python, core + pins_extra, quiet=True)
                extras.append(extra)
            except subprocess.CalledProcessError:
                absent.append(extra)
        pins = {n: v for g in ["", *extras] for n, v in floors()[g].items()}
        modules = set()
        for extra in absent:
            left_out = _resolve(python, [r.split(";")[0] for r in direct()[extra]])
            modules |= {_name(meta["name"]).replace("-", "_") for meta in left_out}
        modules -= {name.replace("-", "_") for name in pins}
        print(f"core floors with extras {extras}; left out (floors incompatible): {absent}")
        Path(python).parent.parent.joinpath("absent-modules").write_text(
            "".join(f"{module}\n" for module in sorted(modules)), "utf-8"
        )
        print(f"modules of the left-out extras: {sorted(modules)}")
    else:
        raise SystemExit(f"unknown profile {profile!r}: all or core")
    target = f".[{','.join(extras)}]" if extras else "."
    _pip(
        python,
        "install",
        "--quiet",
        "-e",
        target,
        *[f"{name}=={version}" for name, version in pins.items()],
    )
    _pip(python, "check")


def main(argv: list[str]) -> None:
    if argv[:1] == ["check"]:
        for group, found in floors().items():
            print(f"{group or 'core'}: {found}")
    elif len(argv) == 3 and argv[0] == "install":
        install(argv[1], argv[2])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
