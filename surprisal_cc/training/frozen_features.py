"""The frozen inputs of a recipe run: its APC model (loaded from ``apc_path``, which the start-up check
has loaded once already to check it, or pretrained on the training split) and the feature cache
of its utterances (filterbanks; with APC also its features and surprisal), filled once on the main
process and read back as the datasets' dynamic items. It also finds and loads the APC of a finished run
(:func:`load_run_apc`: its ``apc_path``, else its own export) for ``--test_only`` and realignment.
"""
from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Union

import speechbrain as sb
from speechbrain.dataio.dataset import DynamicItemDataset
from speechbrain.utils.distributed import run_on_main

from surprisal_cc.model.apc import APCFileError, APCModel, load_apc
from surprisal_cc.training.augment import SpeedPerturbation
from surprisal_cc.training.cache import FeatureCache
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.model.nnet import runs_apc

PathLike = Union[str, os.PathLike]

logger = logging.getLogger(__name__)


PRETRAIN_OR_GIVE_APC = ("pretrain one with recipes/LibriSpeech/pretrain_apc.py, set apc_path: null to pretrain here, "
                        "or give the shipped one by its absolute path (docs/extending.md)")


def run_apc_file(hparams: Mapping, explicit: Optional[PathLike] = None, run: Optional[PathLike] = None, *,
                 todo: str) -> Path:
    """The file of a run's APC model, checked to be there: ``explicit`` (a path given on the command line),
    else the hparams' ``apc_path``, else ``apc_export_path`` (where the run's own pretraining exports it;
    ``hparams/common/apc.yaml`` sets it).

    A relative hparams path is relative to where the recipe ran: given the ``run`` folder (read from
    elsewhere), it is looked for in that folder minus its ``output_folder`` first, then in the working
    directory. One :class:`ConfigurationError` line naming the key, where it was looked for and ``todo``
    (what to do) when it is unset, missing or a folder.

    Example
    -------
    >>> import tempfile
    >>> folder = tempfile.TemporaryDirectory()
    >>> ran_in = Path(folder.name).resolve()  # where the recipe ran
    >>> (ran_in / "results" / "run").mkdir(parents=True); (ran_in / "results" / "apc.pt").touch()
    >>> hparams = {"output_folder": "results/run", "apc_path": None, "apc_export_path": "results/apc.pt"}
    >>> run_apc_file(hparams, run=ran_in / "results" / "run", todo="") == ran_in / "results" / "apc.pt"
    True
    >>> folder.cleanup()
    >>> run_apc_file({**hparams, "apc_path": "/no/apc.pt"}, todo="give apc_path")
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: apc_path /no/apc.pt does not exist: give apc_path
    """
    if explicit is not None:
        key, path, where = "--apc", Path(explicit), None  # a command-line path: relative to the working directory
    else:
        key = run_apc_key(hparams)
        if not hparams.get(key):
            raise ConfigurationError("apc_path is null and apc_export_path is unset (hparams/common/apc.yaml sets "
                                     f"it): {todo}")
        path = Path(str(hparams[key]))
        where = _recipe_folder(hparams, Path(run)) if run is not None and not path.is_absolute() else None
    candidates = list(dict.fromkeys([where / path, path] if where is not None else [path]))
    found = next((c for c in candidates if c.is_file()), None)
    if found is not None:
        return found
    folder = next((c for c in candidates if c.is_dir()), None)
    if folder is not None:
        what = f"{'' if folder == path else f'({folder}) '}is a folder, not an APC model file"
    elif path.is_absolute():
        what = "does not exist"
    else:
        here = os.getcwd()
        elsewhere = where is not None and where.resolve() != Path(here).resolve()
        what = "does not exist in " + (f"{where} or " if elsewhere else "") + \
            f"the working directory {here}"
    raise ConfigurationError(f"{key} {path} {what}: {todo}")


def run_apc_key(hparams: Mapping) -> str:
    """The hparams key that names a run's APC model file: ``apc_path`` when set, else ``apc_export_path``
    (the run's own pretraining exports it there).

    >>> run_apc_key({"apc_path": None, "apc_export_path": "exp/apc/apc.pt"})
    'apc_export_path'
    """
    return "apc_path" if hparams.get("apc_path") else "apc_export_path"


def _recipe_folder(hparams: Mapping, run: Path) -> Optional[Path]:
    """The folder a recipe ran in: the ``run`` folder (made absolute, its links kept: a linked results
    folder still ends with ``output_folder``) minus its relative ``output_folder``; None when
    ``output_folder`` is absolute, unset or not the end of ``run``."""
    out = Path(os.path.normpath(str(hparams.get("output_folder") or "")))
    parts = Path(os.path.abspath(run)).parts
    if out.parts and out.parts != (".",) and not out.is_absolute() and parts[-len(out.parts):] == out.parts:
        return Path(*parts[:-len(out.parts)])
    return None


def load_run_apc(hparams: Mapping, run: Optional[PathLike] = None, *, todo: str,
                 manifests: Optional[Mapping[str, str]] = None) -> APCModel:
    """The APC model file of a run (:func:`run_apc_file`, with ``run`` and ``todo``), loaded; pretrains none.

    With ``manifests`` (split name -> manifest) and ``apc_path`` null, the file is the run's own export:
    one pretrained with other settings or data than the hparams' is refused
    (:func:`~surprisal_cc.training.apc_training.check_stored_settings`). A :class:`ConfigurationError` line naming
    the key, what is wrong and ``todo`` when the file is missing, a folder, not an APC model or made with
    other settings.
    """
    path = run_apc_file(hparams, run=run, todo=todo)
    key = run_apc_key(hparams)
    if manifests is not None and key == "apc_export_path":
        from surprisal_cc.training.apc_training import check_stored_settings

        check_stored_settings(hparams, _pretraining_settings(hparams, manifests), export=path, todo=todo)
    try:
        return load_apc(path)
    except ValueError as err:  # an APCFileError's problem alone: its message repeats the path, with advice of its own
        problem = err.problem if isinstance(err, APCFileError) else str(err)
        raise ConfigurationError(f"{key} {path}: {' '.join(problem.split())}: {todo}") from None


def _pretraining_settings(hparams: Mapping, manifests: Mapping[str, str]) -> Dict[str, Dict]:
    """:func:`~surprisal_cc.training.apc_training.pretraining_settings` of an APC pretrained on the utterances of the
    ``train`` and ``valid`` manifests (those of them given)."""
    from surprisal_cc.training.apc_training import pretraining_settings
    from surprisal_cc.data.manifest import read_manifest

    return pretraining_settings(hparams, {
        split: [row["ID"] for row in read_manifest(manifests[split], ("ID",), resolve_wav=False).rows]
        for split in ("train", "valid") if split in manifests})


def obtain_apc(hparams: Dict, manifests: Mapping[str, str], run_opts: Dict) -> Optional[APCModel]:
    """The APC model the run needs: loaded from ``apc_path``, or pretrained on the training split when
    ``apc_path`` is null; None when the inputs are filterbanks and no controller needs surprisal.

    Arguments
    ---------
    hparams : dict
        Uses ``encoder_module``, ``input_features``, ``apc_path`` and, for pretraining, the
        ``apc_*`` keys of ``hparams/common/apc.yaml``.
    manifests : dict
        Split name -> manifest; pretraining uses ``train`` and ``valid``.
    run_opts : dict
        SpeechBrain's run options (device, precision...) for pretraining.
    """
    encoder = hparams["encoder_module"]
    needed = runs_apc(hparams["input_features"], encoder)
    if not needed:
        logger.info("APC not needed: raw filterbank inputs and no surprisal-driven controller")
        return None
    if hparams.get("apc_path"):
        return load_run_apc(hparams, todo=PRETRAIN_OR_GIVE_APC)
    return load_apc(pretrain_apc_on(hparams, {k: manifests[k] for k in ("train", "valid")}, run_opts))


def pretrain_apc_on(hparams: Dict, manifests: Mapping[str, str], run_opts: Dict) -> Path:
    """Pretrain APC on the ``train`` manifest (validation loss on ``valid``) from cached filterbanks.

    Resumes from its checkpoints and skips training when ``apc_export_path`` exists. With
    ``apc_speed_perturb`` factors, the training split's filterbanks are also cached at those speeds
    and each training utterance is read, each epoch, at a random one of them or at 1.0.

    Returns
    -------
    pathlib.Path
        The exported model file (``apc_export_path``).
    """
    from surprisal_cc.training.apc_training import existing_export, train_apc

    # an export or checkpoints made with other settings or data are refused before the cache is filled
    settings = _pretraining_settings(hparams, manifests)
    export = existing_export(hparams, settings)
    if export is not None:
        return export
    perturbation = hparams.get("apc_speed_perturbation")
    fbank_cache = FeatureCache(hparams["cache_folder"], None, hparams["feature_config"])
    run_on_main(fill_cache, args=[fbank_cache, manifests, hparams["cache_batch_size"], perturbation])
    datasets = {split: DynamicItemDataset.from_csv(csv_path=str(manifest)) for split, manifest in manifests.items()}
    for split, dataset in datasets.items():
        sb.dataio.dataset.add_dynamic_item([dataset], cached_features(fbank_cache, perturbation if split == "train"
                                                                      else None))
    sb.dataio.dataset.set_output_keys(list(datasets.values()), ["id", "fbank"])
    return train_apc(datasets, hparams, run_opts, settings)


def feature_cache(hparams: Dict, manifests: Mapping[str, str], apc: Optional[APCModel],
                  device: str = "cpu") -> Optional[FeatureCache]:
    """The feature cache of every utterance of ``manifests`` (filterbanks; with APC also its
    features and surprisal, the APC run on ``device``: the run's ``--device``), filled on the main
    process; None with ``use_feature_cache: False``."""
    if not hparams["use_feature_cache"]:
        return None
    cache = FeatureCache(hparams["cache_folder"], apc, hparams["feature_config"], device=device)
    run_on_main(fill_cache, args=[cache, manifests, hparams["cache_batch_size"], hparams.get("speed_perturbation")])
    return cache


def cache_items(cache: FeatureCache) -> List[str]:
    """The tensors an entry of ``cache`` holds: ``fbank``, and with APC its ``features`` and ``surprisal``."""
    return ["fbank", "features", "surprisal"] if cache.apc is not None else ["fbank"]


def cached_features(cache: FeatureCache, speed_perturbation: Optional[SpeedPerturbation] = None):
    """Dynamic item: utterance id -> the cached tensors named by :func:`cache_items` (with a
    ``speed_perturbation``, those of the utterance at the speed it draws)."""
    names = cache_items(cache)

    @sb.utils.data_pipeline.takes("id")
    @sb.utils.data_pipeline.provides(*names)
    def cached(utt_id: str):
        if speed_perturbation:
            utt_id = speed_perturbation.cache_id(utt_id, speed_perturbation.choose())
        entry = cache.load(utt_id)
        for name in names:
            yield entry[name]

    return cached


def _check_one_audio_per_id(rows: Mapping[str, List[Dict[str, str]]], manifests: Mapping[str, str]) -> None:
    """The cache is keyed on utterance ids: an id twice in a split, or naming two audio files in two
    splits, is a :class:`DataPreparationError` naming the manifests (test could read train's features)."""
    from surprisal_cc.data.errors import DataPreparationError

    audio_of: Dict[str, tuple] = {}  # id -> (wav, manifest)
    for split, split_rows in rows.items():
        seen = set()
        for row in split_rows:
            if row["ID"] in seen:
                raise DataPreparationError(f"{manifests[split]}: utterance id {row['ID']!r} occurs twice: give each "
                                           "utterance an id of its own")
            seen.add(row["ID"])
            wav, where = audio_of.setdefault(row["ID"], (row["wav"], manifests[split]))
            if wav != row["wav"]:
                raise DataPreparationError(f"utterance id {row['ID']!r} is {wav} in {where} and {row['wav']} in "
                                           f"{manifests[split]}: give the two utterances ids of their own (the "
                                           "feature cache is keyed on the id)")


def fill_cache(cache: FeatureCache, manifests: Mapping[str, str], batch_size: int,
               speed_perturbation: Optional[SpeedPerturbation] = None) -> None:
    """Compute missing cache entries for every utterance of the manifests, longest first, the audio read at
    the cache's sample rate (:meth:`~surprisal_cc.model.feature_config.FeatureConfig.read_audio`); with a
    ``speed_perturbation``, also the training split at each of its speeds."""
    from surprisal_cc.data.manifest import read_manifest

    # wav as the dataset reads it (SpeechBrain's CSV loader does not resolve relative paths)
    rows = {split: read_manifest(manifest, ("ID", "duration", "wav"), resolve_wav=False).rows
            for split, manifest in manifests.items()}
    _check_one_audio_per_id(rows, manifests)

    def longest_first(split_rows: List[Dict[str, str]]) -> List[Dict[str, str]]:
        return sorted(split_rows, key=lambda r: -float(r["duration"]))

    read_audio = cache.feature_config.read_audio
    every_row = longest_first([r for split_rows in rows.values() for r in split_rows])
    cache.build([(r["ID"], r["wav"]) for r in every_row], read_audio, batch_size=batch_size)
    if speed_perturbation and "train" in rows:
        train_rows = longest_first(rows["train"])
        for factor in speed_perturbation.factors:
            cache.build([(speed_perturbation.cache_id(r["ID"], factor), r["wav"]) for r in train_rows],
                        lambda path, factor=factor: speed_perturbation(read_audio(path), factor),
                        batch_size=batch_size)
