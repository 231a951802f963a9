"""The package's import structure, read from the source (imports inside functions included).

* no import circle between modules;
* no private name (``_name``) imported from, or read off, another module;
* the lower layers (data, labels, networks, features, decoding, APC, model folders, run folders and labels, label
  scores, the allocator) import neither the upper ones (brain, the recipe steps, inference, export, realign, cli)
  nor the experiment tools
  (grid, its grid files and run locks, aggregation, report, plots, analysis, apc provenance), and the inference
  runtime loads no experiment tool when it is imported.

Every module is assigned to one layer below, so a new module has to be placed.
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
# by the module's first name below the package (surprisal_cc.data.mfa: data)
LOWER = {"", "errors", "arguments", "data", "nnet", "flops", "features", "augment", "controllers", "calibration", "adaptive", "encoders", "ctc",
         "decoding", "apc", "cache", "metrics", "schedulers", "checkpoints", "hparams_files", "precision", "threads", "viterbi",
         "run_folder", "run_labels", "label_eval", "forward", "model_folder", "architectures", "labels", "allocator"}
UPPER = {"brain", "apc_training", "recipe", "run_settings", "frozen_features", "datasets", "inference", "corpora",
         "evaluation", "export", "realign", "cli", "long_audio", "timestamps"}
TOOLS = {"grid", "grid_spec", "run_locks", "aggregation", "report", "plots", "analysis", "apc_provenance"}


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
    """``(lower module, upper module or tool it imports)`` pairs."""
    return sorted((module, other) for module, imports in graph.items() if layer_of(module) in LOWER
                  for other in imports.modules if layer_of(other) not in LOWER)


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
    assert not [m for m in graph if layer_of(m) not in LOWER | UPPER | TOOLS], "add the new module to a layer"


def test_no_import_circles(graph):
    assert import_circles(graph) == []


def test_no_private_names_across_modules(graph):
    assert [line for imports in graph.values() for line in imports.private] == []


def test_lower_layers_import_no_upper_layer_or_tool(graph):
    assert layer_violations(graph) == []


def test_the_inference_runtime_loads_no_experiment_tool(graph):
    loaded = loaded_at_import(graph, "surprisal_cc.inference") | loaded_at_import(graph, "surprisal_cc.cli")
    assert "surprisal_cc.architectures" in loaded  # the model's modules are there (its model file names the encoder's)
    assert sorted(m for m in loaded if layer_of(m) in TOOLS | {"brain", "realign", "label_eval"}) == []


def test_the_inference_runtime_does_not_load_the_training_brain():
    """``surprisal-cc transcribe`` and ``evaluate`` run without the training Brain: importing the runtime,
    the corpus evaluation and the command line (in a fresh interpreter) loads no ``surprisal_cc.brain``."""
    code = ("import sys, surprisal_cc, surprisal_cc.inference, surprisal_cc.evaluation, surprisal_cc.cli; "
            "print(surprisal_cc.__file__); print('surprisal_cc.brain' in sys.modules)")
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
    code = "import sys, surprisal_cc.grid, surprisal_cc.run_folder, surprisal_cc.run_labels; print('torch' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["False"]


def test_training_and_inference_import_no_experiment_tool(graph):
    """Training and the inference runtime name and read run files through ``run_folder``, not through a tool
    (imports inside functions included); only the command line reaches the tools."""
    modules = [m for m in graph if layer_of(m) in UPPER - {"cli"}]
    assert sorted((m, other) for m in modules for other in graph[m].modules if layer_of(other) in TOOLS) == []


def test_the_checks_find_each_kind_of_problem(tmp_path):
    """A small package with one problem of each kind: every check reports it."""
    files = {
        "__init__.py": "",
        "data/__init__.py": "from .audio import read\n",
        "data/audio.py": "def read():\n    from ..inference import run\n    return run\n",
        "inference.py": "from .data.audio import read\nfrom .report import _loader\n",
        "report.py": "import surprisal_cc.data.audio as audio\n\n\ndef f():\n    return audio._cache\n",
    }
    for name, text in files.items():
        (tmp_path / PACKAGE / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / PACKAGE / name).write_text(text)
    small = read_imports(tmp_path)
    assert import_circles(small) == [["surprisal_cc.data", "surprisal_cc.data.audio", "surprisal_cc.inference",
                                      "surprisal_cc.report"]]
    assert sorted(line.split(": ")[1] for imports in small.values() for line in imports.private) == [
        "surprisal_cc.data.audio._cache", "surprisal_cc.report._loader"]
    assert layer_violations(small) == [("surprisal_cc.data.audio", "surprisal_cc.inference")]
    assert "surprisal_cc.report" in loaded_at_import(small, "surprisal_cc.inference")
    assert "surprisal_cc.inference" not in loaded_at_import(small, "surprisal_cc.data.audio")
