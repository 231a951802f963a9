"""Tests for surprisal_cc.decoding.timestamps: phone times from CTC Viterbi, phone ends limited across pauses."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from surprisal_cc.inference import long_audio
from surprisal_cc.decoding.timestamps import (MAX_PHONE_S, MAX_SPOKEN_NOISE_S, SILENCE_LABELS, extend_segment, format_ctm,
                                     phone_frames, phone_segments)

LABELS = ["<blank>", "sil", "AH", "B", "spn"]
SHIFT = 0.02


def peaky(frames, vocab=len(LABELS)):
    """(T, V) log-probabilities where frame t emits ``frames[t]`` (0: blank) with probability 0.96."""
    lp = np.log(np.full((len(frames), vocab), 0.01))
    for t, k in enumerate(frames):
        lp[t, k] = np.log(0.96)
    return lp


def segments(frames, ids, **limits):
    return phone_segments(peaky(frames), ids, LABELS, 0, SHIFT, **limits)


def test_the_limits_are_named_constants():
    assert MAX_PHONE_S == 0.5 and MAX_SPOKEN_NOISE_S == 1.5
    assert {"sil", "sp", ""} <= SILENCE_LABELS and "spn" not in SILENCE_LABELS


def test_a_phone_before_a_pause_without_sil_ends_at_its_limit():
    """40 blank frames (0.8 s) after AH, no sil: AH lasts 0.5 s from its start, then the pause is a gap in the CTM;
    every start is where it was."""
    frames = [1, 2] + [0] * 40 + [3, 0]
    assert segments(frames, [1, 2, 3]) == [("sil", 0.0, 0.02), ("AH", 0.02, 0.52), ("B", 0.84, 0.88)]
    assert segments(frames, [1, 2, 3], max_phone_s=None)[1] == ("AH", 0.02, 0.84)  # no limit: until B starts
    assert format_ctm("u", segments(frames, [1, 2, 3])).splitlines()[1:] == ["u 1 0.02 0.50 AH", "u 1 0.84 0.04 B"]


def test_the_last_phone_ends_at_its_limit_not_at_the_end_of_the_audio():
    frames = [1, 2] + [0] * 40
    assert segments(frames, [1, 2])[-1] == ("AH", 0.02, 0.52)
    assert segments(frames, [1, 2], max_phone_s=None)[-1] == ("AH", 0.02, 0.84)


def test_silence_lasts_until_the_next_phone_however_long():
    frames = [2, 1] + [0] * 100 + [3]
    assert segments(frames, [2, 1, 3])[1] == ("sil", 0.02, 2.04)


def test_a_phone_keeps_its_emitting_frames_beyond_the_limit():
    """AH emits for 8 frames (0.16 s) with a 0.1 s limit: it ends after its last emitting frame, not at the limit."""
    frames = [1] + [2] * 8 + [0] * 10 + [3]
    assert segments(frames, [1, 2, 3], max_phone_s=0.1)[1] == ("AH", 0.02, 0.18)
    assert phone_frames(peaky(frames), [1, 2, 3], 0, max_frames=[None, 5, None]).tolist() == [[0, 1], [1, 9], [19, 20]]


def test_spoken_noise_has_its_own_longer_limit():
    assert segments([4] + [0] * 60 + [2], [4, 2])[0] == ("spn", 0.0, 1.22)  # 1.22 s: under 1.5 s, until AH
    assert segments([4] + [0] * 100 + [2], [4, 2])[0] == ("spn", 0.0, 1.5)
    assert segments([4] + [0] * 100 + [2], [4, 2], max_spoken_noise_s=None)[0] == ("spn", 0.0, 2.02)


def test_ordinary_speech_keeps_its_phone_ends():
    """Phones followed by a few blank frames tile the utterance as before."""
    frames = [1, 0, 2, 2, 0, 0, 3, 0, 2, 0, 0, 0, 1, 1]
    ids = [1, 2, 3, 2, 1]
    assert segments(frames, ids) == segments(frames, ids, max_phone_s=None)
    spans = [(s, e) for _, s, e in segments(frames, ids)]
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:])) and spans[-1][1] == 0.28


def test_limits_move_ends_only_earlier_and_never_before_a_phones_emission():
    """Random peaky paths with long pauses: the starts are those without limits; an end is the unlimited end or
    the limit (at least the phone's emitting frames), never later than the next start."""
    rng = np.random.default_rng(0)
    for _ in range(30):
        frames, ids = [], []
        for _ in range(rng.integers(1, 12)):
            k = int(rng.choice([1, 2, 3, 4]))
            if ids and ids[-1] == k:
                frames.append(0)
            frames += [k] * int(rng.integers(1, 4)) + [0] * int(rng.choice([0, 1, 3, 30, 90]))
            ids.append(k)
        limited, free = segments(frames, ids, max_phone_s=0.3), segments(frames, ids, max_phone_s=None)
        assert [s for _, s, _ in limited] == [s for _, s, _ in free]
        for (phone, start, end), (_, _, free_end), nxt in zip(limited, free, [s for _, s, _ in free[1:]] + [None]):
            assert end <= free_end and (nxt is None or end <= nxt)
            if phone == "sil":
                assert end == free_end
            elif end < free_end:  # each phone emits for at most 3 frames: it ends at its limit
                assert end == pytest.approx(start + (1.5 if phone == "spn" else 0.3))


def test_a_segment_continued_over_a_part_join_as_whole_file_alignment_counts_it():
    assert extend_segment(("AH", 1.0, 1.2), 1.2, 3.0, SHIFT) == ("AH", 1.0, 1.5)
    assert extend_segment(("AH", 1.0, 1.2), 1.2, 1.3, SHIFT) == ("AH", 1.0, 1.3)
    assert extend_segment(("AH", 1.0, 1.5), 2.0, 3.0, SHIFT) == ("AH", 1.0, 1.5)  # at its limit in its part
    assert extend_segment(("AH", 1.0, 1.7), 1.7, 3.0, SHIFT) == ("AH", 1.0, 1.7)  # emitted past its limit
    assert extend_segment(("sil", 1.0, 1.2), 1.2, 3.0, SHIFT) == ("sil", 1.0, 3.0)
    assert extend_segment(("spn", 1.0, 1.2), 1.2, 3.0, SHIFT) == ("spn", 1.0, 2.5)
    assert extend_segment(("AH", 1.0, 1.2), 1.2, 3.0, SHIFT, max_phone_s=None) == ("AH", 1.0, 3.0)


def _part_model() -> SimpleNamespace:
    """What long_audio's accumulator reads of a model (its phone times come from :func:`phone_segments`)."""
    return SimpleNamespace(labels=LABELS, beam_search=SimpleNamespace(blank=0), frame_shift_s=SHIFT)


@pytest.mark.parametrize("cuts", [[10], [30], [10, 30], [10, 20, 30, 45]])
def test_long_file_parts_join_with_the_whole_files_phone_ends(cuts):
    """A file decoded in parts cut inside pauses without sil (a part may hold no phone): its phone times are
    whole-file decoding's, the limit applied across the joins."""
    frames = [1, 2] + [0] * 40 + [3, 3] + [0] * 4 + [2] + [0] * 10
    ids = [1, 2, 3, 2]
    lp = torch.from_numpy(peaky(frames)).float()
    acc, model = long_audio._Accumulator(), _part_model()
    for start, stop in zip([0] + cuts, cuts + [len(frames)]):
        part_ids = [int(k) for t, k in enumerate(frames[start:stop]) if k and (t == 0 or frames[start + t - 1] != k)]
        forward = SimpleNamespace(frames=torch.tensor([stop - start]), output=SimpleNamespace(stats={}, frame_macs={}),
                                  surprisal=None, fbank=None)
        acc.add(model, long_audio._Part(forward, lp[start:stop], slice(0, stop - start), part_ids, stop, 0.0), start,
                keep_fbank=False)
    whole = segments(frames, ids)
    assert whole == [("sil", 0.0, 0.02), ("AH", 0.02, 0.52), ("B", 0.84, 0.96), ("AH", 0.96, 1.18)]
    assert acc.phones == ids and acc.segments == whole
