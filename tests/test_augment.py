"""FeatureMasking: SpecAugment-style time and channel masks on the encoder's inputs."""
from __future__ import annotations

import pytest
import torch

from surprisal_cc.augment import FeatureMasking


@pytest.mark.parametrize("channels", [80, 512])
def test_channel_masks_are_whole_channels_within_the_width(channels):
    torch.manual_seed(0)
    masking = FeatureMasking(time_masks=(0, 0), channel_masks=(2, 2), max_channel_fraction=27 / 80)
    widest = round(27 / 80 * channels)
    masked_counts = []
    for _ in range(20):
        out = masking(torch.ones(3, 30, channels))
        zero = out == 0
        assert torch.equal(zero.all(dim=1), zero.any(dim=1))  # a masked channel is masked at every frame
        masked_counts += zero.all(dim=1).sum(dim=1).tolist()
    assert 0 < max(masked_counts) <= 2 * (widest - 1)  # SpectrogramDrop's widths are below drop_length_high


def test_time_masks_are_whole_frames_within_the_length():
    torch.manual_seed(0)
    masking = FeatureMasking(time_masks=(1, 3), max_time_frames=10, channel_masks=(0, 0))
    for _ in range(20):
        out = masking(torch.ones(4, 200, 8))
        zero = out == 0
        assert torch.equal(zero.all(dim=2), zero.any(dim=2))  # a masked frame is masked in every channel
        assert int(zero.all(dim=2).sum(dim=1).max()) <= 3 * 9


def test_bad_fraction_is_refused():
    with pytest.raises(ValueError, match="max_channel_fraction"):
        FeatureMasking(max_channel_fraction=1.5)
