"""FeatureMasking (SpecAugment-style masks on the encoder's inputs) and SpeedPerturbation."""
from __future__ import annotations

import random

import pytest
import torch

from surprisal_cc.training.augment import FeatureMasking, SpeedPerturbation, change_speed


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


@pytest.mark.parametrize("factor", [0.9, 1.1])
def test_change_speed_scales_duration_and_pitch(factor):
    sr, hz = 16000, 500.0
    t = torch.arange(sr * 2) / sr
    wav = torch.sin(2 * torch.pi * hz * t)
    out = change_speed(wav, factor, sr)
    assert abs(out.numel() - wav.numel() / factor) <= 1
    peak_bin = int(torch.fft.rfft(out).abs().argmax())
    assert peak_bin * sr / out.numel() == pytest.approx(hz * factor, rel=0.01)  # pitch times the factor


def test_change_speed_at_one_is_the_identity():
    wav = torch.randn(1000)
    assert change_speed(wav, 1.0) is wav


def test_speed_perturbation_draws_only_while_active():
    random.seed(0)
    perturbation = SpeedPerturbation([0.9, 1.1])
    assert {perturbation.choose() for _ in range(50)} == {1.0}
    perturbation.active = True
    assert {perturbation.choose() for _ in range(200)} == {0.9, 1.0, 1.1}
    assert not SpeedPerturbation([]) and bool(perturbation)
    active_but_empty = SpeedPerturbation([])
    active_but_empty.active = True
    assert active_but_empty.choose() == 1.0


def test_speed_perturbation_cache_ids():
    assert SpeedPerturbation.cache_id("u1", 1.0) == "u1"
    assert SpeedPerturbation.cache_id("u1", 0.9) == "u1@speed0.9"


@pytest.mark.parametrize("factors", [[1.0], [0.9, 0.9], [3.0], [-1.1]])
def test_bad_speeds_are_refused_with_the_key(factors):
    with pytest.raises(ValueError, match="speed_perturb"):
        SpeedPerturbation(factors)
