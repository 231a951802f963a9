"""Tolerances for comparing two float32 computations of the same values.

Two computations that differ only in batch composition, in the implementation (e.g. Kaldi's fbank
against ours), or in the CPU that ran them (AVX-512 vs AMX GEMM kernels, thread count) add the
same terms in another order. Each result can then differ by a few float32 ulps of the magnitude
of the terms summed, so the tolerance is relative to the values' scale, never an absolute 1e-6.
"""
from __future__ import annotations

import torch

FLOAT32_SUM_RTOL = 1e-5  # ~100 float32 ulps (eps = 1.2e-7)


def assert_close_up_to_summation_order(actual: torch.Tensor, expected: torch.Tensor, rtol: float = FLOAT32_SUM_RTOL):
    """``actual`` equals ``expected`` within ``rtol`` of each value and of the largest value's magnitude."""
    scale = float(expected.detach().abs().max()) if expected.numel() else 0.0
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=rtol * max(scale, 1.0))


# Routing and decoding of the same audio in batches of another composition. A frame whose p_big
# lies within float32 rounding of the 0.5 threshold can go to the other network, which changes that
# frame's log-probabilities and can change a phone of the best path near it. A real fault (padding
# reaching the routing, another model, other labels) moves far more frames and edits than these.
ROUTING_FLIPS = 3  # frames, over all the utterances compared, that may switch networks
DECODING_EDITS = 4  # edits by which the error counts of two decodings of the same utterances may differ


def assert_same_routing_up_to_summation_order(actual, expected, num_frames, flips: int = ROUTING_FLIPS):
    """Big-network fractions (one per utterance, or one over a corpus) agree but for at most ``flips``
    frames in all: ``sum |actual - expected| * num_frames <= flips``."""
    actual, expected, num_frames = ([v] if isinstance(v, (int, float)) else list(v)
                                    for v in (actual, expected, num_frames))
    assert len(actual) == len(expected) == len(num_frames)
    switched = sum(abs(a - e) * n for a, e, n in zip(actual, expected, num_frames))
    assert switched <= flips + 1e-6, f"{switched:.1f} frames switched networks (at most {flips}): {actual} != {expected}"


def assert_same_errors_up_to_summation_order(actual, expected, edits: int = DECODING_EDITS):
    """Error counts (``substitutions``, ``deletions``, ``insertions`` against the same ``num_ref_tokens``)
    of two decodings of the same utterances differ by at most ``edits`` each and in their total."""
    assert actual["num_ref_tokens"] == expected["num_ref_tokens"]
    kinds = ("substitutions", "deletions", "insertions")
    for kind in kinds:
        assert abs(actual[kind] - expected[kind]) <= edits, (kind, actual[kind], expected[kind])
    total = sum(actual[k] for k in kinds) - sum(expected[k] for k in kinds)
    assert abs(total) <= edits, ({k: actual[k] for k in kinds}, {k: expected[k] for k in kinds})


def assert_same_phones_up_to_summation_order(actual, expected, edits: int = DECODING_EDITS):
    """Two decodings (lists of phone sequences) of the same utterances differ by at most ``edits`` edits
    in all (a near tie in the beam search may break the other way in another summation order)."""
    from speechbrain.utils.edit_distance import wer_details_for_batch

    assert len(actual) == len(expected)
    details = wer_details_for_batch(range(len(actual)), expected, actual)
    total = sum(d["num_edits"] for d in details)
    assert total <= edits, (total, actual, expected)


def error_rate_tolerance(num_ref_tokens: int, edits: int = DECODING_EDITS) -> float:
    """The error rate (in %) that ``edits`` edits over ``num_ref_tokens`` reference tokens make."""
    return 100.0 * edits / num_ref_tokens
