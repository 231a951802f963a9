"""A Kaldi data folder (``wav.scp`` and ``text``, as Kaldi, ESPnet and lhotse's ``kaldi export``
write them) read as utterances with their audio file and words (:func:`read_kaldi_data_folder`,
for scoring), or as utterances with their audio file alone (:func:`read_wav_scp`, for transcribing).

``wav.scp`` lines are ``UTT PATH``; a relative path is read from the current folder, as Kaldi reads
it, or else from the data folder. Entries that Kaldi runs as commands (``... |``) or reads from
archives (``file.ark:offset``) are not audio files and are refused, as is a ``segments`` file
(utterances cut from longer recordings). ``text`` lines are ``UTT WORD WORD ...``; other files
(``utt2spk``, ``spk2utt``, ...) are not read.

Example
-------
>>> import tempfile
>>> with tempfile.TemporaryDirectory() as tmp:
...     _ = Path(tmp, "wav.scp").write_text("u2 /audio/u2.flac\\nu1 /audio/u1.wav\\n")
...     _ = Path(tmp, "text").write_text("u1 hello world\\nu2 GOOD MORNING\\n")
...     read_kaldi_data_folder(tmp)
[KaldiUtterance(id='u1', wav='/audio/u1.wav', words=('HELLO', 'WORLD')), \
KaldiUtterance(id='u2', wav='/audio/u2.flac', words=('GOOD', 'MORNING'))]
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional, Tuple, Union

from surprisal_cc.data.audio import MAX_LISTED
from surprisal_cc.data.errors import BadAudioError, BadLabelsError, DataPreparationError, collect_or_raise_label_problems, first_listed
from surprisal_cc.data.manifest import read_text

PathLike = Union[str, os.PathLike]

__all__ = ["KaldiUtterance", "is_kaldi_data_folder", "read_kaldi_data_folder", "read_wav_scp", "read_wav_scp_entries"]


class KaldiUtterance(NamedTuple):
    """One utterance of a Kaldi data folder: its id, audio file and words (upper case)."""

    id: str
    wav: str
    words: Tuple[str, ...]


def is_kaldi_data_folder(path: PathLike) -> bool:
    """Whether ``path`` is a folder with a ``wav.scp`` file."""
    return Path(path, "wav.scp").is_file()


def read_kaldi_data_folder(folder: PathLike, problems: Optional[List[str]] = None) -> List[KaldiUtterance]:
    """The utterances of a Kaldi data folder, sorted by id.

    Arguments
    ---------
    folder : str or path
        A folder with ``wav.scp`` and ``text``.
    problems : list, optional
        Given a list, utterances without a usable audio entry or transcript are left out, with
        one ``"file: problem"`` line each appended to it, instead of failing.

    Returns
    -------
    list of KaldiUtterance

    Raises
    ------
    DataPreparationError
        When a file is missing, a line has no value or an utterance id occurs twice in a file;
        :class:`~surprisal_cc.data.errors.BadLabelsError` for utterances without usable audio or words (without ``problems``).
    """
    folder = Path(folder)
    audio, refused = read_wav_scp_entries(folder)
    if not (folder / "text").is_file():
        raise DataPreparationError(f"{folder}: a Kaldi data folder needs text (UTT WORD ... lines) to be scored")
    texts = _read_table(folder / "text", empty_allowed=True)
    found: List[str] = []
    utterances = []
    for utt in sorted(audio.keys() | refused.keys()):
        words = tuple(texts.get(utt, "").upper().split())
        if utt in refused:
            found.append(f"{folder / 'wav.scp'}: {utt}: {refused[utt]}")
        elif utt not in texts:
            found.append(f"{folder / 'text'}: no line for {utt}")
        elif not words:
            found.append(f"{folder / 'text'}: no words for {utt}")
        else:
            utterances.append(KaldiUtterance(utt, audio[utt], words))
    found += [f"{folder / 'wav.scp'}: no line for {utt} (it has a transcript in text)"
              for utt in sorted(set(texts) - set(audio) - set(refused))]
    total = len(audio.keys() | refused.keys() | texts.keys())
    collect_or_raise_label_problems(found, total, f"{len(found)} of {total} utterances of {folder} cannot be "
                                    "scored; pass --skip-bad (skip_bad=True) to score the others", problems, MAX_LISTED)
    if not utterances:  # every utterance refused: why, whether or not they were to be skipped
        raise BadLabelsError(first_listed(found, MAX_LISTED), total, f"{folder}: no utterance with both audio and words")
    return utterances


def read_wav_scp(folder: PathLike, problems: Optional[List[str]] = None) -> Dict[str, str]:
    """The audio file of each utterance in a Kaldi data folder's ``wav.scp``, by id (sorted): what
    transcribing it needs (``text`` is not read).

    Arguments
    ---------
    folder : str or path
        A folder with ``wav.scp``.
    problems : list, optional
        Given a list, entries that are not audio files (commands, archive offsets, standard input)
        are left out, with one ``"file: problem"`` line each appended to it, instead of failing.

    Raises
    ------
    DataPreparationError
        As :func:`read_kaldi_data_folder` does, for ``wav.scp`` alone.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = Path(tmp, "wav.scp").write_text("u2 /audio/u2.flac\\nu1 flac -c -d -s /audio/u1.flac |\\n")
    ...     skipped = []
    ...     read_wav_scp(tmp, skipped), [line.split(": ", 1)[1].split(" (")[0] for line in skipped]
    ({'u2': '/audio/u2.flac'}, ['u1: a command'])
    """
    folder = Path(folder)
    audio, refused = read_wav_scp_entries(folder)
    found = [f"{folder / 'wav.scp'}: {utt}: {reason}" for utt, reason in refused.items()]
    total = len(audio) + len(refused)
    collect_or_raise_label_problems(found, total, f"{len(found)} of {total} utterances of {folder} are not audio "
                                    "files; pass --skip-bad to transcribe the others", problems, MAX_LISTED)
    if not audio:
        raise BadAudioError(first_listed(found, MAX_LISTED), total, f"{folder / 'wav.scp'}: no utterance with an "
                            "audio file")
    return audio


def read_wav_scp_entries(folder: PathLike) -> Tuple[Dict[str, str], Dict[str, str]]:
    """``wav.scp`` of ``folder`` as ({utt: audio path}, {utt: why its entry is not an audio file}),
    sorted by id; a ``segments`` file is refused.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = Path(tmp, "wav.scp").write_text("u2 /audio/u2.flac\\nu1 flac -c -d -s /audio/u1.flac |\\n")
    ...     audio, refused = read_wav_scp_entries(tmp)
    ...     audio, {utt: reason.split(" (")[0] for utt, reason in refused.items()}
    ({'u2': '/audio/u2.flac'}, {'u1': 'a command'})
    """
    folder = Path(folder)
    if not (folder / "wav.scp").is_file():
        raise DataPreparationError(f"{folder}: a Kaldi data folder needs wav.scp (UTT PATH lines)")
    if (folder / "segments").exists():
        raise DataPreparationError(f"{folder / 'segments'}: utterances cut from longer recordings are not read; "
                                   "write each utterance to its own audio file (e.g. Kaldi's "
                                   "extract-segments), or give the recordings whole with a wav.scp of its own")
    audio: Dict[str, str] = {}
    refused: Dict[str, str] = {}
    for utt, entry in sorted(_read_table(folder / "wav.scp").items()):
        reason = _not_a_file(entry)
        if reason:
            refused[utt] = reason
        else:
            audio[utt] = _audio_path(folder, entry)
    return audio, refused


def _read_table(path: Path, empty_allowed: bool = False) -> Dict[str, str]:
    """``KEY VALUE...`` lines of a Kaldi table file as {key: value}; blank lines are skipped."""
    table: Dict[str, str] = {}
    text = read_text(path, "Kaldi data files are UTF-8 (convert it, e.g. with iconv)")
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, *rest = line.split(maxsplit=1)
        value = rest[0].strip() if rest else ""
        if not value and not empty_allowed:
            raise DataPreparationError(f"{path}, line {number}: {key!r} has no value (expected: UTT PATH)")
        if key in table:
            raise DataPreparationError(f"{path}, line {number}: utterance id {key!r} occurs twice; "
                                       "give each utterance its own id")
        table[key] = value
    return table


def _not_a_file(entry: str) -> Optional[str]:
    """Why a ``wav.scp`` value is not an audio file's path (a command or an archive), else None."""
    if entry.endswith("|"):
        return (f"a command ({entry}), not an audio file: write its output to a file and list that, "
                "e.g. with Kaldi's wav-copy")
    if entry == "-":
        return "standard input (-), not an audio file"
    if ".ark:" in entry:
        return f"an offset into a Kaldi archive ({entry}), not an audio file: list the audio files"
    return None


def _audio_path(folder: Path, entry: str) -> str:
    """A ``wav.scp`` path: relative to the current folder (Kaldi's reading), else to ``folder``."""
    path = Path(entry)
    if path.is_absolute() or path.exists():
        return entry
    beside = folder / path
    return str(beside) if beside.exists() else entry
