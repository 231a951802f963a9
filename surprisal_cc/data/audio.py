"""Audio loading and corpus-wide audio checks (soundfile based; no ffmpeg needed).

Policy: audio that is not 16 kHz is resampled on load and multi-channel audio is downmixed
(mean over channels); both are reported once, at prepare time, with the file names.  Files that
cannot be decoded, are empty or shorter than one 25 ms frame stop preparation with ONE error that
lists all of them, unless ``skip_bad_audio=True`` (then they are left out with a warning).
"""
from __future__ import annotations

import multiprocessing
import os
import warnings
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import soundfile as sf
import torch
import torchaudio

from .errors import DataPreparationError, DataPreparationWarning

PathLike = Union[str, os.PathLike]
TARGET_SAMPLE_RATE = 16000
MIN_DURATION_S = 0.025  # one analysis frame
POOL_THRESHOLD = 64  # use a worker pool from this many files on
MAX_LISTED = 20


@dataclass(frozen=True)
class AudioInfo:
    """What decoding a file told us."""

    duration: float
    sample_rate: int
    channels: int
    num_samples: int


def read_audio(path: PathLike, target_sr: int = TARGET_SAMPLE_RATE) -> torch.Tensor:
    """Decode ``path`` to a mono float32 tensor of shape ``(samples,)`` at ``target_sr``.

    Multi-channel audio is averaged to mono; other sample rates are resampled with
    :func:`torchaudio.functional.resample`.
    """
    data, sr = sf.read(str(path), dtype="float32", always_2d=True)
    wav = torch.from_numpy(np.ascontiguousarray(data.mean(axis=1)))
    if sr != target_sr:
        wav = torchaudio.functional.resample(wav, sr, target_sr)
    return wav


def inspect_audio(path: PathLike) -> AudioInfo:
    """Decode the whole file (so truncated/corrupt data is caught) and describe it."""
    with sf.SoundFile(str(path)) as f:
        sr, channels = f.samplerate, f.channels
        num_samples = 0
        for block in f.blocks(blocksize=1 << 18, dtype="int16", always_2d=True):
            num_samples += block.shape[0]
    return AudioInfo(num_samples / sr if sr else 0.0, sr, channels, num_samples)


def check_audio_file(path: str) -> Tuple[str, Optional[AudioInfo], Optional[str]]:
    """``(path, its AudioInfo, None)`` for usable audio, ``(path, None, what is wrong)`` otherwise.

    Example
    -------
    >>> check_audio_file("missing.flac")
    ('missing.flac', None, 'file does not exist')
    """
    if not os.path.isfile(path):
        return path, None, "file does not exist"
    if os.path.getsize(path) == 0:
        return path, None, "empty file (0 bytes)"
    try:
        info = inspect_audio(path)
    except Exception as exc:  # soundfile raises several types for corrupt data
        return path, None, f"cannot be decoded ({type(exc).__name__}: {exc})"
    if info.num_samples == 0:
        return path, None, "contains 0 samples"
    if info.duration < MIN_DURATION_S:
        return path, None, (
            f"too short ({info.num_samples} samples < one {MIN_DURATION_S * 1000:.0f} ms frame)"
        )
    return path, info, None


def _listing(items: Sequence[str], limit: Optional[int] = MAX_LISTED) -> str:
    limit = len(items) if limit is None else limit
    shown = "\n  ".join(items[:limit])
    more = f"\n  ... and {len(items) - limit} more" if len(items) > limit else ""
    return f"\n  {shown}{more}"


def check_audio_files(
    paths: Sequence[PathLike],
    *,
    target_sr: int = TARGET_SAMPLE_RATE,
    skip_bad_audio: bool = False,
    num_workers: int = 2,
) -> Dict[str, AudioInfo]:
    """Decode every file and return ``{path: AudioInfo}`` for the usable ones.

    Warns (:class:`DataPreparationWarning`) about files that will be resampled or downmixed.
    Raises :class:`DataPreparationError` listing *every* unreadable/corrupt/empty file, or with
    ``skip_bad_audio=True`` leaves them out and warns with the list.
    """
    path_strs = [str(p) for p in paths]
    if num_workers > 1 and len(path_strs) >= POOL_THRESHOLD:
        ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
        with ctx.Pool(num_workers) as pool:
            results = pool.map(check_audio_file, path_strs, chunksize=32)
    else:
        results = [check_audio_file(p) for p in path_strs]

    good: Dict[str, AudioInfo] = {}
    bad: List[str] = []
    other_rate: List[str] = []
    multichannel: List[str] = []
    for path, info, problem in results:
        if info is None:
            bad.append(f"{path}: {problem}")
            continue
        good[path] = info
        if info.sample_rate != target_sr:
            other_rate.append(f"{path} ({info.sample_rate} Hz)")
        if info.channels > 1:
            multichannel.append(f"{path} ({info.channels} channels)")
    if other_rate:
        warnings.warn(
            f"{len(other_rate)} file(s) are not {target_sr} Hz; they will be resampled on load:"
            + _listing(other_rate),
            DataPreparationWarning,
            stacklevel=2,
        )
    if multichannel:
        warnings.warn(
            f"{len(multichannel)} file(s) have more than one channel; they will be downmixed "
            "(channel mean) on load:" + _listing(multichannel),
            DataPreparationWarning,
            stacklevel=2,
        )
    if bad and not skip_bad_audio:
        raise DataPreparationError(
            f"{len(bad)} unusable audio file(s):" + _listing(bad, None) + "\nRe-download or repair "
            "these files, or pass skip_bad_audio=True to leave them out (they will be listed)."
        )
    if bad:
        warnings.warn(
            f"skip_bad_audio=True: leaving out {len(bad)} unusable audio file(s):" + _listing(bad, None),
            DataPreparationWarning,
            stacklevel=2,
        )
    return good
