"""Surprisal on silence vs. speech frames, from forced alignments."""
from pathlib import Path

import pytest
import torch

from data_fixtures import require_dev_clean_2
from surprisal_cc.experiments.analysis import AlignedUtterance, read_aligned_csv, routing_example, surprisal_by_class
from surprisal_cc.model.apc import APCModel
from surprisal_cc.model.controllers import SurprisalController
from surprisal_cc.model.feature_config import FeatureConfig


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


def test_the_audio_is_read_at_the_features_sample_rate(tmp_path):
    """A 16 kHz file analysed with 8 kHz features is resampled to 8 kHz first: the frames of one second at
    8 kHz, in the surprisal and in the routing plot."""
    import numpy as np
    import soundfile as sf

    config = FeatureConfig(sample_rate=8000, n_mels=40)
    sf.write(tmp_path / "a.flac", np.random.default_rng(0).standard_normal(16000).astype("float32") * 0.1, 16000)
    utt = AlignedUtterance("a", tmp_path / "a.flac", ["sil", "AH"], [0, 4000], [4000, 8000])
    torch.manual_seed(0)
    apc = APCModel(input_size=40, hidden_size=8)
    result = surprisal_by_class(apc, iter([utt]), config)
    assert result["frames_silence"] + result["frames_speech"] == config.num_frames(8000)
    assert result["frames_silence"] > 0 and result["frames_speech"] > 0
    pytest.importorskip("matplotlib")
    assert routing_example(apc, utt, tmp_path / "r.png", config=config).stat().st_size > 0


def test_alignments_count_samples_of_the_audio_file_at_its_own_rate(tmp_path):
    """MFA's samples of a 16 kHz file label 8 kHz features by time: silence for the first half second
    is the 25 frames whose window centres (k * 20 ms + 12.5 ms) come before 0.5 s."""
    import numpy as np
    import soundfile as sf

    config = FeatureConfig(sample_rate=8000, n_mels=40)
    sf.write(tmp_path / "a.flac", np.random.default_rng(0).standard_normal(16000).astype("float32") * 0.1, 16000)
    (tmp_path / "mfa.csv").write_text("path,phn,phn_starts,phn_ends\na.flac,\"['sil', 'AH']\",0 8000,8000 16000\n")
    utt = next(read_aligned_csv(tmp_path / "mfa.csv", tmp_path))
    assert utt.sample_rate == 16000
    torch.manual_seed(0)
    result = surprisal_by_class(APCModel(input_size=40, hidden_size=8), iter([utt]), config)
    assert (result["frames_silence"], result["frames_speech"]) == (25, config.num_frames(8000) - 25)


def _analyse(tmp_path, capsys, csv_text, *options):
    """``surprisal-cc analyse`` of a tiny APC model and alignments ``csv_text``: (exit status, stderr lines)."""
    from surprisal_cc.model.apc import save_apc
    from surprisal_cc.cli.commands import main

    torch.manual_seed(0)
    save_apc(APCModel(hidden_size=8), tmp_path / "apc.pt")
    (tmp_path / "mfa.csv").write_text(csv_text)
    status = main(["analyse", "--apc", str(tmp_path / "apc.pt"), "--mfa", str(tmp_path / "mfa.csv"),
                   "--audio-root", str(tmp_path / "corpus"), *options])
    return status, capsys.readouterr().err.splitlines()


ROW = "path,phn,phn_starts,phn_ends\nspk/a.flac,\"['sil', 'AH']\",0 640,640 1280\n"


def test_analyse_names_bad_inputs_and_outputs_before_the_pass_over_the_corpus(tmp_path, capsys):
    missing_audio = tmp_path / "corpus" / "spk" / "a.flac"
    assert _analyse(tmp_path, capsys, ROW) == (1, [
        f"error: {missing_audio}: no such audio file (utterance a of the alignments): is the audio root the folder "
        "their paths are relative to?"])
    (tmp_path / "calibration.json").write_text('{"weight": 0.02}')
    status, err = _analyse(tmp_path, capsys, ROW, "--plot", str(tmp_path / "r.png"),
                           "--calibration", str(tmp_path / "calibration.json"))
    assert status == 1 and err[0].startswith(f"error: --calibration {tmp_path / 'calibration.json'}: not a run's "
                                             "calibration.json with a weight and a bias")
    (tmp_path / "taken").write_text("")
    assert _analyse(tmp_path, capsys, ROW, "--json", str(tmp_path / "taken" / "out.json")) == (1, [
        f"error: --json {tmp_path / 'taken' / 'out.json'}: its folder {tmp_path / 'taken'} cannot be created "
        "(File exists)"])
    assert _analyse(tmp_path, capsys, "path,phn\n") == (1, [
        f"error: {tmp_path / 'mfa.csv'}: no column phn_starts, phn_ends; give the CSV export of MFA alignments "
        "with sample-level phone boundaries"])
    assert _analyse(tmp_path, capsys, ROW.splitlines()[0] + "\n") == (1, [f"error: {tmp_path / 'mfa.csv'}: no utterances"])
    with pytest.raises(SystemExit) as stop:
        _analyse(tmp_path, capsys, ROW, "--max-utterances", "0")
    assert stop.value.code == 2


def test_load_apc_of_a_file_that_is_not_a_torch_file(tmp_path):
    from surprisal_cc.model.apc import load_apc

    (tmp_path / "apc.pt").write_text("x")
    with pytest.raises(ValueError, match=r"apc\.pt: cannot be loaded as a torch file \(UnpicklingError\); give an APC"):
        load_apc(tmp_path / "apc.pt")
