"""Phone timestamps: the recognised phones aligned to the model's frames, and CTM output.

Each phone of a hypothesis gets a start and an end from the best CTC path through exactly that
phone sequence (:func:`surprisal_cc.viterbi.ctc_viterbi_optional`, nothing optional): a phone
starts at its first emitting frame and lasts until the next phone starts (its trailing blank
frames included); the last ends with the audio's last frame. Blank frames before the first phone
belong to no phone (a hypothesis usually begins with ``sil``, which covers them). A frame
``t`` starts at ``t * frame_shift_s`` seconds (20 ms frames for the recipes' features).

CTC's peaky posteriors place a phone's first emitting frame near, not at, its acoustic onset; how
near, against MFA's boundaries: ``recipes/MiniLibriSpeech/timestamps_vs_mfa.py`` (the README gives
the figure).

Example
-------
>>> import numpy as np
>>> lp = np.log(np.full((6, 4), 0.01))            # ids: 0 blank, 1 sil, 2 and 3 phones
>>> for t, k in enumerate([1, 0, 2, 2, 0, 3]):
...     lp[t, k] = np.log(0.97)
>>> phone_frames(lp, [1, 2, 3], blank=0).tolist()
[[0, 2], [2, 5], [5, 6]]
>>> segs = phone_segments(lp, [1, 2, 3], ["<blank>", "sil", "AH", "B"], blank=0, frame_shift_s=0.02)
>>> segs[1]
('AH', 0.04, 0.1)
>>> print(format_ctm("utt1", segs))
utt1 1 0.00 0.04 sil
utt1 1 0.04 0.06 AH
utt1 1 0.10 0.02 B
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import numpy as np

from .viterbi import ctc_viterbi_optional

Segment = Tuple[str, float, float]  # phone, start s, end s

__all__ = ["Segment", "phone_frames", "phone_segments", "format_ctm"]


def phone_frames(log_probs, ids: Sequence[int], blank: int) -> np.ndarray:
    """(N, 2) frame spans ``[start, end)`` of the phones ``ids`` in the frames of ``log_probs``.

    Arguments
    ---------
    log_probs : array-like, shape (T, V)
        Per-frame log-probabilities of one utterance.
    ids : sequence of int
        The label ids of the hypothesis (no blanks), e.g. the beam search's output.
    blank : int
        Blank id.

    Returns
    -------
    numpy.ndarray
        (len(ids), 2) int array.
    """
    if not len(ids):
        return np.zeros((0, 2), dtype=int)
    return ctc_viterbi_optional(log_probs, list(ids), [False] * len(ids), blank).segments(from_start=False)


def phone_segments(log_probs, ids: Sequence[int], labels: Sequence[str], blank: int,
                   frame_shift_s: float, offset_frames: int = 0) -> List[Segment]:
    """``(phone, start_s, end_s)`` of each phone of ``ids`` (see :func:`phone_frames`).

    Arguments
    ---------
    log_probs : array-like, shape (T, V)
        Per-frame log-probabilities of one utterance (or of one part of a long file).
    ids : sequence of int
        The hypothesis' label ids.
    labels : sequence of str
        Label names by id.
    blank : int
        Blank id.
    frame_shift_s : float
        Seconds between frames.
    offset_frames : int
        Frames before ``log_probs`` starts (parts of a long file).

    Returns
    -------
    list of (str, float, float)
        Phone, start and end in seconds (rounded to microseconds).
    """
    spans = phone_frames(log_probs, ids, blank) + offset_frames
    return [(labels[i], round(float(s) * frame_shift_s, 6), round(float(e) * frame_shift_s, 6))
            for i, (s, e) in zip(ids, spans.tolist())]


def format_ctm(name: str, segments: Sequence[Segment], channel: str = "1") -> str:
    """CTM lines ``<name> <channel> <start> <duration> <phone>`` (seconds, two decimals; 20 ms frames).

    Arguments
    ---------
    name : str
        The recording's name (first field); spaces are replaced by underscores.
    segments : sequence of (str, float, float)
        Phone, start and end in seconds.
    channel : str
        The channel field.

    Returns
    -------
    str
        One line per phone, without a trailing newline.
    """
    name = "_".join(str(name).split()) or "-"
    return "\n".join(f"{name} {channel} {start:.2f} {end - start:.2f} {phone}" for phone, start, end in segments)
