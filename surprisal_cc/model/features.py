"""Log-mel filterbank front end shared by APC pretraining and the ASR recipes.

One definition is used everywhere: torchaudio's Kaldi-compatible ``fbank``
(80 mel bins, 25 ms Hamming window, 10 ms hop, dither 0, no CMVN) on 16 kHz
audio scaled to [-1, 1], followed by frame skipping (keep every ``frame_skip``-th
frame; the paper keeps every second frame, i.e. 20 ms frames).

Example
-------
>>> import torch
>>> front_end = FilterbankFrontEnd()
>>> feats, lengths = front_end(torch.randn(2, 16000), torch.tensor([16000, 8000]))
>>> feats.shape, lengths.tolist()
(torch.Size([2, 49, 80]), [49, 24])
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Tuple

import torch
from torch import Tensor, nn
from torchaudio.compliance import kaldi

from surprisal_cc.checks import is_number


@dataclass(frozen=True)
class FeatureConfig:
    """Everything that determines the features; part of the feature-cache key.

    Arguments
    ---------
    sample_rate : int
        Sample rate of the audio in Hz.
    n_mels : int
        Mel bins per frame.
    frame_length_ms : float
        Window length in milliseconds.
    frame_shift_ms : float
        Hop between windows in milliseconds (before frame skipping).
    window_type : str
        Window function, as ``torchaudio.compliance.kaldi.fbank`` names it.
    dither : float
        Dithering constant (0: none, so the features are deterministic).
    frame_skip : int
        Keep every ``frame_skip``-th frame (2: 20 ms frames).

    Example
    -------
    >>> config = FeatureConfig()
    >>> config.window_samples, config.shift_samples, config.num_frames(16000)
    (400, 160, 49)
    """

    sample_rate: int = 16000
    n_mels: int = 80
    frame_length_ms: float = 25.0
    frame_shift_ms: float = 10.0
    window_type: str = "hamming"
    dither: float = 0.0
    frame_skip: int = 2

    def __post_init__(self) -> None:
        """Refuse values the front end cannot run with, naming the field (a :class:`ValueError`).

        Example
        -------
        >>> FeatureConfig(frame_skip=0)
        Traceback (most recent call last):
            ...
        ValueError: frame_skip must be a whole number of at least 1, got 0
        """
        for name, least in (("sample_rate", 1), ("n_mels", 4), ("frame_skip", 1)):  # kaldi: more than 3 mel bins
            value = getattr(self, name)
            if not is_number(value, integer=True) or value < least:
                raise ValueError(f"{name} must be a whole number of at least {least}, got {value!r}")
        for name in ("frame_length_ms", "frame_shift_ms"):
            value = getattr(self, name)
            if not is_number(value) or value <= 0:
                raise ValueError(f"{name} must be a positive finite number of milliseconds, got {value!r}")
        if self.window_samples < 2 or self.shift_samples < 1:
            raise ValueError(f"frame_length_ms {self.frame_length_ms!r} and frame_shift_ms {self.frame_shift_ms!r} "
                             f"make windows of {self.window_samples} samples every {self.shift_samples} at "
                             f"{self.sample_rate} Hz: a window needs at least 2 samples, a shift at least 1")
        if self.window_type not in kaldi.WINDOWS:
            raise ValueError(f"window_type must be one of {', '.join(kaldi.WINDOWS)}, got {self.window_type!r}")
        if not is_number(self.dither) or self.dither < 0:
            raise ValueError(f"dither must be a finite number of at least 0, got {self.dither!r}")

    def as_dict(self) -> Dict[str, object]:
        """The fields as a plain dict (JSON-ready)."""
        return asdict(self)

    @property
    def window_samples(self) -> int:
        """Samples per analysis window, truncated as Kaldi's ``fbank`` truncates them (11025 Hz x 30 ms
        is 330.75: 330 samples).

        Example
        -------
        >>> FeatureConfig().window_samples, FeatureConfig(sample_rate=11025, frame_length_ms=30).window_samples
        (400, 330)
        """
        return kaldi_samples(self.sample_rate, self.frame_length_ms)

    @property
    def shift_samples(self) -> int:
        """Samples between consecutive windows (before frame skipping), truncated as Kaldi's ``fbank``
        truncates them."""
        return kaldi_samples(self.sample_rate, self.frame_shift_ms)

    @property
    def min_samples(self) -> int:
        """The fewest samples that give one model frame: one window (frame skipping keeps frame 0, so
        it does not change this); one sample less gives none. The shortest usable audio of a model.

        Example
        -------
        >>> config = FeatureConfig(frame_length_ms=50.0, frame_skip=3)
        >>> config.min_samples, config.num_frames(config.min_samples - 1), config.num_frames(config.min_samples)
        (800, 0, 1)
        """
        return self.window_samples

    def num_frames(self, num_samples: int) -> int:
        """Exact number of output frames for a signal of ``num_samples`` samples.

        Example
        -------
        >>> FeatureConfig().num_frames(399), FeatureConfig().num_frames(400)
        (0, 1)
        >>> FeatureConfig(frame_skip=1).num_frames(16000)
        98
        """
        if num_samples < self.window_samples:
            return 0
        full = 1 + (num_samples - self.window_samples) // self.shift_samples
        return -(-full // self.frame_skip)  # ceil: frames 0, k, 2k, ... are kept

    @property
    def audio_limits(self) -> Dict[str, int]:
        """The sample rate and shortest usable audio (:attr:`min_samples`) as the readers and checks of
        :mod:`surprisal_cc.data.audio` take them (``target_sr``, ``min_samples``).

        Example
        -------
        >>> FeatureConfig(sample_rate=8000).audio_limits
        {'target_sr': 8000, 'min_samples': 200}
        """
        return {"target_sr": self.sample_rate, "min_samples": self.min_samples}

    def read_audio(self, path) -> Tensor:
        """The (S,) float32 mono waveform of the audio file ``path`` at :attr:`sample_rate` (resampled where
        the file's differs; :func:`~surprisal_cc.data.audio.read_audio`), a file too short for one frame
        refused (a :class:`~surprisal_cc.data.errors.BadAudioError` naming it): how training, the feature
        cache, realignment, analysis and inference read a file.

        Example
        -------
        >>> import tempfile, numpy as np, soundfile as sf
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     sf.write(f"{tmp}/a.wav", np.zeros(16000), 16000)
        ...     FeatureConfig(sample_rate=8000).read_audio(f"{tmp}/a.wav").shape
        torch.Size([8000])
        """
        from surprisal_cc.data.audio import read_audio

        return read_audio(path, **self.audio_limits)


def kaldi_samples(sample_rate: int, milliseconds: float) -> int:
    """Samples in ``milliseconds`` at ``sample_rate`` Hz, computed as ``torchaudio.compliance.kaldi``
    computes its window and shift (the same float product, truncated), so that frame counts agree.

    Example
    -------
    >>> kaldi_samples(16000, 25.0), kaldi_samples(11025, 12.5)
    (400, 137)
    """
    return int(float(sample_rate) * milliseconds * kaldi.MILLISECONDS_TO_SECONDS)


class FilterbankFrontEnd(nn.Module):
    """Waveforms (B, S) with sample lengths (B,) -> features (B, T, n_mels), frame lengths (B,).

    ``lengths`` are absolute sample counts (int). Each utterance is processed on its real
    samples only, so padding never leaks into features, and the frame counts are exact.

    Arguments
    ---------
    config : FeatureConfig, optional
        The feature definition; None: ``FeatureConfig(**overrides)``.
    **overrides
        Fields of :class:`FeatureConfig`, used when ``config`` is None.

    Example
    -------
    >>> import torch
    >>> front_end = FilterbankFrontEnd(frame_skip=1)
    >>> feats, lengths = front_end(torch.randn(2, 16000), torch.tensor([16000, 399]))
    >>> feats.shape, lengths.tolist()
    (torch.Size([2, 98, 80]), [98, 0])
    """

    def __init__(self, config: FeatureConfig | None = None, **overrides):
        super().__init__()
        self.config = config or FeatureConfig(**overrides)

    def single(self, waveform: Tensor) -> Tensor:
        """Features of one 1-D waveform: (T, n_mels); T is 0 when it is shorter than one window."""
        cfg = self.config
        if waveform.numel() < cfg.window_samples:
            return waveform.new_zeros(0, cfg.n_mels)
        feats = kaldi.fbank(
            waveform.unsqueeze(0).float(),
            num_mel_bins=cfg.n_mels,
            frame_length=cfg.frame_length_ms,
            frame_shift=cfg.frame_shift_ms,
            dither=cfg.dither,
            window_type=cfg.window_type,
            sample_frequency=float(cfg.sample_rate),
            energy_floor=0.0,
        )
        return feats[:: cfg.frame_skip]

    @torch.no_grad()
    def forward(self, wavs: Tensor, lengths: Tensor) -> Tuple[Tensor, Tensor]:
        """Features of a padded batch.

        Arguments
        ---------
        wavs : torch.Tensor
            (B, S) waveforms in [-1, 1], padded at the end.
        lengths : torch.Tensor
            (B,) sample counts (integers, not relative lengths).

        Returns
        -------
        feats : torch.Tensor
            (B, T, n_mels) features, zero-padded after each utterance's frames.
        frame_lengths : torch.Tensor
            (B,) frame counts, on the device of ``wavs``.
        """
        per_utt = [self.single(w[: int(n)]) for w, n in zip(wavs, lengths.tolist())]
        frame_lengths = torch.tensor([f.shape[0] for f in per_utt], dtype=torch.long)
        feats = nn.utils.rnn.pad_sequence(per_utt, batch_first=True)
        return feats, frame_lengths.to(wavs.device)
