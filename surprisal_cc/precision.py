"""Which arithmetic a device runs fast: native bf16, and what ``precision: auto`` means there.

Example
-------
>>> auto_precision("cuda")
'fp32'
"""
from __future__ import annotations

import functools
import logging
import platform
import statistics
import time

import torch
from torch import nn

logger = logging.getLogger(__name__)

#: The ``precision`` values of training (the hparams key; fp16 on CUDA only) and of inference.
TRAINING_PRECISIONS = ("fp32", "bf16", "fp16", "auto")
INFERENCE_PRECISIONS = ("fp32", "bf16", "auto")

#: ``platform.machine()`` of x86 CPUs, whose bf16 instruction sets torch reports one by one.
X86_MACHINES = ("x86_64", "amd64", "i386", "i686", "x86")

#: bf16 autocast is chosen on a CPU only when its training step is at least this much faster than fp32's.
BF16_MIN_SPEEDUP = 1.1


def auto_precision(device="cpu") -> str:
    """What ``precision: auto`` means on ``device``: the faster of bf16 autocast and fp32 there.

    On a CPU, bf16 needs native support (AVX-512-BF16 or AMX; emulated it is slower) and then is
    measured, not assumed: CPUs have trained bf16 autocast 1.5x faster than fp32 (AMD EPYC with
    AVX-512-BF16), 2x slower (one Intel Xeon with AMX) and 1.1-1.5x faster (another) in
    ``benchmarks/bench_training.py``.
    So ``auto`` times a small training step both ways (:func:`bf16_speedup`, once per process and
    thread count, about a second) and takes bf16 only if it is at least :data:`BF16_MIN_SPEEDUP`
    times faster. On CUDA fp32: these networks are small (GRUs of 256 units), the step is bound by
    kernel launches, not arithmetic, and bf16 autocast only adds casts (1.39x slower than fp32 on
    an H100, ``python -m benchmarks.run_all --only training --device cuda``).

    >>> auto_precision("cuda")
    'fp32'
    """
    if torch.device(device).type == "cuda" or not native_bf16(device):
        return "fp32"
    speedup = bf16_speedup()
    chosen = "bf16" if speedup >= BF16_MIN_SPEEDUP else "fp32"
    logger.info("precision auto: a training step ran %.2fx as fast under bf16 autocast as in fp32 on this CPU: %s",
                speedup, chosen)
    return chosen


def bf16_speedup() -> float:
    """How many times faster a training step runs on this CPU under bf16 autocast than in fp32 (measured
    once per process and torch thread count; :func:`measure_bf16_speedup`)."""
    return _cached_speedup(torch.get_num_threads())


@functools.lru_cache(maxsize=None)
def _cached_speedup(threads: int) -> float:
    return measure_bf16_speedup()


def measure_bf16_speedup(batch: int = 8, frames: int = 50, repeats: int = 3) -> float:
    """fp32 step time over bf16-autocast step time of a training step shaped like the recipes': two GRUs
    of 256 units over 512-wide frames (a BiGRU layer) and a 512 -> 1024 -> 1024 -> 512 feed-forward
    network (the big network), forward and backward. The two are timed interleaved after a warm-up
    step each; the ratio of their medians. The caller's random number generator is left as it was.

    >>> measure_bf16_speedup(batch=2, frames=4, repeats=1) > 0
    True
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        grus = nn.ModuleList(nn.GRU(512, 256, batch_first=True) for _ in range(2))
        big = nn.Sequential(nn.Linear(512, 1024), nn.LeakyReLU(), nn.Linear(1024, 1024), nn.LeakyReLU(),
                            nn.Linear(1024, 512))
        x = torch.randn(batch, frames, 512)

    def step(bf16: bool) -> float:
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            h = torch.cat([gru(x)[0] for gru in grus], dim=-1)
            loss = big(h).float().pow(2).mean()
        loss.backward()
        return time.perf_counter() - start

    times = {False: [], True: []}
    for i in range(repeats + 1):
        for bf16 in (False, True):
            elapsed = step(bf16)
            if i:  # the first round warms up
                times[bf16].append(elapsed)
    return statistics.median(times[False]) / max(statistics.median(times[True]), 1e-12)


def native_bf16(device="cpu") -> bool:
    """Whether ``device`` computes bf16 natively: an x86 CPU with AVX-512-BF16 or AMX tiles, another CPU
    (e.g. ARM) where oneDNN says so, or a CUDA GPU of the Ampere generation or newer. (On x86,
    oneDNN's check is also true on AVX-512 CPUs without bf16 instructions, which emulate it slowly,
    so the instruction sets are asked for directly there.)"""
    if torch.device(device).type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if platform.machine().lower() in X86_MACHINES and any(check is not None for check in checks):
        return any(bool(check()) for check in checks if check is not None)
    try:  # other CPUs, and torch before 2.3
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover - builds without oneDNN
        return False
