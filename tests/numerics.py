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
