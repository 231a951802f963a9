"""Exceptions and warnings about corpora, labels and audio files."""
from __future__ import annotations

from typing import List, Optional, Sequence

#: How many problem lines (files, utterances) an error or warning lists before counting the rest
#: (:func:`first_listed`).
MAX_LISTED = 20


class DataPreparationError(ValueError):
    """A corpus, label or audio problem that stops data preparation.

    The message always names the offending file/utterance and says what to do.
    """


class DataPreparationWarning(UserWarning):
    """A recoverable data problem (resampled audio, OOV words, skipped files)."""


class BadAudioError(DataPreparationError):
    """Audio files that cannot be used; ``problems`` holds one ``"path: reason"`` line per file.

    Arguments
    ---------
    problems : sequence of str
        One ``"path: reason"`` line per unusable file.
    total : int
        Number of files checked.
    hint : str
        What to do about it, appended to the message.
    """

    def __init__(self, problems: Sequence[str], total: int, hint: str = ""):
        self.problems, self.total, self.hint = list(problems), total, hint
        super().__init__("\n".join([*self.problems, *([hint] if hint else [])]))


class BadLabelsError(BadAudioError):
    """Utterances without usable labels (no transcript line, an empty one, no MFA labels);
    ``problems`` holds one ``"path: reason"`` line per utterance."""


def collect_or_raise_label_problems(found: Sequence[str], total: int, message: str,
                                    problems: Optional[List[str]], limit: int) -> None:
    """Append the ``found`` problem lines to ``problems`` when a list is given (the caller skips
    those utterances); otherwise, where there are any, raise :class:`BadLabelsError` listing the
    first ``limit`` of them, with ``message`` as its last line.

    Example
    -------
    >>> kept = []
    >>> collect_or_raise_label_problems(["a.flac: no transcript"], 3, "pass --skip-bad", kept, limit=20)
    >>> kept
    ['a.flac: no transcript']
    >>> collect_or_raise_label_problems(["a.flac: no transcript", "b.flac: empty"], 3, "pass --skip-bad", None, limit=1)
    Traceback (most recent call last):
        ...
    surprisal_cc.data.errors.BadLabelsError: a.flac: no transcript
    ... and 1 more
    pass --skip-bad
    """
    if problems is not None:
        problems.extend(found)
    elif found:
        raise BadLabelsError(first_listed(found, limit), total, message)


def first_listed(found: Sequence[str], limit: int, more: str = "") -> List[str]:
    """The first ``limit`` problem lines of ``found``, and a line counting the rest (``more`` says what they are).

    Example
    -------
    >>> first_listed(["a", "b", "c"], 2, " without labels")
    ['a', 'b', '... and 1 more without labels']
    """
    return list(found[:limit]) + ([f"... and {len(found) - limit} more{more}"] if len(found) > limit else [])
