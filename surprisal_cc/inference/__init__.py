"""Using a trained model: :class:`ConditionalASR` (``asr``), shaped like SpeechBrain's ``EncoderASR``, and
the functions beside it that take the model (typed by ``protocol.LoadedModel``): one batch's steps
(``passes``), its result (``transcription``), ``long_audio`` decoded in parts, a FLOPs ``budget``, and
the ``corpora`` that ``evaluate`` reads and its ``evaluation``.

May import: the shared modules, ``data``, ``model`` and ``decoding`` (never training or experiment tools).

>>> from surprisal_cc.inference import ConditionalASR
>>> ConditionalASR.__name__
'ConditionalASR'
"""
import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    if name == "ConditionalASR":  # imported when first used: long_audio and evaluation do not need it loaded
        value = importlib.import_module(f"{__name__}.asr").ConditionalASR
        globals()[name] = value
        return value
    from surprisal_cc.aliases import old_attribute

    return old_attribute(__name__, name)  # the old module surprisal_cc.inference's names


__all__ = ["ConditionalASR"]
