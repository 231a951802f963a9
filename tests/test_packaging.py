"""The package's declared dependencies against what its code imports, and the pins against the lock."""
from __future__ import annotations

import ast
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

REPO = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    """The normalised distribution name of a requirement string (PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9_.\-]+", requirement.strip()).group(0)).lower()


def _imported_top_level(folder: Path) -> set:
    names = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"surprisal_cc", "__future__"}


def _pins(path: Path) -> dict:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line and "==" in line:
            name, version = line.split("==")
            pins[_name(name)] = version.strip()
    return pins


def test_every_third_party_module_the_package_imports_is_a_declared_dependency():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {_name(r) for r in project["dependencies"]}
    optional = {_name(r) for extra in project["optional-dependencies"].values() for r in extra}
    providers = metadata.packages_distributions()
    undeclared = {}
    for module in _imported_top_level(REPO / "surprisal_cc"):
        distributions = {_name(d) for d in providers.get(module, [])}
        assert distributions, f"surprisal_cc imports {module!r}, which no installed distribution provides"
        if not distributions & (declared | optional):
            undeclared[module] = sorted(distributions)
    assert not undeclared, f"imported by surprisal_cc but not in pyproject.toml's dependencies: {undeclared}"


def test_the_direct_pins_are_the_locked_versions():
    direct, locked = _pins(REPO / "requirements.txt"), _pins(REPO / "requirements.lock")
    differ = {name: (version, locked.get(name)) for name, version in direct.items() if locked.get(name) != version}
    assert not differ, f"requirements.txt pins differ from requirements.lock (name: (txt, lock)): {differ}"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    missing = {_name(r) for r in project["dependencies"]} - set(direct)
    assert not missing, f"pyproject.toml dependencies without a pin in requirements.txt: {sorted(missing)}"


TORCH_STACK = {"torch", "torchaudio", "speechbrain"}


def _closure(requirements) -> set:
    """The distributions ``requirements`` pull in, through the installed distributions' metadata (their
    own extras left out)."""
    from packaging.requirements import Requirement

    seen, todo = set(), [Requirement(r) for r in requirements]
    while todo:
        requirement = todo.pop()
        name = _name(requirement.name)
        if name in seen or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        seen.add(name)
        try:
            todo.extend(Requirement(r) for r in metadata.requires(requirement.name) or [])
        except metadata.PackageNotFoundError:
            pass
    return seen


def test_the_onnx_install_pulls_no_torch():
    """``pip install surprisal_cc[onnx]`` (the base dependencies and the onnx extra) installs no torch,
    torchaudio or SpeechBrain; the torch extra has them, and make venv (requirements.lock) everything."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    light = _closure([*project["dependencies"], *extras["onnx"]])
    assert "onnxruntime" in light and not light & TORCH_STACK, sorted(light & TORCH_STACK)
    assert TORCH_STACK <= {_name(r) for r in extras["torch"]}
    locked = _pins(REPO / "requirements.lock")
    everything = {_name(r) for r in [*project["dependencies"], *extras["torch"], *extras["onnx"]]}
    assert everything <= set(locked), sorted(everything - set(locked))
