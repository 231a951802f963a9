"""Shared manifest writing and the "prepare once" cache used by the corpus preparers.

Each set of preparation options gets a folder of its own, ``<save_folder>/<name>-<options digest>/``,
so preparations with other options (labels, validation speakers ...) in the same ``save_folder``
never read or overwrite each other's manifests.  The folder's JSON file records the options and an
input fingerprint (file list + sizes + mtimes); a later call with the same options and unchanged
inputs returns the existing manifests immediately, changed inputs regenerate them there.

Every file is written atomically (a temporary file + ``os.replace``) and the record last, so two
processes preparing the same options at once never see half-written files: each sees whole
manifests, which hold the same rows whichever process wrote them.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from surprisal_cc.data.errors import MAX_LISTED, DataPreparationError

PathLike = Union[str, os.PathLike]
LABELLED_COLUMNS = ["ID", "duration", "wav", "spk_id", "wrd", "phn"]
AUDIO_COLUMNS = ["ID", "duration", "wav", "spk_id"]
STATE_VERSION = 1


def read_text(path: PathLike, hint: str, encoding: str = "utf-8", newline: Optional[str] = None) -> str:
    """The text of ``path`` (``encoding`` and ``newline`` as :func:`open` takes them); a file that is
    not UTF-8 is one :class:`DataPreparationError` naming it and saying what to do (``hint``).

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = Path(tmp, "a.txt").write_bytes("caf\xe9".encode("latin-1"))
    ...     read_text(Path(tmp, "a.txt"), "save it as UTF-8")
    Traceback (most recent call last):
        ...
    surprisal_cc.data.errors.DataPreparationError: .../a.txt: not UTF-8 text: save it as UTF-8
    """
    try:
        with open(path, encoding=encoding, newline=newline) as f:
            return f.read()
    except UnicodeDecodeError:
        raise DataPreparationError(f"{path}: not UTF-8 text: {hint}") from None


def atomic_write_text(path: PathLike, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file in the same folder + ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_manifest(path: PathLike, rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> Path:
    """Write a SpeechBrain CSV (rows sorted by ``ID``; durations with 3 decimals). An id given twice,
    or a row without one of ``columns``, is a :class:`DataPreparationError` naming it.

    Example
    -------
    >>> import tempfile
    >>> rows = [{"ID": "a", "duration": 1.0, "wav": "a.flac"}, {"ID": "a", "duration": 2.0, "wav": "b.flac"}]
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     write_manifest(Path(tmp, "train.csv"), rows, ("ID", "duration", "wav"))
    Traceback (most recent call last):
        ...
    surprisal_cc.data.errors.DataPreparationError: .../train.csv: utterance id 'a' is given twice (a.flac, b.flac): ...
    """
    rows = sorted(rows, key=lambda r: r["ID"])
    for first, second in zip(rows, rows[1:]):
        if first["ID"] == second["ID"]:
            raise DataPreparationError(f"{path}: utterance id {first['ID']!r} is given twice "
                                       f"({first.get('wav')}, {second.get('wav')}): each utterance needs an id of its "
                                       "own (SpeechBrain's datasets and the feature cache are keyed on it)")
    missing = next(((row["ID"], [c for c in columns if c not in row]) for row in rows
                    if any(c not in row for c in columns)), None)
    if missing is not None:
        raise DataPreparationError(f"{path}: utterance {missing[0]!r} has no {', '.join(missing[1])} "
                                   f"(a manifest has the columns {', '.join(columns)})")
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in rows:
        out = {c: row[c] for c in columns}
        out["duration"] = f"{float(row['duration']):.3f}"
        writer.writerow(out)
    atomic_write_text(path, buf.getvalue())
    return Path(path)


#: Why a prepared split can be empty: the audio of every one of its utterances was unusable.
ALL_AUDIO_LEFT_OUT = (f"skip_bad_audio left out the audio of every one of its utterances (the first {MAX_LISTED} "
                      "listed in the warning above): repair or replace those files")


def refuse_empty_split(path: PathLike, split: str, rows: Sequence, why: str = ALL_AUDIO_LEFT_OUT) -> None:
    """A :class:`DataPreparationError` naming ``split`` and its manifest ``path`` where ``rows`` is empty, and
    ``why``: a manifest of its header alone would fail only after training, when the split is evaluated.

    Example
    -------
    >>> refuse_empty_split("save/test.csv", "test", [])
    Traceback (most recent call last):
        ...
    surprisal_cc.data.errors.DataPreparationError: save/test.csv: split 'test' has no utterance: skip_bad_audio left out ...
    """
    if not rows:
        raise DataPreparationError(f"{path}: split {split!r} has no utterance: {why}")


class Manifest(NamedTuple):
    """A manifest CSV as :func:`read_manifest` reads it: its column names and its rows."""

    columns: List[str]
    rows: List[Dict[str, str]]


def read_manifest(path: PathLike, required: Sequence[Union[str, Tuple[str, ...]]] = ("ID", "wav"),
                  hint: str = "", resolve_wav: bool = True) -> Manifest:
    """The columns and rows of the manifest CSV ``path``, written by :func:`write_manifest` or a
    spreadsheet (a byte-order mark is dropped); text that is not UTF-8 is a
    :class:`DataPreparationError`, as is a missing ``required`` column (a tuple: any one of its
    columns), naming the file and adding ``hint``. With ``resolve_wav``, relative ``wav`` paths are
    resolved by :func:`manifest_wav`.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = Path(tmp, "test.csv").write_text("\\ufeffID,wav\\nu1,u1.flac\\n", encoding="utf-8")
    ...     columns, rows = read_manifest(Path(tmp, "test.csv"))
    ...     columns, rows[0]["ID"], rows[0]["wav"] == str(Path(tmp, "u1.flac"))
    (['ID', 'wav'], 'u1', True)
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     _ = Path(tmp, "test.csv").write_text("ID,wav\\nu1,u1.flac\\n")
    ...     read_manifest(Path(tmp, "test.csv"), ["ID", ("phn", "wrd")])
    Traceback (most recent call last):
        ...
    surprisal_cc.data.errors.DataPreparationError: .../test.csv: manifest lacks the column(s) ['phn or wrd']
    """
    text = read_text(path, "save the manifest as UTF-8", encoding="utf-8-sig", newline="")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    columns = list(reader.fieldnames or [])
    lacking = sorted(" or ".join(need) if isinstance(need, tuple) else need for need in required
                     if not set([need] if isinstance(need, str) else need) & set(columns))
    if lacking:
        raise DataPreparationError(f"{path}: manifest lacks the column(s) {lacking}" + (f" ({hint})" if hint else ""))
    rows = list(reader)
    if resolve_wav and "wav" in columns:
        for row in rows:
            if isinstance(row["wav"], str):
                row["wav"] = manifest_wav(Path(path), row["wav"])
    return Manifest(columns, rows)


def manifest_wav(manifest: Path, wav: str) -> str:
    """A manifest's ``wav``: relative paths are relative to the CSV's folder (or, where nothing is
    there but the file is, to the current folder, as recipes run from the repository write them)."""
    path = Path(wav)
    if path.is_absolute():
        return wav
    beside = manifest.parent / path
    return str(path if not beside.exists() and path.exists() else beside)


def file_sha256(path: PathLike) -> str:
    """The SHA-256 digest of a file's bytes, in hexadecimal (read in 1 MiB blocks).

    >>> import tempfile
    >>> with tempfile.NamedTemporaryFile() as f:
    ...     file_sha256(f.name)[:12]
    'e3b0c44298fc'
    """
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def input_fingerprint(files: Iterable[PathLike]) -> str:
    """SHA-256 over (path, size, mtime) of every file: cheap, changes when any input changes."""
    h = hashlib.sha256()
    for f in sorted(str(p) for p in files):
        st = os.stat(f)
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def options_digest(options: Mapping[str, Any]) -> str:
    """10 hex digits of the SHA-256 of ``options`` as canonical JSON (keys sorted, paths and other
    values JSON lacks as ``str``): a short name that stays the same for the same options.

    Example
    -------
    >>> options_digest({"labels": "mfa", "seed": 1}) == options_digest({"seed": 1, "labels": "mfa"})
    True
    >>> options_digest({"labels": "mfa"}) == options_digest({"labels": "lexicon"})
    False
    >>> len(options_digest({}))
    10
    """
    text = json.dumps(options, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:10]


def recorded_manifests(state_path: Path, state: Mapping[str, Any]) -> Optional[Dict[str, Path]]:
    """The manifests recorded in ``state_path`` if its record matches ``state`` (version, options,
    input fingerprint) and every one of them exists; otherwise None."""
    try:
        previous = json.loads(state_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(previous, dict) or any(previous.get(k) != v for k, v in state.items()):
        return None
    manifests = {k: Path(v) for k, v in previous.get("manifests", {}).items()}
    return manifests if manifests and all(p.is_file() for p in manifests.values()) else None


def cached_prepare(
    save_folder: PathLike,
    name: str,
    options: Mapping[str, Any],
    inputs: Iterable[PathLike],
    build: Callable[[Path], Dict[str, Path]],
) -> Dict[str, Path]:
    """The manifests of ``options``, made once in their own folder ``<save_folder>/<name>-<digest>/``
    (:func:`options_digest`): the ones recorded in its ``<name>.json`` when options and inputs match,
    otherwise ``build(folder)`` (-> ``{split: manifest path}``) writes them there and they are recorded.

    Example
    -------
    >>> import tempfile
    >>> def build(folder):
    ...     print("building")
    ...     return {"train": write_manifest(folder / "train.csv", [], AUDIO_COLUMNS)}
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     mfa = cached_prepare(tmp, "demo", {"labels": "mfa"}, [], build)
    ...     again = cached_prepare(tmp, "demo", {"labels": "mfa"}, [], build)  # recorded: not built again
    ...     lexicon = cached_prepare(tmp, "demo", {"labels": "lexicon"}, [], build)
    ...     print(again == mfa, mfa["train"].parent.name == "demo-" + options_digest({"labels": "mfa"}),
    ...           lexicon["train"].parent != mfa["train"].parent)
    building
    building
    True True True
    """
    folder = Path(save_folder).resolve() / f"{name}-{options_digest(options)}"
    state_path = folder / f"{name}.json"
    state = {
        "version": STATE_VERSION,
        "options": json.loads(json.dumps(options, default=str)),
        "fingerprint": input_fingerprint(inputs),
    }
    manifests = recorded_manifests(state_path, state)
    if manifests is not None:
        return manifests
    manifests = build(folder)
    record = {**state, "manifests": {k: str(v) for k, v in manifests.items()}}
    atomic_write_text(state_path, json.dumps(record, indent=1, sort_keys=True) + "\n")
    return manifests


def list_files(folder: PathLike, suffixes: Sequence[str]) -> List[Path]:
    """All files under ``folder`` whose lower-cased name ends with one of ``suffixes`` (sorted).

    Links to folders are followed (each folder is read once); hidden files and folders (``.name``,
    e.g. macOS's ``._x.flac`` and ``.Trash``) are left out.
    """
    out: List[Path] = []
    seen = set()
    for root, dirs, names in os.walk(folder, followlinks=True):
        real = os.path.realpath(root)
        if real in seen:  # a link back up the tree, or a second link to one folder
            dirs[:] = []
            continue
        seen.add(real)
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        out.extend(Path(root, n) for n in names if not n.startswith(".") and n.lower().endswith(tuple(suffixes)))
    return sorted(out)
