"""Phone timestamps: the recognised phones aligned to the model's frames, and CTM output.

Each phone of a hypothesis gets a start and an end from the best CTC path through exactly that
phone sequence (:func:`surprisal_cc.decoding.viterbi.ctc_viterbi_optional`, nothing optional): a phone
starts at its first emitting frame and lasts until the next phone starts (its trailing blank
frames included), but a phone lasts at most :data:`MAX_PHONE_S` from its start (spoken noise,
``spn``, at most :data:`MAX_SPOKEN_NOISE_S`), its own emitting frames always included. Where the
model emits no ``sil`` across a pause, the rest of the pause belongs to no phone: a gap in the CTM,
and a segment that ends before the next one starts. Silence (``sil``, and MFA's silence marks
:data:`surprisal_cc.data.mfa.SILENCE_MARKS`) lasts until the next phone, however long. The last
phone ends with the audio's last frame, within the same limits. Blank frames before the first phone
belong to no phone (a hypothesis usually begins with ``sil``, which covers them). A frame ``t``
starts at ``t * frame_shift_s`` seconds (20 ms frames for the recipes' features).

CTC's peaky posteriors place a phone's first emitting frame near, not at, its acoustic onset; how
near, against MFA's boundaries, and how the ends compare: ``recipes/MiniLibriSpeech/timestamps_vs_mfa.py``
(the README gives the figures).

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

A pause without ``sil``: the phone before it keeps its blank frames up to 0.5 s from its start, and
the pause's rest is a gap before the next phone (40 blank frames, 0.8 s, after ``AH``):

>>> lp = np.log(np.full((44, 4), 0.01))
>>> for t, k in enumerate([1, 2] + [0] * 40 + [3, 0]):
...     lp[t, k] = np.log(0.97)
>>> print(format_ctm("utt1", phone_segments(lp, [1, 2, 3], ["<blank>", "sil", "AH", "B"], 0, 0.02)))
utt1 1 0.00 0.02 sil
utt1 1 0.02 0.50 AH
utt1 1 0.84 0.04 B
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from surprisal_cc.data.mfa import SILENCE_MARKS
from surprisal_cc.data.phones import SILENCE, SPOKEN_NOISE
from surprisal_cc.decoding.viterbi import ctc_viterbi_optional

Segment = Tuple[str, float, float]  # phone, start s, end s

__all__ = ["MAX_PHONE_S", "MAX_SPOKEN_NOISE_S", "SILENCE_LABELS", "Segment", "extend_segment", "format_ctm",
           "phone_frames", "phone_limit_s", "phone_segments"]

#: Longest a phone lasts from its start, in seconds, when blank frames follow it (its emitting frames
#: always count): 0.5 s. MFA's phones on the labelled development split, mfa-dev (62,360 in its
#: TextGrids, silence and spoken noise left out), last 70 ms at the median and 350 ms at the 99.9th
#: percentile, and two last longer than 0.5 s (the longest 0.61 s); the margin above the 99.9th
#: percentile covers CTC's early and late emissions. With it, the shipped model's phones on mfa-dev:
#: 0.78 % of them end earlier (by a median 140 ms), none of the correctly recognised ones before
#: MFA's end, and the ends more than 500 ms from MFA's fall from 212 to 17 of 48,767. Both from
#: ``python recipes/MiniLibriSpeech/timestamps_vs_mfa.py data/MiniLibriSpeech --subset mfa-dev``
#: (``mfa_durations_ms``, ``limit`` and ``ends``: docs/results/MiniLibriSpeech/timestamps_vs_mfa_mfa-dev.json).
MAX_PHONE_S = 0.5
#: Longest spoken noise (``spn``) lasts from its start, in seconds: 1.5 s. MFA writes ``spn`` for a whole
#: word out of its lexicon: on mfa-dev 38 of them, 0.68 s at the median and 1.17 s the longest (the same
#: command's ``mfa_durations_ms``).
MAX_SPOKEN_NOISE_S = 1.5
#: The labels that last until the next phone however long: ``sil`` and MFA's silence marks.
SILENCE_LABELS = frozenset({SILENCE}) | SILENCE_MARKS


def phone_limit_s(phone: str, max_phone_s: Optional[float] = MAX_PHONE_S,
                  max_spoken_noise_s: Optional[float] = MAX_SPOKEN_NOISE_S) -> Optional[float]:
    """How long ``phone`` may last from its start, in seconds: None (until the next phone) for
    :data:`SILENCE_LABELS`, ``max_spoken_noise_s`` for ``spn``, ``max_phone_s`` for the others (None:
    no limit).

    Example
    -------
    >>> phone_limit_s("AH"), phone_limit_s("spn"), phone_limit_s("sil")
    (0.5, 1.5, None)
    """
    if phone in SILENCE_LABELS:
        return None
    return max_spoken_noise_s if phone == SPOKEN_NOISE else max_phone_s


def phone_frames(log_probs, ids: Sequence[int], blank: int,
                 max_frames: Optional[Sequence[Optional[int]]] = None) -> np.ndarray:
    """(N, 2) frame spans ``[start, end)`` of the phones ``ids`` in the frames of ``log_probs``.

    Arguments
    ---------
    log_probs : array-like, shape (T, V)
        Per-frame log-probabilities of one utterance.
    ids : sequence of int
        The label ids of the hypothesis (no blanks), e.g. the beam search's output.
    blank : int
        Blank id.
    max_frames : sequence of (int or None), optional
        For each phone, the most frames it lasts from its start (its emitting frames always count;
        None: until the next phone starts). None: every phone lasts until the next starts.

    Returns
    -------
    numpy.ndarray
        (len(ids), 2) int array.

    Example
    -------
    >>> lp = np.log(np.full((8, 3), 0.01))  # ids: 0 blank, 1 and 2 phones
    >>> for t, k in enumerate([1, 1, 1, 0, 0, 0, 2, 0]):
    ...     lp[t, k] = np.log(0.97)
    >>> phone_frames(lp, [1, 2], blank=0, max_frames=[2, None]).tolist()  # 1 emits for 3 frames
    [[0, 3], [6, 8]]
    >>> phone_frames(lp, [1, 2], blank=0, max_frames=[4, 1]).tolist()
    [[0, 4], [6, 7]]
    """
    if not len(ids):
        return np.zeros((0, 2), dtype=int)
    alignment = ctc_viterbi_optional(log_probs, list(ids), [False] * len(ids), blank)
    spans = alignment.segments(from_start=False)
    if max_frames is not None:
        if len(max_frames) != len(ids):
            raise ValueError(f"max_frames has {len(max_frames)} limits for {len(ids)} phones")
        limits = np.array([np.inf if m is None else m for m in max_frames], dtype=float)
        longest = np.maximum(spans[:, 0] + limits, alignment.emission_ends())
        spans[:, 1] = np.minimum(spans[:, 1], longest)
    return spans


def phone_segments(log_probs, ids: Sequence[int], labels: Sequence[str], blank: int,
                   frame_shift_s: float, offset_frames: int = 0, max_phone_s: Optional[float] = MAX_PHONE_S,
                   max_spoken_noise_s: Optional[float] = MAX_SPOKEN_NOISE_S) -> List[Segment]:
    """``(phone, start_s, end_s)`` of each phone of ``ids`` (see :func:`phone_frames`), each lasting at
    most its :func:`phone_limit_s` from its start.

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
    max_phone_s : float, optional
        The most a phone (not silence, not spoken noise) lasts from its start (:data:`MAX_PHONE_S`);
        None: until the next phone starts.
    max_spoken_noise_s : float, optional
        The same for ``spn`` (:data:`MAX_SPOKEN_NOISE_S`).

    Returns
    -------
    list of (str, float, float)
        Phone, start and end in seconds (rounded to microseconds).
    """
    limits = [phone_limit_s(labels[i], max_phone_s, max_spoken_noise_s) for i in ids]
    max_frames = [None if s is None else _frames(s, frame_shift_s) for s in limits]
    spans = phone_frames(log_probs, ids, blank, max_frames) + offset_frames
    return [(labels[i], _seconds(s, frame_shift_s), _seconds(e, frame_shift_s)) for i, (s, e) in zip(ids, spans.tolist())]


def extend_segment(segment: Segment, reached_s: float, to_s: float, frame_shift_s: float,
                   max_phone_s: Optional[float] = MAX_PHONE_S,
                   max_spoken_noise_s: Optional[float] = MAX_SPOKEN_NOISE_S) -> Segment:
    """The last segment of frames that end at ``reached_s`` (a part of a long file), continued over the
    blank frames that follow them up to ``to_s`` (the next part's first phone, or the next part's end
    where it has none), as :func:`phone_segments` counts blank frames: a segment that ended before
    ``reached_s`` (at its limit) is kept; one that ran to ``reached_s`` lasts until ``to_s``, but at
    most its :func:`phone_limit_s` from its start.

    Example
    -------
    >>> extend_segment(("AH", 10.0, 10.3), 10.3, 12.0, 0.02)    # at most 0.5 s
    ('AH', 10.0, 10.5)
    >>> extend_segment(("AH", 10.0, 10.3), 10.3, 10.36, 0.02)
    ('AH', 10.0, 10.36)
    >>> extend_segment(("sil", 10.0, 10.3), 10.3, 12.0, 0.02)   # silence: until the next phone
    ('sil', 10.0, 12.0)
    >>> extend_segment(("AH", 9.0, 9.5), 10.3, 12.0, 0.02)      # already at its limit
    ('AH', 9.0, 9.5)
    """
    phone, start, end = segment
    reached = _frames(reached_s, frame_shift_s)
    if _frames(end, frame_shift_s) < reached:
        return segment
    stop = _frames(to_s, frame_shift_s)
    limit = phone_limit_s(phone, max_phone_s, max_spoken_noise_s)
    if limit is not None:
        stop = min(stop, max(reached, _frames(start, frame_shift_s) + _frames(limit, frame_shift_s)))
    return phone, start, _seconds(stop, frame_shift_s)


def _frames(seconds: float, frame_shift_s: float) -> int:
    """The nearest whole number of frames to ``seconds``."""
    return int(round(seconds / frame_shift_s))


def _seconds(frames: float, frame_shift_s: float) -> float:
    """The time of frame ``frames`` in seconds, rounded to microseconds."""
    return round(float(frames) * frame_shift_s, 6)


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
