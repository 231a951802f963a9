"""Exceptions and warnings about corpora, labels and audio files."""
from __future__ import annotations

from typing import Sequence


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
