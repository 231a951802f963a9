"""The package's import structure, read from the source (imports inside functions included).

* no import circle between modules;
* no private name (``_name``) imported from, or read off, another module;
* each subpackage imports only its own modules and those of the layers below it (:data:`LAYERS`): the
  shared modules, ``data``, ``decoding``, ``model``, then ``training``, ``inference`` and ``deploy`` (side by
  side: none imports another), ``alignment``, ``experiments``, and ``cli`` at the top;
* the inference runtime loads no experiment tool and no training module when it is imported.

A new subpackage or top-level module has to be placed in :data:`LAYERS`.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

from data_fixtures import REPO

PACKAGE = "surprisal_cc"
#: the layer of each subpackage (and of the shared top-level modules, by module name): a module imports
#: only modules of its own subpackage or of a lower layer, and never its peers of the same layer
LAYERS = {"": 0, "errors": 0, "checks": 0, "config": 0, "runtime": 0, "aliases": 0,
          "data": 1, "decoding": 2, "model": 3, "training": 4, "inference": 4, "deploy": 4, "alignment": 5,
          "experiments": 6, "cli": 7}
SHARED = {name for name, rank in LAYERS.items() if rank == 0}
TOOLS = {"experiments"}


@dataclass
class Imports:
    """What one module imports from the package."""
    modules: Set[str] = field(default_factory=set)        # every import, inside functions too
    at_load: Set[str] = field(default_factory=set)        # those run when the module is imported
    private: List[str] = field(default_factory=list)      # "line: module._name" from another module


def module_names(root: Path) -> Dict[str, Path]:
    """``{dotted module name: file}`` of the package in ``root`` (a folder holding ``<package>/``)."""
    names = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _ancestors(name: str) -> List[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def read_imports(root: Path) -> Dict[str, Imports]:
    """The package-internal imports of every module of the package in ``root``."""
    names = module_names(root)
    graph: Dict[str, Imports] = {}
    for name, path in names.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found, aliases = Imports(), {}
        at_load = {id(node) for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))}
        at_load |= {id(n) for stmt in tree.body if isinstance(stmt, (ast.If, ast.Try))
                    for n in ast.walk(stmt) if isinstance(n, (ast.Import, ast.ImportFrom))}

        def add(target: str, node: ast.AST) -> None:
            # importing a.b.c runs a, a.b and a.b.c; a module's own packages are already running
            for module in [*_ancestors(target), target]:
                if module in names and module != name and module not in _ancestors(name):
                    found.modules.add(module)
                    if id(node) in at_load:
                        found.at_load.add(module)

        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == PACKAGE:
                        add(alias.name, node)
                        aliases[alias.asname or alias.name] = alias.name
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[:len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source.split(".")[0] != PACKAGE:
                    continue
                for alias in node.names:
                    submodule = f"{source}.{alias.name}"
                    if submodule in names:
                        add(submodule, node)
                        aliases[alias.asname or alias.name] = submodule
                    else:
                        add(source, node)
                        if alias.name.startswith("_") and source != name:
                            found.private.append(f"{path.name}:{node.lineno}: {source}.{alias.name}")
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                found.private.append(f"{path.name}:{node.lineno}: {aliases[node.value.id]}.{node.attr}")
        graph[name] = found
    return graph


def import_circles(graph: Dict[str, Imports]) -> List[List[str]]:
    """The groups of modules that import each other, directly or through others (Tarjan's SCCs)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    circles: List[List[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph[module].modules):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                group.append(stack.pop())
                if group[-1] == module:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return circles


def layer_of(module: str) -> str:
    return module[len(PACKAGE) + 1:].split(".")[0] if module != PACKAGE else ""


def layer_violations(graph: Dict[str, Imports]) -> List[Tuple[str, str]]:
    """``(module, module of its own layer or above that it imports)`` pairs, its own subpackage apart
    (the shared top-level modules may import one another)."""
    def allowed(module: str, other: str) -> bool:
        mine, theirs = layer_of(module), layer_of(other)
        if mine == theirs or (mine in SHARED and theirs in SHARED):
            return True
        return LAYERS[theirs] < LAYERS[mine]

    return sorted((module, other) for module, imports in graph.items() for other in imports.modules
                  if not allowed(module, other))


def loaded_at_import(graph: Dict[str, Imports], module: str) -> Set[str]:
    """The package modules that importing ``module`` runs (module-level imports, transitively)."""
    seen, todo = set(), [module, *_ancestors(module)]
    while todo:
        current = todo.pop()
        if current in seen or current not in graph:
            continue
        seen.add(current)
        todo.extend(graph[current].at_load)
    return seen


@pytest.fixture(scope="module")
def graph() -> Dict[str, Imports]:
    return read_imports(REPO)


def test_every_module_has_a_layer(graph):
    assert not [m for m in graph if layer_of(m) not in LAYERS], "add the new subpackage or module to LAYERS"


def test_every_subpackage_says_what_it_holds_and_may_import():
    for init in sorted((REPO / PACKAGE).glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
        assert "May import" in doc or init.parent.name == "data", init


def test_no_import_circles(graph):
    assert import_circles(graph) == []


def test_no_private_names_across_modules(graph):
    assert [line for imports in graph.values() for line in imports.private] == []


def test_each_layer_imports_only_the_layers_below_it(graph):
    assert layer_violations(graph) == []


def test_the_inference_runtime_loads_no_experiment_tool(graph):
    loaded = loaded_at_import(graph, "surprisal_cc.inference.asr") | loaded_at_import(graph, "surprisal_cc.cli.commands")
    assert "surprisal_cc.model.architectures" in loaded  # the model's modules are there (its model file names the encoder's)
    assert sorted(m for m in loaded if layer_of(m) in TOOLS | {"training", "alignment"}) == []


def test_the_inference_runtime_does_not_load_the_training_brain():
    """``surprisal-cc transcribe`` and ``evaluate`` run without the training Brain: importing the runtime,
    the corpus evaluation and the command line (in a fresh interpreter) loads no ``surprisal_cc.training.brain``."""
    code = ("import sys, surprisal_cc, surprisal_cc.inference.asr, surprisal_cc.inference.evaluation, surprisal_cc.cli.commands; "
            "print(surprisal_cc.__file__); print('surprisal_cc.training.brain' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    package_file, brain_loaded = proc.stdout.split()
    assert Path(package_file).parent == REPO / PACKAGE
    assert brain_loaded == "False"


def test_the_grid_and_the_run_folder_load_no_torch():
    """``surprisal-cc grid`` starts without torch: importing the grid, the run files and their names (in a
    fresh interpreter) loads no ``torch`` (``run_folder.new_model_options`` imports the controllers when it
    looks one up)."""
    code = "import sys, surprisal_cc.experiments.grid, surprisal_cc.training.run_folder, surprisal_cc.experiments.run_labels; print('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False"]


def test_training_and_inference_import_no_experiment_tool(graph):
    """Training and the inference runtime name and read run files through ``training.run_folder``, not
    through a tool (imports inside functions included); only the command line reaches the tools."""
    modules = [m for m in graph if layer_of(m) not in TOOLS | {"cli"}]
    assert sorted((m, other) for m in modules for other in graph[m].modules if layer_of(other) in TOOLS) == []
