"""Corpus-level error rates (phone / word) on top of SpeechBrain's ErrorRateStats.

The error rate is ``100 * (S + D + I) / N`` with S, D, I and the reference
length N summed over the whole test set (Kaldi ``compute-wer`` convention),
*not* the mean of per-utterance rates. Hypotheses are never truncated, so the
rate can exceed 100 % when there are many insertions.

Example
-------
>>> er = ErrorRate()
>>> er.append(["u1", "u2"], [["a", "b"], ["c"]], [["a", "c"], ["c", "d", "e"]])
>>> s = er.summarize()
>>> round(s["error_rate"], 2), s["substitutions"], s["deletions"], s["num_ref_tokens"]
(60.0, 1, 2, 5)
"""

from __future__ import annotations

import os
from typing import Sequence

from speechbrain.utils.metric_stats import ErrorRateStats

from .data.phones import merge_repeated

__all__ = ["ErrorRate", "phone_error_rate", "word_error_rate"]


class ErrorRate:
    """Accumulates corpus-level S/D/I counts over a test set.

    Thin wrapper around ``speechbrain.utils.metric_stats.ErrorRateStats``
    (minimum edit distance alignment, counts summed over utterances).

    Args:
        merge_sil: if true, collapse consecutive ``sil_token`` in both
            predictions and targets before scoring.
        sil_token: silence token name used by ``merge_sil``.
    """

    def __init__(self, merge_sil: bool = False, sil_token: str = "sil") -> None:
        self.merge_sil = merge_sil
        self.sil_token = sil_token
        self._stats = ErrorRateStats()

    def clear(self) -> None:
        self._stats = ErrorRateStats()

    def _prep(self, seqs: Sequence[Sequence[str]]) -> list[list[str]]:
        if self.merge_sil:
            return [merge_repeated(s, self.sil_token) for s in seqs]
        return [list(s) for s in seqs]

    def append(
        self,
        ids: Sequence[str],
        predictions: Sequence[Sequence[str]],
        targets: Sequence[Sequence[str]],
    ) -> None:
        """Add a batch of utterances (token lists; ``ids`` name utterances)."""
        if not (len(ids) == len(predictions) == len(targets)):
            raise ValueError(
                f"ids/predictions/targets lengths differ: "
                f"{len(ids)}/{len(predictions)}/{len(targets)}"
            )
        self._stats.append(list(ids), self._prep(predictions), self._prep(targets))

    def summarize(self) -> dict[str, float | int]:
        """Corpus totals: error_rate (percent), substitutions, deletions,
        insertions, num_ref_tokens, num_utterances."""
        s = self._stats.summarize()
        return {
            "error_rate": float(s["error_rate"]),
            "substitutions": int(s["substitutions"]),
            "deletions": int(s["deletions"]),
            "insertions": int(s["insertions"]),
            "num_ref_tokens": int(s["num_scored_tokens"]),
            "num_utterances": int(s["num_scored_sents"]),
        }

    def write_alignments(self, path: str | os.PathLike[str]) -> None:
        """Write the summary and per-utterance alignments (SpeechBrain format)."""
        with open(path, "w", encoding="utf-8") as f:
            self._stats.write_stats(f)

    def __len__(self) -> int:
        return len(self._stats.scores)


def _corpus_rate(
    refs: Sequence[Sequence[str]],
    hyps: Sequence[Sequence[str]],
    merge_sil: bool,
    sil_token: str = "sil",
) -> float:
    if len(refs) != len(hyps):
        raise ValueError(f"{len(refs)} references but {len(hyps)} hypotheses")
    er = ErrorRate(merge_sil=merge_sil, sil_token=sil_token)
    er.append([str(i) for i in range(len(refs))], hyps, refs)
    return float(er.summarize()["error_rate"])


def phone_error_rate(
    refs: Sequence[Sequence[str]],
    hyps: Sequence[Sequence[str]],
    merge_sil: bool = True,
    sil_token: str = "sil",
) -> float:
    """Corpus-level PER in percent (consecutive ``sil`` merged by default).

    >>> round(phone_error_rate([["sil", "a", "b"]], [["sil", "sil", "a", "c"]]), 2)
    33.33
    """
    return _corpus_rate(refs, hyps, merge_sil, sil_token)


def word_error_rate(
    refs: Sequence[Sequence[str] | str], hyps: Sequence[Sequence[str] | str]
) -> float:
    """Corpus-level WER in percent; strings are split on whitespace.

    >>> word_error_rate(["the cat sat", "hi"], ["the cat sat down", "hi"])
    25.0
    """
    split = lambda xs: [x.split() if isinstance(x, str) else list(x) for x in xs]  # noqa: E731
    return _corpus_rate(split(refs), split(hyps), merge_sil=False)
