"""Montreal Forced Aligner (MFA) labels: CSV export, TextGrid files, and running ``mfa``.

MFA is a conda package (it needs Kaldi binaries); it cannot be pip-installed into this venv.
Labels are read into ``{utterance_id: [phone, ...]}`` over :data:`LIBRISPEECH_PHONES`. The
per-phone CSV export (columns :data:`MFA_EXPORT_COLUMNS`) is read by :func:`read_mfa_export` alone
and written by :func:`write_alignment_csv`; :data:`SILENCE_MARKS` are MFA's silence labels.

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
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from surprisal_cc.data.errors import DataPreparationError
from surprisal_cc.data.manifest import atomic_write_text, list_files, read_text
from surprisal_cc.data.phones import LIBRISPEECH_PHONES, SILENCE, SPOKEN_NOISE, merge_repeated, strip_stress
from surprisal_cc.data.phones import refuse_empty_labels, validate_phones

PathLike = Union[str, os.PathLike]
Interval = Tuple[float, float, str]
#: MFA's silence labels (phones and words tiers, CSV export): read as ``sil``, or as no word.
SILENCE_MARKS = frozenset({"", "sp", "sil", "<eps>", "SIL"})
#: The columns of MFA's per-phone CSV export (``dev-clean-2_mfa.csv``), in order.
MFA_EXPORT_COLUMNS = ("path", "wrd", "phonemes_39", "phonemes_61", "phn", "phn_starts", "phn_ends",
                      "words", "wrd_starts", "wrd_ends")
_TOKEN_COLUMNS = ("phonemes_39", "phonemes_61")             # space-separated labels
_LIST_COLUMNS = ("phn", "words")                            # Python list literals
_SAMPLE_COLUMNS = ("phn_starts", "phn_ends", "wrd_starts", "wrd_ends")  # space-separated sample indices
TEXTGRID_HINT = "save the TextGrid as UTF-8, as MFA writes it"

MFA_INSTALL_HELP = (
    "The Montreal Forced Aligner (`mfa`) is not installed. It cannot be pip-installed (it needs "
    "Kaldi/OpenFst binaries); install it with conda: `conda install -c conda-forge "
    "montreal-forced-aligner` (then `mfa model download acoustic english_us_arpa` and "
    "`mfa model download dictionary english_us_arpa`), or prepare the data with labels='lexicon' "
    "(CMUdict + g2p) instead of MFA alignments."
)


def utterance_id(path: PathLike) -> str:
    r"""The utterance id of an audio or label file: its name without the extension, as
    :func:`surprisal_cc.data.librispeech.scan_subset` makes ids (``<speaker>-<chapter>-<n>.flac``).
    Both ``/`` and ``\`` separate folders, on any system: an export made on Windows names its files
    ``C:\corpus\...\84-121123-0000.flac``.

    Example
    -------
    >>> utterance_id("dev-clean-2/84/121123/84-121123-0000.flac"), utterance_id("spk/u1.v2.flac")
    ('84-121123-0000', 'u1.v2')
    >>> utterance_id(r"C:\corpus\dev-clean-2\84\121123\84-121123-0000.flac")
    '84-121123-0000'
    """
    return PurePosixPath(os.fspath(path).replace("\\", "/")).stem


@dataclass(frozen=True)
class MFAExportRow:
    """One utterance (row) of the MFA CSV export; a column that was not read is None.

    ``phonemes_39``/``phonemes_61`` and ``phn``/``words`` are lists of labels (``''`` a silence in
    ``words``), the ``*_starts``/``*_ends`` lists of sample indices.
    """

    path: str
    wrd: Optional[str] = None
    phonemes_39: Optional[List[str]] = None
    phonemes_61: Optional[List[str]] = None
    phn: Optional[List[str]] = None
    phn_starts: Optional[List[int]] = None
    phn_ends: Optional[List[int]] = None
    words: Optional[List[str]] = None
    wrd_starts: Optional[List[int]] = None
    wrd_ends: Optional[List[int]] = None

    @property
    def utt_id(self) -> str:
        """:func:`utterance_id` of ``path``."""
        return utterance_id(self.path)


def _parse_column(column: str, text: str):
    if column in _TOKEN_COLUMNS:
        return text.split()
    if column in _SAMPLE_COLUMNS:
        return [int(x) for x in text.split()]
    if column in _LIST_COLUMNS:
        value = ast.literal_eval(text)
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"not a list: {text[:40]!r}")
        return [str(x) for x in value]
    return text


def read_mfa_export(path: PathLike, columns: Sequence[str] = MFA_EXPORT_COLUMNS[1:],
                    purpose: str = "every column") -> List[MFAExportRow]:
    """The rows of an MFA CSV export (or of a file written by :func:`write_alignment_csv`), with
    ``path`` and ``columns`` parsed. A missing column or a malformed value is one
    :class:`DataPreparationError` naming the file (and the utterance); ``purpose`` says what the
    columns are for in the first.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = Path(tmp, "ali.csv").write_text("path,phonemes_39,phn,phn_starts\\n"
    ...                                         "a/u1.flac,sil AH,\\"['sil', 'AH']\\",0 640\\n")
    ...     row, = read_mfa_export(Path(tmp, "ali.csv"), ("phn", "phn_starts"))
    >>> row.utt_id, row.phn, row.phn_starts, row.phonemes_39
    ('u1', ['sil', 'AH'], [0, 640], None)
    """
    unknown = sorted(set(columns) - set(MFA_EXPORT_COLUMNS))
    if unknown:
        raise ValueError(f"{unknown}: not columns of the MFA export {list(MFA_EXPORT_COLUMNS)}")
    text = read_text(path, "give MFA's CSV export or a folder of TextGrids", newline="")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    missing = [c for c in ("path", *columns) if c not in (reader.fieldnames or [])]
    if missing:
        raise DataPreparationError(f"{path}: no column {', '.join(missing)}; give the CSV export of MFA "
                                   f"alignments with {purpose}")
    rows = []
    for row in reader:
        values = {}
        for column in columns:
            try:
                values[column] = _parse_column(column, row[column] or "")
            except (ValueError, SyntaxError) as err:
                raise DataPreparationError(f"{path}: utterance {row['path']}: malformed {column} ({type(err).__name__}: "
                                           f"{err}); give the CSV export of MFA alignments with {purpose}") from None
        rows.append(MFAExportRow(row["path"], **values))
    return rows


def read_mfa_csv(path: PathLike, column: str = "phonemes_39") -> Dict[str, List[str]]:
    """Labels ``{utterance id: phones}`` of the CSV export's ``column`` (``phonemes_39`` or
    ``phonemes_61``), repeated labels merged and checked against :data:`LIBRISPEECH_PHONES`; an
    utterance without phones, or on two rows, is a :class:`DataPreparationError` naming it (an empty
    reference would count every recognised phone as an insertion; of two rows, one would silently win).

    Example
    -------
    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False) as f:
    ...     _ = f.write("path,phonemes_39\\nLibriSpeech/dev-clean-2/84/121550/84-121550-0000.flac,\\n")
    >>> read_mfa_csv(f.name)
    Traceback (most recent call last):
    ...
    surprisal_cc.data.errors.DataPreparationError: ...: utterance 84-121550-0000 has no phonemes_39 labels; fix or remove its row
    >>> import os; os.remove(f.name)
    """
    labels: Dict[str, List[str]] = {}
    for row in read_mfa_export(path, (column,), f"{column} labels"):
        phones = merge_repeated(getattr(row, column))
        refuse_empty_labels(phones, f"{path}: utterance {row.utt_id}", f"{column} labels", "fix or remove its row")
        if row.utt_id in labels:
            raise DataPreparationError(f"{path}: utterance {row.utt_id} is on two rows; keep the one that labels it")
        validate_phones(phones, LIBRISPEECH_PHONES, f"{path}: utterance {row.utt_id}")
        labels[row.utt_id] = phones
    return labels


def write_alignment_csv(path: PathLike, utterances: Iterable, samples_per_frame: int = 320) -> Path:
    """Write labels in the MFA export format (:data:`MFA_EXPORT_COLUMNS`) that ``labels: mfa`` reads.

    ``phonemes_39`` (and ``phonemes_61``) hold the labels, ``phn`` the same as a list,
    ``phn_starts``/``phn_ends`` sample indices, ``words`` a ``''`` for each ``sil``; ``path`` is the
    audio file's last four parts. Rows are sorted by utterance id; the file is replaced atomically.

    Arguments
    ---------
    path : str or path
        The CSV file to write.
    utterances : iterable
        Realigned utterances (:class:`surprisal_cc.alignment.realign.RealignedUtterance`: ``id``, ``wav``,
        ``words``, ``word_lengths``, ``phones``, ``silences`` and ``segments`` in model frames).
    samples_per_frame : int
        Audio samples per model frame (320: 20 ms frames at 16 kHz).

    Returns
    -------
    pathlib.Path
        ``path``.

    Example
    -------
    >>> import tempfile
    >>> from types import SimpleNamespace
    >>> utt = SimpleNamespace(id="u1", wav="u1.flac", words=["a", "be"], word_lengths=[1, 1],
    ...                       phones=["AH", "sil", "B"], silences=[1], segments=[[0, 2], [2, 4], [4, 6]])
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     row, = read_mfa_export(write_alignment_csv(Path(tmp) / "ali.csv", [utt]))
    >>> row.phonemes_39, row.phn_starts, row.phn_ends, row.words
    (['AH', 'sil', 'B'], [0, 640, 1280], [640, 1280, 1920], ['a', '', 'be'])
    """
    import numpy as np

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=MFA_EXPORT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for utt in sorted(utterances, key=lambda u: u.id):
        spans = (np.asarray(utt.segments) * samples_per_frame).astype(int)
        word_items, word_spans = [], []
        phone_iter = iter(zip(utt.phones, spans.tolist()))
        silences = set(utt.silences)
        for b in range(len(utt.words) + 1):
            if b in silences:
                _, span = next(phone_iter)
                word_items.append("")
                word_spans.append(span)
            if b < len(utt.words):
                first = last = None
                for _ in range(utt.word_lengths[b]):
                    _, span = next(phone_iter)
                    first = span if first is None else first
                    last = span
                word_items.append(utt.words[b].lower())
                word_spans.append([first[0], last[1]])
        phones = " ".join(utt.phones)
        writer.writerow({
            "path": "/".join(Path(utt.wav).parts[-4:]), "wrd": " ".join(utt.words).lower(),
            "phonemes_39": phones, "phonemes_61": phones, "phn": repr(list(utt.phones)),
            "phn_starts": " ".join(str(s) for s, _ in spans.tolist()),
            "phn_ends": " ".join(str(e) for _, e in spans.tolist()),
            "words": repr(word_items), "wrd_starts": " ".join(str(s) for s, _ in word_spans),
            "wrd_ends": " ".join(str(e) for _, e in word_spans),
        })
    atomic_write_text(path, buf.getvalue())
    return Path(path)


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
        if mark in SILENCE_MARKS:
            phones.append(SILENCE)
        elif mark.lower() == SPOKEN_NOISE:
            phones.append(SPOKEN_NOISE)
        else:
            phones.append(strip_stress(mark).upper())
    return merge_repeated(phones)


def textgrid_files(folder: PathLike) -> List[Path]:
    """The TextGrid files under ``folder``, any case of ``.TextGrid``, hidden files (macOS's ``._x``)
    left out, links to folders followed: the files the preparation's fingerprint reads."""
    return list_files(folder, (".textgrid",))


def _read_textgrid(path: Path) -> Dict[str, List[Interval]]:
    """One TextGrid's tiers; a file that does not parse is a :class:`DataPreparationError` naming it."""
    try:
        return parse_textgrid(read_text(path, TEXTGRID_HINT))
    except DataPreparationError as err:
        if str(path) in str(err):
            raise
        raise DataPreparationError(f"{path}: {err}") from None
    except ValueError as err:  # a time that is not a number
        raise DataPreparationError(f"{path}: not a TextGrid MFA writes ({err})") from None


def textgrids_by_utterance(folder: PathLike) -> Dict[str, Path]:
    """``{utterance id: its TextGrid}`` of the TextGrids under ``folder`` (:func:`textgrid_files`; the id is
    the file's name without ``.TextGrid``); a folder without one, or two files of one utterance (in two
    speaker folders, say: one would silently win), is a :class:`DataPreparationError` naming them.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     for speaker in ("84", "85"):
    ...         Path(tmp, speaker).mkdir()
    ...         _ = Path(tmp, speaker, "84-121123-0000.TextGrid").write_text("")
    ...     textgrids_by_utterance(tmp)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    surprisal_cc.data.errors.DataPreparationError: .../84/84-121123-0000.TextGrid and .../85/84-121123-0000.TextGrid: two TextGrids of utterance 84-121123-0000; keep the one that labels it
    """
    paths = textgrid_files(folder)
    if not paths:
        raise DataPreparationError(f"{folder}: no .TextGrid file under it: give MFA's output folder or its "
                                   "export CSV")
    found: Dict[str, Path] = {}
    for path in paths:
        first = found.setdefault(utterance_id(path), path)
        if first != path:
            raise DataPreparationError(f"{first} and {path}: two TextGrids of utterance {utterance_id(path)}; keep "
                                       "the one that labels it")
    return found


def read_mfa_textgrids(folder: PathLike) -> Dict[str, List[str]]:
    """Read every TextGrid under ``folder`` (:func:`textgrids_by_utterance`); a folder without one, two of one
    utterance, or one whose phones tier holds no phone, is a :class:`DataPreparationError` naming it."""
    labels: Dict[str, List[str]] = {}
    for utt_id, path in textgrids_by_utterance(folder).items():
        tiers = _read_textgrid(path)
        try:
            phones = textgrid_phones(tiers)
        except DataPreparationError as err:  # no phones tier
            raise DataPreparationError(f"{path}: {err}") from None
        refuse_empty_labels(phones, f"{path}: utterance {utt_id}", "phone labels (its phones tier holds no interval)",
                            "align it again or remove the file")
        validate_phones(phones, LIBRISPEECH_PHONES, f"{path}: utterance {utt_id}")
        labels[utt_id] = phones
    return labels


def load_mfa_labels(source: PathLike) -> Dict[str, List[str]]:
    """Labels from a CSV file or a folder of TextGrid files."""
    source = Path(source)
    if source.is_dir():
        return read_mfa_textgrids(source)
    if source.is_file():
        return read_mfa_csv(source)
    raise DataPreparationError(f"MFA label source {source} does not exist (CSV file or TextGrid folder)")


def find_mfa_labels(subset_dir: PathLike, subset: Optional[str] = None) -> Optional[Path]:
    """MFA's labels of a LibriSpeech subset: the export file ``phone_labels/<subset>_mfa.csv``, else
    the TextGrid folder ``phone_labels/<subset>/``, inside ``LibriSpeech/`` or else beside it; None
    where there is neither (the export must be a file, the TextGrids a folder).

    Arguments
    ---------
    subset_dir : str or path
        The subset's folder, ``.../LibriSpeech/<subset>``.
    subset : str, optional
        The subset's name; None: the folder's name.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     subset_dir = Path(tmp, "LibriSpeech", "dev-clean-2")
    ...     before = find_mfa_labels(subset_dir)
    ...     Path(tmp, "phone_labels", "dev-clean-2").mkdir(parents=True)
    ...     after = find_mfa_labels(subset_dir).relative_to(tmp).as_posix()
    >>> before, after
    (None, 'phone_labels/dev-clean-2')
    """
    subset_dir = Path(subset_dir)
    subset = subset or subset_dir.name
    for base in (subset_dir.parent, subset_dir.parent.parent):
        export = base / "phone_labels" / f"{subset}_mfa.csv"
        if export.is_file():
            return export
        folder = base / "phone_labels" / subset  # TextGrids, as mfa-dev's
        if folder.is_dir():
            return folder
    return None


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
        if word.strip() in SILENCE_MARKS:
            continue
        marks = [mark.strip() for t, _, mark in tiers[phones] if start <= t < end and mark.strip() not in SILENCE_MARKS]
        out.append((word.strip(), tuple(SPOKEN_NOISE if m.lower() == SPOKEN_NOISE else strip_stress(m).upper()
                                        for m in marks)))
    return out


def read_word_phones(path: PathLike) -> Dict[str, List[Tuple[str, Tuple[str, ...]]]]:
    """``{utterance id: [(word, its phones), ...]}`` from an MFA export CSV: the phones that start
    within each word's time span (:data:`SILENCE_MARKS` left out).

    Arguments
    ---------
    path : str or path
        An MFA export CSV (or one written by :func:`write_alignment_csv`).

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
    for row in read_mfa_export(path, ("phn", "phn_starts", "words", "wrd_starts", "wrd_ends"), "word timings"):
        spans = zip(row.words, row.wrd_starts, row.wrd_ends)
        out[row.utt_id] = [
            (word, tuple(p for p, t in zip(row.phn, row.phn_starts) if start <= t < end and p not in SILENCE_MARKS))
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
    :func:`surprisal_cc.alignment.label_eval.read_boundary_silences` reads them from the CSV export.

    Example
    -------
    >>> tiers = {"words": [(0, 0.2, ""), (0.2, 0.5, "a"), (0.5, 0.6, ""), (0.6, 1, "b")],
    ...          "phones": [(0, 0.2, ""), (0.2, 0.5, "AH0"), (0.5, 0.6, "sp"), (0.6, 1, "B")]}
    >>> textgrid_boundary_silences(tiers)
    (2, {0, 1})
    """
    if words not in tiers:
        raise DataPreparationError(f"TextGrid has no {words!r} tier (tiers: {sorted(tiers)})")
    return boundary_silences([word.strip() not in SILENCE_MARKS for _, _, word in tiers[words]],
                             textgrid_phones(tiers, phones))


def load_mfa_word_phones(source: PathLike) -> Dict[str, List[Tuple[str, Tuple[str, ...]]]]:
    """``{utterance id: [(word, its phones), ...]}`` from a CSV export or a folder of TextGrid files
    (the same sources as :func:`load_mfa_labels`)."""
    source = Path(source)
    if source.is_dir():
        return {utt_id: textgrid_word_phones(_read_textgrid(path))
                for utt_id, path in textgrids_by_utterance(source).items()}
    if source.is_file():
        return read_word_phones(source)
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

