"""Export a finished recipe run as a model folder (:mod:`surprisal_cc.model.model_folder`): its best
checkpoint (lowest validation PER) or the average of its best few, its APC model, and a model card
with the run's test results; ``surprisal-cc export RUN_DIR OUT_DIR`` on the command line.

Example
-------
>>> export_run("no/such/run", "model")
Traceback (most recent call last):
    ...
surprisal_cc.errors.ConfigurationError: no/such/run: no such run folder
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Optional, Tuple, Union

import torch
from torch import Tensor

from surprisal_cc.model.apc import APCModel, apc_from_blob, load_apc_blob
from surprisal_cc.model.architectures import build_encoder
from surprisal_cc.data.errors import DataPreparationWarning
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.training.frozen_features import run_apc_file
from surprisal_cc.config import TolerantLoader, resolved_hparams, ruamel_errors
from surprisal_cc.model.nnet import FINGERPRINT_DIGITS, runs_apc, weights_fingerprint
from surprisal_cc.model.model_folder import check_weights_dtype, load_tensors, model_config, write_model_folder

PathLike = Union[str, os.PathLike]

__all__ = ["export_run", "average_float_state_dicts", "portable_path"]


def _resolved_plain_yaml(hparams_file: Path, overrides: str) -> Dict[str, Any]:
    """Top-level mapping of an hparams file with ``!ref`` resolved and no tag run (tagged nodes as plain data)."""
    import yaml

    try:
        text = resolved_hparams(hparams_file, overrides)
        data = yaml.load(text, Loader=TolerantLoader)
    except (ValueError, KeyError, yaml.YAMLError, ruamel_errors()) as err:
        raise ConfigurationError(f"{hparams_file}: {type(err).__name__}: {' '.join(str(err).split())}") from None
    return data if isinstance(data, dict) else {}


def _run_file(run: Path, *names: str, what: str) -> Path:
    """The first of ``names`` that is a file in ``run``; else :class:`ConfigurationError` (``what``)."""
    for name in names:
        if (run / name).is_file():
            return run / name
    raise ConfigurationError(f"{run}: no {' or '.join(names)} ({what})")


def _checkpoints(run: Path, metric: str, encoder: torch.nn.Module, number: int = 1) -> list:
    """The ``number`` complete checkpoints of ``run/save`` with the lowest ``metric``, best first (one
    whose save was cut short, without an ``encoder`` file, is passed over with a warning)."""
    from surprisal_cc.training.checkpoints import Checkpointer

    save = run / "save"
    if not save.is_dir():
        raise ConfigurationError(f"{run}: no save/ folder with checkpoints")
    checkpointer = Checkpointer(save, recoverables={"encoder": encoder})
    checkpoints = checkpointer.find_checkpoints(min_key=metric, max_num_checkpoints=number,
                                                ckpt_predicate=lambda c: checkpointer.is_complete(c, warn=True))
    if not checkpoints:
        raise ConfigurationError(f"{save}: no checkpoint with a validation {metric} (has the run finished an epoch? A --debug "
                                 "run keeps its checkpoints in a temporary folder: train one epoch, --number_of_epochs=1)")
    if len(checkpoints) < number:
        raise ConfigurationError(f"{save}: {len(checkpoints)} checkpoints with a validation {metric}, not {number} "
                                 "(the recipe keeps checkpoints_to_keep of them): average fewer")
    return checkpoints


def average_float_state_dicts(state_dicts: Iterable[Dict[str, Tensor]]) -> Dict[str, Tensor]:
    """Mean of the floating-point tensors of several state dicts (SpeechBrain's ``average_state_dicts``);
    integer and boolean buffers (counters, flags) are taken from the first one.

    Example
    -------
    >>> first = {"w": torch.tensor([1.0, 2.0]), "calibrated": torch.tensor(True)}
    >>> second = {"w": torch.tensor([3.0, 6.0]), "calibrated": torch.tensor(True)}
    >>> average_float_state_dicts([first, second])
    {'w': tensor([2., 4.]), 'calibrated': tensor(True)}
    """
    from speechbrain.utils.checkpoints import average_state_dicts

    state_dicts = list(state_dicts)
    floating = [k for k, v in state_dicts[0].items() if torch.is_floating_point(v)]
    mean = average_state_dicts([{k: d[k].clone() for k in floating} for d in state_dicts])
    return {k: mean[k] if k in mean else v for k, v in state_dicts[0].items()}


def export_run(run_dir: PathLike, out_dir: PathLike, dtype: str = "fp32",
               apc_path: Optional[PathLike] = None, average: int = 1,
               onnx_step: Optional[Callable[[Path], Any]] = None) -> Path:
    """Turn the best checkpoint (min validation PER) of a finished recipe run, or the average of
    its best ``average`` checkpoints, into a model folder.

    Reads ``RUN_DIR/hyperparams.yaml`` (written by SpeechBrain; hparams files are code, load only
    runs you trust), ``RUN_DIR/results.json`` (or ``results_test_only.json``) and ``RUN_DIR/save``.
    Writes ``model.json``, ``encoder.pt``, ``apc.pt`` (when used) and ``README.md``; ``model.json`` records
    the APC the run trained with (``source.apc_fingerprint``) and ``apc.pt`` as stored (``apc_file_fingerprint``,
    checked when the folder is loaded).

    Arguments
    ---------
    run_dir : str or path
        Output folder of a recipe run.
    out_dir : str or path
        The model folder to write (new, empty, or a model folder to replace).
    dtype : str
        ``"fp32"``, or ``"fp16"``: weight matrices stored in fp16 (half the size; loaded back as
        fp32).
    apc_path : str or path, optional
        The APC model file (a relative one from the working directory); default: the run's (:func:`~surprisal_cc.training.frozen_features.run_apc_file`: its
        ``apc_path``, else the ``apc_export_path`` its pretraining wrote; a relative one is looked for
        where the recipe ran, then in the working directory).
    average : int
        1: the best checkpoint; N > 1: the weights averaged over the N best checkpoints
        (:func:`average_float_state_dicts`; the run must have kept N, ``checkpoints_to_keep``).
    onnx_step : callable, optional
        Called with the written model folder: ``surprisal_cc.deploy.export.write_onnx_graphs`` writes its
        ONNX graphs beside its files (``surprisal-cc export RUN_DIR OUT_DIR --onnx``; this layer does not
        import the deploy one, so the command line passes it).

    Returns
    -------
    pathlib.Path
        The model folder.

    Raises
    ------
    ConfigurationError
        When the run folder lacks its hparams, results, checkpoints or APC model, or the
        checkpoint does not fit the hparams.
    """
    run, out = Path(run_dir), Path(out_dir)
    _check_export_arguments(run, dtype, average)
    hp_file, results = _run_inputs(run)
    raw, hparams = _phone_model_hparams(run, hp_file)
    encoder, encoder_kwargs = _rebuild_encoder(hp_file, raw, hparams)
    metric = hparams.get("selection_metric", "PER")
    checkpoints = _checkpoints(run, metric, encoder, average)
    _load_averaged_weights(encoder, checkpoints, hp_file)
    _warn_if_uncalibrated(encoder, checkpoints[0])
    uses_apc = runs_apc(hparams["input_features"], encoder, training=False)
    apc_file = run_apc_file(hparams, apc_path, run, todo="give --apc the APC model the run trained with "
                                                         "(export_run(apc_path=...))") if uses_apc else None
    blob = load_apc_blob(apc_file) if apc_file is not None else None
    apc = apc_from_blob(blob, apc_file) if blob is not None else None
    digest = weights_fingerprint(apc, digits=64) if apc is not None else None  # whole, once: the fingerprints are its prefixes
    if apc is not None:
        _check_apc_is_the_runs(digest, apc_file, results)
        _check_apc_matches_cache(apc, hparams)
    config = _model_config(hparams, encoder_kwargs, uses_apc, dtype)
    config["source"] = _source(run, metric, checkpoints, average, apc_file, results)
    config["source"]["apc_fingerprint"] = digest[:FINGERPRINT_DIGITS] if digest is not None else None
    folder = write_model_folder(out, config, encoder.state_dict(), blob)
    if onnx_step is not None:
        onnx_step(folder)
    return folder


def _check_export_arguments(run: Path, dtype: str, average: int) -> None:
    """:class:`ConfigurationError` unless ``dtype`` and ``average`` are valid and ``run`` is a folder."""
    check_weights_dtype(dtype)
    if average < 1:
        raise ConfigurationError(f"average must be at least 1 checkpoint, got {average}")
    if not run.is_dir():
        raise ConfigurationError(f"{run}: no such run folder")


def _run_inputs(run: Path) -> Tuple[Path, Dict[str, Any]]:
    """The run's hparams file and test results; :class:`ConfigurationError` when either, or its save/
    folder, is missing."""
    from surprisal_cc.training.run_settings import run_hparams_file

    hp_file = run_hparams_file(run)
    # results.json of a finished run, else the test-only evaluation of an unfinished run's best checkpoint
    results_file = _run_file(run, "results.json", "results_test_only.json",
                             what="the run has no test decoding yet: finish it, or evaluate its best checkpoint "
                                  "with --test_only, then export")
    try:
        results = json.loads(results_file.read_text(encoding="utf-8"))
    except ValueError as err:
        raise ConfigurationError(f"{results_file}: unreadable ({err})") from None
    if not isinstance(results, dict):
        raise ConfigurationError(f"{results_file}: not a JSON object of test results; re-run the run's test "
                                 "(--test_only)")
    if not (run / "save").is_dir():
        raise ConfigurationError(f"{run}: no save/ folder with checkpoints")
    return hp_file, results


def _phone_model_hparams(run: Path, hp_file: Path) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """The run's hparams (``hp_file``) as plain data (no tag run) and loaded; :class:`ConfigurationError`
    unless they describe a phone model with its ``encoder_module`` arguments (checked on the plain data,
    before any module is built)."""
    from surprisal_cc.training.run_settings import inert_override_text, load_run_hparams

    raw = _resolved_plain_yaml(hp_file, inert_override_text(hp_file))
    if raw.get("target_unit", "phone") != "phone":
        raise ConfigurationError(f"{hp_file}: only phone models can be exported (target_unit: {raw['target_unit']})")
    if not isinstance(raw.get("encoder_module"), dict):
        raise ConfigurationError(f"{hp_file}: no encoder_module (build_encoder arguments) to rebuild the model from")
    return raw, load_run_hparams(run)[1]  # a phone model: checked on raw above


def _rebuild_encoder(hp_file: Path, raw: Dict[str, Any], hparams: Dict[str, Any]) -> Tuple[Any, Dict[str, Any]]:
    """The run's encoder rebuilt from its ``encoder_module`` arguments (checked against the one the hparams
    build), and those arguments as JSON data."""
    try:
        encoder_kwargs = json.loads(json.dumps({**raw["encoder_module"], "input_size": int(hparams["input_size"])}))
        encoder = build_encoder(**encoder_kwargs)
    except (TypeError, ValueError) as err:
        raise ConfigurationError(f"{hp_file}: cannot rebuild the encoder from encoder_module ({err})") from None
    if repr(encoder) != repr(hparams["encoder_module"]):
        raise ConfigurationError(f"{hp_file}: the encoder_module arguments do not rebuild the run's encoder")
    return encoder, encoder_kwargs


def _load_averaged_weights(encoder: torch.nn.Module, checkpoints: list, hp_file: Path) -> None:
    """Load into ``encoder`` the weights of ``checkpoints`` (averaged when several)."""
    state = average_float_state_dicts(
        load_tensors(c.path / "encoder.ckpt", todo="remove that checkpoint folder to export the next best one")
        for c in checkpoints)
    try:
        encoder.load_state_dict(state)
    except RuntimeError as err:
        raise ConfigurationError(f"{checkpoints[0].path}: the checkpoint does not fit {hp_file} "
                                 f"({str(err).splitlines()[0]})") from None


def _warn_if_uncalibrated(encoder: torch.nn.Module, checkpoint: Any) -> None:
    """Warn (at :func:`export_run`) when the encoder's surprisal controller is not calibrated."""
    controller = getattr(encoder, "controller", None)
    if controller is not None and not bool(getattr(controller, "calibrated", True)):
        warnings.warn(f"{checkpoint.path}: the surprisal controller is not calibrated", DataPreparationWarning,
                      stacklevel=2)


def _checkpoint_epoch(checkpoint: Any) -> Optional[int]:
    """The epoch counter saved with ``checkpoint``, or None without one."""
    counter = checkpoint.path / "counter.ckpt"
    if not counter.is_file():
        return None
    try:
        return int(counter.read_text().strip())
    except ValueError:
        raise ConfigurationError(f"{counter}: not an epoch count (a damaged checkpoint): export another "
                                 "checkpoint of the run, or remove this one") from None


def _source(run: Path, metric: str, checkpoints: list, average: int,
            apc_file: Optional[Path], results: Dict[str, Any]) -> Dict[str, Any]:
    """The model card's ``source``: the run, its checkpoint(s), APC model and test results (none where the
    run's results file tested the checkpoint of another epoch: ``results_epoch`` names it)."""
    checkpoint = checkpoints[0]
    epoch = _checkpoint_epoch(checkpoint)
    tested = results.get("epochs")
    other = epoch is not None and tested is not None and tested != epoch  # e.g. a run that trained on after its test
    test = {} if other else results
    test = dict(test)
    if isinstance(test.get("data"), dict):  # the manifests it was tested on
        test["data"] = {split: portable_path(path) if path else path for split, path in test["data"].items()}
    return {"run_dir": portable_path(run), "checkpoint": checkpoint.path.name, "epoch": epoch,
            "results_epoch": tested if other else None,
            f"valid_{metric}": checkpoint.meta.get(metric), "apc": portable_path(apc_file) if apc_file else None,
            "averaged_checkpoints": [{"checkpoint": c.path.name, f"valid_{metric}": c.meta.get(metric)}
                                     for c in checkpoints] if average > 1 else None,
            "test": {k: test.get(k) for k in ("PER", "flops_per_frame", "p_big_mean", "big_fraction",
                                               "mean_steps", "epochs", "commit", "data", "date")
                     if k in test},
            "epochs_trained": _epochs_trained(run) or results.get("epochs"), "commit": results.get("commit"),
            "error_rate_details": test.get("error_rate_details"),
            "calibration": results.get("calibration")}


def portable_path(path: PathLike, start: Optional[PathLike] = None) -> str:
    """How a model card names a file of the machine that built it without that machine's paths: relative
    to the git working tree (repository or worktree) that holds it, else to ``start`` (the current
    folder) where it lies below it, else by its name alone (its fingerprint says which file it was).

    >>> portable_path("/nowhere/runs/seed1/apc.pt", start="/elsewhere")
    'apc.pt'
    >>> portable_path("results/run/seed1", start=".")
    'results/run/seed1'
    """
    resolved = Path(os.path.abspath(path))
    for folder in resolved.parents:
        if (folder / ".git").exists():  # a clone's folder, or a worktree's file
            return resolved.relative_to(folder).as_posix()
    try:
        return resolved.relative_to(Path(os.path.abspath(start or os.getcwd()))).as_posix()
    except ValueError:
        return resolved.name


def _model_config(hparams: Dict[str, Any], encoder_kwargs: Dict[str, Any], uses_apc: bool,
                  dtype: str) -> Dict[str, Any]:
    """The model folder's ``model.json`` but its ``source`` (:func:`~surprisal_cc.model.model_folder.model_config`),
    read off the run's loaded hparams: how to rebuild, feed, decode and score the model."""
    labels = hparams["label_encoder"].ind2lab
    prepare = hparams.get("prepare_options") or {}
    beam = hparams["beam_searcher"]
    return model_config(
        encoder_kwargs, hparams["input_features"], [labels[i] for i in range(len(labels))],
        features=hparams["feature_config"].as_dict(), uses_apc=uses_apc,
        blank_index=hparams.get("blank_index", 0), beam_size=beam.beam_size, beam_backend=beam.backend,
        blank_penalty=beam.blank_penalty,
        merge_sil=getattr(hparams["error_rate"], "keywords", {}).get("merge_sil", True), weights_dtype=dtype,
        label_policy={"labels": hparams.get("labels"), "g2p": hparams.get("g2p"),
                      "add_boundary_silence": prepare.get("add_boundary_silence", True)},
        batch_size=int(hparams.get("batch_size", 8)), dataset=hparams.get("dataset"), seed=hparams.get("seed"))


def _check_apc_is_the_runs(digest: str, apc_file: Path, results: Dict[str, Any]) -> None:
    """:class:`ConfigurationError` when the run's results name the APC it trained with (``apc``, a
    :func:`~surprisal_cc.model.nnet.weights_fingerprint` of any length) and ``apc_file`` (whose whole weights
    digest is ``digest``) holds another one."""
    trained_with = results.get("apc")
    if trained_with and digest[:len(trained_with)] != trained_with:
        raise ConfigurationError(f"{apc_file}: APC weights fingerprint {digest[:FINGERPRINT_DIGITS]}, but the run "
                                 f"trained with APC {trained_with} (results.json \"apc\"); pass that APC "
                                 "with --apc PATH")


def _check_apc_matches_cache(apc: APCModel, hparams: Dict[str, Any]) -> None:
    """Warn when the run's feature cache was built by another APC model than the one exported."""
    from surprisal_cc.training.cache import cache_key

    folder = hparams.get("cache_folder")
    if not folder or not Path(folder).is_dir() or not hparams.get("use_feature_cache", True):
        return
    caches = [p for p in Path(folder).iterdir() if (p / "cache.json").is_file() and _cache_apc(p / "cache.json")]
    if caches and Path(folder, cache_key(apc, hparams["feature_config"], torch.float32)) not in caches:
        warnings.warn(f"the APC model being exported built none of the feature caches in {folder}: was the run "
                      "trained with another APC model? (pass --apc PATH)", DataPreparationWarning)


def _cache_apc(path: Path) -> bool:
    """Whether a feature cache's ``cache.json`` says it holds APC features; False (with a warning
    naming the file) where it cannot be read."""
    try:
        return bool(json.loads(path.read_text()).get("apc"))
    except (ValueError, AttributeError):
        warnings.warn(f"{path}: not a feature cache's description (damaged JSON): left out of the check that the "
                      "exported APC built the run's features", DataPreparationWarning)
        return False


def _epochs_trained(run: Path) -> Optional[int]:
    """The last epoch in the run's ``history.jsonl`` (results.json's ``epochs`` is the evaluated
    checkpoint's epoch counter), or None without a history."""
    from surprisal_cc.training.run_folder import read_history

    return max((int(row["epoch"]) for row in read_history(Path(run)) if row.get("epoch") is not None), default=None)
