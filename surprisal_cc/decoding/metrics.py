"""Corpus-level error rates (phone / word) on top of SpeechBrain's ErrorRateStats.

The error rate is ``100 * (S + D + I) / N`` with S, D, I and the reference
length N summed over the whole test set (Kaldi ``compute-wer`` convention),
*not* the mean of per-utterance rates. Hypotheses are never truncated, so the
rate can exceed 100 % when there are many insertions. The PER of label sequences keyed by
utterance (e.g. labels against MFA's) is :func:`surprisal_cc.alignment.label_eval.label_error_rate`.

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
from typing import Sequence, TextIO

import numpy as np

from speechbrain.utils.metric_stats import ErrorRateStats

from surprisal_cc.data.phones import merge_repeated

__all__ = ["ErrorRate", "closest_path"]


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

    def last(self, n: int) -> list[dict]:
        """The per-utterance scores of the last ``n`` utterances appended (SpeechBrain's dicts:
        ``key``, ``ref_tokens``, ``hyp_tokens`` as scored, ``substitutions``, ``deletions``,
        ``insertions``, ``num_ref_tokens``, ``alignment``).

        >>> er = ErrorRate(merge_sil=True)
        >>> er.append(["u1"], [["sil", "sil", "a", "c"]], [["sil", "a", "b"]])
        >>> row = er.last(1)[0]
        >>> row["key"], row["hyp_tokens"], row["substitutions"], row["deletions"], row["insertions"]
        ('u1', ['sil', 'a', 'c'], 1, 0, 0)
        """
        return self._stats.scores[len(self._stats.scores) - n:] if n > 0 else []

    def write_alignments(self, target: str | os.PathLike[str] | TextIO) -> None:
        """Write the summary and per-utterance alignments (SpeechBrain format) to a file path or
        an open text stream (left open)."""
        if hasattr(target, "write"):
            self._stats.write_stats(target)
            return
        with open(target, "w", encoding="utf-8") as f:
            self._stats.write_stats(f)

    def __len__(self) -> int:
        return len(self._stats.scores)


def closest_path(hyp: Sequence[str], tokens: Sequence[str],
                 predecessors: Sequence[Sequence[int]]) -> list[str]:
    """The path through a graph of tokens that is the fewest edits (substitutions, deletions,
    insertions) away from ``hyp``: the reference to score ``hyp`` against when a reference may
    take any of several forms, e.g. every pronunciation of each word
    (:func:`surprisal_cc.model.ctc.pronunciation_graph`).

    The graph is coded as for :func:`surprisal_cc.model.ctc.ctc_loss_graph`: ``predecessors[k]`` lists
    the predecessors of ``tokens[k]`` (1: the start, ``j + 2``: token ``j``, 0: padding; tokens in
    topological order), ``predecessors[len(tokens)]`` the tokens a path may end with. Exact dynamic
    programming over (token, hypothesis position), vectorised over the hypothesis; ties go to the
    earlier predecessor.

    Example
    -------
    >>> tokens = ["sil", "DH", "AH", "DH", "IY", "K", "AE", "T"]  # "the" two ways, then "cat"
    >>> preds = [[1], [2], [3], [2], [5], [4, 6], [7], [8], [9]]
    >>> closest_path("DH IY K AE T".split(), tokens, preds)
    ['sil', 'DH', 'IY', 'K', 'AE', 'T']
    >>> closest_path("DH AH K AH T".split(), tokens, preds)
    ['sil', 'DH', 'AH', 'K', 'AE', 'T']
    """
    n, m = len(tokens), len(hyp)
    if len(predecessors) != n + 1:
        raise ValueError(f"{len(predecessors)} predecessor lists for {n} tokens: need one per token and "
                         "one more (the ends)")
    position = np.arange(m + 1)
    # cost[c]: the fewest edits between hyp[:i] and a path ending at code c (1: the start, j + 2: token j)
    cost = np.empty((n + 2, m + 1), dtype=np.int64)
    cost[1] = position  # the empty path: insert everything
    for k in range(n):
        codes = [c for c in predecessors[k] if c]
        if not codes or max(codes) >= k + 2:
            raise ValueError(f"token {k} ({tokens[k]!r}) has predecessors {list(predecessors[k])}: each "
                             f"needs at least one, all earlier in the graph (codes below {k + 2})")
        before = cost[codes].min(axis=0)
        match = np.array([t != tokens[k] for t in hyp], dtype=np.int64)
        best = before + 1  # tokens[k] deleted
        best[1:] = np.minimum(best[1:], before[:-1] + match)  # tokens[k] substituted or correct
        cost[k + 2] = np.minimum.accumulate(best - position) + position  # hyp tokens inserted after it
    ends = [c for c in predecessors[n] if c]
    if not ends:
        raise ValueError("the graph has no ends (its last predecessor list is empty)")
    code, i = min(ends, key=lambda c: cost[c, m]), m
    path: list[str] = []
    while code != 1:
        k = code - 2
        if i > 0 and cost[code, i] == cost[code, i - 1] + 1:
            i -= 1  # an insertion after token k
            continue
        codes = [c for c in predecessors[k] if c]
        diagonal = [c for c in codes if i > 0 and cost[c, i - 1] + (hyp[i - 1] != tokens[k]) == cost[code, i]]
        path.append(tokens[k])
        if diagonal:
            code, i = diagonal[0], i - 1
        else:
            code = next(c for c in codes if cost[c, i] + 1 == cost[code, i])
    return path[::-1]
