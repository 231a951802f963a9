"""CTC Viterbi alignment: the best frame path through a graph of label tokens, optional tokens.

:mod:`surprisal_cc.alignment.realign` builds word and pause graphs on it (relabelling corpora) and
:mod:`surprisal_cc.decoding.timestamps` aligns recognised phones with it (phone times).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Sequence

import numpy as np

__all__ = ["Alignment", "AlignmentError", "as_numpy", "ctc_viterbi_graph", "ctc_viterbi_optional"]


class AlignmentError(ValueError):
    """No CTC path fits: the utterance has fewer frames than its obligatory labels need."""


@dataclass
class Alignment:
    """Best CTC path through a label sequence with optional tokens.

    Arguments
    ---------
    labels : list of int
        The chosen label sequence: every obligatory token and the optional ones the path used.
    kept : numpy.ndarray of bool, shape (N,)
        For each input token, whether it is in ``labels``.
    score : float
        Log-probability of the best path.
    frame_tokens : numpy.ndarray of int, shape (T,)
        Input-token index each frame emits, -1 for blank frames.
    silences : list of int
        Word boundaries that got ``sil`` (0: before the first word, W: after the last); set by
        :func:`align_words` only.
    pronunciations : list of int
        Index of each word's chosen pronunciation; set by :func:`align_words` only.

    Example
    -------
    >>> import numpy as np
    >>> ali = Alignment(labels=[2, 3], kept=np.array([True, True]), score=-1.0,
    ...                 frame_tokens=np.array([-1, 0, 0, -1, 1, -1]))
    >>> ali.segments().tolist()
    [[0, 4], [4, 6]]
    >>> ali.segments(from_start=False).tolist()  # the first label from its first emitting frame
    [[1, 4], [4, 6]]
    >>> ali.emission_ends().tolist()                 # the frame after each label's last emitting frame
    [3, 5]
    """

    labels: List[int]
    kept: np.ndarray
    score: float
    frame_tokens: np.ndarray
    silences: List[int] = field(default_factory=list)
    pronunciations: List[int] = field(default_factory=list)

    def segments(self, from_start: bool = True) -> np.ndarray:
        """(len(labels), 2) frame spans ``[start, end)`` of the kept labels.

        A label starts at its first emitting frame and lasts until the next label starts (its
        trailing blank frames included); the last ends at T, and the first starts at frame 0
        (``from_start``: the spans tile the utterance) or at its own first emitting frame.

        Returns
        -------
        numpy.ndarray
            (len(labels), 2) int array of ``[start, end)`` frame indices.
        """
        kept_tokens = np.flatnonzero(self.kept)
        emitting = self.frame_tokens >= 0
        firsts = np.full(len(self.kept), -1)
        t = np.flatnonzero(emitting)
        tok = self.frame_tokens[t]
        first_of = np.r_[True, tok[1:] != tok[:-1]]
        firsts[tok[first_of]] = t[first_of]
        starts = firsts[kept_tokens]
        if len(starts) and from_start:
            starts[0] = 0
        ends = np.r_[starts[1:], len(self.frame_tokens)]
        return np.stack([starts, ends], axis=1).astype(int)

    def emission_ends(self) -> np.ndarray:
        """(len(labels),) the frame after each kept label's last emitting frame (a label's
        emitting frames are consecutive; :meth:`segments` adds the blank frames after them).

        Returns
        -------
        numpy.ndarray
            (len(labels),) int array.
        """
        t = np.flatnonzero(self.frame_tokens >= 0)
        tok = self.frame_tokens[t]
        last_of = np.r_[tok[1:] != tok[:-1], True] if len(tok) else np.zeros(0, dtype=bool)
        lasts = np.full(len(self.kept), -1)
        lasts[tok[last_of]] = t[last_of] + 1
        return lasts[np.flatnonzero(self.kept)].astype(int)


def ctc_viterbi_graph(log_probs, tokens: Sequence[int], predecessors: Sequence[Sequence[int]],
                      finals: Sequence[int], blank: int) -> Alignment:
    """Viterbi CTC alignment through a graph of tokens: the best frame path over every token
    sequence that the graph allows.

    Token ``k`` may follow any token in ``predecessors[k]``, where -1 stands for the start of the
    utterance; the sequence ends at a token in ``finals`` (-1 there: the empty sequence is allowed).
    Predecessors come earlier in ``tokens`` (the order is topological), so a path's tokens are in
    increasing index order. Standard CTC topology along every edge: blanks may separate tokens,
    and must where two equal labels follow each other. Ties prefer staying in a state, then the
    nearest state in ``tokens`` order.

    Arguments
    ---------
    log_probs : array-like, shape (T, V)
        Per-frame log-probabilities of one utterance (numpy or torch).
    tokens : sequence of int
        Label ids of the graph's nodes (no blanks).
    predecessors : sequence of sequences of int
        For each token, the earlier tokens (or -1) it may follow.
    finals : sequence of int
        Tokens a path may end with (-1: no token at all).
    blank : int
        Blank id.

    Returns
    -------
    Alignment
        ``kept`` marks the tokens the best path goes through.

    Raises
    ------
    AlignmentError
        When no path fits in T frames.

    Example
    -------
    Two pronunciations of one word, tokens 0-1 (labels 2 3) or token 2 (label 3):

    >>> import numpy as np
    >>> lp = np.log(np.full((4, 4), 0.01))
    >>> for t, k in enumerate([0, 3, 3, 0]):
    ...     lp[t, k] = np.log(0.97)
    >>> ali = ctc_viterbi_graph(lp, [2, 3, 3], [[-1], [0], [-1]], finals=[1, 2], blank=0)
    >>> ali.labels, ali.kept.tolist(), ali.frame_tokens.tolist()
    ([3], [False, False, True], [-1, 2, 2, -1])
    """
    lp = as_numpy(log_probs)
    tok = np.asarray(tokens, dtype=np.int64)
    n, (T, V) = len(tok), lp.shape
    if n and (tok.min() < 0 or tok.max() >= V or (tok == blank).any()):
        raise ValueError(f"tokens must be non-blank ids in [0, {V}), got {tok.tolist()}")
    if len(predecessors) != n:
        raise ValueError(f"predecessors has {len(predecessors)} entries for {n} tokens")
    # states: 0 the blank before every token; 2k + 1 the label of token k, 2k + 2 the blank after it
    S = 2 * n + 1
    incoming: List[List[int]] = [[0]]
    for k in range(n):
        before = sorted(set(predecessors[k]))
        if not before or before[0] < -1 or before[-1] >= k:
            raise ValueError(f"token {k}: predecessors must be earlier tokens or -1, got {list(predecessors[k])}")
        via_label = [2 * j + 1 for j in before if j >= 0 and tok[j] != tok[k]]
        incoming.append([2 * k + 1] + sorted({2 * j + 2 for j in before} | set(via_label), reverse=True))
        incoming.append([2 * k + 2, 2 * k + 1])
    K = max(len(c) for c in incoming)
    pred = np.full((S, K), S, dtype=np.int64)  # column S of the scores stays -inf
    for state, cands in enumerate(incoming):
        pred[state, :len(cands)] = cands
    ext = np.full(S, blank, dtype=np.int64)
    ext[1::2] = tok
    emit = lp[:, ext]  # (T, S)

    scores = np.full(S + 1, -np.inf)
    scores[0] = 0.0  # before the first frame: in the start state
    choice = np.empty((T, S), dtype=np.int8)
    rows = np.arange(S)
    cand = np.empty((S, K))
    for t in range(T):
        np.take(scores, pred, out=cand)
        best = cand.argmax(axis=1)
        choice[t] = best
        scores[:S] = cand[rows, best] + emit[t]

    final_states = sorted({s for f in finals for s in ([0] if f < 0 else [2 * f + 2, 2 * f + 1])}, reverse=True)
    last = scores[final_states]
    state = final_states[int(np.argmax(last))]
    total = float(scores[state])
    if not np.isfinite(total):
        raise AlignmentError(f"no CTC path through the graph of {n} tokens in {T} frames")
    states = np.empty(T, dtype=np.int64)
    for t in range(T - 1, -1, -1):
        states[t] = state
        state = pred[state, choice[t, state]]
    frame_tokens = np.where(states % 2 == 1, (states - 1) // 2, -1)
    kept = np.zeros(n, dtype=bool)
    kept[frame_tokens[frame_tokens >= 0]] = True
    return Alignment(labels=tok[kept].tolist(), kept=kept, score=total, frame_tokens=frame_tokens)


def ctc_viterbi_optional(log_probs, tokens: Sequence[int], optional: Sequence[bool], blank: int) -> Alignment:
    """Viterbi CTC alignment where tokens flagged ``optional`` may be left out.

    Standard CTC topology (blanks between labels, a blank required between equal neighbours,
    after optional tokens are left out too).

    Arguments
    ---------
    log_probs : array-like, shape (T, V)
        Per-frame log-probabilities of one utterance (numpy or torch).
    tokens : sequence of int
        Label ids in order (no blanks).
    optional : sequence of bool
        Same length as ``tokens``.
    blank : int
        Blank id.

    Returns
    -------
    Alignment
        The best path; ``silences`` is left empty.

    Raises
    ------
    AlignmentError
        When no path fits in T frames.

    Example
    -------
    >>> import numpy as np
    >>> lp = np.log(np.full((6, 4), 0.01))  # ids: 0 blank, 1 optional token, 2 and 3 labels
    >>> for t, k in enumerate([2, 0, 1, 1, 3, 0]):
    ...     lp[t, k] = np.log(0.97)
    >>> ali = ctc_viterbi_optional(lp, [2, 1, 3], [False, True, False], blank=0)
    >>> ali.labels, ali.kept.tolist(), ali.frame_tokens.tolist()
    ([2, 1, 3], [True, True, True], [0, -1, 1, 1, 2, -1])
    >>> ctc_viterbi_optional(lp[:1], [2, 3], [False, False], blank=0)
    Traceback (most recent call last):
        ...
    surprisal_cc.decoding.viterbi.AlignmentError: no CTC path for 2 tokens (2 obligatory) in 1 frames
    """
    opt = np.asarray(optional, dtype=bool)
    n = len(tokens)
    if opt.shape != (n,):
        raise ValueError(f"optional has {opt.size} flags for {n} tokens")

    def reachable_before(k: int) -> List[int]:
        """Token k - 1 and, over a run of optional tokens, the ones before it (-1: the start)."""
        out, j = [k - 1], k - 1
        while j >= 0 and opt[j]:
            j -= 1
            out.append(j)
        return out

    try:
        return ctc_viterbi_graph(log_probs, tokens, [reachable_before(k) for k in range(n)], reachable_before(n),
                                 blank)
    except AlignmentError:
        T = as_numpy(log_probs).shape[0]
        raise AlignmentError(f"no CTC path for {n} tokens ({int((~opt).sum())} obligatory) in {T} frames") from None


def as_numpy(log_probs) -> np.ndarray:
    """(T, V) float64 numpy array of numpy or torch log-probabilities, checked for shape."""
    if hasattr(log_probs, "detach"):
        log_probs = log_probs.detach().cpu().double().numpy()
    lp = np.asarray(log_probs, dtype=np.float64)
    if lp.ndim != 2 or lp.shape[0] == 0:
        raise ValueError(f"log_probs must have shape (T, V) with T > 0, got {lp.shape}")
    return lp
