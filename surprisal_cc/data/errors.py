"""Exceptions and warnings raised by the data-preparation layer."""
from __future__ import annotations


class DataPreparationError(ValueError):
    """A corpus, label or audio problem that stops data preparation.

    The message always names the offending file/utterance and says what to do.
    """


class DataPreparationWarning(UserWarning):
    """A recoverable data problem (resampled audio, OOV words, skipped files)."""
