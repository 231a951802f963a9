"""The errors that end a recipe or command with one clear message instead of a traceback."""
import errno
import os


class ConfigurationError(ValueError):
    """A problem with the hparams file, the command-line overrides or a model folder."""


class UsageError(ValueError):
    """A malformed command line found after parsing (exit status 2, as argparse's own errors)."""


class TrainingDivergedError(RuntimeError):
    """More training batches of one epoch had a non-finite loss than ``nonfinite_patience`` allows."""


def os_error_line(err: OSError) -> str:
    """The file system's own error as ``path: what is wrong`` (Python's ``[Errno 17] File exists: 'x'``
    names neither what was attempted nor what to do); ``str(err)`` for one that names no file.

    Example
    -------
    >>> os_error_line(FileNotFoundError(errno.ENOENT, "No such file or directory", "labels.csv"))
    'labels.csv: No such file or directory'
    """
    if not err.filename or not err.strerror:
        return str(err)
    path = os.fsdecode(err.filename)
    if err.errno == errno.EEXIST and not os.path.isdir(path):
        return f"{path}: a file is in the way where a folder is needed; move it or choose another output path"
    if err.errno == errno.ENOTDIR:
        return f"{path}: part of this path is a file, not a folder"
    return f"{path}: {err.strerror}"
