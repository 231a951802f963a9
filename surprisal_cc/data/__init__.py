"""Corpus preparation (Mini-LibriSpeech, LibriSpeech, TIMIT), phone sets and labels.

>>> from surprisal_cc.data import LIBRISPEECH_PHONES, TIMIT_PHONES_39
>>> len(LIBRISPEECH_PHONES), len(TIMIT_PHONES_39)
(41, 39)
"""
import importlib
from typing import Any

from surprisal_cc.data.errors import DataPreparationError, DataPreparationWarning

# Where each public name lives; a corpus module is imported when one of its names is first used,
# so that code needing only the errors (the inference runtime) does not load every corpus reader.
_WHERE = {
    "AudioInfo": "audio", "check_audio_files": "audio", "inspect_audio": "audio", "read_audio": "audio",
    "Lexicon": "lexicon",
    "prepare_librispeech": "librispeech", "prepare_mini_librispeech": "librispeech",
    "load_mfa_labels": "mfa", "load_mfa_word_phones": "mfa", "run_mfa": "mfa",
    "ARPABET_39": "phones", "LIBRISPEECH_PHONES": "phones", "TIMIT_61_TO_39": "phones", "TIMIT_PHONES_39": "phones",
    "strip_stress": "phones", "validate_phones": "phones",
    "prepare_timit": "timit",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["DataPreparationError", "DataPreparationWarning", *_WHERE]
