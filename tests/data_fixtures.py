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
        pytest.skip(f"Mini-LibriSpeech dev-clean-2 not found under {root} (set SURPRISAL_CC_DATA)")
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
