"""The filterbank front end in numpy: :class:`~surprisal_cc.model.features.FilterbankFrontEnd` (torchaudio's
Kaldi-compatible ``fbank``, no dither, ``energy_floor`` 0, then frame skipping) without torch.

The same steps in float32, as torchaudio runs them: frames of ``window_samples`` every ``shift_samples``
(``snip_edges``), each frame's mean removed, pre-emphasis 0.97 (the first sample against itself), the
window, zero padding to a power of two, the power spectrum, Kaldi's mel banks (20 Hz to Nyquist), the log
of each band floored at float32's epsilon, and every ``frame_skip``-th frame kept. The FFT is numpy's, not
torch's (pocketfft both), so values differ in the last bits: within 1e-3 of torchaudio's log-mel values on
speech (``tests/test_deploy.py``), far below what changes a phone.

Example
-------
>>> import numpy as np
>>> feats = fbank_numpy(np.zeros(16000, dtype=np.float32), FeatureConfig())
>>> feats.shape, float(feats.max()) == float(np.log(np.finfo(np.float32).eps))
((49, 80), True)
"""
from __future__ import annotations

import math
from typing import Any, Mapping

import numpy as np

from surprisal_cc.model.feature_config import FeatureConfig

_EPS = np.float32(np.finfo(np.float32).eps)


def numpy_feature_config(features: Mapping[str, Any]) -> FeatureConfig:
    """The :class:`~surprisal_cc.model.feature_config.FeatureConfig` of ``model.json``'s ``features``, checked
    as everywhere, and refused (a ValueError) where this front end cannot compute it: with dither, which
    draws random numbers.

    >>> numpy_feature_config({"dither": 1.0})
    Traceback (most recent call last):
        ...
    ValueError: features.dither 1.0: the numpy front end computes features without dither
    """
    config = FeatureConfig(**dict(features))
    if config.dither:
        raise ValueError(f"features.dither {config.dither}: the numpy front end computes features without dither")
    return config

def _window(kind: str, size: int) -> np.ndarray:
    """torch's symmetric window of ``size`` samples, in float32."""
    n = np.arange(size, dtype=np.float64)
    if kind == "rectangular":
        return np.ones(size, dtype=np.float32)
    if kind == "blackman":
        a = 2 * math.pi / (size - 1)
        return (0.42 - 0.5 * np.cos(a * n) + 0.08 * np.cos(2 * a * n)).astype(np.float32)
    hann = (0.5 - 0.5 * np.cos(2 * math.pi * n / (size - 1))).astype(np.float32)
    if kind == "hamming":
        return (0.54 - 0.46 * np.cos(2 * math.pi * n / (size - 1))).astype(np.float32)
    return hann if kind == "hanning" else np.power(hann, np.float32(0.85))  # povey


def _mel(freq):
    return 1127.0 * np.log(1.0 + freq / 700.0)


def mel_banks(n_mels: int, padded: int, sample_rate: float, low: float = 20.0, high: float = 0.0) -> np.ndarray:
    """Kaldi's triangular mel banks ``(n_mels, padded // 2 + 1)`` (the last column zero), in float32 as
    torchaudio's ``get_mel_banks`` computes them."""
    nyquist = 0.5 * sample_rate
    high = high + nyquist if high <= 0.0 else high
    mel_low, mel_high = 1127.0 * math.log(1.0 + low / 700.0), 1127.0 * math.log(1.0 + high / 700.0)
    delta = (mel_high - mel_low) / (n_mels + 1)
    b = np.arange(n_mels, dtype=np.float32)[:, None]
    left = np.float32(mel_low) + b * np.float32(delta)
    center = np.float32(mel_low) + (b + np.float32(1.0)) * np.float32(delta)
    right = np.float32(mel_low) + (b + np.float32(2.0)) * np.float32(delta)
    freqs = np.float32(sample_rate / padded) * np.arange(padded // 2, dtype=np.float32)
    mel = (np.float32(1127.0) * np.log(np.float32(1.0) + freqs / np.float32(700.0)))[None, :]
    bins = np.maximum(np.float32(0.0), np.minimum((mel - left) / (center - left), (right - mel) / (right - center)))
    return np.pad(bins.astype(np.float32), ((0, 0), (0, 1)))


def fbank_numpy(waveform: np.ndarray, settings: FeatureConfig) -> np.ndarray:
    """(T, n_mels) float32 log-mel frames of one mono waveform (S,) in [-1, 1]; T is 0 when it is shorter
    than one window."""
    wav = np.asarray(waveform, dtype=np.float32).reshape(-1)
    size, shift = settings.window_samples, settings.shift_samples
    if wav.size < size:
        return np.zeros((0, settings.n_mels), dtype=np.float32)
    m = 1 + (wav.size - size) // shift
    frames = np.lib.stride_tricks.as_strided(wav, (m, size), (shift * wav.strides[0], wav.strides[0]))
    frames = frames[::settings.frame_skip]  # only the frames kept: each depends on its own window alone
    frames = frames - frames.mean(axis=1, keepdims=True, dtype=np.float32)
    previous = np.concatenate([frames[:, :1], frames[:, :-1]], axis=1)
    frames = frames - np.float32(0.97) * previous
    frames = frames * _window(settings.window_type, size)[None, :]
    padded = 1 if size == 0 else 2 ** (size - 1).bit_length()
    spectrum = np.abs(np.fft.rfft(frames, n=padded, axis=1)).astype(np.float32) ** 2
    banks = mel_banks(settings.n_mels, padded, float(settings.sample_rate))
    energies = spectrum @ banks.T
    return np.log(np.maximum(energies, _EPS)).astype(np.float32)
