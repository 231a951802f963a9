"""Helpers for tests and smoke runs: small corpora built from real audio on disk.

:func:`make_mini_librispeech_subset` builds a Mini-LibriSpeech-layout folder
(``LibriSpeech/train-clean-5`` and ``LibriSpeech/dev-clean-2``) whose audio files are symbolic
links to a few utterances of an existing dev-clean-2, with transcripts filtered to match, so the
real recipes run end to end on real speech in seconds.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, Sequence


def _speaker_utterances(subset_dir: Path) -> Dict[str, List[Path]]:
    by_speaker: Dict[str, List[Path]] = {}
    for flac in sorted(subset_dir.glob("*/*/*.flac")):
        by_speaker.setdefault(flac.parts[-3], []).append(flac)
    return by_speaker


def make_mini_librispeech_subset(
    source_dev_clean_2: Path,
    root: Path,
    train_speakers: int = 4,
    test_speakers: int = 2,
    utterances_per_speaker: int = 4,
    mfa_csv: Path | None = None,
) -> Path:
    """Create ``root/LibriSpeech/{train-clean-5,dev-clean-2}`` from speakers of a real dev-clean-2.

    Speakers are taken in sorted order: the first ``train_speakers`` form the stand-in train-clean-5,
    the next ``test_speakers`` the stand-in dev-clean-2. With ``mfa_csv``, a symbolic link
    ``root/phone_labels/dev-clean-2_mfa.csv`` points to it. Returns ``root``.
    """
    source_dev_clean_2 = Path(source_dev_clean_2)
    speakers = _speaker_utterances(source_dev_clean_2)
    names: Sequence[str] = sorted(speakers)
    if len(names) < train_speakers + test_speakers:
        raise ValueError(f"{source_dev_clean_2} has {len(names)} speakers; need {train_speakers + test_speakers}")
    plan = {"train-clean-5": names[:train_speakers], "dev-clean-2": names[train_speakers:train_speakers + test_speakers]}
    for subset, chosen in plan.items():
        for speaker in chosen:
            for flac in speakers[speaker][:utterances_per_speaker]:
                chapter_dir = root / "LibriSpeech" / subset / flac.parts[-3] / flac.parts[-2]
                chapter_dir.mkdir(parents=True, exist_ok=True)
                link = chapter_dir / flac.name
                if not link.exists():
                    os.symlink(flac.resolve(), link)
                trans_name = f"{flac.parts[-3]}-{flac.parts[-2]}.trans.txt"
                source_lines = (flac.parent / trans_name).read_text().splitlines()
                line = next(l for l in source_lines if l.split(" ", 1)[0] == flac.stem)
                with open(chapter_dir / trans_name, "a", encoding="utf-8") as f:
                    f.write(line + "\n")
    speakers_txt = source_dev_clean_2.parent / "SPEAKERS.TXT"
    if speakers_txt.exists() and not (root / "LibriSpeech" / "SPEAKERS.TXT").exists():
        os.symlink(speakers_txt.resolve(), root / "LibriSpeech" / "SPEAKERS.TXT")
    if mfa_csv is not None:
        (root / "phone_labels").mkdir(parents=True, exist_ok=True)
        link = root / "phone_labels" / "dev-clean-2_mfa.csv"
        if not link.exists():
            os.symlink(Path(mfa_csv).resolve(), link)
    return root
