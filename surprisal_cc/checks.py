"""Command-line arguments shared by ``surprisal-cc`` and the experiment tools (grid, analysis): argparse
value types, and output files checked (or their folder made) before any work; the checks of the
Python API's own arguments (a routing seed, a batch size, a device); and :func:`is_number`, what every
check of a setting counts as a number.

A value that does not fit is argparse's usage error: one line, exit status 2.

Example
-------
>>> positive_int("3"), finite_float("-1.5"), non_negative_float("0")
(3, -1.5, 0.0)
"""
from __future__ import annotations

import argparse
import math
import numbers
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Dict, Mapping, Optional, TypeVar, Union

from surprisal_cc.errors import ConfigurationError, UsageError

if TYPE_CHECKING:  # torch is imported where a device is resolved, so that --help and usage errors are quick
    import torch

Number = TypeVar("Number", int, float)

__all__ = ["positive_int", "finite_float", "non_negative_float", "chunk_seconds", "routing_seed", "make_output_folder",
           "check_writable",
           "is_number", "check_chunk_seconds", "check_routing_seed", "check_batch_size", "resolve_device"]


def positive_int(text: str) -> int:
    """An integer of at least 1.

    >>> positive_int("two")
    Traceback (most recent call last):
        ...
    argparse.ArgumentTypeError: must be a positive integer, got two
    """
    value = _number(int, text)
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def finite_float(text: str) -> float:
    """A finite number (not nan or inf).

    >>> finite_float("nan")
    Traceback (most recent call last):
        ...
    argparse.ArgumentTypeError: must be a finite number, got nan
    """
    value = _number(float, text)
    if value is None or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number of at least 0.

    >>> non_negative_float("-5")
    Traceback (most recent call last):
        ...
    argparse.ArgumentTypeError: must be 0 or more, got -5
    """
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def chunk_seconds(text: str) -> float:
    """Seconds of a long file's part, as the command line gives them (:func:`check_chunk_seconds`).

    >>> chunk_seconds("0"), chunk_seconds("20")
    (0.0, 20.0)
    >>> chunk_seconds("0.001")
    Traceback (most recent call last):
        ...
    argparse.ArgumentTypeError: must be 0 (whole files) or at least 1 second, got 0.001
    """
    value = _number(float, text)
    try:
        return check_chunk_seconds(text if value is None else value)
    except ConfigurationError:
        raise argparse.ArgumentTypeError(f"must be 0 (whole files) or at least 1 second, got {text}") from None


def is_number(value: Any, *, integer: bool = False) -> bool:
    """Whether ``value`` is a finite real number (not nan or +-inf): never a bool (YAML's ``true``), a
    string or None. numpy scalars count as the numbers they hold (``np.float32`` as ``float`` and
    ``np.float64`` do). ``integer``: a whole-number type only (int, numpy integers; not ``2.0``).

    Example
    -------
    >>> is_number(2), is_number(0.5), is_number(True), is_number("1"), is_number(float("inf"))
    (True, True, False, False, False)
    >>> is_number(3, integer=True), is_number(3.0, integer=True)
    (True, False)
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral if integer else numbers.Real):
        return False
    return isinstance(value, numbers.Integral) or math.isfinite(value)


def check_chunk_seconds(seconds: Any, name: str = "long_chunk_s") -> float:
    """``seconds`` of a long file's part as a float: 0 (every file whole) or at least 1 (shorter parts
    would be mostly the context decoded around them, at many times the cost of whole-file decoding);
    :class:`ConfigurationError` naming ``name`` otherwise.

    Example
    -------
    >>> check_chunk_seconds(0), check_chunk_seconds(20)
    (0.0, 20.0)
    >>> check_chunk_seconds(0.01)
    Traceback (most recent call last):
        ...
    surprisal_cc.errors.ConfigurationError: long_chunk_s must be 0 (whole files) or at least 1 second, got 0.01
    """
    if not is_number(seconds) or not (seconds == 0 or seconds >= 1):
        raise ConfigurationError(f"{name} must be 0 (whole files) or at least 1 second, got {seconds!r}")
    return float(seconds)


def routing_seed(text: str) -> int:
    """A seed of sampled routing, as the command line gives it (:func:`check_routing_seed`).

    >>> routing_seed("-5")
    Traceback (most recent call last):
        ...
    argparse.ArgumentTypeError: must be a whole number in [0, 2**63), got -5
    """
    value = _number(int, text)
    if value is None or not 0 <= value < 2 ** 63:
        raise argparse.ArgumentTypeError(f"must be a whole number in [0, 2**63), got {text}")
    return value


def make_output_folder(option: str, path: Union[str, os.PathLike]) -> None:
    """Create the folder of the output file ``path`` given as ``option``, before any work is done for it;
    an :class:`OSError` naming the option, the file and the folder where it cannot be created."""
    folder = Path(path).parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OSError(f"{option} {path}: its folder {folder} cannot be created ({err.strerror})") from None


def check_writable(what: str, path: Union[str, os.PathLike]) -> None:
    """Raise now, before any work, when the output file ``path`` (``what``, as ``"alignments file"``)
    cannot be written; leaves the file system as it was (a file already there keeps its content)."""
    existed = os.path.lexists(path)
    try:
        with open(path, "a", encoding="utf-8"):
            pass
        if not existed:
            os.remove(path)
    except OSError as err:
        raise OSError(f"{what} {path} cannot be written: {err.strerror or err}") from None


def check_outputs_apart(outputs: Mapping[str, Any], inputs: Mapping[str, Any] = {}) -> None:
    """:class:`UsageError` when two of the ``outputs`` (``{option: path}``, None or ``-`` for none) name
    one file, or one names a file of the ``inputs`` or lies inside an input folder (a corpus's
    ``wav.scp``, ``text``, ...): writing it would destroy what was read or written.

    Example
    -------
    >>> check_outputs_apart({"--per-utterance": "out.jsonl", "--alignments": "./out.jsonl"})
    Traceback (most recent call last):
        ...
    surprisal_cc.errors.UsageError: --per-utterance and --alignments name one file (./out.jsonl): give each its own
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as corpus:
    ...     check_outputs_apart({"--alignments": f"{corpus}/text"}, {"DATA": corpus})
    Traceback (most recent call last):
        ...
    surprisal_cc.errors.UsageError: --alignments (.../text) is inside the folder DATA reads (...): write it outside that folder
    """
    def key(path: Any) -> Optional[str]:
        return None if path in (None, "", "-") else os.path.realpath(os.fspath(path))

    seen: Dict[str, str] = {}
    folders: Dict[str, str] = {}
    for option, path in inputs.items():
        if key(path) is not None:
            (folders if os.path.isdir(key(path)) else seen).setdefault(key(path), option)
    for option, path in outputs.items():
        if key(path) is None:
            continue
        if key(path) in seen:
            raise UsageError(f"{seen[key(path)]} and {option} name one file ({path}): give each its own")
        for folder, reader in folders.items():
            if os.path.commonpath([folder, key(path)]) == folder:
                raise UsageError(f"{option} ({path}) is inside the folder {reader} reads ({inputs[reader]}): "
                                 "write it outside that folder")
        seen[key(path)] = option


def check_routing_seed(seed) -> int:
    """``seed`` as the int that seeds sampled routing; :class:`ConfigurationError` unless it is a whole
    number in [0, 2**63).

    Example
    -------
    >>> check_routing_seed(3)
    3
    >>> check_routing_seed(3.5)
    Traceback (most recent call last):
        ...
    surprisal_cc.errors.ConfigurationError: a routing seed is a whole number in [0, 2**63), got 3.5
    """
    if not is_number(seed, integer=True) or not 0 <= seed < 2 ** 63:
        raise ConfigurationError(f"a routing seed is a whole number in [0, 2**63), got {seed!r}")
    return int(seed)


def check_batch_size(batch_size) -> int:
    """``batch_size`` as a positive int; :class:`ConfigurationError` otherwise.

    Example
    -------
    >>> check_batch_size(8)
    8
    >>> check_batch_size(0)
    Traceback (most recent call last):
        ...
    surprisal_cc.errors.ConfigurationError: batch_size must be a whole number of utterances, at least 1; got 0
    """
    if not is_number(batch_size, integer=True) or batch_size < 1:
        raise ConfigurationError(f"batch_size must be a whole number of utterances, at least 1; got {batch_size!r}")
    return int(batch_size)


def resolve_device(device: Union[str, "torch.device"]) -> "torch.device":
    """``torch.device(device)``; :class:`ConfigurationError` for an invalid name, a device other than
    cpu and cuda (mps, meta, ...), missing CUDA or a CUDA device number this machine lacks.

    Example
    -------
    >>> resolve_device("cpu")
    device(type='cpu')
    >>> resolve_device("mps")
    Traceback (most recent call last):
        ...
    surprisal_cc.errors.ConfigurationError: device mps: only cpu and cuda[:N] are supported; use cpu (or cuda on a machine with an NVIDIA GPU)
    """
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError:
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise ConfigurationError(f"device {device}: only cpu and cuda[:N] are supported; use cpu "
                                 "(or cuda on a machine with an NVIDIA GPU)")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigurationError(f"device {device}: CUDA is not available on this machine; use cpu")
    if dev.type == "cuda" and dev.index is not None and dev.index >= torch.cuda.device_count():
        count = torch.cuda.device_count()
        raise ConfigurationError(f"device {device}: this machine has {count} CUDA device(s), cuda:0 to "
                                 f"cuda:{count - 1}")
    return dev


def _number(kind: Callable[[str], Number], text: str) -> Optional[Number]:
    """``kind(text)``, or None where ``text`` is not such a number."""
    try:
        return kind(text)
    except ValueError:
        return None
