"""How a run is named in tables and plots: its configuration (:func:`config_of`: the keys that tell
configurations apart, with their defaults where a results file lacks them) and the names made of it
(:func:`model_name`, its bracketed :func:`setup_notes`, :func:`budget_name`, a run folder's
:func:`run_label`). It names the rows that :mod:`surprisal_cc.training.run_folder` reads from run folders; it is
not :mod:`surprisal_cc.training.run_settings`, which loads and checks the settings a run is started with.

Example
-------
>>> model_name(config_of({"controller": "learned", "penalty": 0.01, "seed": 1}))
'Learned controller (λ=0.01)'
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from surprisal_cc.config import load_yaml_tolerant
from surprisal_cc.training.run_folder import Row

# configuration keys of a run and their values when a results file lacks them ("apc": the fingerprint of the
# APC weights, nnet.weights_fingerprint; results written before it was recorded have none)
CONFIG_DEFAULTS: Dict[str, Any] = {
    "dataset": "", "encoder": "conditional", "controller": "surprisal", "architecture": "paper",
    "input_features": "apc", "controller_at_train": True, "controller_at_test": True,
    "train_stochastic": True, "test_stochastic": True, "test_bias_shift": 0.0,
    "penalty": None, "penalty_utterances": None, "learned_estimator": None, "act_ponder_cost": None, "pondernet_beta": None,
    "number_of_epochs": None, "train_labels": None, "precision": None, "augment": False,
    "speed_perturb": (), "train_targets": None, "test_flops_fraction": None, "test_budget_split": None,
    "model_options": None, "apc": None,
}
CONFIG_KEYS: Tuple[str, ...] = tuple(CONFIG_DEFAULTS)
# the built-in encoders that halt per frame instead of routing between two networks (no controller)
ADAPTIVE_ENCODERS = ("act", "pondernet")
# keys whose values are names that a row's label can join when a report pools runs over them
# (surprisal_cc.experiments.aggregation.pool_configurations): e.g. an APC file and its fp16 copy
POOLABLE_KEYS: Tuple[str, ...] = ("apc", "precision", "train_labels", "train_targets", "dataset")
# display names in tables; a new controller may add its own (it is still recorded by its settings)
CONTROLLER_NAMES = {"random": "Random controller", "learned": "Learned controller",
                    "surprisal": "Surprisal-based controller", "big_only": "Big network only",
                    "small_only": "Small network only"}

__all__ = ["config_of", "model_name", "budget_name", "setup_notes", "run_label"]


def config_of(row: Row) -> Row:
    """The configuration a run was made with; settings irrelevant to its model are dropped.

    Arguments
    ---------
    row : dict
        A results row (or any mapping with configuration keys).

    Returns
    -------
    dict
        Every key of ``CONFIG_DEFAULTS``, with its default where ``row`` lacks it; settings of
        other controllers and encoders are None.

    Example
    -------
    >>> config = config_of({"controller": "random", "penalty": 0.01, "test_bias_shift": None})
    >>> config["controller"], config["penalty"], config["test_bias_shift"], config["encoder"]
    ('random', None, 0.0, 'conditional')
    >>> config_of({"encoder": "act", "controller": "surprisal"})["controller"] is None  # ACT has none
    True
    """
    config = {key: row.get(key, default) for key, default in CONFIG_DEFAULTS.items()}
    config["test_bias_shift"] = float(config["test_bias_shift"] or 0.0)
    factors = config["speed_perturb"] or ()
    config["speed_perturb"] = tuple(float(f) for f in (factors if isinstance(factors, (list, tuple)) else [factors]))
    if config["encoder"] in ADAPTIVE_ENCODERS:  # no controller: the one its run recorded says nothing about it
        config["controller"] = None
    if config["controller"] != "learned":
        config["penalty"] = config["learned_estimator"] = config["penalty_utterances"] = None
    if config["encoder"] != "act":
        config["act_ponder_cost"] = None
    if config["encoder"] != "pondernet":
        config["pondernet_beta"] = None
    if config["test_flops_fraction"] is None:
        config["test_budget_split"] = None
    else:
        config["test_flops_fraction"] = float(config["test_flops_fraction"])
        config["test_budget_split"] = config["test_budget_split"] or "valid"
    return config


def model_name(config: Row) -> str:
    """Human-readable name of a configuration, e.g. ``Learned controller (λ=0.01)``.

    Arguments
    ---------
    config : dict
        A configuration (:func:`config_of`); missing keys take their defaults.

    Returns
    -------
    str
        The name, with departures from the paper's setup in brackets.

    Example
    -------
    >>> model_name({"controller": "learned", "penalty": 0.01})
    'Learned controller (λ=0.01)'
    >>> model_name({"controller": "learned", "penalty": 0.001, "penalty_utterances": 32})
    'Learned controller (λ=0.001, per utterance x32)'
    >>> model_name({"encoder": "act", "act_ponder_cost": 0.001})
    'ACT (τ=0.001)'
    >>> model_name({"encoder": "early_exit", "controller": "surprisal"})  # a new encoder: its own name
    'early_exit'
    >>> model_name({"controller": "surprisal", "input_features": "fbank", "test_bias_shift": 1.0})
    'Surprisal-based controller [fbank features, bias +1]'
    >>> model_name({"controller": "big_only", "train_labels": "mfa:realigned", "precision": "fp32", "augment": True})
    'Big network only [training labels realigned, fp32 training, masked inputs]'
    >>> model_name({"controller": "surprisal", "speed_perturb": [0.9, 1.1]})
    'Surprisal-based controller [speeds 0.9/1/1.1]'
    >>> model_name({"controller": "surprisal", "apc": "3f9a1c07b2d4"})  # runs with other APCs are other rows
    'Surprisal-based controller [APC 3f9a1c07]'
    >>> model_name({"controller": "surprisal", "test_flops_fraction": 0.9})
    'Surprisal-based controller [test budget 0.9x big-only]'
    """
    if config.get("encoder") == "act":
        name = "ACT" + (f" (τ={config['act_ponder_cost']:g})" if config.get("act_ponder_cost") is not None else "")
    elif config.get("encoder") == "pondernet":
        beta = config.get("pondernet_beta")
        name = "PonderNet" + (f" (β={beta:g})" if beta is not None else "")
    elif config.get("encoder", "conditional") != "conditional":  # an encoder without a controller
        name = str(config["encoder"])
    else:
        controller = config.get("controller", "surprisal")
        name = CONTROLLER_NAMES.get(controller, str(controller))
        if controller == "learned" and config.get("penalty") is not None:
            per_utterance = f", per utterance x{config['penalty_utterances']}" if config.get("penalty_utterances") else ""
            name += f" (λ={config['penalty']:g}{per_utterance})"
        if controller == "learned" and config.get("learned_estimator") == "routed":
            name += " (routed estimator)"
    if config.get("model_options"):  # an encoder or controller added to the toolkit: its settings
        name += f" ({config['model_options']})"
    notes = setup_notes(config)
    return name + (f" [{', '.join(notes)}]" if notes else "")


def budget_name(fraction: float, split: Optional[str] = "valid") -> str:
    """How a test-time FLOPs budget is named in tables.

    Example
    -------
    >>> budget_name(0.9), budget_name(0.9, "test")
    ('test budget 0.9x big-only', 'test budget 0.9x big-only, solved on the test audio')
    """
    return f"test budget {float(fraction):g}x big-only" + (", solved on the test audio" if split == "test" else "")


def setup_notes(config: Row, omit: Sequence[str] = ()) -> List[str]:
    """A configuration's departures from the paper's setup, and its training precision where the
    run recorded it, as :func:`model_name` brackets them, leaving out those of the keys in ``omit``
    (shown elsewhere, e.g. in a table's own columns).

    Example
    -------
    >>> setup_notes({"input_features": "fbank", "augment": True, "speed_perturb": [0.9, 1.1]}, omit=["input_features"])
    ['masked inputs', 'speeds 0.9/1/1.1']
    """
    def shown(key: str) -> bool:
        return key not in omit

    notes = [f"{config['architecture']}"] if config.get("architecture", "paper") != "paper" and shown("architecture") else []
    if config.get("input_features", "apc") != "apc" and shown("input_features"):
        notes.append(f"{config['input_features']} features")
    notes += [text for key, text in (("controller_at_train", "no surprisal in training"),
                                     ("controller_at_test", "no surprisal at test"),
                                     ("train_stochastic", "deterministic training"),
                                     ("test_stochastic", "deterministic test")) if config.get(key) is False and shown(key)]
    if config.get("test_bias_shift") and shown("test_bias_shift"):
        notes.append(f"bias {config['test_bias_shift']:+g}")
    if config.get("test_flops_fraction") is not None and shown("test_flops_fraction"):
        notes.append(budget_name(config["test_flops_fraction"], config.get("test_budget_split")))
    labels = config.get("train_labels")
    if labels and labels != "lexicon" and shown("train_labels"):
        notes.append("MFA training labels" if labels == "mfa" else f"training labels {labels.split(':', 1)[-1]}")
    notes += {"pronunciation_alternatives": ["every pronunciation"], "optional_silence": ["optional sil"]}.get(
        config.get("train_targets"), []) if shown("train_targets") else []
    if config.get("apc") and shown("apc"):  # the weights' fingerprint (recorded since the APC became a key)
        notes.append("APC " + "+".join(part[:8] for part in str(config["apc"]).split("+")))  # pooled: joined
    if (config.get("precision") in ("fp32", "bf16") or "+" in str(config.get("precision") or "")) \
            and shown("precision"):  # "+": pooled
        notes.append(f"{config['precision']} training")
    if config.get("augment") and shown("augment"):
        notes.append("masked inputs")
    if config.get("speed_perturb") and shown("speed_perturb"):
        notes.append("speeds " + "/".join(f"{f:g}" for f in sorted({1.0, *map(float, config["speed_perturb"])})))
    return notes


def run_label(run_dir: Path) -> str:
    """Configuration name of a run folder, from its results.json or else its hyperparams.yaml.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "hyperparams.yaml").write_text("controller: random\\n")
    ...     label = run_label(Path(folder))
    >>> label
    'Random controller'
    """
    results = run_dir / "results.json"
    info: Dict[str, Any] = (json.loads(results.read_text(encoding="utf-8")) if results.exists()
                            else load_yaml_tolerant(run_dir / "hyperparams.yaml"))
    return model_name(config_of(info)) if info else run_dir.name
