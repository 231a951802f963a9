"""Corpus archives fetched and unpacked: Mini-LibriSpeech from OpenSLR (:func:`download_mini_librispeech`),
each archive checked against its published checksum (:func:`verify_checksum`) and extracted without
letting a member leave the target folder (:func:`safe_extract`).
"""
from __future__ import annotations

import hashlib
import os
import re
import tarfile
import urllib.request
from pathlib import Path, PurePosixPath
from typing import Mapping, Optional, Sequence, Union

from surprisal_cc.data.errors import DataPreparationError

PathLike = Union[str, os.PathLike]

MINI_TRAIN, MINI_TEST = "train-clean-5", "dev-clean-2"
MINI_LIBRISPEECH_URL = "https://www.openslr.org/resources/31/"
# MD5s of the OpenSLR SLR31 archives (as published with the corpus and used by public recipes).
MINI_LIBRISPEECH_MD5 = {
    MINI_TRAIN: "5df7d4e78065366204ca6845bb08f490",
    MINI_TEST: "6d7ab67ac6a1d2c993d050e16d61080d",
}


def verify_checksum(path: PathLike, expected: str) -> None:
    """Check ``path`` against ``"md5:<hex>"``, ``"sha256:<hex>"`` or a bare 32/64-digit hex."""
    algo, _, digest = expected.rpartition(":")
    algo = algo or {32: "md5", 64: "sha256"}.get(len(digest), "")
    if algo not in ("md5", "sha256"):
        raise ValueError(f"unsupported checksum {expected!r}: use md5:<hex> or sha256:<hex>")
    h = hashlib.new(algo)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    if h.hexdigest() != digest.lower():
        raise DataPreparationError(
            f"{path}: {algo} checksum mismatch (expected {digest.lower()}, got {h.hexdigest()}); "
            "the download is corrupt or incomplete: delete it and download again"
        )


def _member_problem(member: tarfile.TarInfo, dest: Path) -> Optional[str]:
    name = PurePosixPath(member.name)
    if name.is_absolute() or member.name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", member.name):
        return "absolute path"
    if ".." in name.parts:
        return "'..' in path"
    target = (dest / member.name).resolve()
    if dest != target and dest not in target.parents:
        return "escapes the target folder"
    if member.issym() or member.islnk():
        link = PurePosixPath(member.linkname)
        if link.is_absolute():
            return f"link to absolute path {member.linkname}"
        base = target.parent if member.issym() else dest
        resolved = (base / member.linkname).resolve()
        if dest != resolved and dest not in resolved.parents:
            return f"link {member.linkname} points outside the target folder"
    elif not (member.isfile() or member.isdir()):
        return "not a regular file or folder"
    return None


def safe_extract(archive: PathLike, dest: PathLike) -> None:
    """Extract a tar archive, refusing absolute paths, ``..`` and links leaving ``dest``."""
    dest_path = Path(dest).resolve()
    dest_path.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive) as tar:
        members = tar.getmembers()
        bad = [f"{m.name}: {p}" for m in members if (p := _member_problem(m, dest_path))]
        if bad:
            raise DataPreparationError(
                f"refusing to extract {archive}: unsafe member(s):\n  " + "\n  ".join(bad)
            )
        if hasattr(tarfile, "data_filter"):
            tar.extractall(dest_path, members=members, filter="data")
        else:  # Python without extraction filters: the explicit check above still applies
            tar.extractall(dest_path, members=members)


def download_mini_librispeech(
    data_folder: PathLike, subsets: Sequence[str], checksums: Optional[Mapping[str, str]] = None
) -> None:
    """Download + verify + safely extract Mini-LibriSpeech subsets into ``data_folder``.

    ``checksums`` may override the built-in MD5s (e.g. ``{"dev-clean-2": "sha256:<hex>"}``).
    """
    folder = Path(data_folder)
    folder.mkdir(parents=True, exist_ok=True)
    for subset in subsets:
        expected = (checksums or {}).get(subset) or f"md5:{MINI_LIBRISPEECH_MD5[subset]}"
        archive = folder / f"{subset}.tar.gz"
        if not archive.is_file():
            part = archive.with_name(archive.name + ".part")
            urllib.request.urlretrieve(f"{MINI_LIBRISPEECH_URL}{subset}.tar.gz", part)
            os.replace(part, archive)
        verify_checksum(archive, expected)
        safe_extract(archive, folder)
        archive.unlink()
