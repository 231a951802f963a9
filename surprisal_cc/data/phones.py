"""Phone inventories and helpers.

* ``ARPABET_39``: the 39 stressless CMU/ARPAbet phones (upper case, sorted).
* ``LIBRISPEECH_PHONES``: ``ARPABET_39 + ["sil", "spn"]``, the 41 labels used for
  Mini-LibriSpeech in the paper (MFA convention: ``spn`` = spoken noise / unknown word).
* ``TIMIT_61_TO_39``: the Lee & Hon (1989) folding of the 61 TIMIT phones to 39 classes, as in
  the Kaldi / SpeechBrain TIMIT recipes (lower case, TIMIT's own convention); ``q`` maps to ``None``
  (removed).  ``TIMIT_PHONES_39`` is the sorted set of its 39 values (incl. ``sil``).

>>> len(ARPABET_39), len(LIBRISPEECH_PHONES), len(TIMIT_PHONES_39)
(39, 41, 39)
>>> strip_stress("AH0"), fold_timit(["h#", "q", "ax-h", "pcl", "p", "epi", "pau", "h#"])
('AH', ['sil', 'ah', 'sil', 'p', 'sil'])
"""
from __future__ import annotations

import re
from typing import Dict, Iterable, List, Optional, Sequence

from surprisal_cc.data.errors import DataPreparationError

ARPABET_39: List[str] = sorted(
    "AA AE AH AO AW AY B CH D DH EH ER EY F G HH IH IY JH K L M N NG OW OY P R S SH T TH "
    "UH UW V W Y Z ZH".split()
)
SILENCE = "sil"
SPOKEN_NOISE = "spn"
LIBRISPEECH_PHONES: List[str] = ARPABET_39 + [SILENCE, SPOKEN_NOISE]

_TIMIT_IDENTITY = (
    "aa ae ah aw ay b ch d dh dx eh er ey f g hh ih iy jh k l m n ng ow oy p r s sh t th "
    "uh uw v w y z".split()
)
TIMIT_61_TO_39: Dict[str, Optional[str]] = {
    **{p: p for p in _TIMIT_IDENTITY},
    # vowel / consonant merges
    "ao": "aa", "ax": "ah", "ax-h": "ah", "axr": "er", "hv": "hh", "ix": "ih", "el": "l",
    "em": "m", "en": "n", "nx": "n", "eng": "ng", "zh": "sh", "ux": "uw",
    # closures, pauses, epenthetic silence and utterance boundaries -> silence
    "bcl": SILENCE, "dcl": SILENCE, "gcl": SILENCE, "pcl": SILENCE, "tcl": SILENCE,
    "kcl": SILENCE, "h#": SILENCE, "pau": SILENCE, "epi": SILENCE,
    # glottal stop is removed
    "q": None,
}
TIMIT_PHONES_39: List[str] = sorted({p for p in TIMIT_61_TO_39.values() if p is not None})

_STRESS = re.compile(r"[0-9]+$")


def strip_stress(phone: str) -> str:
    """Remove a trailing CMU stress digit: ``"AH0" -> "AH"``, ``"sil" -> "sil"``."""
    return _STRESS.sub("", phone)


def merge_repeated(phones: Iterable[str], symbol: str = SILENCE) -> List[str]:
    """Collapse runs of ``symbol`` into one (other repeated phones are kept).

    >>> merge_repeated(["sil", "sil", "AH", "AH", "sil"])
    ['sil', 'AH', 'AH', 'sil']
    """
    out: List[str] = []
    for p in phones:
        if not (p == symbol and out and out[-1] == symbol):
            out.append(p)
    return out


def fold_timit(phones61: Iterable[str], where: str = "<phones>") -> List[str]:
    """Fold a TIMIT 61-phone sequence to the 39 set: drop ``q``, merge repeated ``sil``."""
    phones61 = list(phones61)
    validate_phones(phones61, TIMIT_61_TO_39, where)
    folded = [TIMIT_61_TO_39[p] for p in phones61]
    return merge_repeated(p for p in folded if p is not None)


def refuse_empty_labels(phones: Sequence[str], where: str, what: str, fix: str) -> None:
    """Raise :class:`DataPreparationError` ``"<where> has no <what>; <fix>"`` where ``phones`` is empty: an
    empty reference would count every recognised phone as an insertion, an empty training target gives
    CTC nothing to learn. Every label reader checks its labels with it (MFA's CSV export and TextGrids,
    TIMIT's ``.PHN`` files).

    >>> refuse_empty_labels([], "a.TextGrid: utterance u1", "phone labels", "realign it or remove the file")
    Traceback (most recent call last):
    ...
    surprisal_cc.data.errors.DataPreparationError: a.TextGrid: utterance u1 has no phone labels; realign it or remove the file
    """
    if not phones:
        raise DataPreparationError(f"{where} has no {what}; {fix}")


def validate_phones(phones: Sequence[str], allowed: Iterable[str], where: str) -> None:
    """Raise :class:`DataPreparationError` naming ``where`` and the unknown symbols.

    >>> validate_phones(["AH", "XX"], LIBRISPEECH_PHONES, "utt-1")
    Traceback (most recent call last):
    ...
    surprisal_cc.data.errors.DataPreparationError: utt-1: unknown phone symbol(s) ['XX'] ...
    """
    allowed_set = set(allowed)
    unknown = sorted({p for p in phones if p not in allowed_set})
    if unknown:
        raise DataPreparationError(
            f"{where}: unknown phone symbol(s) {unknown} (allowed: {sorted(allowed_set)}); "
            "fix the label file or the phone mapping"
        )
