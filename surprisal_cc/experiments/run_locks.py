"""Run lock files: while a grid process (or the Slurm job of a run) trains a run, the run's folder holds a
lock file naming the process: ``PID START HOST`` (its PID, its start time, the host it runs on), and
``job ID RESTART`` inside a Slurm job (the job's id and ``SLURM_RESTART_COUNT``), so that a second grid
command, here or on another node of a shared file system, leaves that run alone. A lock whose process has
ended on this host (a machine stopped mid-run) is taken over; a lock held on another host is never taken
over, as its PID means nothing here (remove the file by hand once no process on that host runs it), except
one left by an earlier start of the same Slurm job (a requeued job that was killed before it could
release it). A lock of the older ``PID START`` form names a process of this host. :mod:`surprisal_cc.experiments.grid` takes
and releases them around each launch, under the name a run gives its lock
(:attr:`surprisal_cc.experiments.grid_spec.Run.lock_name`).
"""
from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from typing import Optional

__all__ = ["acquire_run_lock", "lock_holder", "release_run_lock", "this_host", "holder_host"]


def this_host() -> str:
    """The name of this host, as locks record it (tests replace it to play two hosts)."""
    return socket.gethostname()


def _slurm_job() -> Optional[str]:
    """``job ID RESTART`` inside a Slurm job (its id and how many times it was requeued), else None."""
    job = os.environ.get("SLURM_JOB_ID")
    return f"job {job} {os.environ.get('SLURM_RESTART_COUNT', '0')}" if job else None


def _lock_identity() -> str:
    """What this process writes into a lock it takes: ``PID START HOST [job ID RESTART]``."""
    mine = _process_identity(os.getpid()) or f"{os.getpid()} ?"
    return " ".join(filter(None, [mine, this_host(), _slurm_job()]))


def holder_host(holder: str) -> str:
    """The host a lock's holder runs on (this host for a lock of the older ``PID START`` form).

    >>> holder_host("123 456 node7 job 99 0"), holder_host("123 456") == this_host()
    ('node7', True)
    """
    fields = holder.split()
    return fields[2] if len(fields) > 2 else this_host()


def _is_live(holder: str) -> bool:
    """Whether the process a lock names may still run: on this host, if that process (PID and start time) runs;
    on another host, always, unless it is an earlier start of this very Slurm job (requeued since)."""
    fields = holder.split()
    if not fields or not fields[0].isdigit():
        return False
    if holder_host(holder) != this_host():
        job = fields[fields.index("job") + 1:] if "job" in fields else []
        mine = (_slurm_job() or "").split()[1:]
        if len(job) == 2 and len(mine) == 2 and job[0] == mine[0]:
            return not (job[1].isdigit() and mine[1].isdigit() and int(job[1]) < int(mine[1]))
        return True
    return _process_identity(int(fields[0])) == " ".join(fields[:2])


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
    (``"PID START HOST ..."``), another grid process training the same run. A lock whose process has ended
    on this host (a machine stopped mid-run) is taken over; one held on another host is not.

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
    identity = _lock_identity()
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
    """The live grid process (``"PID START HOST ..."``) that holds the lock file ``folder/name``, without
    taking it; None when there is no lock or its process has ended (:func:`_is_live`).

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
    return holder if _is_live(holder) else None


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
