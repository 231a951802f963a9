"""Corpus preparation (Mini-LibriSpeech, LibriSpeech, TIMIT), phone sets and labels.

>>> from surprisal_cc.data import LIBRISPEECH_PHONES, TIMIT_PHONES_39
>>> len(LIBRISPEECH_PHONES), len(TIMIT_PHONES_39)
(41, 39)
"""
from .audio import AudioInfo, check_audio_files, inspect_audio, read_audio
from .errors import DataPreparationError, DataPreparationWarning
from .lexicon import Lexicon
from .librispeech import lexicon_vs_mfa_per, prepare_librispeech, prepare_mini_librispeech
from .mfa import load_mfa_labels, load_mfa_word_phones, run_mfa
from .phones import (
    ARPABET_39,
    LIBRISPEECH_PHONES,
    TIMIT_61_TO_39,
    TIMIT_PHONES_39,
    strip_stress,
    validate_phones,
)
from .timit import prepare_timit

__all__ = [
    "ARPABET_39", "LIBRISPEECH_PHONES", "TIMIT_61_TO_39", "TIMIT_PHONES_39", "AudioInfo",
    "DataPreparationError", "DataPreparationWarning", "Lexicon", "check_audio_files",
    "inspect_audio", "lexicon_vs_mfa_per", "load_mfa_labels", "load_mfa_word_phones", "prepare_librispeech",
    "prepare_mini_librispeech", "prepare_timit", "read_audio", "run_mfa", "strip_stress",
    "validate_phones",
]
