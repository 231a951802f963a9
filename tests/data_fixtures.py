"""Shared helpers for the tests/test_data_*.py files (kept out of conftest.py on purpose)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def shared_data() -> Path:
    """``$SURPRISAL_CC_DATA`` or ``<repo>/../shared/data``."""
    return Path(os.environ.get("SURPRISAL_CC_DATA", REPO.parent / "shared" / "data"))


def require_dev_clean_2() -> Path:
    root = shared_data()
    if not (root / "LibriSpeech" / "dev-clean-2").is_dir():
        message = f"Mini-LibriSpeech dev-clean-2 not found under {root} (set SURPRISAL_CC_DATA)"
        if os.environ.get("CI"):  # CI must run the integration tests on real audio, never skip them
            pytest.fail(f"{message}: CI needs it for the integration tests on real audio", pytrace=False)
        pytest.skip(message)
    return root


MFA_CSV_HEADER = "path,wrd,phonemes_39,phonemes_61,phn,phn_starts,phn_ends,words,wrd_starts,wrd_ends\n"


def write_mfa_csv(path: Path, subset: str, labels: dict) -> Path:
    """A CSV in the published MFA export format: ``labels = {utt_id: "sil AH ... sil"}``."""
    rows = []
    for utt, phones in labels.items():
        spk, chapter, _ = utt.split("-")
        rows.append(f"{subset}/{spk}/{chapter}/{utt}.flac,x,{phones},{phones},,,,,,\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(MFA_CSV_HEADER + "".join(rows))
    return path


@pytest.fixture(scope="module")
def mini_corpus(tmp_path_factory):
    """A stand-in Mini-LibriSpeech (``<root>/corpus``) from a few real dev-clean-2 speakers (symbolic links):
    4 speakers as train-clean-5, 2 as dev-clean-2, 3 utterances each, MFA labels linked. Returns ``<root>``.
    Import it into a test module to use it there (``from data_fixtures import mini_corpus``)."""
    from surprisal_cc.fixtures import make_mini_librispeech_subset

    shared = require_dev_clean_2()
    root = tmp_path_factory.mktemp("mls")
    make_mini_librispeech_subset(shared / "LibriSpeech" / "dev-clean-2", root / "corpus", train_speakers=4,
                                 test_speakers=2, utterances_per_speaker=3,
                                 mfa_csv=shared / "phone_labels" / "dev-clean-2_mfa.csv")
    return root
