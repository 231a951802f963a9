"""The model folder, the on-disk form of a trained model: :func:`write_model_folder` writes it,
:func:`load_model_folder` reads it back and checks it, :func:`default_model_dir` is the shipped one.

==============  ==============================================================================
``model.json``  format version, encoder arguments, features, labels, decoding, provenance, and
                ``apc_file_fingerprint``: the weights fingerprint of ``apc.pt`` as it loads
``encoder.pt``  encoder state dict (the calibrated controller included)
``apc.pt``      the frozen APC model (absent when the model runs without APC)
``README.md``   model card (:func:`model_card`)
==============  ==============================================================================

Every tensor file loads with ``torch.load(weights_only=True)``: no pickled code. Loading checks that
``apc.pt`` is the APC the folder was written with (a folder written before ``apc_file_fingerprint``
was recorded is not checked).

Example
-------
>>> import tempfile
>>> from pathlib import Path
>>> from surprisal_cc.model.architectures import build_encoder
>>> encoder = {"name": "conditional", "input_size": 80, "num_outputs": 4, "controller": "big_only"}
>>> config = model_config(encoder, "fbank", ["<blank>", "AH", "B", "sil"], weights_dtype="fp16")
>>> with tempfile.TemporaryDirectory() as tmp:
...     folder = write_model_folder(Path(tmp) / "model", config, build_encoder(**encoder).state_dict(), None)
...     names = sorted(p.name for p in folder.iterdir())
...     _, loaded, apc = load_model_folder(folder)
>>> names, type(loaded).__name__, apc
(['README.md', 'encoder.pt', 'model.json'], 'ConditionalEncoder', None)
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch import Tensor

from surprisal_cc.model.apc import APCFileError, APCModel, load_apc
from surprisal_cc.checks import is_number
from surprisal_cc.model.architectures import build_encoder
from surprisal_cc.model.controllers import build_controller
from surprisal_cc.errors import ConfigurationError
from surprisal_cc.model.feature_config import FeatureConfig
from surprisal_cc.model.nnet import FINGERPRINT_DIGITS, INPUT_FEATURES, Encoder, runs_apc, weights_fingerprint

FORMAT_VERSION = 1
MODEL_FILE, ENCODER_FILE, APC_FILE, CARD_FILE = "model.json", "encoder.pt", "apc.pt", "README.md"
# model.json's key for the weights fingerprint of apc.pt as it loads (its stored dtype's values, as fp32)
APC_FILE_FINGERPRINT = "apc_file_fingerprint"
WEIGHT_DTYPES = {"fp32": torch.float32, "fp16": torch.float16}

__all__ = ["FORMAT_VERSION", "WEIGHT_DTYPES", "ModelFormatError", "default_model_dir", "load_model_folder",
           "load_tensors", "check_weights_dtype", "model_config", "write_model_folder", "model_card"]


class ModelFormatError(ValueError):
    """A model folder that is missing, incomplete, damaged or of another format version."""


def default_model_dir() -> Path:
    """The shipped model, ``surprisal_cc/pretrained`` (package data): where ``--model`` points when it is not given.

    Example
    -------
    >>> default_model_dir().parent.name, default_model_dir().name
    ('surprisal_cc', 'pretrained')
    """
    return Path(__file__).resolve().parents[1] / "pretrained"


# ----------------------------------------------------------------------------------------------
# Reading
# ----------------------------------------------------------------------------------------------
def _export_hint(folder: Path) -> str:
    """How to get a model folder from what is at ``folder``, for error messages.

    Example
    -------
    >>> _export_hint(Path("results/run/seed1/model"))
    'pass --model DIR (from_pretrained(DIR)) with an exported model, or export a finished recipe run: surprisal-cc export RUN_DIR results/run/seed1/model'
    """
    if (folder / "hyperparams.yaml").is_file() or (folder / "save").is_dir():  # a recipe's run folder
        return f"it is a recipe run: export it first, e.g. surprisal-cc export {folder} {folder.name}_model"
    if folder.is_file():
        return "a model is a folder (model.json, encoder.pt, apc.pt): pass --model DIR"
    return (f"pass --model DIR (from_pretrained(DIR)) with an exported model, or export a finished recipe run: "
            f"surprisal-cc export RUN_DIR {folder}")


def load_model_folder(folder: Path) -> Tuple[Dict[str, Any], Encoder, Optional[APCModel]]:
    """(config, encoder with weights, APC model or None) of an exported model folder.

    Arguments
    ---------
    folder : pathlib.Path
        A model folder, as :func:`write_model_folder` writes it.

    Returns
    -------
    config : dict
        The content of ``model.json``.
    encoder : Encoder
        The encoder with its weights.
    apc : APCModel or None
        The APC model, when the model uses one.

    Raises
    ------
    ModelFormatError
        When the folder is missing, incomplete, damaged or of another format version, or when
        ``model.json`` contradicts itself, the encoder or the APC model (unknown ``features`` keys or
        values, ``labels`` not one per encoder output, ``blank_index`` outside them, ``input_features`` of
        another width than ``encoder.input_size``, a ``beam_size``, ``beam_backend`` or ``blank_penalty``
        the beam search cannot run with), or ``apc.pt`` is not the APC the folder was
        written with (``apc_file_fingerprint``).

    Example
    -------
    >>> import tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     try:
    ...         load_model_folder(Path(tmp))
    ...     except ModelFormatError as err:
    ...         print("no model.json" in str(err))
    True
    """
    if not folder.is_dir():
        there = "a file, not a model folder" if folder.is_file() else "no model folder there"
        raise ModelFormatError(f"{folder}: {there}; {_export_hint(folder)}")
    config_path = folder / MODEL_FILE
    if not config_path.is_file():
        raise ModelFormatError(f"{folder}: not a model folder (no {MODEL_FILE}); {_export_hint(folder)}")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise ModelFormatError(f"{config_path}: unreadable ({err})") from None
    version = config.get("format_version") if isinstance(config, dict) else None
    if isinstance(version, int) and version > FORMAT_VERSION:
        import surprisal_cc

        raise ModelFormatError(f"{config_path}: model format version {version} is newer than this surprisal_cc "
                               f"{surprisal_cc.__version__} reads (version {FORMAT_VERSION}): upgrade surprisal_cc "
                               "to load it")
    if version != FORMAT_VERSION:
        raise ModelFormatError(f"{config_path}: model format version {version}, but this surprisal_cc reads "
                               f"version {FORMAT_VERSION}: export the run again with this version "
                               "(surprisal-cc export RUN_DIR OUT_DIR)")
    try:
        encoder = build_encoder(**config["encoder"])
        for key in ("labels", "features", "input_features"):
            config[key]
    except (KeyError, TypeError, ValueError) as err:
        raise ModelFormatError(f"{config_path}: incomplete or invalid model description ({err})") from None
    state = load_tensors(folder / ENCODER_FILE)
    try:
        encoder.load_state_dict(state)
    except RuntimeError as err:
        raise ModelFormatError(f"{folder / ENCODER_FILE}: weights do not fit {MODEL_FILE} "
                               f"({_state_dict_problems(err)})") from None
    apc = None
    if config.get("uses_apc", True) and runs_apc(config["input_features"], encoder, training=False):
        apc_path = folder / APC_FILE
        if not apc_path.is_file():
            raise ModelFormatError(f"{apc_path}: missing (this model needs its APC model)")
        again = "put back the apc.pt exported with this model, or export the model again"
        try:
            apc = load_apc(apc_path)
        except APCFileError as err:  # load_apc's own checks, which name the file; the fix is the folder's
            raise ModelFormatError(f"{err.path}: {err.problem}; {again}") from None
        except ValueError as err:
            raise ModelFormatError(str(err).splitlines()[0]) from None
        except Exception as err:  # torch raises several types for damaged or unsafe files
            raise ModelFormatError(f"{apc_path}: cannot be loaded ({type(err).__name__}: "
                                   f"{str(err).splitlines()[0] if str(err) else ''}); {again}") from None
    _check_config(config, config_path, encoder, apc)
    if apc is not None:
        _check_apc_file(config, folder, apc)
    return config, encoder, apc


def _check_apc_file(config: Dict[str, Any], folder: Path, apc: APCModel) -> None:
    """Refuse an ``apc.pt`` (loaded as ``apc``) other than the one the model ``folder`` was written with:
    its weights fingerprint must be ``model.json``'s ``apc_file_fingerprint``; not checked where that is absent.

    Example
    -------
    >>> apc = APCModel(input_size=6, hidden_size=8)
    >>> _check_apc_file({APC_FILE_FINGERPRINT: weights_fingerprint(apc)}, Path("model"), apc)
    >>> _check_apc_file({APC_FILE_FINGERPRINT: "0" * 12}, Path("model"), apc)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    surprisal_cc.model.model_folder.ModelFormatError: model...apc.pt: APC weights fingerprint ..., but model...model.json records 000000000000 ...
    """
    recorded = config.get(APC_FILE_FINGERPRINT)
    if recorded is None:
        return
    if not isinstance(recorded, str) or not re.fullmatch(r"[0-9a-f]{8,64}", recorded):
        raise ModelFormatError(f"{folder / MODEL_FILE}: {APC_FILE_FINGERPRINT} must be 8 to 64 lower-case hex "
                               f"digits (the weights fingerprint of {APC_FILE}), got {recorded!r}")
    found = weights_fingerprint(apc, digits=len(recorded))
    if found != recorded:
        raise ModelFormatError(f"{folder / APC_FILE}: APC weights fingerprint {found}, but {folder / MODEL_FILE} "
                               f"records {recorded} ({APC_FILE_FINGERPRINT}): this is not the APC the model was "
                               f"exported with, and its features would not be those the model was trained on; put "
                               f"back the {APC_FILE} exported with it, or export the run again "
                               f"(surprisal-cc export RUN_DIR {folder})")


def _check_config(config: Dict[str, Any], config_path: Path, encoder: Encoder, apc: Optional[APCModel]) -> None:
    """Refuse a ``model.json`` whose fields contradict each other, the encoder or the APC model, with
    a :class:`ModelFormatError` that names ``config_path``, the field and what is wrong:

    * ``features``: an object of :class:`~surprisal_cc.model.feature_config.FeatureConfig`'s fields, no other key, with
      values it accepts (``features.frame_skip`` 0 is refused here, not at the first decoding);
    * ``labels``: a list of strings, one per encoder output (``encoder.num_outputs``, the blank included);
    * ``blank_index`` (default 0): an index of ``labels``;
    * ``uses_apc``: not false where the model runs the APC (APC features or a surprisal controller);
    * ``input_features``: ``apc`` or ``fbank``, whose width per frame is ``encoder.input_size``:
      ``features.n_mels`` for ``fbank``, the APC model's hidden size for ``apc``;
    * ``features.n_mels``: the APC model's input width, where the model runs the APC;
    * ``beam_size``, ``beam_backend``, ``blank_penalty``: as :func:`_check_decoding` accepts them.

    Example
    -------
    >>> from surprisal_cc.model.architectures import build_encoder
    >>> encoder = {"name": "conditional", "input_size": 80, "num_outputs": 3, "controller": "big_only"}
    >>> config = {"encoder": encoder, "input_features": "fbank", "features": {}, "labels": ["<blank>", "AH", "B"]}
    >>> _check_config({**config, "blank_index": 3}, Path("model.json"), build_encoder(**encoder), None)
    Traceback (most recent call last):
    ...
    surprisal_cc.model.model_folder.ModelFormatError: model.json: blank_index 3 is not an index of labels (0 to 2)
    """
    features, labels, inputs = config["features"], config["labels"], config["input_features"]
    input_size, num_outputs = config["encoder"]["input_size"], config["encoder"]["num_outputs"]
    known = [f.name for f in dataclasses.fields(FeatureConfig)]
    if not isinstance(features, dict):
        raise ModelFormatError(f"{config_path}: features must be an object of {', '.join(known)}, "
                               f"got {type(features).__name__}")
    unknown = sorted(set(features) - set(known))
    if unknown:
        raise ModelFormatError(f"{config_path}: features has unknown keys {unknown} (known: {', '.join(known)})")
    try:
        n_mels = FeatureConfig(**features).n_mels
    except ValueError as err:  # FeatureConfig's message names the field
        raise ModelFormatError(f"{config_path}: features.{err}") from None
    if not isinstance(labels, list) or not all(isinstance(label, str) for label in labels):
        raise ModelFormatError(f"{config_path}: labels must be a list of strings, got {repr(labels)[:80]}")
    if len(labels) != num_outputs:
        raise ModelFormatError(f"{config_path}: labels lists {len(labels)} labels, but encoder.num_outputs is "
                               f"{num_outputs} (one output per label, the blank included)")
    blank = config.get("blank_index", 0)
    if not is_number(blank, integer=True) or not 0 <= blank < len(labels):
        raise ModelFormatError(f"{config_path}: blank_index {blank!r} is not an index of labels "
                               f"(0 to {len(labels) - 1})")
    if inputs not in INPUT_FEATURES:
        raise ModelFormatError(f"{config_path}: input_features {inputs!r} is unknown (known: "
                               f"{', '.join(map(repr, INPUT_FEATURES))})")
    if apc is None and runs_apc(inputs, encoder, training=False):
        raise ModelFormatError(f"{config_path}: uses_apc is false, but this model runs the APC (input_features "
                               f"{inputs!r}, encoder.controller {config['encoder'].get('controller')!r})")
    width, source = (apc.hidden_size, "the APC model's hidden size") if inputs == "apc" else (n_mels, "features.n_mels")
    if input_size != width:
        raise ModelFormatError(f"{config_path}: encoder.input_size is {input_size}, but input_features {inputs!r} "
                               f"gives {width} values per frame ({source})")
    if apc is not None and apc.input_size != n_mels:
        raise ModelFormatError(f"{config_path}: features.n_mels is {n_mels}, but the APC model ({APC_FILE}) reads "
                               f"{apc.input_size} mel bins per frame")
    _check_decoding(config, config_path)


def _check_decoding(config: Dict[str, Any], config_path: Path) -> None:
    """Refuse ``model.json`` decoding fields the beam search cannot run with, naming ``config_path``:
    ``beam_size`` (default 10) not a whole number of at least 1, ``beam_backend`` (default native) not
    a backend, or one this environment lacks, ``blank_penalty`` (default 0) not a finite number.

    Example
    -------
    >>> _check_decoding({"beam_size": 10, "beam_backend": "native", "blank_penalty": 0.5}, Path("model.json"))
    >>> _check_decoding({"beam_size": "ten"}, Path("model.json"))
    Traceback (most recent call last):
    ...
    surprisal_cc.model.model_folder.ModelFormatError: model.json: beam_size must be a whole number of at least 1, got 'ten'
    """
    from surprisal_cc.decoding.search import BACKEND_NAMES, missing_backend

    size = config.get("beam_size", 10)
    if not is_number(size, integer=True) or size < 1:
        raise ModelFormatError(f"{config_path}: beam_size must be a whole number of at least 1, got {size!r}")
    backend = config.get("beam_backend", "native")
    if not isinstance(backend, str) or backend not in BACKEND_NAMES:
        raise ModelFormatError(f"{config_path}: beam_backend {backend!r} is unknown (known: "
                               f"{', '.join(BACKEND_NAMES)})")
    missing = missing_backend(backend)
    if missing:
        raise ModelFormatError(f"{config_path}: beam_backend {backend!r} cannot run here ({missing}): install it, "
                               "or set beam_backend to \"native\"")
    penalty = config.get("blank_penalty", 0.0)
    if not is_number(penalty):
        raise ModelFormatError(f"{config_path}: blank_penalty must be a finite number, got {penalty!r}")


def _state_dict_problems(err: RuntimeError, count: int = 3, width: int = 200) -> str:
    """The first ``count`` lines of torch's ``load_state_dict`` error that say what does not fit (missing and
    unexpected keys, size mismatches), each cut to ``width`` characters.

    Example
    -------
    >>> message = 'Error(s) in loading state_dict for Net:\\n\\tMissing key(s) in state_dict: "a". \\n\\tUnexpected ...'
    >>> _state_dict_problems(RuntimeError(message), count=1)
    'Error(s) in loading state_dict for Net: Missing key(s) in state_dict: "a"; and 1 more'
    """
    head, *lines = [line.strip() for line in str(err).splitlines() if line.strip()] or [type(err).__name__]
    shown = [line.rstrip(".") if len(line) <= width else line[:width - 3] + "..." for line in lines[:count]]
    more = f"; and {len(lines) - count} more" if len(lines) > count else ""
    return " ".join([head, "; ".join(shown)]).strip() + more


def load_tensors(path: Path, todo: str = "copy the model folder again, or export it again") -> Dict[str, Tensor]:
    """State dict of a tensor file (``weights_only=True``); :class:`ModelFormatError` if unusable, ending
    in ``todo``, what to do."""
    if not path.is_file():
        raise ModelFormatError(f"{path}: missing")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises several types for damaged or unsafe files
        raise ModelFormatError(f"{path}: cannot be loaded ({type(err).__name__}: "
                               f"{str(err).splitlines()[0] if str(err) else ''}): the file is damaged or not one "
                               f"torch.save wrote; {todo}") from None
    if not isinstance(state, dict):
        raise ModelFormatError(f"{path}: not a state dict")
    return state


# ----------------------------------------------------------------------------------------------
# Writing
# ----------------------------------------------------------------------------------------------
def check_weights_dtype(name: Any) -> torch.dtype:
    """The torch dtype of the stored weight matrices that ``model.json``'s ``weights_dtype`` names
    (:data:`WEIGHT_DTYPES`); :class:`ConfigurationError` for any other name.

    Example
    -------
    >>> check_weights_dtype("fp16")
    torch.float16
    >>> check_weights_dtype("bf16")
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: dtype must be one of ['fp16', 'fp32'], got 'bf16'
    """
    if not isinstance(name, str) or name not in WEIGHT_DTYPES:
        raise ConfigurationError(f"dtype must be one of {sorted(WEIGHT_DTYPES)}, got {name!r}")
    return WEIGHT_DTYPES[name]


def model_config(encoder: Mapping[str, Any], input_features: str, labels: Sequence[str], *,
                 features: Optional[Mapping[str, Any]] = None, uses_apc: Optional[bool] = None,
                 blank_index: int = 0, beam_size: int = 10, beam_backend: Optional[str] = None,
                 blank_penalty: Optional[float] = None, merge_sil: bool = True, weights_dtype: Optional[str] = None,
                 **details: Any) -> Dict[str, Any]:
    """The ``model.json`` content that rebuilds, feeds and decodes a model (all but its ``source``).

    Arguments
    ---------
    encoder : mapping
        :func:`~surprisal_cc.model.architectures.build_encoder`'s arguments.
    input_features : str
        ``"fbank"`` or ``"apc"``.
    labels : sequence of str
        One label per encoder output, the blank included.
    features : mapping, optional
        :class:`~surprisal_cc.model.feature_config.FeatureConfig`'s fields; default: its defaults.
    uses_apc : bool, optional
        Whether the model runs the APC model; left out when not given (a folder is written with it).
    blank_index, beam_size, beam_backend, blank_penalty, merge_sil
        Decoding: the blank's label index, the CTC beam width, the beam search backend (left out when
        not given: ``"native"``), what is subtracted from the blank's log-probability before it (left
        out when not given: 0) and whether ``sil`` is merged before scoring.
    weights_dtype : str, optional
        ``"fp32"`` or ``"fp16"`` (:func:`check_weights_dtype`), the stored weights; left out when not given.
    **details
        Further fields, after those above (``label_policy``, ``batch_size``, ``dataset``, ``seed``).

    Example
    -------
    >>> encoder = {"name": "conditional", "input_size": 80, "num_outputs": 3, "controller": "big_only"}
    >>> config = model_config(encoder, "fbank", ["<blank>", "AH", "B"], seed=1)
    >>> list(config)
    ['format_version', 'encoder', 'input_features', 'features', 'labels', 'blank_index', 'beam_size', 'merge_sil', 'seed']
    >>> model_config(encoder, "fbank", ["<blank>", "AH", "B"], weights_dtype="int8")
    Traceback (most recent call last):
    ...
    surprisal_cc.errors.ConfigurationError: dtype must be one of ['fp16', 'fp32'], got 'int8'
    """
    optional = {"uses_apc": uses_apc, "beam_backend": beam_backend, "blank_penalty": blank_penalty,
                "weights_dtype": weights_dtype}
    if weights_dtype is not None:
        check_weights_dtype(weights_dtype)
    config = {"format_version": FORMAT_VERSION, "encoder": dict(encoder), "input_features": input_features,
              "uses_apc": uses_apc,
              "features": dict(features) if features is not None else FeatureConfig().as_dict(),
              "labels": list(labels), "blank_index": int(blank_index), "beam_size": int(beam_size),
              "beam_backend": beam_backend,
              "blank_penalty": None if blank_penalty is None else float(blank_penalty),
              "merge_sil": bool(merge_sil), "weights_dtype": weights_dtype}
    config = {k: v for k, v in config.items() if k not in optional or v is not None}
    return {**config, **details}


def write_model_folder(out: Path, config: Dict[str, Any], encoder_state: Dict[str, Tensor],
                       apc_blob: Optional[Dict[str, Any]]) -> Path:
    """Write ``model.json``, ``encoder.pt``, ``apc.pt`` (with ``apc_blob``) and ``README.md`` into ``out``;
    ``model.json`` records the weights fingerprint of ``apc.pt`` as it loads (``apc_file_fingerprint``), which
    :func:`load_model_folder` checks.

    Arguments
    ---------
    out : pathlib.Path
        New, empty or existing model folder.
    config : dict
        The ``model.json`` content; its ``weights_dtype`` (``"fp32"`` or ``"fp16"``) sets the
        dtype of the stored weight matrices. Its ``apc_file_fingerprint``, if any, is replaced.
    encoder_state : dict of str to torch.Tensor
        The encoder's state dict.
    apc_blob : dict, optional
        The APC model file's content (``state_dict`` and configuration); None: no ``apc.pt``.

    Returns
    -------
    pathlib.Path
        ``out``.

    Raises
    ------
    ConfigurationError
        When ``out`` exists and is neither empty nor a model folder, or ``weights_dtype`` is not one of
        :data:`WEIGHT_DTYPES` (:func:`check_weights_dtype`).
    """
    out = Path(out)
    dtype = check_weights_dtype(config.get("weights_dtype"))
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / MODEL_FILE).is_file())):
        raise ConfigurationError(f"{out}: exists and is not a model folder; export into a new or empty folder")
    # The folder is written whole beside its destination, then renamed into place: an export that is
    # interrupted leaves the previous model folder, never one file of each.
    target = out.resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    staging, replaced = target.with_name(f".{target.name}.partial"), target.with_name(f".{target.name}.replaced")
    if replaced.exists() and not target.exists():
        os.replace(replaced, target)   # an earlier export stopped between its two renames
    _remove_tree(staging)
    staging.mkdir()
    torch.save(_cast(encoder_state, dtype), staging / ENCODER_FILE)
    config = {k: v for k, v in config.items() if k != APC_FILE_FINGERPRINT}
    if apc_blob is not None:
        torch.save({**apc_blob, "state_dict": _cast(apc_blob["state_dict"], dtype)}, staging / APC_FILE)
        # as loading will compute it: the stored (cast) weights, read back
        config[APC_FILE_FINGERPRINT] = weights_fingerprint(load_apc(staging / APC_FILE))
    (staging / MODEL_FILE).write_text(json.dumps(config, indent=2, default=str) + "\n", encoding="utf-8")
    (staging / CARD_FILE).write_text(model_card(config, staging, name=target.name), encoding="utf-8")
    _swap_into_place(staging, target, replaced)
    return out


def _swap_into_place(staging: Path, target: Path, replaced: Path) -> None:
    """Rename the folder ``staging`` to ``target``. A model folder already at ``target`` is renamed
    to ``replaced`` first and deleted last; the files in it that a model folder does not consist of
    (a user's notes) are copied into the new one. The current working folder is not renamed: its
    files are replaced one by one, ``model.json`` last."""
    import shutil

    if not target.exists():
        os.replace(staging, target)
        return
    if target == Path.cwd().resolve():
        if not (staging / APC_FILE).exists() and (target / APC_FILE).exists():
            (target / APC_FILE).unlink()
        for name in (ENCODER_FILE, APC_FILE, CARD_FILE, MODEL_FILE):
            if (staging / name).exists():
                os.replace(staging / name, target / name)
        staging.rmdir()
        return
    for extra in target.iterdir():
        if extra.name not in (MODEL_FILE, ENCODER_FILE, APC_FILE, CARD_FILE):
            if extra.is_dir() and not extra.is_symlink():
                shutil.copytree(extra, staging / extra.name, symlinks=True)
            else:
                shutil.copy2(extra, staging / extra.name, follow_symlinks=False)
    _remove_tree(replaced)
    os.replace(target, replaced)
    os.replace(staging, target)
    _remove_tree(replaced)


def _remove_tree(path: Path) -> None:
    """Delete the folder ``path`` (left by an earlier, interrupted export) if it exists."""
    import shutil

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _cast(state: Dict[str, Tensor], dtype: torch.dtype) -> Dict[str, Tensor]:
    """Weight matrices (2-D and up) to ``dtype``; scalars, vectors and integer buffers unchanged.

    Every tensor is copied to the CPU into its own storage: a view (e.g. of the flat weight buffer
    cuDNN keeps for a GRU on a GPU) would otherwise save the whole buffer it belongs to.
    """
    return {k: (v.to(dtype) if v.is_floating_point() and v.ndim >= 2 else v).detach().cpu().clone()
            for k, v in state.items()}


# ----------------------------------------------------------------------------------------------
# Model card
# ----------------------------------------------------------------------------------------------
def _tested_by_chance(enc: Dict[str, Any]) -> bool:
    """Whether a conditional encoder's test-time controller routes by chance (inference always samples it)."""
    if not (enc.get("conditional_options") or {}).get("controller_at_test", True):
        return True  # the random p = 0.5 controller at test time
    try:
        return build_controller(enc.get("controller"), **(enc.get("controller_options") or {})).routes_by_chance
    except (KeyError, TypeError, ValueError):  # a controller this installation does not have
        return False


def model_card(config: Dict[str, Any], out: Path, name: Optional[str] = None) -> str:
    """The model folder's README.md, from ``model.json`` (its ``source`` part: the run it came from).

    Arguments
    ---------
    config : dict
        The ``model.json`` content.
    out : pathlib.Path
        The folder holding the ``.pt`` files, whose size appears in the card.
    name : str, optional
        The model folder's name in the card's commands; default: ``out``'s.

    Returns
    -------
    str
        Markdown text.
    """
    enc, src = config["encoder"], config.get("source") or {}
    test, details = src.get("test") or {}, src.get("error_rate_details") or {}
    calibration, policy = src.get("calibration") or {}, config.get("label_policy") or {}
    size = sum(f.stat().st_size for f in out.iterdir() if f.suffix == ".pt")
    folder_name = name or out.name
    encoder_name = enc.get("name", "conditional")
    model = encoder_name if encoder_name != "conditional" else f"conditional, {enc.get('controller')} controller"
    rows = [
        ("model", f"{model}, architecture {enc.get('architecture', 'paper')}, inputs {config['input_features']}"
                  f"{' + APC surprisal' if config.get('uses_apc') and config['input_features'] != 'apc' else ''}"),
        ("data", f"{config.get('dataset')}: " + (", ".join(f"{k} `{Path(v).name}`"
                                                           for k, v in sorted((test.get('data') or {}).items()))
                                                 or "–")),
        ("labels", f"{len(config['labels']) - 1} phones + blank; training labels: {_policy(policy)}"),
        ("epochs", f"{src.get('epochs_trained', '–')} trained; best checkpoint: epoch {src.get('epoch', '–')} "
                   f"(validation PER {_fmt(src.get('valid_PER'))} %)"),
    ]
    rows += _apc_row(src.get("apc_fingerprint"), config.get(APC_FILE_FINGERPRINT), config.get("weights_dtype"))
    averaged = src.get("averaged_checkpoints")
    if averaged:
        rows.append(("weights averaged", f"over the {len(averaged)} best checkpoints (validation PER "
                                         + ", ".join(f"{_fmt(c.get('valid_PER'))}" for c in averaged) + " %)"))
    rows += [
        ("seed", str(config.get("seed", "–"))),
        ("test PER" + (" (of the best checkpoint alone)" if averaged else ""), f"{_fmt(test.get('PER'))} % (S {details.get('substitutions', '–')} / D "
                     f"{details.get('deletions', '–')} / I {details.get('insertions', '–')}, "
                     f"{details.get('num_ref_tokens', '–')} reference phones, {details.get('num_utterances', '–')} "
                     f"utterances), CTC beam search width {config.get('beam_size', 10)}"
                     if src.get("results_epoch") is None else
                     f"not measured for this checkpoint (the run's results file tested epoch "
                     f"{src['results_epoch']}'s): `surprisal-cc evaluate` this model"),
        ("FLOPs per frame", f"{_millions(test.get('flops_per_frame'))} on the test set (MACs counted from what "
                            f"ran{', APC included' if config.get('uses_apc') else ''})"),
    ]
    if test.get("p_big_mean") is not None:
        rows.append(("routing", f"p_big {test['p_big_mean']:.3f}, big network on "
                                f"{100 * (test.get('big_fraction') or 0):.1f} % of test frames"))
    if calibration.get("weight") is not None:
        rows.append(("calibration", f"w {calibration['weight']:.5g}, b {calibration['bias']:.5g} (target mean "
                                    f"{calibration.get('target_mean')}, variance {calibration.get('target_var')})"))
    rows += [("commit", str(src.get("commit", "–"))),
             ("weights", f"{config['weights_dtype']}, {size / 2 ** 20:.1f} MiB; format version "
                         f"{config['format_version']}")]
    table = "\n".join(f"| {k} | {v} |" for k, v in rows)
    stochastic = (enc.get("conditional_options") or {}).get("test_stochastic")
    tested = "" if stochastic is None else f" ({'sampled' if stochastic else 'deterministic'} routing)"
    routing = ("; both commands and `ConditionalASR` route deterministically (`p_big > 0.5`) unless given "
               "`--sampled` (`routing=\"sampled\"`)") if encoder_name == "conditional" else ""
    by_chance = encoder_name == "conditional" and _tested_by_chance(enc)
    if by_chance:
        routing = "; both commands and `ConditionalASR` draw its routing (it routes by chance alone)"
    origin = (f", exported from checkpoint `{src['checkpoint']}` of a recipe run with `surprisal-cc export`."
              if src.get("checkpoint") else ".")
    return f"""# surprisal_cc phone recogniser ({config.get('dataset') or 'untrained'}, {model})

Surprisal-triggered conditional computation for CTC phone recognition{origin}

| | |
|---|---|
{table}

## Use

```python
from surprisal_cc.inference.asr import ConditionalASR

asr = ConditionalASR.from_pretrained("{folder_name}")   # {"sampled routing, " if by_chance else "deterministic routing (p_big > 0.5), " if encoder_name == "conditional" else ""}one thread
result = asr.transcribe_file("utterance.flac")
print(result.text, result.segments, result.flops_per_frame, result.rtf)
```

```bash
surprisal-cc transcribe utterance.flac --model {folder_name} [--json | --format ctm] [--plot routing.png]
surprisal-cc evaluate LibriSpeech/dev-clean-2 --model {folder_name} [--mfa-labels dev-clean-2_mfa.csv] [--json]
```

The test PER above is the recipe's decoding{tested}{routing}.
"""


def _apc_row(trained_with: Optional[str], stored: Optional[str], dtype: Optional[str]) -> List[Tuple[str, str]]:
    """The model card's APC row: the fingerprint of the APC the run trained with (``trained_with``) and,
    where it differs, that of ``apc.pt`` (``stored``, e.g. its fp16 copy: ``dtype``); none without either.

    Example
    -------
    >>> _apc_row("27d287a179a6", "75da3c37ee63", "fp16")[0][1]  # doctest: +ELLIPSIS
    'weights fingerprint 27d287a179a6 (...); `apc.pt` here is its fp16 copy, fingerprint 75da3c37ee63'
    """
    if not trained_with:
        return [("APC", f"`{APC_FILE}` weights fingerprint {stored}")] if stored else []
    text = f"weights fingerprint {trained_with} (the APC the run trained with, results.json \"apc\")"
    if stored and stored[:FINGERPRINT_DIGITS] != trained_with[:FINGERPRINT_DIGITS]:
        text += f"; `{APC_FILE}` here is its {dtype} copy" if dtype == "fp16" else f"; `{APC_FILE}` here"
        text += f", fingerprint {stored}"
    return [("APC", text)]


def _policy(policy: Dict[str, Any]) -> str:
    """The training label policy in words."""
    labels = policy.get("labels")
    text = ", ".join(f"{k} {v}" for k, v in labels.items()) if isinstance(labels, dict) else str(labels or "–")
    return text + (f" (g2p {policy['g2p']})" if policy.get("g2p") else "")


def _fmt(value: Optional[float]) -> str:
    """Two decimals, or a dash for None."""
    return "–" if value is None else f"{value:.2f}"


def _millions(value: Optional[float]) -> str:
    """``"1.23M"``, or a dash for None."""
    return "–" if value is None else f"{value / 1e6:.2f}M"
