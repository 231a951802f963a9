"""Audio for the ONNX runtime, in numpy and soundfile (no torch): decoding (files are checked by
:func:`surprisal_cc.data.audio_files.check_audio_file`, as for training: one ``path: problem`` line per
unusable file, with :data:`MAX_RESAMPLE_KERNEL` for this reader's resampler), mono downmix and resampling
with torchaudio's windowed-sinc kernel (``sinc_interp_hann``, 6 zero crossings, roll-off 0.99), whole files
or spans of them (long files, part by part).

Example
-------
>>> import tempfile, soundfile as sf
>>> with tempfile.TemporaryDirectory() as tmp:
...     sf.write(f"{tmp}/a.wav", np.zeros(44100), 44100)
...     read_audio(f"{tmp}/a.wav", 16000, 400).shape
(16000,)
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np
import soundfile as sf

from surprisal_cc.data.audio_files import PathLike, refuse_short_audio, resampled_length, soundfile_name

MAX_RESAMPLE_KERNEL = 1 << 20  # taps of the resampling kernel (rate / gcd x target / gcd) this reader builds


def read_span(sound_file: sf.SoundFile, start: int = 0, stop: Optional[int] = None) -> np.ndarray:
    """Samples ``[start, stop)`` of an open file at its own rate, mono float32 (the channels' mean)."""
    sound_file.seek(start)
    data = sound_file.read(-1 if stop is None else max(0, stop - start), dtype="float32", always_2d=True)
    return np.ascontiguousarray(data.mean(axis=1), dtype=np.float32)


def _sinc_kernel(orig: int, new: int, width_zeros: int = 6, rolloff: float = 0.99) -> Tuple[np.ndarray, int]:
    """torchaudio's ``_get_sinc_resample_kernel`` (sinc_interp_hann) for rates reduced by their gcd."""
    base = min(orig, new) * rolloff
    width = math.ceil(width_zeros * orig / base)
    idx = np.arange(-width, width + orig, dtype=np.float64)[None, :] / orig
    t = np.arange(0, -new, -1, dtype=np.float64)[:, None] / new + idx
    t = np.clip(t * base, -width_zeros, width_zeros)
    window = np.cos(t * math.pi / width_zeros / 2) ** 2
    t = t * math.pi
    with np.errstate(invalid="ignore", divide="ignore"):
        kernels = np.where(t == 0, 1.0, np.sin(t) / t)
    return (kernels * window * (base / orig)).astype(np.float32), width


def resample(wav: np.ndarray, rate: int, target_sr: int) -> np.ndarray:
    """``wav`` (S,) from ``rate`` to ``target_sr`` Hz, as :func:`torchaudio.functional.resample` computes it."""
    if rate == target_sr:
        return wav
    common = math.gcd(rate, target_sr)
    orig, new = rate // common, target_sr // common
    kernel, width = _sinc_kernel(orig, new)
    padded = np.pad(np.asarray(wav, dtype=np.float32), (width, width + orig))
    taps = kernel.shape[1]
    count = (padded.size - taps) // orig + 1
    frames = np.lib.stride_tricks.as_strided(padded, (count, taps), (orig * padded.strides[0], padded.strides[0]))
    out = (frames @ kernel.T).reshape(-1)
    return out[:resampled_length(wav.size, orig, new)].astype(np.float32)


def read_audio(path: PathLike, target_sr: int, min_samples: int) -> np.ndarray:
    """The (S,) float32 mono waveform of ``path`` at ``target_sr``; audio too short for one frame is a
    :class:`~surprisal_cc.data.errors.BadAudioError` naming the file."""
    with sf.SoundFile(soundfile_name(path)) as sound_file:
        wav, rate = read_span(sound_file), sound_file.samplerate
    refuse_short_audio(path, wav.size, rate, min_samples, target_sr)
    return resample(wav, rate, target_sr)


class SpanReader:
    """Samples ``[start, stop)`` of a file at the model's rate, read part by part (long files): memory is
    that of a part, whatever the file's length (:func:`surprisal_cc.data.audio.read_resampled_span`'s blocks
    and margins)."""

    def __init__(self, path: PathLike, target_sr: int):
        self.file = sf.SoundFile(soundfile_name(path))
        self.target_sr = target_sr
        self.total = resampled_length(self.file.frames, self.file.samplerate, target_sr)

    def read(self, start: int, stop: int) -> np.ndarray:
        rate, target = self.file.samplerate, self.target_sr
        if rate == target:
            return read_span(self.file, start, stop)
        common = math.gcd(rate, target)
        block_in, block_out = rate // common, target // common
        reach = -(-10 * max(block_in, block_out) // block_out) + 1
        margin = -(-reach // block_in)
        first = max(0, start // block_out - margin)
        last = (stop - 1) // block_out + 1 + margin
        wav = resample(read_span(self.file, first * block_in, min(self.file.frames, last * block_in)), rate, target)
        return wav[start - first * block_out:stop - first * block_out]

    def close(self) -> None:
        self.file.close()
