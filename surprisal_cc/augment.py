"""SpecAugment-style masking of the encoder's input frames during training (not in the paper).

The masks are SpeechBrain's ``SpectrogramDrop`` along time and along the feature channels. The
channel masks' width is a fraction of the feature width, so that one setting fits the 80
filterbank channels and the 512 APC features alike. The surprisal that drives the controller is
computed from the clean audio and is not masked. Switched on with ``--augment=True``
(``feature_masking`` in ``hparams/common/conditional_ctc.yaml``).
"""
from __future__ import annotations

from typing import Dict, Sequence

from speechbrain.augment.freq_domain import SpectrogramDrop
from torch import Tensor, nn

__all__ = ["FeatureMasking"]


class FeatureMasking(nn.Module):
    """Time masks and channel masks on a (batch, time, channels) feature tensor, zero inside a mask.

    The defaults are SpecAugment's LibriSpeech "basic" policy without time warping: two time masks
    of up to 1 s and two channel masks of up to 27/80 of the channels.

    Arguments
    ---------
    time_masks : sequence of two ints
        Fewest and most time masks per batch.
    max_time_frames : int
        Longest time mask, in frames (50 = 1 s at the recipes' 20 ms frames).
    channel_masks : sequence of two ints
        Fewest and most channel masks per batch.
    max_channel_fraction : float
        Widest channel mask as a fraction of the channels.

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
