"""A run folder's files: what a recipe run's test evaluations and their configurations are named
(``results*.json``, ``hyperparams_test_only*.yaml``), and reading a run's results, hparams and history
back, one run or every run under a folder, with what a results row takes from the run's
``hyperparams.yaml`` (training labels and targets, a new encoder's or controller's ``model_options``).
Training names its files with it and the experiment tools read them with it. How a run is named in
tables and plots is :mod:`surprisal_cc.experiments.run_labels`; the settings a run is started with (its command
line and hparams, loaded and checked) are :mod:`surprisal_cc.training.run_settings`.

Example
-------
>>> results_file_name(0.0, True, tag=evaluation_tag({"controller_at_test": False}))
'results_test_only_random_at_test.json'
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

import yaml

from surprisal_cc.checks import is_number
from surprisal_cc.config import load_yaml_tolerant

PathLike = Union[str, Path]
Row = Dict[str, Any]

# test-time conditions that name a --test_only evaluation's files apart: (key, tag where the key is off)
EVALUATION_TAGS = (("controller_at_test", "_random_at_test"), ("test_stochastic", "_deterministic"))
RESULTS_PATTERN = re.compile(r"^results(_test_only" + "".join(f"({re.escape(tag)})?" for _, tag in EVALUATION_TAGS)
                             + r"(_budget[0-9.eE+-]+(_on_test)?)?)?(_bias[+-][0-9.eE+-]+)?\.json$")

# the encoders and the controller settings of hparams/common/conditional_ctc.yaml that have keys of
# their own in a run's configuration (run_labels.CONFIG_DEFAULTS); a new encoder's or controller's
# settings are recorded as ``model_options``
BUILT_IN_ENCODERS = ("conditional", "act", "pondernet")
BUILT_IN_CONTROLLER_SETTINGS = ("p_big", "penalty_weight", "penalty_utterances", "estimator", "hidden_size")
BUILT_IN_CONTROLLERS = ("random", "learned", "surprisal", "big_only", "small_only")

__all__ = ["collect_results", "results_files_under", "read_history", "epoch_minutes", "train_labels_name", "train_targets_name",
           "results_file_name", "evaluation_tag", "test_only_hyperparams_name", "new_model_options"]


# ---------------------------------------------------------------------------- reading runs
def _hparam(hparams: Mapping[str, Any], *keys: str) -> Any:
    """First of the (dotted) keys found, following a ``<ref>`` once; None when absent."""
    for dotted in keys:
        value: Any = hparams
        for part in dotted.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, str) and re.fullmatch(r"<[\w.]+>", value.strip()):
            value = _hparam(hparams, value.strip()[1:-1])
        if value is not None:
            return value
    return None


def as_float(value: Any) -> Optional[float]:
    """``float(value)``, or None when it is not a number.

    Example
    -------
    >>> as_float("0.5"), as_float(None), as_float("abc")
    (0.5, None, None)
    """
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def read_history(run_dir: Path) -> List[Row]:
    """Rows of ``history.jsonl`` (one per validated epoch, in epoch order); [] when absent.

    A run stopped after an epoch's validation but before its checkpoint was written validates that
    epoch again when it resumes: the later row replaces the earlier one. A last line cut short by
    such a stop is left out.

    Arguments
    ---------
    run_dir : pathlib.Path
        A run folder.

    Returns
    -------
    list of dict
        One entry per line of the file.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "history.jsonl").write_text('{"epoch": 1, "PER": 30.5}\\n')
    ...     history = read_history(Path(folder))
    >>> history
    [{'epoch': 1, 'PER': 30.5}]
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "history.jsonl").write_text(
    ...         '{"epoch": 1, "PER": 30.5}\\n{"epoch": 2, "PER": 29}\\n{"epoch": 2, "PER": 28}\\n{"epoch": 3, "P')
    ...     history = read_history(Path(folder))
    >>> history
    [{'epoch': 1, 'PER': 30.5}, {'epoch': 2, 'PER': 28}]
    """
    path = run_dir / "history.jsonl"
    if not path.exists():
        return []
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    rows: List[Row] = []
    for number, line in enumerate(lines, 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if number < len(lines):
                raise ValueError(f"{path}, line {number}: not JSON; repair or remove that line") from None
            continue
        if not isinstance(row, dict):
            raise ValueError(f"{path}, line {number}: not a JSON object; repair or remove that line")
        rows.append(row)
    # rows come in epoch order; an epoch validated again keeps its place, with the later row
    by_epoch = {row.get("epoch", ("row", n)): row for n, row in enumerate(rows)}
    return list(by_epoch.values())


_LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+ - .* - (?:Going into epoch (\d+)|epoch: (\d+),)")


def epoch_minutes(run_dir: PathLike, history: Optional[List[Row]] = None) -> Dict[int, float]:
    """Wall-clock minutes of each epoch (training and validation) of a run folder.

    From ``epoch_s`` of ``history.jsonl`` (``history``: its rows, where :func:`read_history` already
    read them); for epochs without it, from the time stamps of SpeechBrain's ``Going into epoch N``
    and ``epoch: N, ...`` lines in ``log.txt``.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = (Path(folder) / "history.jsonl").write_text('{"epoch": 2, "PER": 30.5, "epoch_s": 90}\\n')
    ...     _ = (Path(folder) / "log.txt").write_text(
    ...         "2026-01-01 10:00:00,1 - speechbrain.core - INFO - Going into epoch 1\\n"
    ...         "2026-01-01 10:06:30,1 - speechbrain.utils.train_logger - INFO - epoch: 1, lr: 0.001\\n")
    ...     minutes = epoch_minutes(folder)
    >>> minutes
    {1: 6.5, 2: 1.5}
    """
    import datetime

    run_dir = Path(run_dir)
    minutes: Dict[int, float] = {}
    log = run_dir / "log.txt"
    if log.exists():
        started: Dict[int, datetime.datetime] = {}
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            match = _LOG_LINE.match(line)
            if not match:
                continue
            stamp = datetime.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S")
            if match.group(2):
                started[int(match.group(2))] = stamp
            elif int(match.group(3)) in started:
                epoch = int(match.group(3))
                minutes[epoch] = (stamp - started[epoch]).total_seconds() / 60
    for entry in read_history(run_dir) if history is None else history:
        if entry.get("epoch_s") is not None:
            minutes[int(entry["epoch"])] = float(entry["epoch_s"]) / 60
    return dict(sorted(minutes.items()))


def train_labels_name(labels: Optional[Dict[str, str]], mfa_labels: Optional[Dict[str, object]]) -> Optional[str]:
    """Where the training labels came from: ``lexicon``, ``mfa`` (the corpus' MFA alignments) or
    ``mfa:<file stem>`` (another label file, e.g. a relabelling); None when the recipe has no choice.

    Example
    -------
    >>> train_labels_name({"train": "lexicon", "test": "mfa"}, {"train": None})
    'lexicon'
    >>> train_labels_name({"train": "mfa"}, {"train": "labels/realigned_pauses.csv"})
    'mfa:realigned_pauses'
    >>> train_labels_name(None, None) is None
    True
    """
    if not isinstance(labels, dict) or labels.get("train") is None:
        return None
    source = mfa_labels.get("train") if isinstance(mfa_labels, dict) else mfa_labels
    if labels["train"] != "mfa" or not source:
        return str(labels["train"])
    return f"mfa:{Path(str(source)).stem}"


def train_targets_name(optional_silence: Any = False, pronunciation_alternatives: Any = False) -> Optional[str]:
    """Which kind of training targets a run had: ``optional_silence``, ``pronunciation_alternatives``
    or None (the labels as they are).

    Example
    -------
    >>> train_targets_name(False, True), train_targets_name(None, None)
    ('pronunciation_alternatives', None)
    """
    if pronunciation_alternatives:
        return "pronunciation_alternatives"
    return "optional_silence" if optional_silence else None


def _run_info(run_dir: Path) -> Row:
    """What a results file lacks: penalty and ponder settings and the APC file (hyperparams.yaml), last train loss."""
    hp = load_yaml_tolerant(run_dir / "hyperparams.yaml")
    history = read_history(run_dir)
    planned = _hparam(hp, "number_of_epochs")
    validated = max((e["epoch"] for e in history if isinstance(e.get("epoch"), int)), default=None)
    if is_number(planned) and validated is not None and validated < planned:
        # a run asked for more epochs (SpeechBrain rewrote hyperparams.yaml) and not there yet: its results are
        # those of the epochs it had, not of the longer profile's
        planned = validated
    return {
        "penalty": as_float(_hparam(hp, "learned_penalty", "encoder_module.controller_options.penalty_weight")),
        "penalty_utterances": _hparam(hp, "learned_penalty_utterances",
                                      "encoder_module.controller_options.penalty_utterances"),
        "learned_estimator": _hparam(hp, "learned_estimator", "encoder_module.controller_options.estimator"),
        "act_ponder_cost": as_float(_hparam(hp, "act_ponder_cost", "encoder_module.adaptive_options.act.ponder_cost")),
        "pondernet_beta": as_float(_hparam(hp, "pondernet_beta", "encoder_module.adaptive_options.pondernet.beta")),
        "number_of_epochs": planned,
        "train_labels": train_labels_name(hp.get("labels"), hp.get("mfa_labels")) if hp else None,
        "train_targets": train_targets_name(hp.get("optional_silence"), hp.get("pronunciation_alternatives")),
        "train_loss": history[-1].get("train_loss") if history else None,
        "model_options": new_model_options(hp) if hp else None,
        "apc_path": _hparam(hp, "apc_path"),
    }


def new_model_options(hparams: Mapping[str, Any]) -> Optional[str]:
    """The settings of an encoder or controller added to the toolkit (not one of the built-in ones)
    as ``key=value`` text, so that runs differing in them are told apart; None for the built-in ones.

    Example
    -------
    >>> hp = {"encoder": "conditional", "controller": "change", "encoder_module": {"controller_options":
    ...       {"p_big": 0.5, "change_scale": 0.5, "change_bias": -6.0}}}
    >>> new_model_options(hp)
    'change_bias=-6.0, change_scale=0.5'
    >>> new_model_options({"encoder": "early_exit", "encoder_module": {"adaptive_options": {"early_exit": {"k": 3}}}})
    'k=3'
    >>> new_model_options({"encoder": "act", "controller": "surprisal"}) is None
    True
    """
    encoder = hparams.get("encoder") or "conditional"
    if encoder not in BUILT_IN_ENCODERS:
        options = _hparam(hparams, f"encoder_module.adaptive_options.{encoder}") or {}
    elif encoder == "conditional" and (hparams.get("controller") or "surprisal") not in BUILT_IN_CONTROLLERS:
        controller = hparams.get("controller")
        from surprisal_cc.model.controllers import CONTROLLERS  # imported here: it loads torch, which only this lookup needs
        from surprisal_cc.model.nnet import keyword_names
        own = keyword_names(CONTROLLERS[controller]) if controller in CONTROLLERS else None  # None: not known here
        options = {key: value for key, value in (_hparam(hparams, "encoder_module.controller_options") or {}).items()
                   if key not in BUILT_IN_CONTROLLER_SETTINGS and (own is None or key in own)}
    else:
        return None
    return ", ".join(f"{key}={value}" for key, value in sorted(options.items())) or None


TEST_ONLY_HYPERPARAMS = "hyperparams_test_only.yaml"
"""What a ``--test_only`` evaluation saves its configuration as, beside the training's ``hyperparams.yaml``."""


def evaluation_tag(config: Mapping[str, Any]) -> str:
    """What tells a ``--test_only`` evaluation's files apart when the test-time conditions of ``config``
    (hparams, or ``--key=value`` overrides as strings, read as hyperpyyaml reads them) are not the
    defaults: another controller than the trained one (``test_controller``; or a random p = 0.5 one,
    ``controller_at_test`` False: Table 4), deterministic
    routing (Appendix C), a test-time FLOPs budget (``test_flops_fraction``).

    Example
    -------
    >>> evaluation_tag({}), evaluation_tag({"controller_at_test": False})
    ('', '_random_at_test')
    >>> evaluation_tag({"controller_at_test": "False", "test_stochastic": False})
    '_random_at_test_deterministic'
    >>> evaluation_tag({"test_flops_fraction": "0.9"}), evaluation_tag({"test_flops_fraction": None})
    ('_budget0.9', '')
    >>> evaluation_tag({"test_flops_fraction": 0.9, "test_budget_split": "test"})
    '_budget0.9_on_test'
    >>> evaluation_tag({"test_controller": "surprisal", "test_flops_fraction": "0.87"})
    '_surprisal_at_test_budget0.87'
    """
    def read(key: str, default: Any) -> Any:
        value = config.get(key, default)
        return yaml.safe_load(value) if isinstance(value, str) else value

    budget, split = read("test_flops_fraction", None), read("test_budget_split", "valid")
    swapped = read("test_controller", None)
    return (f"_{swapped}_at_test" if swapped else "") + \
        "".join(tag for key, tag in EVALUATION_TAGS if not read(key, True)) + \
        (f"_budget{float(budget):g}" + ("" if split == "valid" else f"_on_{split}") if budget is not None else "")


def test_only_hyperparams_name(tag: str = "") -> str:
    """Name of a ``--test_only`` evaluation's configuration file (``tag``: :func:`evaluation_tag`).

    Example
    -------
    >>> test_only_hyperparams_name(), test_only_hyperparams_name("_deterministic")
    ('hyperparams_test_only.yaml', 'hyperparams_test_only_deterministic.yaml')
    """
    return TEST_ONLY_HYPERPARAMS.replace(".yaml", f"{tag}.yaml")


test_only_hyperparams_name.__test__ = False  # a name, not a test, for pytest given this module


def results_file_name(bias_shift: float = 0.0, test_only: bool = False, stem: str = "results",
                      suffix: str = ".json", tag: str = "") -> str:
    """Name of the results file of one test evaluation, so that no evaluation overwrites another.

    A training run writes ``results.json`` (``results_bias+2.json`` with a shifted controller bias); a
    ``--test_only`` evaluation writes ``results_test_only.json`` (``results_test_only_bias+2.json``), and
    with other test-time conditions ``results_test_only<tag>.json`` (:func:`evaluation_tag`).

    Arguments
    ---------
    bias_shift : float
        Controller bias shift at test time (0: none).
    test_only : bool
        The evaluation of a trained model by ``--test_only``.
    stem : str
        Name before the suffixes.
    suffix : str
        File extension.
    tag : str
        :func:`evaluation_tag` of a test-only evaluation (ignored for a training run's own test).

    Returns
    -------
    str
        The file name.

    Example
    -------
    >>> results_file_name(), results_file_name(1.0), results_file_name(0.0, True), results_file_name(-0.5, True)
    ('results.json', 'results_bias+1.json', 'results_test_only.json', 'results_test_only_bias-0.5.json')
    >>> results_file_name(0.0, True, tag=evaluation_tag({"controller_at_test": False}))
    'results_test_only_random_at_test.json'
    """
    shift = float(bias_shift or 0.0)
    evaluation = f"_test_only{tag}" if test_only else ""
    return f"{stem}{evaluation}{f'_bias{shift:+g}' if shift else ''}{suffix}"


def results_files_under(path: Path) -> List[Path]:
    """``path`` itself if it is a file, else the results files found under it."""
    if path.is_file():
        return [path]
    return sorted(p for p in path.rglob("results*.json") if RESULTS_PATTERN.match(p.name))


def collect_results(paths: Union[PathLike, Sequence[PathLike]]) -> List[Row]:
    """One row per results file (files given, or ``results*.json`` found recursively in folders).

    Files: ``results.json`` and ``results_test_only.json`` (and their ``_bias+S`` variants,
    :func:`results_file_name`); in the folders searched, not those of ``--debug`` runs (``"debug": true``). Adds ``path``, ``run_dir``, and from the run folder: ``penalty``
    (learned-controller lambda), ``learned_estimator``,
    ``act_ponder_cost``, ``pondernet_beta``, ``number_of_epochs``, ``train_labels`` (hyperparams.yaml) and
    ``train_loss`` (last epoch of history.jsonl), unless the results file has them.

    Arguments
    ---------
    paths : str or pathlib.Path, or a sequence of them
        Results files, or folders searched recursively.

    Returns
    -------
    list of dict
        One row per results file.

    Example
    -------
    >>> import json, tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     run = Path(folder) / "learned_seed1"
    ...     run.mkdir()
    ...     _ = (run / "results.json").write_text(json.dumps({"controller": "learned", "seed": 1, "PER": 20.0}))
    ...     _ = (run / "hyperparams.yaml").write_text("learned_penalty: 0.01\\nnumber_of_epochs: 30\\n")
    ...     rows = collect_results(folder)
    >>> len(rows), rows[0]["penalty"], rows[0]["number_of_epochs"], Path(rows[0]["path"]).name
    (1, 0.01, 30, 'results.json')
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    rows, infos = [], {}
    given = {Path(p) for p in paths if Path(p).is_file()}  # files named, not searched for in folders
    for file in (f for p in paths for f in results_files_under(Path(p))):
        try:
            row = json.loads(file.read_text(encoding="utf-8"))
        except ValueError as err:
            raise ValueError(f"{file}: not valid JSON ({err}); a run still writing it finishes it, otherwise re-run "
                             "that run's test (--test_only) or remove the file") from None
        if file not in given and isinstance(row, dict) and row.get("debug"):
            continue  # a --debug check of the pipeline, not a result
        if not isinstance(row, dict):
            raise ValueError(f"{file}: not a results file (a JSON object of a run's test results); remove it or "
                             "re-run that run's test (--test_only)")
        run_dir = file.parent
        if run_dir not in infos:
            infos[run_dir] = _run_info(run_dir)
        for key, value in infos[run_dir].items():
            if row.get(key) is None:
                row[key] = value
        if row.get("penalty") is None and row.get("penalty_weight") is not None:
            row["penalty"] = as_float(row["penalty_weight"])
        rows.append({**row, "path": str(file), "run_dir": str(run_dir)})
    return rows
