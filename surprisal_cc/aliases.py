"""One table of the package's old dotted paths: the flat modules of releases before the subpackages
(``surprisal_cc.encoders``, ``surprisal_cc.recipe.label_encoder_for`` ...), as published
``hyperparams.yaml`` files and model folders name them. Importing ``surprisal_cc`` installs a finder
that answers each old module name with a stand-in whose names are those of the module it became, or of
:data:`MOVED_NAMES` for names an old module only re-exported; no module re-exports old names.

>>> import importlib
>>> encoders = importlib.import_module("surprisal_cc.encoders")
>>> encoders.ConditionalEncoder is importlib.import_module("surprisal_cc.model.encoders").ConditionalEncoder
True
>>> encoders.build_encoder.__module__
'surprisal_cc.model.architectures'
>>> resolve_dotted("surprisal_cc.metrics.ErrorRate").__module__
'surprisal_cc.decoding.metrics'
"""
from __future__ import annotations

import functools
import importlib
import importlib.abc
import importlib.util
import sys
import types
from typing import Any

#: old module (below ``surprisal_cc.``) -> the module it is now
MOVED = {
    "adaptive": "model.adaptive",
    "aggregation": "experiments.aggregation",
    "allocator": "training.allocator",
    "analysis": "experiments.analysis",
    "apc": "model.apc",
    "apc_training": "training.apc_training",
    "architectures": "model.architectures",
    "arguments": "checks",
    "augment": "training.augment",
    "brain": "training.brain",
    "cache": "training.cache",
    "calibration": "model.calibration",
    "checkpoints": "training.checkpoints",
    "cli": "cli.commands",
    "controllers": "model.controllers",
    "corpora": "inference.corpora",
    "ctc": "model.ctc",
    "datasets": "training.datasets",
    "decoding": "decoding.search",
    "encoders": "model.encoders",
    "evaluation": "inference.evaluation",
    "export": "training.export",
    "features": "model.features",
    "flops": "model.flops",
    "forward": "model.forward",
    "frozen_features": "training.frozen_features",
    "grid": "experiments.grid",
    "grid_spec": "experiments.grid_spec",
    "hparams_files": "config",
    "inference": "inference.asr",
    "label_eval": "alignment.label_eval",
    "labels": "training.labels",
    "long_audio": "inference.long_audio",
    "metrics": "decoding.metrics",
    "model_folder": "model.model_folder",
    "nnet": "model.nnet",
    "plots": "experiments.plots",
    "precision": "runtime",
    "realign": "alignment.realign",
    "recipe": "training.recipe",
    "report": "experiments.report",
    "run_folder": "training.run_folder",
    "run_labels": "experiments.run_labels",
    "run_locks": "experiments.run_locks",
    "run_settings": "training.run_settings",
    "schedulers": "training.schedulers",
    "threads": "runtime",
    "timestamps": "decoding.timestamps",
    "viterbi": "decoding.viterbi",
}

#: old dotted names that lived in another module than their own (re-exported there): name -> where it is now
MOVED_NAMES = {
    "surprisal_cc.encoders.build_encoder": "surprisal_cc.model.architectures.build_encoder",
    "surprisal_cc.features.FeatureConfig": "surprisal_cc.model.feature_config.FeatureConfig",
    "surprisal_cc.recipe.phone_set": "surprisal_cc.training.labels.phone_set",
    "surprisal_cc.recipe.label_encoder_for": "surprisal_cc.training.labels.label_encoder_for",
    "surprisal_cc.recipe.input_size_for": "surprisal_cc.model.nnet.input_size_for",
}


def old_attribute(old_module: str, name: str) -> Any:
    """``name`` as the old module ``old_module`` (``surprisal_cc.<old>``) had it: the stand-ins' lookup, and
    the ``__getattr__`` of a package where an old flat module of its name was (``surprisal_cc.decoding``:
    old dotted paths such as ``surprisal_cc.decoding.CTCBeamSearch``)."""
    moved = MOVED_NAMES.get(f"{old_module}.{name}")
    if moved is not None:
        module, _, attribute = moved.rpartition(".")
        return getattr(importlib.import_module(module), attribute)
    new = MOVED.get(old_module[len("surprisal_cc."):])
    if new is None:
        raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
    try:
        return getattr(importlib.import_module("surprisal_cc." + new), name)
    except AttributeError:
        raise AttributeError(f"module {old_module!r} has no attribute {name!r}") from None


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``surprisal_cc.<old>`` for every old module of :data:`MOVED` and answers with a stand-in module
    whose attributes are looked up by :func:`old_attribute`."""

    def find_spec(self, fullname, path=None, target=None):
        old = fullname[len("surprisal_cc."):] if fullname.startswith("surprisal_cc.") else None
        if old in MOVED:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name, f"Old name of surprisal_cc.{MOVED[spec.name[len('surprisal_cc.'):]]}")
        module.__getattr__ = functools.partial(old_attribute, spec.name)
        return module

    def exec_module(self, module):  # nothing to run: names are looked up when used
        pass


def install() -> None:
    """Put the finder of old module names on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())


def resolve_dotted(name: str) -> Any:
    """The object a dotted path names (``package.module.attribute``), old paths included, as
    hyperpyyaml's ``!new:`` / ``!name:`` / ``!apply:`` tags find it."""
    import pydoc

    found = pydoc.locate(name)
    if found is None:
        raise ImportError(f"{name}: names nothing (not a module, class or function of this version)")
    return found
