"""The settings of a recipe run: its hparams file loaded with clear errors (:func:`load_hparams`: built,
then checked before any data is read by :mod:`surprisal_cc.training.run_checks`, the training precision
resolved by :mod:`surprisal_cc.training.precision`), the hparams of a finished run folder read back without
side effects (:func:`load_run_hparams`), and the experiment folder, whose resumed training must keep the
settings its checkpoints were trained with (:func:`create_experiment_directory`). The command line that
names them is :mod:`surprisal_cc.training.command_line`'s.
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import speechbrain as sb
from speechbrain.utils.distributed import if_main_process

from surprisal_cc.training.allocator import reuse_freed_memory
from surprisal_cc.checks import resolve_device
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.config import (configured_paths, expand_hparams, load_hparams_file, load_yaml_tolerant,
                                 new_empty_folders_removed, parse_yaml_tolerant, ruamel_errors)
from surprisal_cc.training.changed_settings import argument_references, changed_training_settings
from surprisal_cc.training.precision import PRECISION_RECORD, resolve_precision
from surprisal_cc.training.run_checks import (check_apc_path, check_bias_sweep, check_flops_budget, check_num_outputs,
                                             check_selection_metric, check_settings, check_test_budget, check_test_only)


def load_hparams(hparams_file: str, overrides: str = "", run_opts: Optional[Mapping] = None) -> Dict:
    """Load a hyperpyyaml file with overrides; unknown keys and bad values get a clear error.

    With ``run_opts`` (a recipe run) the training ``precision`` is resolved (:func:`~surprisal_cc.training.precision.resolve_precision`),
    the settings that must agree are checked (labels and ``num_outputs``, a test budget, a bias
    sweep, a checkpoint to evaluate for ``--test_only``: :func:`~surprisal_cc.training.run_checks.check_test_only`), and
    ``malloc_reuse: True`` switches this process's allocator to reuse freed memory
    (:func:`~surprisal_cc.training.allocator.reuse_freed_memory`). A configuration rejected here leaves no new
    empty folder behind (:func:`~surprisal_cc.config.new_empty_folders_removed`: the checkpointer
    creates its ``save/`` while the file is built, before the settings are checked). Note: hparams files
    are code (``!new:``/``!apply:`` run Python); only load files you trust.
    """
    path = Path(hparams_file)
    if not path.is_file():
        raise ConfigurationError(f"hparams file {hparams_file} does not exist")
    with new_empty_folders_removed(configured_paths(path, overrides)):
        return _load_checked_hparams(hparams_file, overrides, run_opts)


def _load_checked_hparams(hparams_file: str, overrides: str, run_opts: Optional[Mapping]) -> Dict:
    """:func:`load_hparams` of an existing file: built, then (with ``run_opts``) checked."""
    path = Path(hparams_file)
    try:
        hparams = load_hparams_file(path, overrides)
    except KeyError as err:
        raise ConfigurationError(f"{hparams_file}: {err.args[0].split(' not found')[0]} is not a key of this configuration "
                                 "(check the spelling; every --key=value override must name an existing key)") from None
    except (ValueError, TypeError, ImportError, AttributeError) as err:
        raise ConfigurationError(f"{hparams_file}: {build_error_reason(err)}") from None
    except ruamel_errors() as err:  # e.g. the same --key=value override given twice
        problem = " ".join(str(getattr(err, "problem", None) or err).split())
        raise ConfigurationError(f"{hparams_file}: {problem} "
                                 "(give each key once, in the file or as one --key=value option)") from None
    if run_opts is not None:
        device = resolve_device(run_opts.get("device") or "cpu")  # a missing GPU, before any data is read
        if "precision" in hparams:
            run_folder = hparams.get("output_folder") or hparams.get("apc_output_folder")  # APC pretraining's
            hparams["precision"] = resolve_precision(hparams["precision"], run_opts, run_folder)
            if hparams["precision"] == "fp16" and device.type != "cuda":
                raise ConfigurationError(f"precision fp16 trains on CUDA only (device {device}): use fp32, bf16 or "
                                         "auto")
        if hparams.get("malloc_reuse"):
            reuse_freed_memory()
        unit = hparams.get("target_unit", "phone")
        if unit not in ("phone", "sentencepiece"):
            raise ConfigurationError(f"target_unit must be 'phone' or 'sentencepiece', got {unit!r}")
        if unit == "phone" and "label_encoder" in hparams:  # APC pretraining files have no labels
            check_num_outputs(hparams)
        check_settings(hparams, boolean_keys=[key for key, value in load_yaml_tolerant(path).items()
                                              if isinstance(value, bool)])  # types and ranges first
        check_test_budget(hparams)
        check_bias_sweep(hparams)
        check_selection_metric(hparams)
        apc = check_apc_path(hparams, run_opts)
        check_flops_budget(hparams, apc if apc is not None else hparams.get("apc_model"))
        if "checkpointer" in hparams:  # a recognition recipe: --test_only needs its trained run
            check_test_only(hparams, run_opts)
    return hparams


def build_error_reason(err: BaseException) -> str:
    """What went wrong while an hparams file was built, in its own words: the innermost error, through the
    layers that only quote the error they caught (``<model file>: cannot build the encoder with settings
    [...]: ValueError: <reason>``), so that the reason (and the hparams key it names) is not lost among
    them. A ``ValueError`` is its message; another error keeps its type's name (``TypeError: ...``).

    Example
    -------
    >>> try:
    ...     try:
    ...         raise ValueError("unknown controller 'bogus' (hparams key 'controller')")
    ...     except ValueError as inner:
    ...         raise ValueError(f"paper.yaml: cannot build the encoder: ValueError: {inner}") from None
    ... except ValueError as err:
    ...     build_error_reason(err)
    "unknown controller 'bogus' (hparams key 'controller')"
    >>> build_error_reason(TypeError("f() got an unexpected keyword argument 'x'"))
    "TypeError: f() got an unexpected keyword argument 'x'"
    """
    reason = err
    while True:
        inner = reason.__cause__ or reason.__context__
        if inner is None or f"{type(inner).__name__}: {inner}" not in str(reason):
            break  # an error caught while another was handled, not quoted by it, is not the reason
        reason = inner
    return str(reason) if isinstance(reason, ValueError) else f"{type(reason).__name__}: {reason}"


# ----------------------------------------------------------------------------------------------
# Reading a configuration without running it: the hparams of a finished run (export, realign) or
# of an hparams file whose model is only built (surprisal-cc flops)
# ----------------------------------------------------------------------------------------------
RUN_HPARAMS_FILES = ("hyperparams.yaml", "hparams.yaml")


def run_hparams_file(run_dir: Union[str, os.PathLike]) -> Path:
    """The hparams file SpeechBrain writes into a recipe run folder (``hyperparams.yaml``, or
    ``hparams.yaml``); :class:`ConfigurationError` when ``run_dir`` holds neither.

    Example
    -------
    >>> run_hparams_file("no/such/run")
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: no/such/run: no hyperparams.yaml or hparams.yaml (the hparams SpeechBrain \
writes into a recipe run folder: is this the output_folder of a recipe run?)
    """
    run = Path(run_dir)
    for name in RUN_HPARAMS_FILES:
        if (run / name).is_file():
            return run / name
    raise ConfigurationError(f"{run}: no {' or '.join(RUN_HPARAMS_FILES)} (the hparams SpeechBrain writes into a "
                             "recipe run folder: is this the output_folder of a recipe run?)")


def inert_override_text(hparams_file: Union[str, os.PathLike], overrides: Union[str, Mapping, None] = None) -> str:
    """Overrides for :func:`load_hparams` that load ``hparams_file`` free of side effects: ``overrides``
    (YAML text, or a mapping of plain values) and, for every key they do not set,
    :func:`~surprisal_cc.config.inert_overrides` (no checkpoint folder, a dummy for each
    ``!PLACEHOLDER``). YAML text is kept as written, tags (``!ref``) included.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     hparams = Path(tmp) / "hparams.yaml"
    ...     _ = hparams.write_text("data_folder: !PLACEHOLDER\\nlr: 0.1\\n")
    ...     print(inert_override_text(hparams, {"lr": 0.5}))
    ...     print(inert_override_text(hparams, "data_folder: data"))
    lr: 0.5
    data_folder: placeholder
    data_folder: data
    """
    import yaml

    from surprisal_cc.config import TolerantLoader, inert_overrides

    if isinstance(overrides, Mapping):
        given = dict(overrides)
        text = yaml.safe_dump(given, sort_keys=False).strip() if given else ""
    else:
        text = (overrides or "").strip()
        try:  # plain YAML (a flow mapping such as "{lr: 0.5}" too) in block style, so lines can follow it
            given = yaml.safe_load(text) if text else {}
            if isinstance(given, dict) and given:
                text = yaml.safe_dump(given, sort_keys=False).strip()
        except yaml.YAMLError:  # tags (!ref), kept as written, read as plain data; or not YAML: named
            try:
                given = yaml.load(text, Loader=TolerantLoader)
            except yaml.YAMLError as err:
                raise ConfigurationError(f"{hparams_file}: the overrides are not YAML "
                                         f"({' '.join(str(err).split())})") from None
    given = given if isinstance(given, dict) else {}
    inert = [f"{key}: {value}" for key, value in inert_overrides(hparams_file).items() if key not in given]
    return "\n".join(([text] if text else []) + inert)


def load_inert_hparams(hparams_file: Union[str, os.PathLike], overrides: Union[str, Mapping, None] = None) -> Dict:
    """:func:`load_hparams` of ``hparams_file`` with ``overrides`` (YAML text or a mapping), building the
    modules without side effects (:func:`inert_override_text`): no data is read, no checkpoint folder is
    created, ``!PLACEHOLDER`` values need no override."""
    return load_hparams(str(hparams_file), inert_override_text(hparams_file, overrides))


def load_run_hparams(run_dir: Union[str, os.PathLike], overrides: Union[str, Mapping, None] = None,
                     phones_for: Optional[str] = None) -> Tuple[Path, Dict]:
    """The hparams file of a recipe run folder (:func:`run_hparams_file`) and its hparams, loaded
    without side effects (:func:`load_inert_hparams`) with ``overrides`` on top.

    Arguments
    ---------
    run_dir : str or path
        Output folder of a recipe run.
    overrides : str or mapping, optional
        Hparams overrides (YAML text or a mapping).
    phones_for : str, optional
        What needs a phone model (e.g. ``"realignment"``): :class:`ConfigurationError` unless the
        run's ``target_unit`` is ``phone``.

    Returns
    -------
    hparams_file : pathlib.Path
    hparams : dict

    Example
    -------
    >>> load_run_hparams("no/such/run")[1]
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: no/such/run: no hyperparams.yaml or hparams.yaml (the hparams SpeechBrain \
writes into a recipe run folder: is this the output_folder of a recipe run?)
    """
    hparams_file = run_hparams_file(run_dir)
    hparams = load_inert_hparams(hparams_file, overrides)
    unit = hparams.get("target_unit", "phone")
    if phones_for is not None and unit != "phone":
        raise ConfigurationError(f"{hparams_file}: {phones_for} needs phone targets (target_unit: {unit})")
    return hparams_file, hparams


# ----------------------------------------------------------------------------------------------
# The experiment folder, and the settings its checkpoints were trained with
# ----------------------------------------------------------------------------------------------
def create_experiment_directory(experiment_directory: str, hparams_file: str, overrides: str = "",
                                test_only: bool = False, hparams: Optional[Dict[str, Any]] = None) -> None:
    """SpeechBrain's ``create_experiment_directory`` (folder, log, environment, resolved
    ``hyperparams.yaml``) for an hparams file that may start from another one: the saved
    ``hyperparams.yaml`` holds the whole configuration (:func:`~surprisal_cc.config.expand_hparams`).
    A ``test_only`` evaluation of a trained folder leaves the training's ``hyperparams.yaml`` as it
    was and saves its own as ``hyperparams_test_only.yaml`` (``hyperparams_test_only_random_at_test.yaml``
    and so on where the loaded ``hparams`` change the test-time conditions: :func:`~surprisal_cc.training.run_folder.evaluation_tag`).
    Training resumed from the checkpoints in ``hparams["save_folder"]`` must keep the settings they
    were trained with (:func:`~surprisal_cc.training.changed_settings.changed_training_settings`, the arguments written out in the file's objects
    included: :func:`~surprisal_cc.training.changed_settings.argument_references`); a :class:`ConfigurationError` otherwise, and the stored
    ``hyperparams.yaml`` is kept."""
    saved = Path(experiment_directory) / "hyperparams.yaml"
    stored = saved.read_bytes() if if_main_process() and saved.is_file() else None
    resumed = not test_only and stored is not None and hparams is not None and "save_folder" in hparams \
        and any(Path(hparams["save_folder"]).glob("CKPT+*"))
    text = expand_hparams(hparams_file)
    with tempfile.TemporaryDirectory() as folder:
        expanded = Path(folder) / Path(hparams_file).name
        expanded.write_text(text, encoding="utf-8")
        sb.create_experiment_directory(experiment_directory=experiment_directory,
                                       hyperparams_to_save=str(expanded), overrides=overrides)
        if if_main_process() and saved.is_file():  # name the file the configuration came from
            saved.write_text(saved.read_text(encoding="utf-8").replace(
                os.path.abspath(expanded), os.path.abspath(hparams_file), 1), encoding="utf-8")
    if resumed:
        changed = changed_training_settings(parse_yaml_tolerant(stored), parse_yaml_tolerant(saved.read_bytes()),
                                            argument_references(text, overrides))
        if changed:
            saved.write_bytes(stored)  # the configuration of the checkpoints stays beside them
            raise ConfigurationError(f"{experiment_directory} holds checkpoints trained with other settings "
                                     f"({'; '.join(changed)}): give the settings it was trained with, or another "
                                     "--output_folder (or --experiment_root) for a new run")
    record = Path(experiment_directory) / PRECISION_RECORD
    if (not test_only and hparams is not None and if_main_process() and not record.exists()
            and parse_yaml_tolerant(saved.read_bytes()).get("precision") == "auto"):
        from surprisal_cc.data.manifest import atomic_write_text

        atomic_write_text(record, json.dumps({"precision": hparams["precision"]}) + "\n")  # read by resolve_precision
    if test_only and stored is not None:
        from surprisal_cc.training.run_folder import evaluation_tag, test_only_hyperparams_name

        saved.replace(saved.with_name(test_only_hyperparams_name(evaluation_tag(hparams or {}))))
        saved.write_bytes(stored)
