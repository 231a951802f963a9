"""Training-data augmentation (neither is in the paper); both are off by default.

:class:`FeatureMasking`: SpecAugment-style masks on the encoder's input frames. The masks are
SpeechBrain's ``SpectrogramDrop`` along time and along the feature channels. The channel masks'
width is a fraction of the feature width, so that one setting fits the 80 filterbank channels and
the 512 APC features alike. The surprisal that drives the controller is computed from the clean
audio and is not masked. Switched on with ``--augment=True`` (``feature_masking`` in
``hparams/common/conditional_ctc.yaml``).

:class:`SpeedPerturbation`: each training utterance is heard, each epoch, at a speed drawn from
1.0 and the given factors (Kaldi's 0.9/1.0/1.1 recipe, done per utterance and epoch as
SpeechBrain's ``SpeedPerturb`` does, so an epoch keeps its size). Switched on with
``--speed_perturb=[0.9,1.1]``. The perturbed versions are features of their own in the feature
cache (APC features and surprisal included), computed once; validation, test and the controller's
calibration see the clean audio only.
"""
from __future__ import annotations

import random
from typing import Dict, Optional, Sequence

import speechbrain as sb
import torchaudio
from speechbrain.augment.freq_domain import SpectrogramDrop
from torch import Tensor, nn

__all__ = ["FeatureMasking", "SpeedPerturbation", "activate_in_training", "change_speed"]


def change_speed(wav: Tensor, factor: float, sample_rate: int = 16000) -> Tensor:
    """``wav`` played ``factor`` times as fast: duration divided by ``factor``, pitch multiplied by
    it (sox's and Kaldi's ``speed``). The signal is read as if sampled at ``factor * sample_rate``
    and resampled to ``sample_rate`` (:func:`torchaudio.functional.resample`).

    Example
    -------
    >>> import torch
    >>> change_speed(torch.randn(16000), 1.1).shape, change_speed(torch.randn(16000), 0.9).shape
    (torch.Size([14546]), torch.Size([17778]))
    """
    if factor == 1.0:
        return wav
    return torchaudio.functional.resample(wav, orig_freq=round(sample_rate * factor), new_freq=sample_rate)


class SpeedPerturbation:
    """Per-utterance random speed for the training split.

    Arguments
    ---------
    factors : sequence of float
        Speeds besides 1.0 (empty: no perturbation). Each lies in [0.5, 2] and is not 1.
    sample_rate : int
        Audio sample rate.
    key : str
        The hparams key of ``factors``, named by the error about bad factors.

    The draw (:meth:`choose`) is 1.0 until ``active`` is set: the Brain sets it for its training
    stages only, so that the controller's calibration, run before training, sees clean audio.
    Draws use Python's ``random``, which the recipes seed and checkpoint.

    Example
    -------
    >>> perturbation = SpeedPerturbation([0.9, 1.1])
    >>> perturbation.choose(), perturbation.cache_id("1272-128104-0000", 0.9)
    (1.0, '1272-128104-0000@speed0.9')
    >>> perturbation.active = True
    >>> perturbation.choose() in (0.9, 1.0, 1.1)
    True
    """

    def __init__(self, factors: Sequence[float] = (), sample_rate: int = 16000, key: str = "speed_perturb"):
        factors = tuple(float(f) for f in (factors or ()))
        bad = [f for f in factors if not 0.5 <= f <= 2.0 or f == 1.0]
        if bad or len(set(factors)) != len(factors):
            raise ValueError(f"{key}: {list(factors)} is not a list of distinct speeds in [0.5, 2] other "
                             f"than 1.0 (1.0 is always included); e.g. --{key}=[0.9,1.1], or [] for none")
        self.factors, self.sample_rate, self.active = factors, int(sample_rate), False

    def __bool__(self) -> bool:
        return bool(self.factors)

    def __repr__(self) -> str:
        return f"SpeedPerturbation(factors={list(self.factors)})"

    def choose(self) -> float:
        """A random speed among 1.0 and the factors while active, else 1.0."""
        return random.choice((1.0,) + self.factors) if self.active and self.factors else 1.0

    @staticmethod
    def cache_id(utt_id: str, factor: float) -> str:
        """Feature-cache id of ``utt_id`` at speed ``factor`` (the id itself at 1.0)."""
        return utt_id if factor == 1.0 else f"{utt_id}@speed{factor:g}"

    def __call__(self, wav: Tensor, factor: float) -> Tensor:
        """``wav`` at speed ``factor`` (:func:`change_speed`)."""
        return change_speed(wav, factor, self.sample_rate)


def activate_in_training(perturbation: Optional[SpeedPerturbation], stage: sb.Stage) -> None:
    """Let ``perturbation`` (if any) draw speeds in training stages only; called by the Brains'
    ``on_stage_start``, so validation, test and calibration hear the clean audio.

    Example
    -------
    >>> perturbation = SpeedPerturbation([0.9, 1.1])
    >>> activate_in_training(perturbation, sb.Stage.TRAIN); perturbation.active
    True
    >>> activate_in_training(perturbation, sb.Stage.VALID); perturbation.active
    False
    """
    if perturbation is not None:
        perturbation.active = stage == sb.Stage.TRAIN


class FeatureMasking(nn.Module):
    """Time masks and channel masks on a (batch, time, channels) feature tensor, zero inside a mask.

    The defaults follow SpecAugment's LibriSpeech "basic" policy without time warping: two time masks
    and two channel masks. A mask's length is drawn by SpeechBrain's ``SpectrogramDrop`` from
    ``[0, max)``, the upper bound excluded: time masks of up to 49 frames (0.98 s), channel masks of up
    to 26 of 80 channels (a width that rounds to 1 channel masks none).

    Arguments
    ---------
    time_masks : sequence of two ints
        Fewest and most time masks per batch.
    max_time_frames : int
        Bound on a time mask's length, in frames, excluded (50: 1 s at the recipes' 20 ms frames).
    channel_masks : sequence of two ints
        Fewest and most channel masks per batch.
    max_channel_fraction : float
        Bound on a channel mask's width as a fraction of the channels (rounded), excluded.

    Example
    -------
    >>> import torch
    >>> _ = torch.manual_seed(0)
    >>> masking = FeatureMasking(time_masks=(1, 1), max_time_frames=5, channel_masks=(1, 1), max_channel_fraction=0.5)
    >>> feats = torch.ones(2, 40, 16)
    >>> out = masking(feats.clone())
    >>> out.shape, bool((out == 0).any()), bool((out == 1).any())
    (torch.Size([2, 40, 16]), True, True)
    """

    def __init__(self, time_masks: Sequence[int] = (2, 2), max_time_frames: int = 50,
                 channel_masks: Sequence[int] = (2, 2), max_channel_fraction: float = 27 / 80):
        super().__init__()
        if not 0.0 <= max_channel_fraction <= 1.0:
            raise ValueError(f"max_channel_fraction must be in [0, 1], got {max_channel_fraction}")
        self.time_masks, self.channel_masks = tuple(time_masks), tuple(channel_masks)
        self.max_channel_fraction = float(max_channel_fraction)
        self.time_drop = SpectrogramDrop(drop_length_low=0, drop_length_high=int(max_time_frames),
                                         drop_count_low=self.time_masks[0], drop_count_high=self.time_masks[1], dim=1)
        self._channel_drops: Dict[int, SpectrogramDrop] = {}

    def channel_drop(self, channels: int) -> SpectrogramDrop:
        """The channel-mask module for features of this width."""
        if channels not in self._channel_drops:
            width = max(1, round(self.max_channel_fraction * channels))
            self._channel_drops[channels] = SpectrogramDrop(
                drop_length_low=0, drop_length_high=width, drop_count_low=self.channel_masks[0],
                drop_count_high=self.channel_masks[1], dim=2)
        return self._channel_drops[channels]

    def forward(self, feats: Tensor) -> Tensor:
        """Masked ``feats`` (the tensor is modified in place and returned)."""
        return self.channel_drop(feats.shape[-1])(self.time_drop(feats))
