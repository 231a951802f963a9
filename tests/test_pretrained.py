"""The shipped default model in ``pretrained/`` loads and transcribes real speech."""
from __future__ import annotations

import json

import pytest

from data_fixtures import REPO, require_dev_clean_2
from surprisal_cc.inference import ConditionalASR, default_model_dir

PRETRAINED = REPO / "pretrained"


def test_pretrained_is_the_default_model_folder_and_is_small():
    assert default_model_dir() == PRETRAINED
    if not (PRETRAINED / "model.json").is_file():
        pytest.skip("no model shipped in pretrained/")
    size = sum(p.stat().st_size for p in PRETRAINED.rglob("*") if p.is_file())
    assert size <= 25 * 2**20, f"pretrained/ holds {size / 2**20:.1f} MiB, more than 25 MiB"
    assert json.loads((PRETRAINED / "model.json").read_text())["format_version"] >= 1


def test_pretrained_model_transcribes_real_speech():
    if not (PRETRAINED / "model.json").is_file():
        pytest.skip("no model shipped in pretrained/")
    root = require_dev_clean_2()
    audio = sorted((root / "LibriSpeech" / "dev-clean-2").rglob("*.flac"))[0]
    asr = ConditionalASR.from_pretrained(PRETRAINED, deterministic=True)
    result = asr.transcribe_file(audio)
    assert len(result.phones) > 10 and set(result.phones) - {"sil"}  # real phones, not only silence
    assert result.surprisal is not None and result.surprisal.shape[0] == result.num_frames
    assert result.use_big is not None and 0.0 < result.big_fraction < 1.0  # surprisal routing: both networks ran
    assert result.flops_per_frame > 0 and result.rtf > 0
