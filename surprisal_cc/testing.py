"""Synthetic corpora for tests: a small TIMIT tree (real NIST SPHERE files), a tiny
LibriSpeech tree and broken audio files.  Nothing here is real speech."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Mapping, Sequence, Tuple, Union

import numpy as np
import soundfile as sf

PathLike = Union[str, os.PathLike]


def tone(seconds: float = 0.3, sample_rate: int = 16000, freq: float = 220.0) -> np.ndarray:
    """A short int16 sine wave."""
    t = np.arange(int(seconds * sample_rate)) / sample_rate
    return (0.3 * 32767 * np.sin(2 * np.pi * freq * t)).astype(np.int16)


def write_sphere(path: PathLike, samples: np.ndarray, sample_rate: int = 16000) -> Path:
    """Write int16 mono ``samples`` as a NIST SPHERE file (1024-byte ``NIST_1A`` header)."""
    header = (
        "NIST_1A\n   1024\n"
        f"sample_count -i {len(samples)}\nsample_n_bytes -i 2\nchannel_count -i 1\n"
        f"sample_byte_format -s2 01\nsample_rate -i {sample_rate}\nsample_coding -s3 pcm\n"
        "end_head\n"
    ).encode("ascii")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(header.ljust(1024, b" ") + samples.astype("<i2").tobytes())
    return path


# (61-phone transcription, expected 39-phone folding) -- hand-written
TIMIT_PHN_CASES: Dict[str, Tuple[str, str]] = {
    "sa": ("h# sh ix hv eh dcl jh ih dcl d ah kcl k q h#", "sil sh ih hh eh sil jh ih sil d ah sil k sil"),
    "si": ("h# ax-h bcl b ao tcl t q ix pau epi axr el em h#", "sil ah sil b aa sil t ih sil er l m sil"),
    "sx": ("h# en nx eng zh ux gcl g pcl p dx hh h#", "sil n n ng sh uw sil g sil p dx hh sil"),
}
TIMIT_WORDS = "she had"

# speaker -> (part, dialect region, upper-case names?)
TIMIT_FIXTURE_SPEAKERS: Dict[str, Tuple[str, str, bool]] = {
    "FCJF0": ("TRAIN", "DR1", True),
    "mdwk0": ("TRAIN", "DR2", False),
    "MDAB0": ("TEST", "DR1", True),   # core test
    "mjsw0": ("TEST", "DR3", False),  # development set
    "FCMR0": ("TEST", "DR1", True),   # plain test speaker: in neither split
}
TIMIT_FIXTURE_SENTENCES = ("SA1", "SA2", "SI1027", "SX127")


def make_timit_fixture(root: PathLike) -> Path:
    """Create a TIMIT-layout tree under ``root``; returns ``root``.

    ``TRAIN/`` is upper case, ``test/`` lower case; speaker folders and file names follow the
    per-speaker case in :data:`TIMIT_FIXTURE_SPEAKERS`.  Every speaker has SA1, SA2, SI1027, SX127;
    their ``.PHN`` content comes from :data:`TIMIT_PHN_CASES` (by sentence type).
    """
    root = Path(root)
    for spk, (part, region, upper) in TIMIT_FIXTURE_SPEAKERS.items():
        part_name = part if part == "TRAIN" else part.lower()
        folder = root / part_name / (region if upper else region.lower()) / spk
        for sent in TIMIT_FIXTURE_SENTENCES:
            name = sent if upper else sent.lower()
            ext = (lambda e: e.upper() if upper else e.lower())
            samples = tone(0.3)
            write_sphere(folder / f"{name}{ext('.wav')}", samples)
            phones = TIMIT_PHN_CASES[sent[:2].lower()][0].split()
            bounds = np.linspace(0, len(samples), len(phones) + 1).astype(int)
            (folder / f"{name}{ext('.phn')}").write_text(
                "".join(f"{a} {b} {p}\n" for a, b, p in zip(bounds[:-1], bounds[1:], phones))
            )
            words = TIMIT_WORDS.split()
            (folder / f"{name}{ext('.wrd')}").write_text(
                "".join(f"{i * 100} {(i + 1) * 100} {w}\n" for i, w in enumerate(words))
            )
            (folder / f"{name}{ext('.txt')}").write_text(f"0 {len(samples)} She had.\n")
    return root


def make_librispeech_fixture(
    root: PathLike,
    subsets: Mapping[str, Mapping[str, Sequence[str]]],
    genders: Mapping[str, str] = (),  # type: ignore[assignment]
    sample_rate: int = 16000,
) -> Path:
    """Tiny LibriSpeech tree: ``subsets = {subset: {"<spk>-<chapter>": [transcript, ...]}}``.

    Writes ``root/LibriSpeech/<subset>/<spk>/<chapter>/<spk>-<chapter>-NNNN.flac`` (0.2 s tones),
    the ``.trans.txt`` files and ``SPEAKERS.TXT`` (from ``genders``).
    """
    base = Path(root) / "LibriSpeech"
    for subset, chapters in subsets.items():
        for spk_chapter, lines in chapters.items():
            spk, chapter = spk_chapter.split("-")
            folder = base / subset / spk / chapter
            folder.mkdir(parents=True, exist_ok=True)
            trans = []
            for i, text in enumerate(lines):
                utt = f"{spk_chapter}-{i:04d}"
                sf.write(folder / f"{utt}.flac", tone(0.2, sample_rate), sample_rate)
                trans.append(f"{utt} {text}\n")
            (folder / f"{spk_chapter}.trans.txt").write_text("".join(trans))
    rows = "".join(f"{s:<5}| {g} | subset | 1.00 | Reader {s}\n" for s, g in dict(genders).items())
    (base / "SPEAKERS.TXT").write_text(";ID  |SEX| SUBSET |MINUTES| NAME\n" + rows)
    return Path(root)


def make_bad_audio_fixture(root: PathLike) -> Dict[str, Path]:
    """Broken/unusual audio: ``corrupt``, ``empty`` (0 bytes), ``no_samples``, ``too_short``
    (10 ms), ``rate_8k``, ``stereo`` and a ``good`` file; returns ``{kind: path}``."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    paths = {k: root / f"{k}.flac" for k in ("good", "corrupt", "empty", "too_short", "rate_8k", "stereo")}
    paths["no_samples"] = root / "no_samples.wav"  # valid WAV header, 0 frames
    sf.write(paths["good"], tone(0.2), 16000)
    paths["corrupt"].write_bytes(b"fLaC" + bytes(range(256)) * 4)
    paths["empty"].write_bytes(b"")
    sf.write(paths["no_samples"], np.zeros(0, dtype=np.int16), 16000)
    sf.write(paths["too_short"], tone(0.01), 16000)
    sf.write(paths["rate_8k"], tone(0.2, 8000), 8000)
    sf.write(paths["stereo"], np.stack([tone(0.2), tone(0.2, freq=330)], axis=1), 16000)
    return paths
