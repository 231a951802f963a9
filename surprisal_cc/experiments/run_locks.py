"""Run lock files: while a grid process trains a run, the run's folder holds a lock file naming the
process (its PID and start time), so that a second grid command on the same machine leaves that run alone;
a lock whose process has ended (a machine stopped mid-run) is taken over. :mod:`surprisal_cc.experiments.grid` takes
and releases them around each launch, under the name a run gives its lock
(:attr:`surprisal_cc.experiments.grid_spec.Run.lock_name`).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Optional

__all__ = ["acquire_run_lock", "lock_holder", "release_run_lock"]


def _process_identity(pid: int) -> Optional[str]:
    """``pid`` and its start time (so that a reused PID is told apart), or None when no such process runs."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass  # alive, another user's
    try:  # Linux: field 22 of /proc/PID/stat, after the parenthesised command name
        started = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        started = "?"
    return f"{pid} {started}"


def acquire_run_lock(folder: Path, name: str = "grid.lock") -> Optional[str]:
    """Take the lock file ``folder/name`` for this process; returns None when taken, else the live holder
    (``"PID START"``), another grid process training the same run. A lock whose process has ended
    (a machine stopped mid-run) is taken over.

    Example
    -------
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     first = acquire_run_lock(Path(folder))
    ...     again = acquire_run_lock(Path(folder))  # held by this very process: refused
    ...     release_run_lock(Path(folder))
    ...     after = acquire_run_lock(Path(folder))
    >>> first is None, again is not None, after is None
    (True, True, True)
    """
    lock = Path(folder) / name
    identity = _process_identity(os.getpid()) or str(os.getpid())
    # the holder is written beside the lock and linked into place: a lock file is never seen empty
    # (another grid would take an empty one for stale), and linking fails where the lock exists
    fd, written = tempfile.mkstemp(dir=lock.parent, prefix=f".{name}.")
    mine = Path(written)
    os.fchmod(fd, 0o644)  # other users' grids read the holder (mkstemp's file is private)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(identity)
    try:
        for _ in range(2):
            try:
                _place_lock(lock, mine, identity)
                return None
            except FileExistsError:
                holder = lock_holder(lock.parent, name)
                if holder is not None:
                    return holder
                lock.unlink(missing_ok=True)  # stale: its process has ended
        return lock.read_text(encoding="utf-8").strip() if lock.exists() else "?"
    finally:
        mine.unlink(missing_ok=True)


def lock_holder(folder: Path, name: str = "grid.lock") -> Optional[str]:
    """The live grid process (``"PID START"``) that holds the lock file ``folder/name``, without taking
    it; None when there is no lock or its process has ended.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     free = lock_holder(Path(folder))
    ...     _ = acquire_run_lock(Path(folder))
    ...     held = lock_holder(Path(folder))
    >>> free is None, held.split()[0] == str(os.getpid())
    (True, True)
    """
    try:
        holder = (Path(folder) / name).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    pid = holder.split()[0] if holder else ""
    return holder if pid.isdigit() and _process_identity(int(pid)) == holder else None


def _place_lock(lock: Path, written: Path, identity: str) -> None:
    """Link ``written`` (the holder) to ``lock``; on a file system without hard links, create ``lock``
    and write ``identity`` into it. FileExistsError where the lock exists."""
    try:
        os.link(written, lock)
    except FileExistsError:
        raise
    except OSError:  # e.g. vfat, some FUSE and SMB mounts
        fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(identity)


def release_run_lock(folder: Path, name: str = "grid.lock") -> None:
    """Remove the lock :func:`acquire_run_lock` took."""
    (Path(folder) / name).unlink(missing_ok=True)
