"""The steps that the recipe scripts (``recipes/*/train.py``, ``pretrain_apc.py``) share.

Each ``train.py`` shows its pipeline top to bottom and calls these in order:
:func:`parse_arguments` and :func:`load_hparams` (command line and hparams, clear errors),
:func:`check_test_only` (a ``--test_only`` run has a trained folder to read),
:func:`create_experiment_directory`, :func:`prepare_manifests` (the corpus's ``prepare_*`` function),
:func:`prepare_labels` (phones checked against the phone set, or sentencepiece units trained),
:func:`obtain_apc` (load or pretrain the frozen APC model), :func:`feature_cache` (filterbanks,
APC features and surprisal of every utterance, computed once), :func:`dataio_prep`
(DynamicItemDataset pipelines) and :func:`training_loader_options`; the Brain
(:class:`~surprisal_cc.brain.ConditionalCTCBrain`) does the rest. :func:`recipe_errors` turns
configuration and data errors into one line ``error: ...``.
"""
from __future__ import annotations

import contextlib
import filecmp
import gc
import inspect
import logging
import os
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import speechbrain as sb
import torch
from speechbrain.dataio.dataset import DynamicItemDataset
from speechbrain.dataio.encoder import CTCTextEncoder
from speechbrain.utils.distributed import if_main_process, run_on_main

from .apc import APCModel, load_apc
from .arguments import resolve_device
from .augment import SpeedPerturbation
from .cache import FeatureCache
from .controllers import CALIBRATION_METHODS, check_calibration_target
from .errors import ConfigurationError, TrainingDivergedError
from .hparams_files import expand_hparams, load_hparams_file, load_yaml_tolerant, parse_yaml_tolerant, ruamel_errors
# input_size_for: run folders saved before it moved to nnet apply it as surprisal_cc.recipe.input_size_for
from .nnet import input_size_for, keyword_names, runs_apc  # noqa: F401
from .precision import TRAINING_PRECISIONS, auto_precision

logger = logging.getLogger(__name__)


def parse_arguments(argv: Sequence[str]) -> Tuple[str, Dict, str]:
    """SpeechBrain's ``parse_arguments``, with stray words refused instead of passed on as overrides.

    Returns ``(hparams_file, run_opts, overrides)``; every override must be ``--key=value`` (or
    ``--key value``) and name a key of the hparams file (checked by :func:`load_hparams`).
    """
    hparams_file, run_opts, overrides = sb.parse_arguments(list(argv))
    stray = [line for line in overrides.splitlines() if line.strip() and ":" not in line]
    if stray:
        raise ConfigurationError(f"unexpected argument {stray[0]!r}: after the hparams file, give overrides as "
                                 "--key=value (keys of that file) or SpeechBrain's options (--device, --test_only, ...)")
    return hparams_file, run_opts, overrides


def load_hparams(hparams_file: str, overrides: str = "", run_opts: Optional[Mapping] = None) -> Dict:
    """Load a hyperpyyaml file with overrides; unknown keys and bad values get a clear error.

    With ``run_opts`` (a recipe run) the training ``precision`` is resolved (:func:`resolve_precision`),
    the settings that must agree are checked (labels and ``num_outputs``, a test budget, a bias
    sweep), and ``malloc_reuse: True`` switches this process's allocator to reuse freed memory
    (:func:`reuse_freed_memory`). Note: hparams files are code (``!new:``/``!apply:`` run
    Python); only load files you trust.
    """
    path = Path(hparams_file)
    if not path.is_file():
        raise ConfigurationError(f"hparams file {hparams_file} does not exist")
    try:
        hparams = load_hparams_file(path, overrides)
    except KeyError as err:
        raise ConfigurationError(f"{hparams_file}: {err.args[0].split(' not found')[0]} is not a key of this configuration "
                                 "(check the spelling; every --key=value override must name an existing key)") from None
    except (ValueError, TypeError, ImportError, AttributeError) as err:
        raise ConfigurationError(f"{hparams_file}: {type(err).__name__}: {err}") from None
    except ruamel_errors() as err:  # e.g. the same --key=value override given twice
        problem = " ".join(str(getattr(err, "problem", None) or err).split())
        raise ConfigurationError(f"{hparams_file}: {problem} "
                                 "(give each key once, in the file or as one --key=value option)") from None
    if run_opts is not None:
        device = resolve_device(run_opts.get("device") or "cpu")  # a missing GPU, before any data is read
        if "precision" in hparams:
            hparams["precision"] = resolve_precision(hparams["precision"], run_opts)
            if hparams["precision"] == "fp16" and device.type != "cuda":
                raise ConfigurationError(f"precision fp16 trains on CUDA only (device {device}): use fp32, bf16 or "
                                         "auto")
        if hparams.get("malloc_reuse"):
            reuse_freed_memory()
        if hparams.get("target_unit", "phone") not in ("phone", "sentencepiece"):
            raise ConfigurationError(f"target_unit must be 'phone' or 'sentencepiece', got {hparams['target_unit']!r}")
        if hparams.get("target_unit") == "phone":
            check_num_outputs(hparams)
        check_test_budget(hparams)
        check_bias_sweep(hparams)
        check_selection_metric(hparams)
        check_settings(hparams, boolean_keys=[key for key, value in load_yaml_tolerant(path).items()
                                              if isinstance(value, bool)])
        check_apc_path(hparams, run_opts)
    return hparams


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
    :func:`~surprisal_cc.hparams_files.inert_overrides` (no checkpoint folder, a dummy for each
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

    from .hparams_files import TolerantLoader, inert_overrides

    if isinstance(overrides, Mapping):
        text = yaml.safe_dump(dict(overrides), sort_keys=False).strip() if overrides else ""
    else:
        text = (overrides or "").strip()
        try:  # plain YAML (a flow mapping such as "{lr: 0.5}" too) in block style, so lines can follow it
            plain = yaml.safe_load(text) if text else None
        except yaml.YAMLError:
            plain = None  # tags (!ref) or not YAML: kept as written, or named below
        if isinstance(plain, dict) and plain:
            text = yaml.safe_dump(plain, sort_keys=False).strip()
    try:
        given = yaml.load(text, Loader=TolerantLoader) if text else {}
    except yaml.YAMLError as err:
        raise ConfigurationError(f"{hparams_file}: the overrides are not YAML ({' '.join(str(err).split())})") from None
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


# Settings checked before any data is read (check_settings): a misread one would otherwise fail, or
# silently change the run, after data preparation and the feature cache.
POSITIVE_INT_KEYS = ("batch_size", "number_of_epochs", "apc_batch_size", "apc_epochs", "checkpoints_to_keep")
POSITIVE_FLOAT_KEYS = ("lr", "apc_lr")
CHOICE_KEYS = {"valid_search": ("greedy", "beam"), "sorting": ("random", "ascending", "descending"),
               "calibration_method": CALIBRATION_METHODS}


def check_settings(hparams: Mapping, boolean_keys: Iterable[str] = ()) -> None:
    """The ``boolean_keys`` (:func:`load_hparams` passes those whose value in the hparams file is True
    or False) are still booleans, every setting of the lists above that is present has its type and
    range, and the controller's calibration targets are reachable; one :class:`ConfigurationError`
    line per problem otherwise.

    Example
    -------
    >>> check_settings({"augment": "no", "lr": -1, "valid_search": "beams"}, boolean_keys=["augment"])
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: augment must be True or False, got 'no'
    lr must be a positive number, got -1
    valid_search must be one of ('greedy', 'beam'), got 'beams'
    """
    problems = [f"{key} must be True or False, got {hparams[key]!r}" for key in boolean_keys
                if key in hparams and not isinstance(hparams[key], bool)]
    problems += [f"{key} must be a whole number of at least 1, got {hparams[key]!r}" for key in POSITIVE_INT_KEYS
                 if key in hparams and (isinstance(hparams[key], bool) or not isinstance(hparams[key], int)
                                        or hparams[key] < 1)]
    problems += [f"{key} must be a positive number, got {hparams[key]!r}" for key in POSITIVE_FLOAT_KEYS
                 if key in hparams and (isinstance(hparams[key], bool) or not isinstance(hparams[key], (int, float))
                                        or not 0 < hparams[key] < float("inf"))]
    problems += [f"{key} must be one of {choices}, got {hparams[key]!r}" for key, choices in CHOICE_KEYS.items()
                 if key in hparams and hparams[key] not in choices]
    mean, var = hparams.get("controller_target_mean"), hparams.get("controller_target_var")
    if isinstance(mean, (int, float)):
        try:
            check_calibration_target(mean, var if isinstance(var, (int, float)) else None)
        except ValueError as err:
            problems.append(str(err))
    if problems:
        raise ConfigurationError("\n".join(problems))


def check_apc_path(hparams: Mapping, run_opts: Mapping) -> None:
    """Where the run needs APC: ``apc_path`` is a loadable APC model file; with ``apc_path`` null, a
    ``--test_only`` run finds the APC its training exported (it never pretrains one)."""
    if "encoder_module" not in hparams or not runs_apc(hparams.get("input_features", "apc"),
                                                       hparams["encoder_module"]):
        return  # APC pretraining (its own recipe), or a model without APC
    if hparams.get("apc_path"):
        load_apc_path(hparams["apc_path"])
    elif run_opts.get("test_only") and not Path(hparams.get("apc_export_path", "")).is_file():
        raise ConfigurationError(f"--test_only with apc_path null needs the APC the run trained with, and "
                                 f"{hparams.get('apc_export_path')} does not exist: give --apc_path=FILE (the APC "
                                 "the run loaded; its results.json names its fingerprint)")


def load_apc_path(apc_path: Union[str, Path]) -> APCModel:
    """The APC model file that the hparams key ``apc_path`` names; a :class:`ConfigurationError` line
    when it is missing, a folder or not an APC model."""
    path = Path(apc_path)
    if not path.is_file():
        what = "is a folder, not an APC model file" if path.is_dir() else "does not exist" + (
            "" if path.is_absolute() else f" in the working directory {os.getcwd()}")
        raise ConfigurationError(f"apc_path {path} {what}: pretrain one with recipes/LibriSpeech/pretrain_apc.py, "
                                 "set apc_path: null to pretrain here, or give the shipped one by its absolute path "
                                 "(docs/extending.md)")
    try:
        return load_apc(path)
    except ValueError as err:
        raise ConfigurationError(f"apc_path {path}: {err}") from None


# Settings a resumed training run may change: where files are, how long it trains, and how it is
# validated and tested. Any other plain setting (a number, a name, a list of them) that differs from
# the one its checkpoints were trained with is refused: the run would mix two configurations.
RESUMABLE_KEYS = frozenset({
    "apc_export_path", "apc_output_folder", "beam_size", "cache_batch_size", "cache_folder", "checkpoints_to_keep",
    "ckpt_interval_minutes", "controller_at_test", "data_folder", "dev_subset", "download", "error_details_file",
    "experiment_root", "find_unused_parameters", "malloc_reuse", "num_workers", "number_of_epochs", "output_folder",
    "prepared_folder", "results_file", "save_folder", "selection_metric", "test_bias_shifts", "test_budget_split",
    "test_flops_fraction", "test_stochastic", "test_threads", "train_log", "use_feature_cache", "valid_search"})


def changed_training_settings(stored: Mapping[str, Any], requested: Mapping[str, Any]) -> List[str]:
    """``"key: trained with X, requested Y"`` for each plain top-level setting (not in
    :data:`RESUMABLE_KEYS`) that both configurations hold and that differs.

    Example
    -------
    >>> changed_training_settings({"lr": 0.001, "number_of_epochs": 30, "seed": 1},
    ...                           {"lr": 0.002, "number_of_epochs": 40, "seed": 1})
    ['lr: trained with 0.001, requested 0.002']
    """
    def plain(value) -> bool:
        return not isinstance(value, (dict, list)) or (isinstance(value, list) and all(map(plain, value)))

    def same_file(a, b) -> bool:  # one file by two names (relative and absolute, another working directory)
        return isinstance(a, str) and isinstance(b, str) and Path(a).is_file() and Path(b).is_file() \
            and filecmp.cmp(a, b, shallow=False)

    return [f"{key}: trained with {stored[key]!r}, requested {value!r}" for key, value in requested.items()
            if key in stored and key not in RESUMABLE_KEYS and not key.startswith("__")
            and plain(value) and plain(stored[key]) and stored[key] != value and not same_file(stored[key], value)]


def create_experiment_directory(experiment_directory: str, hparams_file: str, overrides: str = "",
                                test_only: bool = False, hparams: Optional[Dict[str, Any]] = None) -> None:
    """SpeechBrain's ``create_experiment_directory`` (folder, log, environment, resolved
    ``hyperparams.yaml``) for an hparams file that may start from another one: the saved
    ``hyperparams.yaml`` holds the whole configuration (:func:`~surprisal_cc.hparams_files.expand_hparams`).
    A ``test_only`` evaluation of a trained folder leaves the training's ``hyperparams.yaml`` as it
    was and saves its own as ``hyperparams_test_only.yaml`` (``hyperparams_test_only_random_at_test.yaml``
    and so on where the loaded ``hparams`` change the test-time conditions: :func:`~surprisal_cc.runs.evaluation_tag`).
    Training resumed from the checkpoints in ``hparams["save_folder"]`` must keep the settings they
    were trained with (:func:`changed_training_settings`); a :class:`ConfigurationError` otherwise,
    and the stored ``hyperparams.yaml`` is kept."""
    saved = Path(experiment_directory) / "hyperparams.yaml"
    stored = saved.read_bytes() if if_main_process() and saved.is_file() else None
    resumed = not test_only and stored is not None and hparams is not None and "save_folder" in hparams \
        and any(Path(hparams["save_folder"]).glob("CKPT+*"))
    with tempfile.TemporaryDirectory() as folder:
        expanded = Path(folder) / Path(hparams_file).name
        expanded.write_text(expand_hparams(hparams_file), encoding="utf-8")
        sb.create_experiment_directory(experiment_directory=experiment_directory,
                                       hyperparams_to_save=str(expanded), overrides=overrides)
        if if_main_process() and saved.is_file():  # name the file the configuration came from
            saved.write_text(saved.read_text(encoding="utf-8").replace(
                os.path.abspath(expanded), os.path.abspath(hparams_file), 1), encoding="utf-8")
    if resumed:
        changed = changed_training_settings(parse_yaml_tolerant(stored), parse_yaml_tolerant(saved.read_bytes()))
        if changed:
            saved.write_bytes(stored)  # the configuration of the checkpoints stays beside them
            raise ConfigurationError(f"{experiment_directory} holds checkpoints trained with other settings "
                                     f"({'; '.join(changed)}): give the settings it was trained with, or another "
                                     "--output_folder (or --experiment_root) for a new run")
    if test_only and stored is not None:
        from .runs import evaluation_tag, test_only_hyperparams_name

        saved.replace(saved.with_name(test_only_hyperparams_name(evaluation_tag(hparams or {}))))
        saved.write_bytes(stored)


@contextlib.contextmanager
def recipe_errors():
    """Configuration, data and divergence errors end the script with one line ``error: ...`` (exit 1).

    Under torchrun the process group is also closed here, after a barrier when the script succeeded,
    so no rank tears down its communication threads at interpreter exit while another still uses them.

    Example
    -------
    >>> with recipe_errors():
    ...     raise ConfigurationError("num_outputs is 40")
    Traceback (most recent call last):
    SystemExit: error: num_outputs is 40
    """
    from .data import DataPreparationError

    succeeded = False
    try:
        yield
        succeeded = True
    except (ConfigurationError, DataPreparationError, TrainingDivergedError) as err:
        sys.exit(f"error: {err}")
    finally:
        close_process_group(barrier=succeeded)


def close_process_group(barrier: bool = True) -> None:
    """Leave the DDP process group, if this process joined one (a no-op otherwise): wait for every
    rank first when ``barrier``, then destroy the group explicitly rather than at interpreter exit.

    The Brain's DDP wrappers sit in reference cycles that outlive ``main()``; they are collected
    first, so their reducers release the group now and not during the interpreter's shutdown,
    where gloo's threads can abort a finished run (SIGABRT)."""
    from speechbrain.utils.distributed import ddp_barrier, is_distributed_initialized

    if is_distributed_initialized():
        gc.collect()
        if barrier:
            ddp_barrier()  # SpeechBrain's: passes the CUDA device under NCCL
        torch.distributed.destroy_process_group()


def check_test_only(hparams: Mapping, run_opts: Mapping) -> None:
    """``--test_only`` needs a trained run: its ``checkpointer`` must find a checkpoint of a validated
    epoch (one that records ``selection_metric``), not only a checkpoint taken within an epoch."""
    if not run_opts.get("test_only"):
        return
    metric = hparams.get("selection_metric", "PER")
    checkpointer = hparams["checkpointer"]
    if checkpointer.find_checkpoint(min_key=metric) is None:
        raise ConfigurationError(f"--test_only: {checkpointer.checkpoints_dir} holds no checkpoint of a validated "
                                 f"epoch ({metric}) to evaluate: train this run first, or point --output_folder at "
                                 "a trained run")


def phone_set(name: str) -> List[str]:
    """The label set of a corpus: ``librispeech`` (41: 39 ARPAbet + sil + spn) or ``timit`` (39 folded).

    Example
    -------
    >>> len(phone_set("librispeech")), len(phone_set("timit")), phone_set("timit")[:3]
    (41, 39, ['aa', 'ae', 'ah'])
    """
    from .data import phones

    sets = {"librispeech": phones.LIBRISPEECH_PHONES, "timit": phones.TIMIT_PHONES_39}
    if name not in sets:
        raise ConfigurationError(f"unknown phone set {name!r}; choose one of {sorted(sets)}")
    return list(sets[name])


def label_encoder_for(labels: Sequence[str], blank: str = "<blank>") -> CTCTextEncoder:
    """CTC label encoder with the blank at index 0 and the given labels in order (fixed, not data-derived).

    ``labels`` is the hparams key ``phone_set``: a list of labels, or the name of a
    :func:`phone_set` (``--phone_set=timit``).

    Example
    -------
    >>> encoder = label_encoder_for(["sil", "AH", "B"])
    >>> encoder.encode_sequence(["AH", "B", "sil"]), encoder.ind2lab[0]
    ([2, 3, 1], '<blank>')
    >>> len(label_encoder_for("librispeech").ind2lab)
    42
    >>> label_encoder_for(["AH", "B", "AH"])
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: phone_set lists a label more than once: ['AH']
    """
    if isinstance(labels, str):  # a name, not a string of one-character labels
        labels = phone_set(labels)
    repeated = sorted(label for label, count in Counter(labels).items() if count > 1)
    if repeated:
        raise ConfigurationError(f"phone_set lists a label more than once: {repeated}")
    encoder = CTCTextEncoder()
    encoder.insert_blank(blank_label=blank, index=0)
    encoder.update_from_iterable(labels, sequence_input=False)
    return encoder


class SentencePieceLabels:
    """SentencePiece units as CTC targets (blank = 0, unit ids shifted by one).

    Trained with SpeechBrain's tokenizer on the ``wrd`` column of the training manifest; offers the
    ``encode_sequence`` / ``decode_ndim`` interface of the phone label encoder plus ``decode_words``.
    """

    def __init__(self, model_dir: str, vocab_size: int, train_manifest: str):
        from speechbrain.tokenizers.SentencePiece import SentencePiece

        tokenizer = SentencePiece(model_dir=str(model_dir), vocab_size=vocab_size, annotation_train=str(train_manifest),
                                  annotation_read="wrd", model_type="unigram", character_coverage=1.0)
        self.sp = tokenizer.sp
        self.ind2lab = ["<blank>", *[self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())]]

    def encode_sequence(self, words: Sequence[str]) -> List[int]:
        return [i + 1 for i in self.sp.encode_as_ids(" ".join(words))]

    def decode_ndim(self, ids: Sequence[int]) -> List[str]:
        return [self.ind2lab[int(i)] for i in ids]

    def decode_words(self, ids: Sequence[int]) -> List[str]:
        return self.sp.decode_ids([int(i) - 1 for i in ids]).split()


def train_units(sp_dir: Path, vocab_size: int, train_manifest: str) -> Path:
    """SentencePiece units in ``sp_dir``, trained there unless already present.

    They are trained in a private folder beside it that is then renamed into place in one step, so
    two runs preparing the same units at the same moment cannot mix each other's files: the first
    rename wins and the other run's folder is discarded.

    Example
    -------
    >>> import tempfile
    >>> tmp = Path(tempfile.mkdtemp())
    >>> manifest = tmp / "train.csv"
    >>> words = ["THE CAT SAT ON THE MAT", "A DOG RAN IN THE PARK", "SHE READ HER BOOK BY THE WINDOW"]
    >>> _ = manifest.write_text("ID,wrd\\n" + "".join(f"u{i},{words[i % 3]}\\n" for i in range(60)))
    >>> (train_units(tmp / "units", 20, str(manifest)) / "20_unigram.model").is_file()
    True
    >>> sorted(p.name for p in tmp.iterdir())
    ['train.csv', 'units']
    """
    sp_dir = Path(sp_dir)
    if (sp_dir / f"{vocab_size}_unigram.model").is_file():
        return sp_dir
    sp_dir.parent.mkdir(parents=True, exist_ok=True)
    private = Path(tempfile.mkdtemp(prefix=f".{sp_dir.name}.", dir=sp_dir.parent))
    try:
        SentencePieceLabels(private, vocab_size, train_manifest)
        try:
            os.rename(private, sp_dir)  # atomic; fails if another run's units are already there
        except OSError:
            if not (sp_dir / f"{vocab_size}_unigram.model").is_file():
                raise ConfigurationError(f"{sp_dir} exists without '{vocab_size}_unigram.model' (an interrupted "
                                         f"run of an older version?): delete that folder and run again") from None
    finally:
        shutil.rmtree(private, ignore_errors=True)
    return sp_dir


def dataio_prep(hparams: Dict, manifests: Mapping[str, str], cache: Optional[FeatureCache]) -> Dict[str, DynamicItemDataset]:
    """DynamicItemDatasets of every split, with their pipelines.

    Arguments
    ---------
    hparams : dict
        Uses ``label_encoder``, ``target_unit``, ``sorting``, ``optional_silence`` or
        ``pronunciation_alternatives`` (and ``g2p``), ``speed_perturbation`` (training split only).
    manifests : dict
        Split name -> manifest CSV (columns ID, duration, wav, wrd, phn).
    cache : FeatureCache or None
        Features come from the cache (``fbank``, and ``features`` / ``surprisal`` with APC), or,
        without one, the audio is read (``sig``).

    Returns
    -------
    dict
        Split name -> DynamicItemDataset giving ``id``, ``tokens`` (targets from ``phn``, or
        SentencePiece units of ``wrd``), ``wrd``, the features, and for an optional-silence
        training split ``optional`` (which targets may be skipped); with pronunciation
        alternatives, the training and validation splits give ``predecessors`` (``tokens`` then
        hold the graph's tokens; :func:`surprisal_cc.ctc.ctc_loss_graph`).
    """
    datasets = _load_splits(manifests, hparams.get("sorting", "random"))
    label_encoder: CTCTextEncoder = hparams["label_encoder"]
    optional_silence = hparams.get("optional_silence", False)
    alternatives = hparams.get("pronunciation_alternatives", False)
    if optional_silence and alternatives:
        raise ConfigurationError("optional_silence and pronunciation_alternatives are two kinds of training "
                                 "targets: set one of them")
    graph_splits = [split for split in ("train", "valid") if split in datasets] if alternatives else []
    special = graph_splits or (["train"] if optional_silence and "train" in datasets else [])
    plain = [d for split, d in datasets.items() if split not in special]
    for split in graph_splits:  # every pronunciation of every word: trained on, and validated against
        _add_graph_targets(hparams, datasets[split], split, label_encoder)
    if optional_silence and "train" in datasets:  # training targets: an optional sil at every word boundary
        _add_optional_silence_targets(hparams, datasets["train"], label_encoder)
    target_column = "phn" if hparams["target_unit"] == "phone" else "wrd"

    @sb.utils.data_pipeline.takes(target_column)
    @sb.utils.data_pipeline.provides("tokens")
    def targets(text: str):
        return torch.LongTensor(label_encoder.encode_sequence(text.split()))

    sb.dataio.dataset.add_dynamic_item(plain, targets)
    sb.dataio.dataset.add_dynamic_item([d for split, d in datasets.items() if split != "train"],
                                       _features(cache, None))
    if "train" in datasets:
        sb.dataio.dataset.add_dynamic_item([datasets["train"]], _features(cache, hparams.get("speed_perturbation")))
    outputs = ["id", "tokens", "wrd"] + (cache_items(cache) if cache is not None else ["sig"])
    sb.dataio.dataset.set_output_keys(plain, outputs)
    sb.dataio.dataset.set_output_keys([datasets[split] for split in special],
                                      outputs + ["predecessors" if alternatives else "optional"])
    return datasets


def _load_splits(manifests: Mapping[str, str], sorting: str) -> Dict[str, DynamicItemDataset]:
    """A DynamicItemDataset per manifest; the training split sorted by duration unless ``sorting`` is random."""
    datasets = {}
    for split, manifest in manifests.items():
        data = DynamicItemDataset.from_csv(csv_path=str(manifest))
        if split == "train" and sorting != "random":
            data = data.filtered_sorted(sort_key="duration", reverse=sorting == "descending")
        datasets[split] = data
    return datasets


def _features(cache: Optional[FeatureCache], perturbation: Optional[SpeedPerturbation]):
    """The dynamic item of the features: the cached ones, or without a cache the audio (``sig``), at
    the speed ``perturbation`` draws."""
    from .data.audio import read_audio

    if cache is not None:
        return cached_features(cache, perturbation)

    @sb.utils.data_pipeline.takes("wav")
    @sb.utils.data_pipeline.provides("sig")
    def audio(wav: str):
        signal = read_audio(wav)
        return perturbation(signal, perturbation.choose()) if perturbation else signal

    return audio


def _add_graph_targets(hparams: Dict, data: DynamicItemDataset, split: str, label_encoder: CTCTextEncoder) -> None:
    """``tokens`` and ``predecessors`` of ``data``: the graph of every pronunciation of every word
    (:func:`~surprisal_cc.ctc.pronunciation_targets`); a plain chain where an utterance has none."""
    from .ctc import chain_predecessors, graph_tensor, pronunciation_targets

    graphs = _special_targets(hparams, data, split, "pronunciation_alternatives", pronunciation_targets,
                              "labels made of its words' CMUdict pronunciations (lexicon or realigned labels) "
                              "with a word of several", "every pronunciation of every word")
    width = max((len(p) for _, preds in graphs.values() for p in preds), default=1)  # one width per split

    @sb.utils.data_pipeline.takes("id", "phn")
    @sb.utils.data_pipeline.provides("tokens", "predecessors")
    def graph_targets(utt_id: str, text: str):
        phones = text.split()
        tokens, preds = graphs.get(utt_id, (phones, chain_predecessors(len(phones))))
        yield torch.LongTensor(label_encoder.encode_sequence(tokens))
        yield graph_tensor(preds, width)

    sb.dataio.dataset.add_dynamic_item([data], graph_targets)


def _add_optional_silence_targets(hparams: Dict, data: DynamicItemDataset, label_encoder: CTCTextEncoder) -> None:
    """``tokens`` and ``optional`` of the training split: an optional ``sil`` at every word boundary
    (:func:`~surprisal_cc.ctc.optional_silence_targets`)."""
    from .ctc import optional_silence_targets

    table = _special_targets(hparams, data, "train", "optional_silence", optional_silence_targets,
                             "lexicon labels (labels: {train: lexicon}) to insert optional sil into",
                             "optional sil at word boundaries")

    @sb.utils.data_pipeline.takes("id", "phn")
    @sb.utils.data_pipeline.provides("tokens", "optional")
    def optional_targets(utt_id: str, text: str):
        phones, optional = table.get(utt_id, (text.split(), None))
        yield torch.LongTensor(label_encoder.encode_sequence(phones))
        yield torch.tensor(optional if optional is not None else [False] * len(phones), dtype=torch.bool)

    sb.dataio.dataset.add_dynamic_item([data], optional_targets)


def _special_targets(hparams: Dict, data: DynamicItemDataset, split: str, key: str, build, needs: str,
                     what: str) -> Dict:
    """A split's special targets, ``build(manifest rows, g2p)`` (hparams ``key``), checked and logged;
    the training split must have some."""
    if hparams["target_unit"] != "phone":
        raise ConfigurationError(f"{key} needs phone targets (target_unit: phone)")
    table = build(data.data, hparams.get("g2p", "spn"))
    if not table and split == "train":
        raise ConfigurationError(f"{key}: no training utterance has {needs}")
    logger.info("%s for %d of %d %s utterances (the others keep their labels)", what, len(table), len(data.data),
                "training" if split == "train" else split)
    return table


def cache_items(cache: FeatureCache) -> List[str]:
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


def fill_cache(cache: FeatureCache, manifests: Mapping[str, str], batch_size: int,
               speed_perturbation: Optional[SpeedPerturbation] = None) -> None:
    """Compute missing cache entries for every utterance of the manifests, longest first; with a
    ``speed_perturbation``, also the training split at each of its speeds."""
    from .data.audio import read_audio
    from .data.manifest import read_manifest

    # wav as the dataset reads it (SpeechBrain's CSV loader does not resolve relative paths)
    rows = {split: read_manifest(manifest, ("ID", "duration", "wav"), resolve_wav=False).rows
            for split, manifest in manifests.items()}

    def longest_first(split_rows: List[Dict[str, str]]) -> List[Dict[str, str]]:
        return sorted(split_rows, key=lambda r: -float(r["duration"]))

    every_row = longest_first([r for split_rows in rows.values() for r in split_rows])
    cache.build([(r["ID"], r["wav"]) for r in every_row], read_audio, batch_size=batch_size)
    if speed_perturbation and "train" in rows:
        train_rows = longest_first(rows["train"])
        for factor in speed_perturbation.factors:
            cache.build([(speed_perturbation.cache_id(r["ID"], factor), r["wav"]) for r in train_rows],
                        lambda path, factor=factor: speed_perturbation(read_audio(path), factor),
                        batch_size=batch_size)


def obtain_apc(hparams: Dict, manifests: Mapping[str, str], run_opts: Dict) -> Optional[APCModel]:
    """The APC model the run needs: loaded from ``apc_path``, or pretrained on the training split
    when ``apc_path`` is null; None when the inputs are filterbanks and no controller needs surprisal.

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
        return load_apc_path(hparams["apc_path"])
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
    from .apc_training import pretrain_apc

    perturbation = hparams.get("apc_speed_perturbation")
    fbank_cache = FeatureCache(hparams["cache_folder"], None, hparams["feature_config"])
    run_on_main(fill_cache, args=[fbank_cache, manifests, hparams["cache_batch_size"], perturbation])
    datasets = {split: DynamicItemDataset.from_csv(csv_path=str(manifest)) for split, manifest in manifests.items()}
    for split, dataset in datasets.items():
        sb.dataio.dataset.add_dynamic_item([dataset], cached_features(fbank_cache, perturbation if split == "train"
                                                                      else None))
    sb.dataio.dataset.set_output_keys(list(datasets.values()), ["id", "fbank"])
    return pretrain_apc(datasets, hparams, run_opts)


def prepare_manifests(prepare: Callable[..., Dict[str, str]], hparams: Mapping) -> Dict[str, str]:
    """Run the corpus's ``prepare`` function with the hparams key ``prepare_options`` on the main
    process, then on every process (a repeat returns the manifests at once), and return
    ``{split: manifest path}``. Options that ``prepare`` does not take, or lacks, are a clear error first.

    Example
    -------
    >>> def prepare_toy(save_folder: str, speakers: int = 2):
    ...     return {"train": f"{save_folder}/train.csv"}
    >>> prepare_manifests(prepare_toy, {"prepare_options": {"save_folder": "out"}})
    {'train': 'out/train.csv'}
    >>> prepare_manifests(prepare_toy, {"prepare_options": {"save_folder": "out", "speaker": 3}})
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: prepare_options: 'speaker' is not an argument of prepare_toy, which takes ['save_folder', 'speakers']
    >>> prepare_manifests(prepare_toy, {"prepare_options": {"speakers": 3}})
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: prepare_options lacks 'save_folder', which prepare_toy needs
    """
    options = dict(hparams["prepare_options"])
    taken = keyword_names(prepare)
    for key in options:
        if taken is not None and key not in taken:
            raise ConfigurationError(f"prepare_options: {key!r} is not an argument of {prepare.__name__}, "
                                     f"which takes {sorted(taken)}")
    needed = [p.name for p in inspect.signature(prepare).parameters.values()
              if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    missing = [name for name in needed if name not in options]
    if missing:
        raise ConfigurationError(f"prepare_options lacks {', '.join(map(repr, missing))}, which "
                                 f"{prepare.__name__} needs")
    run_on_main(prepare, kwargs=options)
    return prepare(**options)


def prepare_labels(hparams: Dict, manifests: Mapping[str, str]) -> None:
    """Check the manifests' phones against the label set (``phone_set``), or with ``target_unit:
    sentencepiece``, train the units on the training words (main process) and make them
    ``hparams["label_encoder"]``. The units lie beside the training manifest, in its preparation's
    folder: other options (validation speakers, subsets) give other training words, hence units of
    their own."""
    if hparams["target_unit"] != "sentencepiece":
        encoder = hparams["label_encoder"]
        check_manifest_phones(manifests, [label for label in encoder.lab2ind if label != encoder.blank_label])
        return
    sp_dir = Path(manifests["train"]).parent / f"sentencepiece_{hparams['sp_vocab_size']}"
    run_on_main(train_units, args=[sp_dir, hparams["sp_vocab_size"], manifests["train"]])
    hparams["label_encoder"] = SentencePieceLabels(sp_dir, hparams["sp_vocab_size"], manifests["train"])
    check_num_outputs(hparams)


def feature_cache(hparams: Dict, manifests: Mapping[str, str], apc: Optional[APCModel]) -> Optional[FeatureCache]:
    """The feature cache of every utterance of ``manifests`` (filterbanks; with APC also its
    features and surprisal), filled on the main process; None with ``use_feature_cache: False``."""
    if not hparams["use_feature_cache"]:
        return None
    cache = FeatureCache(hparams["cache_folder"], apc, hparams["feature_config"])
    run_on_main(fill_cache, args=[cache, manifests, hparams["cache_batch_size"], hparams.get("speed_perturbation")])
    return cache


def training_loader_options(hparams: Dict, train_set: DynamicItemDataset) -> Dict:
    """Training DataLoader options: fixed-size batches, or length-bucketed ones (``dynamic_batching``).

    With ``sorting: ascending`` or ``descending`` the batches follow the sorted training split
    (:func:`dataio_prep`) instead of being shuffled; ``random`` shuffles them every epoch.
    With ``dynamic_batching: True`` SpeechBrain's ``DynamicBatchSampler`` groups utterances of
    similar duration into batches of at most ``max_batch_length`` seconds of padded audio, so the
    BiGRUs hardly run over padding; the batches come in a random order that changes every epoch
    (seeded), or ordered by duration as ``sorting`` says.

    Example
    -------
    >>> options = {"train_loader_options": {"batch_size": 8, "shuffle": True}}
    >>> training_loader_options({**options, "sorting": "ascending"}, None)["shuffle"]
    False
    >>> training_loader_options({**options, "sorting": "random"}, None)["shuffle"]
    True
    """
    options = dict(hparams["train_loader_options"])
    sorting = hparams.get("sorting", "random")
    if sorting not in ("random", "ascending", "descending"):
        raise ConfigurationError(f"sorting must be random, ascending or descending, got {sorting!r}")
    if not hparams.get("dynamic_batching", False):
        if sorting != "random":
            options["shuffle"] = False  # a shuffling sampler would undo the sorted order
        return options
    from speechbrain.dataio.sampler import DynamicBatchSampler

    sampler = DynamicBatchSampler(train_set, max_batch_length=hparams["max_batch_length"],
                                  num_buckets=hparams["num_buckets"], length_func=lambda x: float(x["duration"]),
                                  shuffle=True, batch_ordering=sorting, seed=hparams["seed"])
    return {"batch_sampler": sampler, "num_workers": options.get("num_workers", 0)}


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4


def reuse_freed_memory() -> bool:
    """Make glibc's ``malloc`` keep the memory this process frees for its next allocations.

    By default glibc gives every block of more than 32 MB its own ``mmap`` and returns it to the
    kernel when freed, so each training step's activations are faulted in (and zeroed by the
    kernel) anew: on a 2-core AMD EPYC, 10 % of a step's CPU time went to the kernel. With mmap
    off and no trimming, a step reuses the previous step's pages: training steps 1.09x faster,
    peak memory 21 % higher (``benchmarks/bench_allocator.py``). Numerics are unchanged. Returns
    whether the setting took effect (False off glibc, e.g. on macOS or musl).

    Example
    -------
    >>> import platform
    >>> reuse_freed_memory() == (platform.libc_ver()[0] == "glibc")
    True
    """
    import ctypes
    import ctypes.util
    import platform

    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success; the largest int threshold (2 GiB) means "never trim"
    return mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1 and mallopt(_M_MMAP_MAX, 0) == 1


def resolve_precision(precision: str, run_opts) -> str:
    """The training precision: ``auto`` becomes :func:`auto_precision` of the run's device.

    ``--precision`` on the command line (SpeechBrain's flag) wins over the YAML key.
    """
    if "precision" in getattr(run_opts, "overridden_args", ()):
        return run_opts["precision"]
    if precision not in TRAINING_PRECISIONS:
        raise ConfigurationError(f"precision must be one of {TRAINING_PRECISIONS}, got {precision!r}")
    if precision != "auto":
        return precision
    device = (run_opts.get("device") if run_opts is not None else None) or "cpu"
    return _agreed_by_every_rank(auto_precision, device)


def _agreed_by_every_rank(choose: Callable[[str], str], device: str) -> str:
    """``choose(device)`` as the main process makes it, for every DDP rank: on a CPU, ``auto`` times
    bf16 against fp32 (:func:`~surprisal_cc.precision.auto_precision`), and ranks timed side by side
    could choose differently. Only the main process measures; the others take its choice (a no-op
    outside DDP and on CUDA, where the rule is fixed and nothing is measured)."""
    from speechbrain.utils.distributed import is_distributed_initialized

    if not is_distributed_initialized() or torch.device(device).type == "cuda":
        return choose(device)
    main = torch.distributed.get_rank() == 0
    choice = torch.tensor([TRAINING_PRECISIONS.index(choose(device)) if main else -1])
    torch.distributed.broadcast(choice, src=0)
    return TRAINING_PRECISIONS[int(choice)]


def check_manifest_phones(manifests: Mapping[str, str], labels: Sequence[str]) -> None:
    """Every phone of the manifests' ``phn`` columns is one of ``labels``: a clear error naming the
    manifest, the phones and an utterance, before any feature is computed.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = Path(tmp, "test.csv").write_text("ID,phn\\nu1,sil HH AY sil\\n")
    ...     check_manifest_phones({"test": f"{tmp}/test.csv"}, ["sil", "AY"])
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: .../test.csv: phone(s) ['HH'] (utterance u1) are not in the label set (2 labels, hparams key phone_set): set phone_set to the corpus's phones, or map them in its prepare function
    """
    from .data.manifest import read_manifest

    for manifest in manifests.values():
        columns, rows = read_manifest(manifest, (), resolve_wav=False)
        if "phn" not in columns:
            continue
        for row in rows:
            unknown = sorted(set((row["phn"] or "").split()) - set(labels))
            if unknown:
                raise ConfigurationError(
                    f"{manifest}: phone(s) {unknown} (utterance {row.get('ID')}) are not in the label set "
                    f"({len(labels)} labels, hparams key phone_set): set phone_set to the corpus's phones, "
                    "or map them in its prepare function")


def check_selection_metric(hparams: Mapping) -> None:
    """``selection_metric`` (the validation metric the checkpoints are kept and chosen by) is one that
    validation reports for the run's targets: PER for phones; TER or WER for sentencepiece units.

    Example
    -------
    >>> check_selection_metric({"target_unit": "sentencepiece", "selection_metric": "PER"})
    Traceback (most recent call last):
        ...
    surprisal_cc.errors.ConfigurationError: selection_metric: PER is not reported for sentencepiece targets: choose one of ['TER', 'WER'] (--selection_metric=TER)
    """
    unit = hparams.get("target_unit", "phone")
    choices = ["PER"] if unit == "phone" else ["TER", "WER"]
    metric = hparams.get("selection_metric", choices[0])
    if metric not in choices:
        raise ConfigurationError(f"selection_metric: {metric} is not reported for {unit} targets: choose one of "
                                 f"{choices} (--selection_metric={choices[0]})")


def check_num_outputs(hparams: Dict) -> None:
    """``num_outputs`` is the label set's size plus the blank, found before any data is touched."""
    expected = len(hparams["label_encoder"].ind2lab)
    if hparams["num_outputs"] != expected:
        raise ConfigurationError(f"num_outputs is {hparams['num_outputs']} but the label set has {expected - 1} "
                                 f"labels + blank = {expected}: set --num_outputs={expected}")


def check_test_budget(hparams: Mapping) -> None:
    """``test_flops_fraction`` (a test-time FLOPs budget) is a fraction, and replaces a bias sweep."""
    fraction = hparams.get("test_flops_fraction")
    if fraction is None:
        return
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0.0 < fraction < 1.0:
        raise ConfigurationError(f"test_flops_fraction must be a number in (0, 1) (a fraction of the big-only MACs "
                                 f"per frame) or null, got {fraction!r}")
    if hparams.get("test_budget_split", "valid") not in ("valid", "test"):
        raise ConfigurationError(f"test_budget_split must be 'valid' or 'test' (the audio whose surprisal the "
                                 f"budget's bias shift is solved on), got {hparams['test_budget_split']!r}")
    if [float(s) for s in hparams.get("test_bias_shifts", [0.0])] != [0.0]:
        raise ConfigurationError(f"test_flops_fraction: {fraction} solves the test-time bias shift itself: leave "
                                 f"test_bias_shifts at [0.0] (it is {hparams['test_bias_shifts']})")


def check_bias_sweep(hparams: Mapping) -> None:
    """A test-time bias sweep (``test_bias_shifts`` other than 0) needs a controller with a logit to
    shift: not big-only, small-only, nor an adaptive-depth encoder (their results would repeat the
    unshifted one under another name)."""
    shifts = [float(s) for s in hparams.get("test_bias_shifts", [0.0])]
    if not any(shifts):
        return
    encoder = hparams.get("encoder_module")
    controller = getattr(encoder, "controller", None)
    if controller is None or not hasattr(encoder, "test_bias_shift"):
        raise ConfigurationError(f"test_bias_shifts: {shifts} shifts a controller's logit; the {hparams.get('encoder')!r} "
                                 "encoder has none: leave test_bias_shifts at [0.0]")
    if not controller.shifts_with_bias:
        raise ConfigurationError(f"test_bias_shifts: {shifts} shifts a controller's logit; the {controller.name!r} "
                                 "controller has none to shift: leave test_bias_shifts at [0.0]")
