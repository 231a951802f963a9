"""Audio files without torch: what decoding a file tells (:class:`AudioInfo`, :func:`inspect_audio`) and
whether it is usable (:func:`check_audio_file`, :func:`refuse_short_audio`: one line saying what is
wrong). The training side's reader (:mod:`surprisal_cc.data.audio`, torch and torchaudio) and the ONNX
runtime (:mod:`surprisal_cc.deploy.audio`, numpy only) both check files with these, so a file is refused
with the same words by both.

Example
-------
>>> import tempfile, numpy as np, soundfile as sf
>>> with tempfile.TemporaryDirectory() as tmp:
...     sf.write(f"{tmp}/a.wav", np.zeros(8000), 16000)
...     path, info, problem = check_audio_file(f"{tmp}/a.wav", min_samples=400)
>>> info.duration, problem, check_audio_file("missing.flac")[2]
(0.5, None, 'file does not exist')
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

import numpy as np
import soundfile as sf

from surprisal_cc.checks import is_number
from surprisal_cc.data.errors import BadAudioError

PathLike = Union[str, os.PathLike]
TARGET_SAMPLE_RATE = 16000
MIN_DURATION_S = 0.025  # one 25 ms analysis frame: the shortest usable audio where no model's features are known
MAX_PEAK = 2.0  # a little over 1 is clipping or resampling overshoot; int16 scale is thousands
CLIP_LEVEL = 0.99  # a sample at or above this share of full scale counts as clipped (AudioInfo.clipped_share)


def soundfile_name(path: PathLike) -> Union[str, bytes]:
    r"""``path`` as soundfile should be given it: the file system's own bytes on POSIX, so that a name
    that is not valid in the locale's encoding (Latin-1 bytes on a UTF-8 system, which Python holds
    as surrogate escapes) still opens; soundfile would encode a ``str`` strictly and fail.

    >>> soundfile_name("a/caf\udce9.flac") == b"a/caf\xe9.flac" if os.name == "posix" else True
    True
    """
    return str(path) if os.name == "nt" else os.fsencode(path)


@dataclass(frozen=True)
class AudioInfo:
    """What decoding a file told us."""

    duration: float
    sample_rate: int
    channels: int
    num_samples: int
    peak: float = 0.0  # largest sample magnitude; inf where a sample is NaN or infinite
    rms_dbfs: float = 0.0  # RMS level of the mono mix (the channel mean), dB relative to full scale
    clipped_share: float = 0.0  # share of samples (every channel) at or above CLIP_LEVEL of full scale


def resampled_length(num_samples: int, rate: int, target_sr: int) -> int:
    """Samples that :func:`resample` makes of ``num_samples`` at ``rate`` Hz: ``ceil(num_samples x
    target_sr / rate)``, computed exactly.

    Example
    -------
    >>> resampled_length(44101, 44100, 16000), resampled_length(3, 8000, 16000)
    (16001, 6)
    """
    return -(-int(num_samples) * int(target_sr) // int(rate))


def milliseconds(num_samples: int, rate: int) -> str:
    """A duration as the audio messages write it: ``milliseconds(441, 44100)`` is ``'10 ms'``."""
    return f"{num_samples * 1000 / rate:.4g} ms"


def checked_min_samples(min_samples: Any) -> int:
    """``min_samples`` as an int, or a ValueError where it is not a whole number of at least 1."""
    if not is_number(min_samples, integer=True) or min_samples < 1:
        raise ValueError(f"min_samples must be a whole number of at least 1 (FeatureConfig.min_samples), "
                         f"got {min_samples!r}")
    return int(min_samples)


def short_audio_problem(num_samples: int, rate: int, min_samples: Optional[int] = None,
                        target_sr: int = TARGET_SAMPLE_RATE) -> Optional[str]:
    """Why ``num_samples`` samples at ``rate`` Hz are too short to use, or None: fewer than
    ``min_samples`` once resampled to ``target_sr`` (a model's ``FeatureConfig.min_samples`` at its
    sample rate: one frame), or where ``min_samples`` is None, shorter than :data:`MIN_DURATION_S`.

    Example
    -------
    >>> short_audio_problem(399, 16000), short_audio_problem(400, 16000)
    ('too short (399 samples < one 25 ms frame)', None)
    >>> short_audio_problem(441, 44100, min_samples=480)
    "too short (10 ms; the model's shortest usable audio is 30 ms, 480 samples at 16000 Hz: one frame)"
    >>> short_audio_problem(1323, 44100, min_samples=480) is None
    True
    """
    if min_samples is None:
        if num_samples / rate < MIN_DURATION_S:
            return f"too short ({num_samples} samples < one {MIN_DURATION_S * 1000:.0f} ms frame)"
        return None
    if resampled_length(num_samples, rate, target_sr) < checked_min_samples(min_samples):
        return (f"too short ({milliseconds(num_samples, rate)}; the model's shortest usable audio is "
                f"{milliseconds(min_samples, target_sr)}, {min_samples} samples at {target_sr} Hz: one frame)")
    return None


def refuse_short_audio(path: PathLike, num_samples: int, rate: int, min_samples: Optional[int] = None,
                       target_sr: int = TARGET_SAMPLE_RATE) -> None:
    """A :class:`BadAudioError` of one line naming ``path``, its duration and the model's shortest usable
    audio where the file's own ``num_samples`` samples at its ``rate`` Hz are too short
    (:func:`short_audio_problem`: fewer than ``min_samples`` once resampled to ``target_sr``): the check of
    both runtimes' ``read_audio`` and of their readers that read a file in parts. The duration is the file's own, as
    :func:`check_audio_file` reports it.

    Example
    -------
    >>> refuse_short_audio("a.flac", 2205, 44100, 800)
    >>> refuse_short_audio("a.flac", 2200, 44100, 800)
    Traceback (most recent call last):
        ...
    surprisal_cc.data.errors.BadAudioError: a.flac: too short (49.89 ms; the model's shortest usable audio is 50 ms, 800 samples at 16000 Hz: one frame)
    """
    problem = short_audio_problem(num_samples, rate, min_samples, target_sr)
    if problem is not None:
        raise BadAudioError([f"{path}: {problem}"], 1)


def inspect_audio(path: PathLike) -> AudioInfo:
    """Decode the whole file (so truncated/corrupt data is caught) and describe it."""
    with sf.SoundFile(soundfile_name(path)) as f:
        sr, channels = f.samplerate, f.channels
        num_samples, peak, energy, at_full_scale = 0, 0.0, 0.0, 0
        for block in f.blocks(blocksize=1 << 18, dtype="float32", always_2d=True):
            num_samples += block.shape[0]
            if block.size:
                magnitude = np.abs(block)
                largest = float(magnitude.max())  # NaN where a sample is NaN
                peak = max(peak, largest if np.isfinite(largest) else np.inf)
                energy += float(np.square(block.mean(axis=1), dtype=np.float64).sum())
                at_full_scale += int(np.count_nonzero(magnitude >= CLIP_LEVEL))
    rms = math.sqrt(energy / num_samples) if num_samples and math.isfinite(energy) else 0.0
    level = 20 * math.log10(rms) if rms > 0 else -math.inf
    clipped = at_full_scale / (num_samples * channels) if num_samples else 0.0
    return AudioInfo(num_samples / sr if sr else 0.0, sr, channels, num_samples, peak, level, clipped)


def check_audio_file(path: PathLike, min_samples: Optional[int] = None, target_sr: int = TARGET_SAMPLE_RATE,
                     max_resample_kernel: Optional[int] = None) -> Tuple[str, Optional[AudioInfo], Optional[str]]:
    """``(path, its AudioInfo, None)`` for usable audio, ``(path, None, what is wrong)`` otherwise: missing,
    a folder, empty, undecodable, no samples, too short, NaN or infinite samples, or far outside [-1, 1].
    Too short is fewer than ``min_samples`` at ``target_sr`` (a model's ``FeatureConfig.min_samples``
    at its rate), or where it is None shorter than :data:`MIN_DURATION_S` (:func:`short_audio_problem`).
    ``max_resample_kernel``: a reader whose resampling kernel holds (rate / gcd) x (target / gcd) taps
    refuses rates that need more (the ONNX runtime's numpy resampler); None: any rate.

    Example
    -------
    >>> check_audio_file("missing.flac")
    ('missing.flac', None, 'file does not exist')
    """
    path = str(path)
    if not os.path.isfile(path):
        return path, None, ("a folder, not an audio file" if os.path.isdir(path) else
                            "broken link (its target does not exist)" if os.path.islink(path) else
                            "file does not exist")
    if os.path.getsize(path) == 0:
        return path, None, "empty file (0 bytes)"
    try:
        info = inspect_audio(path)
    except Exception as exc:  # soundfile raises several types for corrupt data
        return path, None, f"cannot be decoded ({type(exc).__name__}: {exc})"
    if info.num_samples == 0:
        return path, None, "contains 0 samples"
    short = short_audio_problem(info.num_samples, info.sample_rate, min_samples, target_sr)
    if short is not None:
        return path, None, short
    if not np.isfinite(info.peak):
        return path, None, "contains NaN or infinite samples"
    if info.peak > MAX_PEAK:
        return path, None, (f"samples reach {info.peak:g}, far outside [-1, 1] (float audio stored int16-scaled?): "
                            "rescale it to [-1, 1]")
    rate, common = info.sample_rate, math.gcd(info.sample_rate, target_sr)
    if max_resample_kernel is not None and (rate // common) * (target_sr // common) > max_resample_kernel:
        return path, None, (f"sample rate {rate} Hz shares too small a factor with {target_sr} Hz to resample here: "
                            f"convert it to {target_sr} Hz first (e.g. sox in.wav -r {target_sr} out.wav)")
    return path, info, None
