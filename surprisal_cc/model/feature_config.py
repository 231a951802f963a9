"""What determines the features (:class:`FeatureConfig`): sample rate, mel bins, window, shift, frame
skipping, and the frame counts they give. Imports no torch, so that the ONNX runtime
(:mod:`surprisal_cc.deploy`) computes with the same definition; the front end that computes the features
in torch is :class:`surprisal_cc.model.features.FilterbankFrontEnd`.

Example
-------
>>> config = FeatureConfig()
>>> config.window_samples, config.shift_samples, config.num_frames(16000), config.frame_shift_s
(400, 160, 49, 0.02)
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Dict

from surprisal_cc.checks import is_number

if TYPE_CHECKING:
    from torch import Tensor

#: The window functions ``torchaudio.compliance.kaldi.fbank`` computes (its ``WINDOWS``; a test checks they agree).
KALDI_WINDOWS = ("hamming", "hanning", "povey", "rectangular", "blackman")

__all__ = ["FeatureConfig", "KALDI_WINDOWS", "kaldi_samples"]


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
        if self.window_type not in KALDI_WINDOWS:
            raise ValueError(f"window_type must be one of {', '.join(KALDI_WINDOWS)}, got {self.window_type!r}")
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
    def frame_shift_s(self) -> float:
        """Seconds between the model's frames (the shift times the frame skip)."""
        return self.frame_shift_ms * self.frame_skip / 1000.0

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

    def read_audio(self, path) -> "Tensor":
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
    return int(float(sample_rate) * milliseconds * 0.001)
