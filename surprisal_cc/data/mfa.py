"""Montreal Forced Aligner (MFA) labels: CSV export, TextGrid files, and running ``mfa``.

MFA is a conda package (it needs Kaldi binaries); it cannot be pip-installed into this venv.
Labels are read into ``{utterance_id: [phone, ...]}`` over :data:`LIBRISPEECH_PHONES`.

>>> tg = '''File type = "ooTextFile"
... Object class = "TextGrid"
... xmin = 0
... xmax = 1
... tiers? <exists>
... size = 1
... item []:
...     item [1]:
...         class = "IntervalTier"
...         name = "phones"
...         xmin = 0
...         xmax = 1
...         intervals: size = 3
...         intervals [1]:
...             xmin = 0
...             xmax = 0.2
...             text = ""
...         intervals [2]:
...             xmin = 0.2
...             xmax = 0.5
...             text = "HH"
...         intervals [3]:
...             xmin = 0.5
...             xmax = 1
...             text = "AH0"
... '''
>>> textgrid_phones(parse_textgrid(tg))
['sil', 'HH', 'AH']
"""
from __future__ import annotations

import ast
import csv
import io
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import DataPreparationError
from .manifest import read_text
from .phones import LIBRISPEECH_PHONES, SILENCE, SPOKEN_NOISE, merge_repeated, strip_stress
from .phones import validate_phones

PathLike = Union[str, os.PathLike]
Interval = Tuple[float, float, str]
_SILENCE_MARKS = {"", "sp", "sil", "<eps>", "SIL"}
TEXTGRID_HINT = "save the TextGrid as UTF-8, as MFA writes it"

MFA_INSTALL_HELP = (
    "The Montreal Forced Aligner (`mfa`) is not installed. It cannot be pip-installed (it needs "
    "Kaldi/OpenFst binaries); install it with conda: `conda install -c conda-forge "
    "montreal-forced-aligner` (then `mfa model download acoustic english_us_arpa` and "
    "`mfa model download dictionary english_us_arpa`), or prepare the data with labels='lexicon' "
    "(CMUdict + g2p) instead of MFA alignments."
)


def read_mfa_csv(path: PathLike, column: str = "phonemes_39") -> Dict[str, List[str]]:
    """Read the CSV export (columns ``path,...,phonemes_39,...``): utterance id = file stem."""
    labels: Dict[str, List[str]] = {}
    text = read_text(path, "give MFA's CSV export or a folder of TextGrids", newline="")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    if reader.fieldnames is None or "path" not in reader.fieldnames or column not in reader.fieldnames:
        raise DataPreparationError(
            f"{path}: expected columns 'path' and {column!r}, found {reader.fieldnames}"
        )
    for row in reader:
        utt_id = Path(row["path"]).name.split(".")[0]
        phones = merge_repeated(row[column].split())
        validate_phones(phones, LIBRISPEECH_PHONES, f"{path}: utterance {utt_id}")
        labels[utt_id] = phones
    return labels


_TG_TOKEN = re.compile(r'"((?:[^"]|"")*)"|(\S+)')


def parse_textgrid(text: str) -> Dict[str, List[Interval]]:
    """Parse a long-format Praat TextGrid (as ``mfa align`` writes it) into interval tiers.

    Returns ``{tier name: [(xmin, xmax, text), ...]}``; point tiers are ignored.
    """
    tiers: Dict[str, List[Interval]] = {}
    current: Optional[List[Interval]] = None
    is_interval_tier = False
    pending: Dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if "=" not in line:
            if line.startswith("intervals ["):
                pending = {}
            continue
        key, _, raw = (part.strip() for part in line.partition("="))
        m = _TG_TOKEN.match(raw)
        value = (m.group(1).replace('""', '"') if m.group(1) is not None else m.group(2)) if m else ""
        if key == "class":
            is_interval_tier = value == "IntervalTier"
        elif key == "name":
            current = tiers.setdefault(value, []) if is_interval_tier else None
        elif current is not None and key in ("xmin", "xmax", "text"):
            pending[key] = value
            if key == "text":
                if "xmin" not in pending or "xmax" not in pending:
                    raise DataPreparationError(f"malformed TextGrid interval near: {line!r}")
                current.append((float(pending["xmin"]), float(pending["xmax"]), value))
                pending = {}
    return tiers


def textgrid_phones(tiers: Mapping[str, List[Interval]], tier: str = "phones") -> List[str]:
    """MFA phone tier -> labels: stress stripped, ``""``/``sp``/``sil`` -> ``sil`` (merged)."""
    if tier not in tiers:
        raise DataPreparationError(f"TextGrid has no {tier!r} tier (tiers: {sorted(tiers)})")
    phones = []
    for _, _, mark in tiers[tier]:
        mark = mark.strip()
        if mark in _SILENCE_MARKS:
            phones.append(SILENCE)
        elif mark.lower() == SPOKEN_NOISE:
            phones.append(SPOKEN_NOISE)
        else:
            phones.append(strip_stress(mark).upper())
    return merge_repeated(phones)


def read_mfa_textgrids(folder: PathLike) -> Dict[str, List[str]]:
    """Read every ``*.TextGrid`` under ``folder`` (utterance id = file stem)."""
    labels: Dict[str, List[str]] = {}
    for path in sorted(Path(folder).rglob("*.TextGrid")):
        phones = textgrid_phones(parse_textgrid(read_text(path, TEXTGRID_HINT)))
        validate_phones(phones, LIBRISPEECH_PHONES, f"{path}: utterance {path.stem}")
        labels[path.stem] = phones
    return labels


def load_mfa_labels(source: PathLike) -> Dict[str, List[str]]:
    """Labels from a CSV file or a folder of TextGrid files."""
    source = Path(source)
    if source.is_dir():
        return read_mfa_textgrids(source)
    if source.is_file():
        return read_mfa_csv(source)
    raise DataPreparationError(f"MFA label source {source} does not exist (CSV file or TextGrid folder)")


def textgrid_word_phones(tiers: Mapping[str, List[Interval]], words: str = "words",
                         phones: str = "phones") -> List[Tuple[str, Tuple[str, ...]]]:
    """Each word of an MFA TextGrid with the phones that start within it (stress stripped, silence
    left out), in order.

    Example
    -------
    >>> tiers = {"words": [(0, 0.2, ""), (0.2, 1, "a")], "phones": [(0, 0.2, ""), (0.2, 0.6, "AH0")]}
    >>> textgrid_word_phones(tiers)
    [('a', ('AH',))]
    """
    for tier in (words, phones):
        if tier not in tiers:
            raise DataPreparationError(f"TextGrid has no {tier!r} tier (tiers: {sorted(tiers)})")
    out = []
    for start, end, word in tiers[words]:
        if word.strip() in _SILENCE_MARKS:
            continue
        marks = [mark.strip() for t, _, mark in tiers[phones] if start <= t < end and mark.strip() not in _SILENCE_MARKS]
        out.append((word.strip(), tuple(SPOKEN_NOISE if m.lower() == SPOKEN_NOISE else strip_stress(m).upper()
                                        for m in marks)))
    return out


def read_word_phones(path: PathLike) -> Dict[str, List[Tuple[str, Tuple[str, ...]]]]:
    """``{utterance id: [(word, its phones), ...]}`` from an MFA export CSV: the phones that start
    within each word's time span (``sil``, ``sp`` and empty labels left out).

    Arguments
    ---------
    path : str or path
        An MFA export CSV (or one written by :func:`surprisal_cc.realign.write_alignment_csv`).

    Returns
    -------
    dict of str to list of (str, tuple of str)

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     with open(Path(tmp) / "ali.csv", "w", newline="") as f:
    ...         csv.writer(f).writerows([["path", "phn", "phn_starts", "words", "wrd_starts", "wrd_ends"],
    ...                                  ["a/u1.flac", "['sil', 'EY', 'sil', 'B', 'IY']", "0 1 2 4 5",
    ...                                   "['a', '', 'be']", "1 2 4", "2 4 6"]])
    ...     read_word_phones(Path(tmp) / "ali.csv")
    {'u1': [('a', ('EY',)), ('be', ('B', 'IY'))]}
    """
    out: Dict[str, List[Tuple[str, Tuple[str, ...]]]] = {}
    with open(path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            phones, starts = ast.literal_eval(row["phn"]), [int(x) for x in row["phn_starts"].split()]
            words = ast.literal_eval(row["words"])
            spans = zip(words, [int(x) for x in row["wrd_starts"].split()], [int(x) for x in row["wrd_ends"].split()])
            out[Path(row["path"]).name.split(".")[0]] = [
                (word, tuple(p for p, t in zip(phones, starts) if start <= t < end and p not in ("sil", "sp", "")))
                for word, start, end in spans if word]
    return out


def boundary_silences(is_word: Sequence[bool], labels: Sequence[str]) -> Tuple[int, set]:
    """``(number of words, word boundaries with sil)`` of one utterance: boundary b lies before word
    b; a non-word interval between two words marks an interior boundary, and the two ends count where
    the labels start or end with ``sil``.

    Arguments
    ---------
    is_word : sequence of bool
        For each interval of the words tier, whether it is a word (not a silence).
    labels : sequence of str
        The utterance's phone labels.

    Example
    -------
    >>> boundary_silences([False, True, False, True], ["sil", "AH", "sil", "B"])
    (2, {0, 1})
    """
    count, silences = 0, set()
    for word in is_word:
        if word:
            count += 1
        elif count > 0:
            silences.add(count)
    silences.discard(count)
    if list(labels[:1]) == [SILENCE]:
        silences.add(0)
    if list(labels[-1:]) == [SILENCE]:
        silences.add(count)
    return count, silences


def textgrid_boundary_silences(tiers: Mapping[str, List[Interval]], words: str = "words",
                               phones: str = "phones") -> Tuple[int, set]:
    """:func:`boundary_silences` of an MFA TextGrid, as
    :func:`surprisal_cc.label_eval.read_boundary_silences` reads them from the CSV export.

    Example
    -------
    >>> tiers = {"words": [(0, 0.2, ""), (0.2, 0.5, "a"), (0.5, 0.6, ""), (0.6, 1, "b")],
    ...          "phones": [(0, 0.2, ""), (0.2, 0.5, "AH0"), (0.5, 0.6, "sp"), (0.6, 1, "B")]}
    >>> textgrid_boundary_silences(tiers)
    (2, {0, 1})
    """
    if words not in tiers:
        raise DataPreparationError(f"TextGrid has no {words!r} tier (tiers: {sorted(tiers)})")
    return boundary_silences([word.strip() not in _SILENCE_MARKS for _, _, word in tiers[words]],
                             textgrid_phones(tiers, phones))


def load_mfa_word_phones(source: PathLike) -> Dict[str, List[Tuple[str, Tuple[str, ...]]]]:
    """``{utterance id: [(word, its phones), ...]}`` from a CSV export or a folder of TextGrid files
    (the same sources as :func:`load_mfa_labels`)."""
    source = Path(source)
    if source.is_dir():
        return {path.stem: textgrid_word_phones(parse_textgrid(read_text(path, TEXTGRID_HINT)))
                for path in sorted(source.rglob("*.TextGrid"))}
    if source.is_file():
        try:
            return read_word_phones(source)
        except (KeyError, ValueError, SyntaxError) as err:
            raise DataPreparationError(f"{source}: no word timings ({type(err).__name__}: {err}); words and "
                                       "their phones need the columns phn, phn_starts, words, wrd_starts, "
                                       "wrd_ends of MFA's CSV export") from None
    raise DataPreparationError(f"MFA label source {source} does not exist (CSV file or TextGrid folder)")


def build_mfa_command(
    corpus_dir: PathLike,
    dictionary: PathLike,
    acoustic_model: PathLike,
    output_dir: PathLike,
    *,
    num_jobs: int = 2,
    clean: bool = True,
    extra_args: Sequence[str] = (),
    executable: str = "mfa",
) -> List[str]:
    """The ``mfa align`` command line (long TextGrid output into ``output_dir``)."""
    cmd = [executable, "align", str(corpus_dir), str(dictionary), str(acoustic_model), str(output_dir)]
    cmd += ["--num_jobs", str(num_jobs), "--output_format", "long_textgrid"]
    if clean:
        cmd.append("--clean")
    return cmd + list(extra_args)


def run_mfa(
    corpus_dir: PathLike,
    dictionary: PathLike,
    acoustic_model: PathLike,
    output_dir: PathLike,
    *,
    num_jobs: int = 2,
    clean: bool = True,
    extra_args: Sequence[str] = (),
) -> Path:
    """Run ``mfa align`` if the executable is on PATH; return ``output_dir`` (TextGrids).

    ``corpus_dir`` must hold audio + ``.lab``/``.txt`` transcripts as MFA expects;
    ``dictionary``/``acoustic_model`` are paths or MFA model names (e.g. ``english_us_arpa``).
    Raises :class:`DataPreparationError` with install instructions when ``mfa`` is missing.
    """
    exe = shutil.which("mfa")
    if exe is None:
        raise DataPreparationError(MFA_INSTALL_HELP)
    cmd = build_mfa_command(
        corpus_dir, dictionary, acoustic_model, output_dir,
        num_jobs=num_jobs, clean=clean, extra_args=extra_args, executable=exe,
    )
    Path(output_dir).mkdir(parents=True, exist_ok=True)
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise DataPreparationError(
            f"`{' '.join(cmd)}` failed with exit code {res.returncode}:\n{res.stderr[-2000:]}"
        )
    return Path(output_dir)

