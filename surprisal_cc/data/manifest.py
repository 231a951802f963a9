"""Shared manifest writing and the "prepare once" cache used by the corpus preparers.

A preparer records its options and an input fingerprint (file list + sizes + mtimes) in a JSON
file next to the manifests; a later call with the same options and unchanged inputs returns the
existing manifests immediately, anything else regenerates them.  All files are written atomically.
"""
from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Union

from .errors import DataPreparationError

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
    """Write a SpeechBrain CSV (rows sorted by ``ID``; durations with 3 decimals)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(columns), lineterminator="\n")
    writer.writeheader()
    for row in sorted(rows, key=lambda r: r["ID"]):
        out = {c: row[c] for c in columns}
        out["duration"] = f"{float(row['duration']):.3f}"
        writer.writerow(out)
    atomic_write_text(path, buf.getvalue())
    return Path(path)


def input_fingerprint(files: Iterable[PathLike]) -> str:
    """SHA-256 over (path, size, mtime) of every file: cheap, changes when any input changes."""
    h = hashlib.sha256()
    for f in sorted(str(p) for p in files):
        st = os.stat(f)
        h.update(f"{f}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def cached_prepare(
    save_folder: PathLike,
    name: str,
    options: Mapping[str, Any],
    inputs: Iterable[PathLike],
    build: Callable[[Path], Dict[str, Path]],
) -> Dict[str, Path]:
    """Return the manifests recorded in ``<save_folder>/<name>.json`` if options and inputs match;
    otherwise call ``build(save_folder)`` (-> ``{split: manifest path}``) and record the result."""
    save = Path(save_folder).resolve()
    state_path = save / f"{name}.json"
    state = {
        "version": STATE_VERSION,
        "options": json.loads(json.dumps(options, default=str)),
        "fingerprint": input_fingerprint(inputs),
    }
    previous: Optional[dict] = None
    if state_path.is_file():
        try:
            previous = json.loads(state_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            previous = None
    if previous and all(previous.get(k) == v for k, v in state.items()):
        manifests = {k: Path(v) for k, v in previous.get("manifests", {}).items()}
        if manifests and all(p.is_file() for p in manifests.values()):
            return manifests
    manifests = build(save)
    state["manifests"] = {k: str(v) for k, v in manifests.items()}
    atomic_write_text(state_path, json.dumps(state, indent=1, sort_keys=True) + "\n")
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
