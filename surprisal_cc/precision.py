"""Which arithmetic a device runs fast: native bf16, and what ``precision: auto`` means there.

Example
-------
>>> auto_precision("cuda"), auto_precision("cpu") == ("bf16" if native_bf16("cpu") else "fp32")
('fp32', True)
"""
from __future__ import annotations

import torch


def auto_precision(device="cpu") -> str:
    """What ``precision: auto`` means on ``device``: the faster of bf16 autocast and fp32 there.

    A CPU with native bf16 (AVX-512-BF16 or AMX) trains about 1.5x faster in bf16 autocast
    (``benchmarks/bench_training.py``); without it bf16 is emulated and slower, so fp32. On CUDA
    fp32: these networks are small (GRUs of 256 units), the step is bound by kernel launches, not
    arithmetic, and bf16 autocast only adds casts (1.39x slower than fp32 on an H100,
    ``python -m benchmarks.run_all --only training --device cuda``).

    >>> auto_precision("cuda")
    'fp32'
    """
    if torch.device(device).type == "cuda":
        return "fp32"
    return "bf16" if native_bf16(device) else "fp32"


def native_bf16(device="cpu") -> bool:
    """Whether ``device`` computes bf16 natively: a CPU with AVX-512-BF16 or AMX (as oneDNN reports
    it), or a CUDA GPU of the Ampere generation or newer."""
    if torch.device(device).type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover - builds without oneDNN
        return False
