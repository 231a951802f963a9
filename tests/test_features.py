"""Tests for surprisal_cc.model.features: frame counts, frame skipping, padding invariance, Kaldi fbank."""
from __future__ import annotations

import re

import pytest
import torch
from torchaudio.compliance import kaldi

from surprisal_cc.model.feature_config import FeatureConfig
from surprisal_cc.model.features import FilterbankFrontEnd
from surprisal_cc.model.nnet import lengths_to_mask
from numerics import assert_close_up_to_summation_order

# sample counts around the window (400) and hop (160) boundaries
LENGTHS = [0, 1, 399, 400, 401, 559, 560, 719, 720, 880, 1040, 3211, 8000]


def _kaldi_frames(num_samples: int) -> int:
    """Frame count of torchaudio's Kaldi fbank (snip_edges) computed on a real signal."""
    if num_samples < 400:
        return 0
    wav = torch.randn(1, num_samples)
    return kaldi.fbank(wav, num_mel_bins=80, frame_length=25.0, frame_shift=10.0, dither=0.0,
                       window_type="hamming", sample_frequency=16000.0, energy_floor=0.0).shape[0]


def test_window_and_shift_samples():
    cfg = FeatureConfig()
    assert (cfg.window_samples, cfg.shift_samples) == (400, 160)
    assert FeatureConfig(sample_rate=8000).window_samples == 200


@pytest.mark.parametrize("frame_skip", [1, 2, 3])
def test_num_frames_matches_front_end(frame_skip):
    torch.manual_seed(0)
    cfg = FeatureConfig(frame_skip=frame_skip)
    front_end = FilterbankFrontEnd(cfg)
    lengths = torch.tensor(LENGTHS)
    wavs = torch.randn(len(LENGTHS), max(LENGTHS)) * 0.1
    feats, frames = front_end(wavs, lengths)
    expected = [cfg.num_frames(n) for n in LENGTHS]
    assert frames.tolist() == expected
    assert feats.shape == (len(LENGTHS), max(expected), 80)
    # independent count: kept frames 0, k, 2k, ... of the Kaldi frames
    assert expected == [len(range(0, _kaldi_frames(n), frame_skip)) for n in LENGTHS]


def test_num_frames_hand_values():
    cfg = FeatureConfig()  # frame_skip = 2
    assert cfg.num_frames(0) == 0
    assert cfg.num_frames(399) == 0  # shorter than one window
    assert cfg.num_frames(400) == 1  # exactly one window
    assert cfg.num_frames(559) == 1  # 1 Kaldi frame
    assert cfg.num_frames(560) == 1  # 2 Kaldi frames -> frame 0 kept
    assert cfg.num_frames(720) == 2  # 3 Kaldi frames -> frames 0, 2
    assert cfg.num_frames(16000) == 49  # 98 Kaldi frames
    assert FeatureConfig(frame_skip=1).num_frames(16000) == 98


def test_short_signals_give_zero_frames():
    torch.manual_seed(0)
    front_end = FilterbankFrontEnd()
    feats, frames = front_end(torch.randn(2, 399), torch.tensor([399, 100]))
    assert frames.tolist() == [0, 0]
    assert feats.shape == (2, 0, 80)
    assert front_end.single(torch.randn(400)).shape == (1, 80)


def test_frame_skip_1_vs_2():
    torch.manual_seed(0)
    lengths = torch.tensor([5000, 3211, 400])
    wavs = torch.randn(3, 5000) * 0.1
    f1, n1 = FilterbankFrontEnd(frame_skip=1)(wavs, lengths)
    f2, n2 = FilterbankFrontEnd(frame_skip=2)(wavs, lengths)
    assert n2.tolist() == [(n + 1) // 2 for n in n1.tolist()]
    for i in range(3):
        torch.testing.assert_close(f2[i, : n2[i]], f1[i, : n1[i]][::2], rtol=0, atol=0)


def test_padding_invariance():
    torch.manual_seed(0)
    front_end = FilterbankFrontEnd()
    short, long = torch.randn(3000) * 0.1, torch.randn(6000) * 0.1
    batch = torch.full((2, 6000), 0.7)  # non-zero padding must not leak
    batch[0, :3000], batch[1] = short, long
    feats, frames = front_end(batch, torch.tensor([3000, 6000]))
    alone, alone_frames = front_end(short.unsqueeze(0), torch.tensor([3000]))
    assert int(frames[0]) == int(alone_frames[0]) == FeatureConfig().num_frames(3000)
    n = int(frames[0])
    assert_close_up_to_summation_order(feats[0, :n], alone[0])
    assert torch.all(feats[0, n:] == 0)
    feats_long, _ = front_end(long.unsqueeze(0), torch.tensor([6000]))
    assert_close_up_to_summation_order(feats[1], feats_long[0])


def test_equals_kaldi_fbank_every_second_frame():
    torch.manual_seed(0)
    wav = torch.randn(4321) * 0.2
    expected = kaldi.fbank(wav.unsqueeze(0), num_mel_bins=80, frame_length=25.0, frame_shift=10.0,
                           window_type="hamming", dither=0.0, energy_floor=0.0,
                           sample_frequency=16000.0)[::2]
    feats, frames = FilterbankFrontEnd()(wav.unsqueeze(0), torch.tensor([4321]))
    assert int(frames[0]) == expected.shape[0] == 13
    assert_close_up_to_summation_order(feats[0], expected)
    # hamming, not Kaldi's default povey window
    povey = kaldi.fbank(wav.unsqueeze(0), num_mel_bins=80, dither=0.0, energy_floor=0.0)[::2]
    assert not torch.allclose(feats[0], povey, atol=1e-3)


def test_feature_config_is_hashable_and_serialisable():
    a, b = FeatureConfig(), FeatureConfig(frame_skip=1)
    assert a == FeatureConfig() and a != b
    assert a.as_dict()["frame_skip"] == 2 and b.as_dict()["frame_skip"] == 1
    assert set(a.as_dict()) == {"sample_rate", "n_mels", "frame_length_ms", "frame_shift_ms", "window_type",
                                "dither", "frame_skip"}


def test_lengths_to_mask():
    mask = lengths_to_mask(torch.tensor([3, 0, 1]), 4)
    assert mask.tolist() == [[True, True, True, False], [False] * 4, [True, False, False, False]]
    assert lengths_to_mask(torch.tensor([2, 1])).shape == (2, 2)


@pytest.mark.parametrize("field, value, problem", [
    ("frame_skip", 0, "frame_skip must be a whole number of at least 1, got 0"),
    ("frame_skip", 2.0, "frame_skip must be a whole number of at least 1, got 2.0"),
    ("sample_rate", True, "sample_rate must be a whole number of at least 1, got True"),
    ("n_mels", 3, "n_mels must be a whole number of at least 4, got 3"),
    ("frame_length_ms", float("inf"), "frame_length_ms must be a positive finite number of milliseconds, got inf"),
    ("frame_shift_ms", 0, "frame_shift_ms must be a positive finite number of milliseconds, got 0"),
    ("frame_shift_ms", "10", "frame_shift_ms must be a positive finite number of milliseconds, got '10'"),
    ("frame_shift_ms", 0.01, "frame_length_ms 25.0 and frame_shift_ms 0.01 make windows of 400 samples every 0 at "
                             "16000 Hz: a window needs at least 2 samples, a shift at least 1"),
    ("window_type", "hann", "window_type must be one of hamming, hanning, povey, rectangular, blackman, got 'hann'"),
    ("dither", -1.0, "dither must be a finite number of at least 0, got -1.0"),
])
def test_values_the_front_end_cannot_run_with_are_refused_naming_the_field(field, value, problem):
    with pytest.raises(ValueError, match="^" + re.escape(problem) + "$"):
        FeatureConfig(**{field: value})


# a window or shift that is no whole number of samples (11025 Hz x 30 ms is 330.75) is truncated by Kaldi
CONFIGS = [dict(), dict(frame_skip=1), dict(frame_skip=3), dict(frame_length_ms=50.0, frame_skip=2),
           dict(sample_rate=8000), dict(sample_rate=11025, frame_length_ms=30, frame_shift_ms=12.5),
           dict(frame_length_ms=25.04, frame_shift_ms=10.04, frame_skip=1)]


def _real_kaldi_frames(cfg: FeatureConfig, num_samples: int) -> int:
    """Frames of torchaudio's Kaldi fbank on a real signal (0 where it refuses one shorter than its window),
    every ``frame_skip``-th kept."""
    try:
        full = kaldi.fbank(torch.randn(1, num_samples) * 0.1, num_mel_bins=cfg.n_mels, frame_length=cfg.frame_length_ms,
                           frame_shift=cfg.frame_shift_ms, dither=0.0, window_type=cfg.window_type,
                           sample_frequency=float(cfg.sample_rate), energy_floor=0.0).shape[0]
    except AssertionError:  # "choose a window size ... that is [2, num_samples]"
        full = 0
    return len(range(0, full, cfg.frame_skip))


@pytest.mark.parametrize("overrides", CONFIGS)
def test_min_samples_is_the_one_frame_boundary_of_the_real_front_end(overrides):
    """One sample less than min_samples gives no frame, min_samples gives one, whatever the frame skip;
    in the front end, in Kaldi's fbank itself and in num_frames."""
    torch.manual_seed(0)
    cfg = FeatureConfig(**overrides)
    front_end = FilterbankFrontEnd(cfg)
    least = cfg.min_samples
    assert [front_end.single(torch.randn(n) * 0.1).shape[0] for n in (least - 1, least)] == [0, 1]
    assert [_real_kaldi_frames(cfg, n) for n in (least - 1, least)] == [0, 1]
    assert [cfg.num_frames(n) for n in (least - 1, least)] == [0, 1]
    _, frames = front_end(torch.randn(2, least) * 0.1, torch.tensor([least, least - 1]))
    assert frames.tolist() == [1, 0]


@pytest.mark.parametrize("overrides", CONFIGS)
def test_num_frames_matches_kaldi_where_window_and_shift_are_no_whole_samples(overrides):
    cfg = FeatureConfig(**overrides)
    torch.manual_seed(0)
    lengths = list(range(cfg.window_samples - 2, cfg.window_samples + 3 * cfg.shift_samples + 3))
    wavs = torch.randn(len(lengths), max(lengths)) * 0.1
    _, frames = FilterbankFrontEnd(cfg)(wavs, torch.tensor(lengths))
    assert frames.tolist() == [cfg.num_frames(n) for n in lengths] == [_real_kaldi_frames(cfg, n) for n in lengths]


def test_window_and_shift_are_truncated_as_kaldi_truncates_them():
    cfg = FeatureConfig(sample_rate=11025, frame_length_ms=30, frame_shift_ms=12.5)
    assert (cfg.window_samples, cfg.shift_samples, cfg.min_samples) == (330, 137, 330)


def test_the_feature_definition_is_torchaudios_and_loads_no_torch():
    """FeatureConfig checks windows against torchaudio's list without importing it (the ONNX runtime uses it)."""
    import subprocess
    import sys

    from torchaudio.compliance import kaldi

    from surprisal_cc.model.feature_config import KALDI_WINDOWS

    assert list(KALDI_WINDOWS) == list(kaldi.WINDOWS)
    code = "import sys, surprisal_cc.model.feature_config; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split() == ["False"]

