"""The shipped default model in ``surprisal_cc/pretrained/`` loads and transcribes real speech."""
from __future__ import annotations

import json

import pytest

from data_fixtures import REPO, require_dev_clean_2
from surprisal_cc.inference import ConditionalASR, default_model_dir

PRETRAINED = REPO / "surprisal_cc" / "pretrained"


def test_pretrained_is_the_default_model_folder_and_is_small():
    assert default_model_dir() == PRETRAINED
    assert (PRETRAINED / "model.json").is_file(), "the shipped model is part of the repository"
    size = sum(p.stat().st_size for p in PRETRAINED.rglob("*") if p.is_file())
    assert size <= 25 * 2**20, f"surprisal_cc/pretrained/ holds {size / 2**20:.1f} MiB, more than 25 MiB"
    assert json.loads((PRETRAINED / "model.json").read_text())["format_version"] >= 1


@pytest.mark.integration
def test_pretrained_model_transcribes_real_speech():
    assert (PRETRAINED / "model.json").is_file(), "the shipped model is part of the repository"
    root = require_dev_clean_2()
    audio = sorted((root / "LibriSpeech" / "dev-clean-2").rglob("*.flac"))[0]
    asr = ConditionalASR.from_pretrained(PRETRAINED, routing="deterministic")
    result = asr.transcribe_file(audio)
    assert len(result.phones) > 10 and set(result.phones) - {"sil"}  # real phones, not only silence
    assert result.surprisal is not None and result.surprisal.shape[0] == result.num_frames
    assert result.use_big is not None and 0.0 < result.big_fraction < 1.0  # surprisal routing: both networks ran
    assert result.flops_per_frame > 0 and result.rtf > 0


def _committed_pretrained() -> bytes:
    """``surprisal_cc/pretrained/model.json`` as committed at HEAD, or a skip where git cannot give it."""
    import shutil
    import subprocess

    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    found = subprocess.run(["git", "-C", str(REPO), "show", "HEAD:surprisal_cc/pretrained/model.json"], capture_output=True)
    if found.returncode != 0:
        pytest.skip("not a git clone with a committed surprisal_cc/pretrained/")
    return found.stdout


def test_the_model_shipped_at_a_revision_is_written_whole(tmp_path, monkeypatch, capsys):
    """``shipped_model.py`` (grid_apc_tc5.yaml's pinned aligner) writes the shipped model of a revision, and names
    a revision the clone does not hold instead of writing a partial folder."""
    model_json = _committed_pretrained()
    monkeypatch.syspath_prepend(str(REPO / "recipes" / "MiniLibriSpeech"))
    import shipped_model

    out = tmp_path / "aligner" / "HEAD"
    assert shipped_model.main(["HEAD", str(out)]) == 0
    assert (out / "model.json").read_bytes() == model_json
    assert {"model.json", "encoder.pt"} <= {p.name for p in out.iterdir()}
    assert not out.with_name("HEAD.partial").exists()
    assert ConditionalASR.from_pretrained(out).config == json.loads(model_json)  # a model folder that loads

    missing = tmp_path / "aligner" / "missing"
    assert shipped_model.main(["0" * 40, str(missing)]) == 1
    assert "0000000000" in capsys.readouterr().err and not missing.exists()
