"""Surprisal on silence vs. speech frames, from forced alignments."""
from pathlib import Path

import pytest
import torch

from data_fixtures import require_dev_clean_2
from surprisal_cc.analysis import AlignedUtterance, read_aligned_csv, routing_example, surprisal_by_class
from surprisal_cc.apc import APCModel
from surprisal_cc.controllers import SurprisalController
from surprisal_cc.features import FeatureConfig


def test_frame_labels_follow_window_centres():
    # 20 ms frames: centres at 200, 520, 840, 1160 samples (frame k: 2k * 160 + 200)
    utt = AlignedUtterance("u", Path("x.flac"), ["sil", "AH", "sp"], [0, 400, 900], [400, 900, 2000])
    assert utt.frame_is_silence(4, FeatureConfig()).tolist() == [True, False, False, True]


@pytest.mark.integration
def test_surprisal_by_class_on_real_audio(tmp_path):
    shared = require_dev_clean_2()
    torch.manual_seed(0)
    apc = APCModel(hidden_size=16)
    utts = read_aligned_csv(shared / "phone_labels" / "dev-clean-2_mfa.csv", shared / "LibriSpeech")
    result = surprisal_by_class(apc, utts, max_utterances=2)
    assert result["frames_speech"] > 0 and result["frames_silence"] > 0
    assert result["mean_surprisal_speech"] > 0
    first = next(read_aligned_csv(shared / "phone_labels" / "dev-clean-2_mfa.csv", shared / "LibriSpeech"))
    png = routing_example(apc, first, tmp_path / "r.png", SurprisalController(0.01, -1.0))
    assert png.stat().st_size > 1000
