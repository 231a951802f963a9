"""Audio files: loading and checks (soundfile based; no ffmpeg needed), and the length check of in-memory
batches (the batches themselves: :mod:`surprisal_cc.data.waveforms`).

Policy: audio that is not 16 kHz is resampled on load and multi-channel audio is downmixed
(mean over channels); both are reported once, at prepare time, with the file names.  Files that
cannot be decoded, are empty, too short, or hold NaN, infinite or far out-of-range (int16-scaled
float) samples stop preparation with ONE error that lists all of them, unless
``skip_bad_audio=True`` (then they are left out with a warning).

Too short is shorter than a model's one frame where the model is known (``min_samples``, its
``FeatureConfig.min_samples`` at its sample rate), and shorter than :data:`MIN_DURATION_S` (one
25 ms frame) where it is not (:func:`short_audio_problem`).
"""
from __future__ import annotations

import functools
import math
import multiprocessing
import numbers
import os
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import soundfile as sf
import torch
import torchaudio

from surprisal_cc.data.errors import MAX_LISTED, BadAudioError, DataPreparationError, DataPreparationWarning, first_listed
from surprisal_cc.data.audio_files import (CLIP_LEVEL, MAX_PEAK, MIN_DURATION_S, TARGET_SAMPLE_RATE, AudioInfo,  # noqa: F401
                                           PathLike, check_audio_file, checked_min_samples, inspect_audio,
                                           milliseconds, refuse_short_audio, resampled_length, short_audio_problem,
                                           soundfile_name)
from surprisal_cc.data.manifest import list_files

POOL_THRESHOLD = 64  # use a worker pool from this many files on
# RMS level (dBFS, of the mono mix) below which a file is quieter than any training speech by a margin:
# train-clean-5 lies at -39.8 to -17.8 dBFS (median -25.7); 20 dB quieter, the shipped model's PER on
# mfa-dev rises by 11 points (docs/results/MiniLibriSpeech/level_sensitivity.json)
QUIET_DBFS = -45.0
# Share of samples at or above CLIP_LEVEL of full scale from which a file counts as clipped: in dev-clean-2
# and a third of train-clean-5 (1,596 files) it is at most 0.07 %, and zero in all but 8 of them
CLIPPED_SHARE = 0.01
# torchaudio's resampling kernel holds (rate / gcd) x (target / gcd) taps: 70,560 for 44.1 kHz, 256 million
# (gigabytes, minutes per second of audio) for 16001 Hz; above this many, a polyphase filter resamples
MAX_RESAMPLE_KERNEL = 1 << 20
# what libsndfile decodes
AUDIO_SUFFIXES = (".flac", ".wav", ".sph", ".ogg", ".opus", ".mp3", ".aiff", ".aif")


def read_audio(path: PathLike, target_sr: int = TARGET_SAMPLE_RATE, min_samples: Optional[int] = None) -> torch.Tensor:
    """Decode ``path`` to a mono float32 tensor of shape ``(samples,)`` at ``target_sr``.

    Multi-channel audio is averaged to mono; other sample rates are resampled (:func:`resample`).
    With ``min_samples`` (a model's ``FeatureConfig.min_samples``), audio of fewer samples at
    ``target_sr`` is a :class:`BadAudioError` of one line naming the file and its own duration
    (:func:`refuse_short_audio`), before any resampling; None: no length check.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     sf.write(f"{tmp}/a.wav", np.zeros(480), 16000)
    ...     wav = read_audio(f"{tmp}/a.wav", min_samples=480)
    ...     try:
    ...         read_audio(f"{tmp}/a.wav", min_samples=800)
    ...     except BadAudioError as err:
    ...         print(wav.shape, str(err) == f"{tmp}/a.wav: " + short_audio_problem(480, 16000, 800))
    torch.Size([480]) True
    """
    with sf.SoundFile(soundfile_name(path)) as sound_file:
        wav, sr = read_audio_span(sound_file), sound_file.samplerate
    if min_samples is not None:
        refuse_short_audio(path, wav.numel(), sr, min_samples, target_sr)
    if sr != target_sr:
        wav = resample(wav, sr, target_sr)
    return wav


def read_audio_span(sound_file: sf.SoundFile, start: int = 0, stop: Optional[int] = None) -> torch.Tensor:
    """Samples ``[start, stop)`` (``stop`` None: to the end) of an open file at its own rate, as a mono
    float32 tensor (the channels' mean).

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     sf.write(f"{tmp}/a.wav", np.array([[0.5, 0.0], [0.25, 0.25], [0.0, -0.5]]), 8000)
    ...     with sf.SoundFile(f"{tmp}/a.wav") as sound_file:
    ...         read_audio_span(sound_file, 1), read_audio_span(sound_file, 0, 1)
    (tensor([ 0.2500, -0.2500]), tensor([0.2500]))
    """
    sound_file.seek(start)
    data = sound_file.read(-1 if stop is None else max(0, stop - start), dtype="float32", always_2d=True)
    return torch.from_numpy(np.ascontiguousarray(data.mean(axis=1)))


def read_resampled_span(sound_file: sf.SoundFile, start: int, stop: int,
                        target_sr: int = TARGET_SAMPLE_RATE) -> torch.Tensor:
    """Samples ``[start, stop)`` at ``target_sr`` of an open file, mono (:func:`read_audio_span`), as
    resampling the whole file gives them (:func:`read_audio`; equal up to float rounding), from only the
    file's samples around them: memory is that of the span, whatever the file's length.

    The file is read in whole blocks of ``rate / gcd`` samples (each resamples to ``target_sr / gcd``
    samples, with the filter's phases of the whole file), with a margin of blocks on each side that
    covers the resampling filter; the span is cut from what they resample to.

    Example
    -------
    >>> import tempfile
    >>> signal = np.sin(np.arange(44100) / 7.0) / 2
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     sf.write(f"{tmp}/a.wav", signal, 44100, subtype="FLOAT")
    ...     whole = read_audio(f"{tmp}/a.wav")
    ...     with sf.SoundFile(f"{tmp}/a.wav") as sound_file:
    ...         span = read_resampled_span(sound_file, 5000, 6000)
    >>> span.shape, bool((span - whole[5000:6000]).abs().max() < 1e-5)
    (torch.Size([1000]), True)
    """
    rate = sound_file.samplerate
    if rate == target_sr:
        return read_audio_span(sound_file, start, stop)
    common = math.gcd(rate, target_sr)
    block_in, block_out = rate // common, target_sr // common
    # each filter reads at most this many input samples either side of an output's position: torchaudio's
    # ceil(6 x rate / (0.99 x min(rate, target))), resample_poly's 10 x max(rate, target) / target
    reach = -(-10 * max(block_in, block_out) // block_out) + 1
    margin = -(-reach // block_in)  # in blocks
    first = max(0, start // block_out - margin)
    last = (stop - 1) // block_out + 1 + margin
    wav = resample(read_audio_span(sound_file, first * block_in, min(sound_file.frames, last * block_in)),
                   rate, target_sr)
    return wav[start - first * block_out:stop - first * block_out]


def sample_rate_hz(rate: Any, name: str = "sample_rate") -> int:
    """``rate`` as a whole number of Hz (``16000.0`` is 16000); a :class:`ValueError` naming ``name`` and
    the value for anything else (8000.5, 0, -16000, nan, a string), instead of truncating it.

    Example
    -------
    >>> sample_rate_hz(16000.0), sample_rate_hz(np.int64(8000))
    (16000, 8000)
    >>> sample_rate_hz(8000.5)
    Traceback (most recent call last):
        ...
    ValueError: sample_rate must be a positive whole number of Hz, got 8000.5
    """
    value = rate.item() if getattr(rate, "ndim", None) == 0 else rate  # a 0-d tensor or array
    if (isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value).is_integer()
            or value <= 0):
        raise ValueError(f"{name} must be a positive whole number of Hz, got {rate!r}")
    return int(value)


def resample(wav: torch.Tensor, rate: int, target_sr: int) -> torch.Tensor:
    """``wav`` (..., samples) from ``rate`` to ``target_sr`` Hz: :func:`torchaudio.functional.resample`,
    or, for rates that share only a small factor with ``target_sr`` (its kernel over
    :data:`MAX_RESAMPLE_KERNEL` taps), scipy's polyphase filter, in bounded memory. Either rate not a
    positive whole number of Hz: :class:`ValueError` (:func:`sample_rate_hz`).

    Example
    -------
    >>> resample(torch.zeros(44100), 44100, 16000).shape, resample(torch.zeros(2, 16001), 16001, 16000).shape
    (torch.Size([16000]), torch.Size([2, 16000]))
    """
    rate, target_sr = sample_rate_hz(rate, "rate"), sample_rate_hz(target_sr, "target_sr")
    common = math.gcd(rate, target_sr)
    if (rate // common) * (target_sr // common) <= MAX_RESAMPLE_KERNEL:
        return torchaudio.functional.resample(wav, rate, target_sr)
    from scipy.signal import resample_poly

    out = resample_poly(wav.detach().cpu().numpy(), target_sr // common, rate // common, axis=-1)
    return torch.from_numpy(out.astype(np.float32)).to(wav.device)


def level_summary(levels: Sequence[float]) -> Dict[str, Any]:
    """The median and range (dBFS, to 0.1 dB) of files' RMS levels (:attr:`AudioInfo.rms_dbfs`), JSON-ready:
    a silent file (every sample zero: -inf dBFS) is counted in ``silent_files``, not in the median and
    range, so no -inf reaches them; they are None where no file has sound.

    Example
    -------
    >>> level_summary([-20.04, -30.0, -25.0, -math.inf])
    {'rms_dbfs_median': -25.0, 'rms_dbfs_range': [-30.0, -20.0], 'silent_files': 1}
    >>> level_summary([-math.inf])
    {'rms_dbfs_median': None, 'rms_dbfs_range': None, 'silent_files': 1}
    """
    heard = [float(level) for level in levels if level > -math.inf]
    return {"rms_dbfs_median": round(float(np.median(heard)), 1) if heard else None,
            "rms_dbfs_range": [round(min(heard), 1), round(max(heard), 1)] if heard else None,
            "silent_files": len(levels) - len(heard)}


def _listing(items: Sequence[str], limit: int = MAX_LISTED) -> str:
    """The first ``limit`` of ``items`` and a line counting the rest (:func:`~surprisal_cc.data.errors.first_listed`),
    each on an indented line of its own."""
    return "".join(f"\n  {line}" for line in first_listed(items, limit))


def check_audio_each(paths: Sequence[PathLike], num_workers: int = 1, min_samples: Optional[int] = None,
                     target_sr: int = TARGET_SAMPLE_RATE) -> List[Tuple[str, Optional[AudioInfo], Optional[str]]]:
    """:func:`check_audio_file` of every path, in order.

    Arguments
    ---------
    paths : sequence of str or path
        Audio files.
    num_workers : int
        Worker processes, used from :data:`POOL_THRESHOLD` files on.
    min_samples : int, optional
        The model's shortest usable audio in samples at ``target_sr`` (its ``FeatureConfig.min_samples``);
        None: :data:`MIN_DURATION_S`.
    target_sr : int
        The model's sample rate.

    Example
    -------
    >>> check_audio_each(["missing.flac"])
    [('missing.flac', None, 'file does not exist')]
    """
    path_strs = [str(p) for p in paths]
    check = functools.partial(check_audio_file, min_samples=min_samples, target_sr=target_sr)
    if num_workers > 1 and len(path_strs) >= POOL_THRESHOLD:
        ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
        with ctx.Pool(num_workers) as pool:
            return pool.map(check, path_strs, chunksize=32)
    return [check(p) for p in path_strs]


def check_audio_many(paths: Sequence[PathLike], num_workers: int = 1, min_samples: Optional[int] = None,
                     target_sr: int = TARGET_SAMPLE_RATE) -> Tuple[Dict[str, AudioInfo], List[str]]:
    """Decode every file once: ``({path: AudioInfo} of usable files, ["path: problem", ...])``
    (arguments as :func:`check_audio_each`'s).

    Example
    -------
    >>> check_audio_many(["missing.flac"])
    ({}, ['missing.flac: file does not exist'])
    """
    return split_checked(check_audio_each(paths, num_workers, min_samples, target_sr))


def split_checked(checks: Sequence[Tuple[str, Optional[AudioInfo], Optional[str]]]
                  ) -> Tuple[Dict[str, AudioInfo], List[str]]:
    """``({path: AudioInfo} of usable files, ["path: problem", ...])`` from :func:`check_audio_each`'s results.

    Example
    -------
    >>> infos, problems = split_checked([("a.flac", AudioInfo(1.0, 16000, 1, 16000), None),
    ...                                  ("b.flac", None, "empty file (0 bytes)")])
    >>> list(infos), problems
    (['a.flac'], ['b.flac: empty file (0 bytes)'])
    """
    infos: Dict[str, AudioInfo] = {}
    problems: List[str] = []
    for path, info, problem in checks:
        if info is None:
            problems.append(f"{path}: {problem}")
        else:
            infos[path] = info
    return infos, problems


def refuse_bad_audio(problems: Sequence[str], total: int, skip_bad: bool, hint: str, none_usable_hint: str = "",
                     *, bad: Optional[int] = None, error: type = BadAudioError) -> None:
    """Every input usable, or with ``skip_bad`` the caller leaves the bad ones out (and lists them):
    otherwise ``error`` (a :class:`BadAudioError`) of the ``problems`` lines out of ``total``, with
    ``hint`` when some are usable and ``none_usable_hint`` when none is (``bad``: how many are bad,
    default ``len(problems)``).

    Example
    -------
    >>> refuse_bad_audio(["a.flac: file does not exist"], 2, skip_bad=True, hint="pass --skip-bad")
    >>> refuse_bad_audio(["a.flac: file does not exist"], 2, skip_bad=False, hint="pass --skip-bad")
    Traceback (most recent call last):
        ...
    surprisal_cc.data.errors.BadAudioError: a.flac: file does not exist
    pass --skip-bad
    """
    if problems and not skip_bad:
        raise error(list(problems), total,
                    hint if (len(problems) if bad is None else bad) < total else none_usable_hint)


def check_audio_files(
    paths: Sequence[PathLike],
    *,
    target_sr: int = TARGET_SAMPLE_RATE,
    skip_bad_audio: bool = False,
    num_workers: int = 2,
    min_samples: Optional[int] = None,
) -> Dict[str, AudioInfo]:
    """Decode every file of a corpus and return ``{path: AudioInfo}`` for the usable ones.

    Warns (:class:`DataPreparationWarning`) about files that will be resampled or downmixed.
    Raises :class:`DataPreparationError` counting every unreadable/corrupt/empty/too short file and
    listing the first :data:`MAX_LISTED` (``min_samples``: as :func:`check_audio_file`'s), or with
    ``skip_bad_audio=True`` leaves them out and warns so, listing them the same way.
    """
    good, bad = check_audio_many(paths, num_workers, min_samples, target_sr)
    warn_converted(good, target_sr, stacklevel=3)  # names the caller of check_audio_files
    if bad and not skip_bad_audio:
        raise DataPreparationError(
            f"{len(bad)} unusable audio file(s):" + _listing(bad) + "\nRe-download or repair "
            "these files, or set skip_bad_audio to True (--skip_bad_audio=True) to leave them out (the first "
            f"{MAX_LISTED} will be listed)."
        )
    if bad:
        warnings.warn(
            f"skip_bad_audio=True: leaving out {len(bad)} unusable audio file(s):" + _listing(bad),
            DataPreparationWarning,
            stacklevel=2,
        )
    return good


def check_audio(path: PathLike, sample_rate: int = TARGET_SAMPLE_RATE, stacklevel: int = 2,
                min_samples: Optional[int] = None) -> None:
    """Raise :class:`BadAudioError` unless ``path`` is usable audio; warn when it will be converted.

    The error has one line naming the file; the :class:`DataPreparationWarning` says that the file
    will be resampled to ``sample_rate`` or downmixed to mono, and is reported at the caller
    ``stacklevel`` frames up (as :func:`warnings.warn` counts: 2 is this function's caller).
    ``min_samples``: the model's shortest usable audio at ``sample_rate`` (its
    ``FeatureConfig.min_samples``); None: :data:`MIN_DURATION_S`.

    Example
    -------
    >>> import tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     bad = Path(tmp) / "bad.wav"
    ...     _ = bad.write_text("not audio")
    ...     try:
    ...         check_audio(bad)
    ...     except BadAudioError as err:
    ...         print(len(err.problems), err.problems[0].startswith(str(bad)))
    1 True
    """
    infos, problems = check_audio_many([path], min_samples=min_samples, target_sr=sample_rate)
    if problems:
        raise BadAudioError(problems, 1)
    warn_converted(infos, sample_rate, stacklevel=stacklevel + 1)


def warn_converted(infos: Dict[str, Any], sample_rate: int = TARGET_SAMPLE_RATE, stacklevel: int = 2,
                   input_level: Optional[float] = None) -> None:
    """Warn once per kind of conversion (resampling, downmixing) with the files it applies to, once
    more for files below the model's rate (upsampling cannot restore their missing band), and once
    for files quieter than :data:`QUIET_DBFS` (the features are not level-normalised), unless the
    model scales its input to ``input_level`` dBFS (``ConditionalASR.set_input_level``); digital
    silence is not counted as quiet. Files with :data:`CLIPPED_SHARE` or more of their samples at
    full scale (:data:`CLIP_LEVEL`) are named as clipped, whatever the input level.

    Corpus preparation, ``evaluate`` and ``transcribe`` all report converted files this way: one
    :class:`DataPreparationWarning` per kind, listing up to :data:`MAX_LISTED` files.

    Arguments
    ---------
    infos : dict of str to AudioInfo
        Usable files, as :func:`check_audio_many` returns them.
    sample_rate : int
        The model's sample rate.
    stacklevel : int
        The frame the warnings are reported at, as :func:`warnings.warn` counts (2: this
        function's caller).
    input_level : float, optional
        The RMS level (dBFS) the model scales each utterance to, if it does.

    Example
    -------
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     warn_converted({"a.wav": AudioInfo(1.0, 8000, 2, 8000)})
    >>> for w in caught:
    ...     print(w.message)
    1 file(s) are not 16000 Hz; resampled to 16000 Hz on load:
      a.wav (8000 Hz)
    1 file(s) have no content above half their sample rate, where speech at 16000 Hz (the model's training audio) has it; expect a higher error rate:
      a.wav (8000 Hz)
    1 file(s) have more than one channel; downmixed to mono (channel mean) on load:
      a.wav (2 channels)
    """
    other_rate = [f"{path} ({info.sample_rate} Hz)" for path, info in infos.items() if info.sample_rate != sample_rate]
    multichannel = [f"{path} ({info.channels} channels)" for path, info in infos.items() if info.channels > 1]
    if other_rate:
        warnings.warn(f"{len(other_rate)} file(s) are not {sample_rate} Hz; resampled to {sample_rate} Hz on load:"
                      + _listing(other_rate), DataPreparationWarning, stacklevel=stacklevel)
    narrowband = [f"{path} ({info.sample_rate} Hz)" for path, info in infos.items() if info.sample_rate < sample_rate]
    if narrowband:
        warnings.warn(f"{len(narrowband)} file(s) have no content above half their sample rate, where speech at "
                      f"{sample_rate} Hz (the model's training audio) has it; expect a higher error rate:"
                      + _listing(narrowband), DataPreparationWarning, stacklevel=stacklevel)
    if multichannel:
        warnings.warn(f"{len(multichannel)} file(s) have more than one channel; downmixed to mono (channel mean) "
                      "on load:" + _listing(multichannel), DataPreparationWarning, stacklevel=stacklevel)
    clipped = [f"{path} ({info.clipped_share:.1%} of samples)" for path, info in infos.items()
               if info.clipped_share >= CLIPPED_SHARE]
    if clipped:
        warnings.warn(f"{len(clipped)} file(s) are clipped, {CLIPPED_SHARE:.0%} or more of their samples at full scale "
                      "(LibriSpeech training audio: under 0.1 %); clipping distorts the spectrum, so expect a higher "
                      "error rate, which no input level undoes: record or convert them at a lower gain:"
                      + _listing(clipped), DataPreparationWarning, stacklevel=stacklevel)
    quiet = [f"{path} ({info.rms_dbfs:.1f} dBFS)" for path, info in infos.items()
             if -math.inf < info.rms_dbfs < QUIET_DBFS]
    if quiet and input_level is None:
        warnings.warn(f"{len(quiet)} file(s) have an RMS level below {QUIET_DBFS:g} dBFS, quieter than any "
                      "LibriSpeech training speech (about -26 dBFS); the features are not level-normalised, so "
                      "expect a higher error rate: raise their level first, e.g. ConditionalASR.set_input_level(-26) "
                      "(--input-level -26 of transcribe and evaluate):" + _listing(quiet), DataPreparationWarning,
                      stacklevel=stacklevel)


def iter_audio_paths(paths: Sequence[PathLike]) -> Iterator[Path]:
    """The given paths; a folder stands for the audio files under it (sorted).

    Audio files are those ending in one of :data:`AUDIO_SUFFIXES` (what libsndfile decodes:
    ``.flac``, ``.wav``, ``.sph``, ``.ogg``, ``.opus``, ``.mp3``, ``.aiff``, ``.aif``).

    Example
    -------
    >>> import tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     for name in ("b.flac", "a.wav", "c.opus", "notes.txt"):
    ...         _ = Path(tmp, name).write_text("")
    ...     names = [p.name for p in iter_audio_paths([tmp])]
    >>> names
    ['a.wav', 'b.flac', 'c.opus']
    """
    for path in map(Path, paths):
        if path.is_dir():
            yield from list_files(path, AUDIO_SUFFIXES)
        else:
            yield path


# ----------------------------------------------------------------------------------------------
# In-memory batches too short for a model (the batches themselves: surprisal_cc.data.waveforms)
# ----------------------------------------------------------------------------------------------
def refuse_short_waveforms(samples: torch.Tensor, target_sr: int, min_samples: int) -> None:
    """A :class:`DataPreparationError` of one line naming the places in the batch of the waveforms whose
    ``samples`` (B,) counts at ``target_sr`` Hz (the model's rate) are fewer than ``min_samples`` (the model's
    ``FeatureConfig.min_samples``: one frame).

    Example
    -------
    >>> refuse_short_waveforms(torch.tensor([480, 800]), 16000, 480)
    """
    min_samples = checked_min_samples(min_samples)
    counts = torch.as_tensor(samples).tolist()
    short = [i for i, n in enumerate(counts) if n < min_samples]
    if short:
        listed = ", ".join(map(str, short[:10])) + (f" and {len(short) - 10} more" if len(short) > 10 else "")
        lengths = ", ".join(str(counts[i]) for i in short[:10]) + (" ..." if len(short) > 10 else "")
        raise DataPreparationError(
            f"waveform(s) {listed} of the batch ({lengths} samples at {target_sr} Hz) are shorter than the model's "
            f"shortest usable audio, {milliseconds(min_samples, target_sr)} ({min_samples} samples at {target_sr} Hz: one "
            "frame)")
