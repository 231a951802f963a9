"""TIMIT preparation (LDC93S1 layout) with the standard 61 -> 39 phone folding.

Layout: ``TRAIN|TEST/DR*/<speaker>/<utt>.WAV`` (NIST SPHERE, read by soundfile) with ``.PHN``,
``.WRD`` and ``.TXT`` next to it; folder and file names in any case.  SA sentences are removed.
Splits (as in the Kaldi/SpeechBrain recipes): train = all of TRAIN; valid = the 50-speaker
development set (:data:`TIMIT_DEV_SPEAKERS`); test = the 24-speaker core test set
(:data:`TIMIT_CORE_TEST_SPEAKERS`, 192 utterances).  IDs are ``<speaker>_<utt>`` in lower case.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Union

from surprisal_cc.data.audio import MAX_LISTED, TARGET_SAMPLE_RATE, check_audio_files
from surprisal_cc.data.errors import DataPreparationError, first_listed
from surprisal_cc.data.manifest import LABELLED_COLUMNS, cached_prepare, list_files, refuse_empty_split, write_manifest
from surprisal_cc.data.phones import fold_timit, refuse_empty_labels

PathLike = Union[str, os.PathLike]

# Kaldi egs/timit/s5/conf/dev_spk.list
TIMIT_DEV_SPEAKERS = frozenset(
    "faks0 fdac1 fjem0 mgwt0 mjar0 mmdb1 mmdm2 mpdf0 fcmh0 fkms0 mbdg0 mbwm0 mcsh0 fadg0 fdms0 "
    "fedw0 mgjf0 mglb0 mrtk0 mtaa0 mtdt0 mthc0 mwjg0 fnmr0 frew0 fsem0 mbns0 mmjr0 mdls0 mdlf0 "
    "mdvc0 mers0 fmah0 fdrw0 mrcs0 mrjm4 fcal1 mmwh0 fjsj0 majc0 mjsw0 mreb0 fgjd0 fjmg0 mroa0 "
    "mteb0 mjfc0 mrjr0 fmml0 mrws1".split()
)
# The TIMIT core test set (2 male + 1 female speaker per dialect region), Kaldi conf/test_spk.list
TIMIT_CORE_TEST_SPEAKERS = frozenset(
    "mdab0 mwbt0 felc0 mtas1 mwew0 fpas0 mjmp0 mlnt0 fpkt0 mlll0 mtls0 fjlm0 mbpm0 mklt0 fnlp0 "
    "mcmj0 mjdh0 fmgd0 mgrt0 mnjm0 fdhc0 mjln0 mpam0 fmld0".split()
)


@dataclass(frozen=True)
class TimitUtterance:
    id: str
    wav: Path
    spk_id: str
    part: str  # "train" | "test"


def timit_split(utterance: TimitUtterance) -> Optional[str]:
    """The recipe split of a TIMIT utterance: ``train`` (TIMIT's training part), ``valid`` (the 50
    development speakers) or ``test`` (the 24 core-test speakers); None for the rest of TIMIT's test part.

    Example
    -------
    >>> [timit_split(TimitUtterance("u", Path("u.wav"), spk, part))
    ...  for spk, part in (("fcjf0", "train"), ("faks0", "test"), ("mdab0", "test"), ("fcmr0", "test"))]
    ['train', 'valid', 'test', None]
    """
    if utterance.part == "train":
        return "train"
    if utterance.spk_id in TIMIT_DEV_SPEAKERS:
        return "valid"
    return "test" if utterance.spk_id in TIMIT_CORE_TEST_SPEAKERS else None


def find_child(folder: Path, name: str) -> Optional[Path]:
    """Case-insensitive lookup of ``folder/name`` (TIMIT copies spell names in either case); None if absent."""
    for entry in folder.iterdir() if folder.is_dir() else ():
        if entry.name.lower() == name.lower():
            return entry
    return None


def find_sibling(wav: Path, suffix: str) -> Optional[Path]:
    """The label file next to ``wav`` with ``suffix`` in upper or lower case (``.PHN``, ``.phn``); None if absent."""
    for cand in (wav.with_suffix(suffix.upper()), wav.with_suffix(suffix.lower())):
        if cand.is_file():
            return cand
    return None


def read_phn(path: Path) -> List[str]:
    """The phones of a TIMIT ``.PHN`` file (``<start> <end> <phone>`` lines), unfolded (61 phones).

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     phn = Path(folder) / "SX1.PHN"
    ...     _ = phn.write_text("0 2400 h#\\n2400 3200 dh\\n3200 4000 ax\\n")
    ...     read_phn(phn)
    ['h#', 'dh', 'ax']
    """
    return _third_fields(path)


def read_folded_phones(phn: Path, utt_id: str) -> List[str]:
    """The phones of utterance ``utt_id``'s ``.PHN`` file folded to 39 (:func:`~surprisal_cc.data.phones.fold_timit`);
    an unknown phone, or a file without phones (empty, or ``q`` alone), is a :class:`DataPreparationError`
    naming the file.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     phn = Path(folder) / "SX1.PHN"
    ...     _ = phn.write_text("")
    ...     read_folded_phones(phn, "fcjf0_sx1")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    surprisal_cc.data.errors.DataPreparationError: .../SX1.PHN (utterance fcjf0_sx1) has no phone labels; restore it from the corpus
    """
    where = f"{phn} (utterance {utt_id})"
    phones = fold_timit(read_phn(phn), where=where)
    refuse_empty_labels(phones, where, "phone labels", "restore it from the corpus")
    return phones


def _third_fields(path: Path) -> List[str]:
    """The third field of each line of a TIMIT ``.PHN``/``.WRD`` file (``<start> <end> <label>``); a line
    without one is a :class:`DataPreparationError` naming the file and line."""
    fields = []
    for number, line in enumerate(path.read_text(encoding="latin-1").splitlines(), 1):
        if line.strip():
            parts = line.split()
            if len(parts) < 3:
                raise DataPreparationError(f"{path}:{number}: {line.strip()!r} is not '<start> <end> <label>' "
                                           "(a damaged TIMIT label file: restore it from the corpus)")
            fields.append(parts[2])
    return fields


def _read_words(wav: Path) -> List[str]:
    wrd = find_sibling(wav, ".wrd")
    if wrd is not None:
        return [word.upper() for word in _third_fields(wrd)]
    txt = find_sibling(wav, ".txt")
    if txt is not None:  # "<start> <end> Sentence text."
        text = " ".join(txt.read_text(encoding="latin-1").split()[2:])
        return "".join(c for c in text.upper() if c.isalnum() or c in " '-").split()
    return []


def scan_timit(data_folder: PathLike) -> List[TimitUtterance]:
    """All non-SA utterances of TRAIN and TEST (any case of names)."""
    root = Path(data_folder)
    if find_child(root, "TRAIN") is None and find_child(root / "TIMIT", "TRAIN") is not None:
        root = root / "TIMIT"
    utts: List[TimitUtterance] = []
    for part in ("train", "test"):
        part_dir = find_child(root, part)
        if part_dir is None:
            raise DataPreparationError(
                f"TIMIT folder {part.upper()} (or {part}) not found under {root.resolve()}; pass the "
                "folder that contains TRAIN/ and TEST/ as data_folder"
            )
        for wav in list_files(part_dir, (".wav",)):
            stem = wav.name[:-4]
            if "." in stem or stem.lower().startswith("sa"):
                continue
            spk = wav.parent.name.lower()
            utts.append(TimitUtterance(f"{spk}_{stem.lower()}", wav.resolve(), spk, part))
    return utts


def prepare_timit(
    data_folder: PathLike, save_folder: PathLike, skip_bad_audio: bool = False,
    sample_rate: int = TARGET_SAMPLE_RATE,
) -> Dict[str, Path]:
    """Write ``timit_train.csv``, ``timit_valid.csv`` (dev speakers), ``timit_test.csv`` (core test) for TIMIT.

    ``phn`` holds the folded 39-phone labels (``q`` removed, repeated ``sil`` merged), ``wrd`` the
    upper-case words from ``.WRD`` (or ``.TXT``).  ``sample_rate`` (the model's) words the warning
    about files at another rate.  Idempotent: an unchanged repeat returns at once.
    """
    root = Path(data_folder)
    if not root.is_dir():
        raise DataPreparationError(f"TIMIT data_folder {root.resolve()} does not exist")
    inputs = list_files(root, (".wav", ".phn", ".wrd", ".txt"))
    options = {"data_folder": str(root.resolve()), "skip_bad_audio": skip_bad_audio}

    def build(save: Path) -> Dict[str, Path]:
        utts = scan_timit(root)
        split_of = {u.id: timit_split(u) for u in utts}
        utts = [u for u in utts if split_of[u.id]]
        expected = {"train": "TIMIT's TRAIN part", "valid": "the 50 development speakers of TEST (e.g. faks0)",
                    "test": "the 24 core-test speakers of TEST (e.g. mdab0)"}
        empty = [f"{split} ({where})" for split, where in expected.items() if split not in split_of.values()]
        if empty:  # before any audio is decoded
            raise DataPreparationError(f"TIMIT data_folder {root}: no utterance of {', '.join(empty)}; point "
                                       "data_folder at a full TIMIT copy (TRAIN/ and TEST/ with their speaker folders)")
        infos = check_audio_files([u.wav for u in utts], skip_bad_audio=skip_bad_audio, target_sr=sample_rate)
        rows: Dict[str, List[dict]] = {"train": [], "valid": [], "test": []}
        problems = []
        for u in utts:
            if str(u.wav) not in infos:
                continue
            phn = find_sibling(u.wav, ".phn")
            words = _read_words(u.wav)
            if phn is None or not words:
                problems.append(f"{u.wav}: missing {'.PHN' if phn is None else '.WRD/.TXT'} file or empty")
                continue
            phones = read_folded_phones(phn, u.id)
            rows[split_of[u.id]].append({
                "ID": u.id, "duration": infos[str(u.wav)].duration, "wav": str(u.wav),
                "spk_id": u.spk_id, "wrd": " ".join(words), "phn": " ".join(phones),
            })
        if problems:
            raise DataPreparationError(f"{len(problems)} TIMIT label problem(s):\n  "
                                       + "\n  ".join(first_listed(problems, MAX_LISTED)))
        for split, split_rows in rows.items():
            refuse_empty_split(save / f"timit_{split}.csv", split, split_rows)
        return {s: write_manifest(save / f"timit_{s}.csv", r, LABELLED_COLUMNS) for s, r in rows.items()}

    return cached_prepare(save_folder, "timit_prepare", options, inputs, build)
