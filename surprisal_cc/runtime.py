"""How torch runs on this machine: the arithmetic a device computes natively (bf16) and the fixed rule
``precision: auto`` follows there, and the intra-op threads decoding runs on.

Threads: one by default, so that decoding never oversubscribes the cores.
The GRUs run one small matrix product per time step; with torch's default (one thread per core)
every step synchronises all threads, and when another process keeps a core busy each step waits
for a thread that is not scheduled: decoding then runs tens of times slower (the inference
benchmark's busy-core rows). One thread is as fast on an idle machine at batch 1 and unaffected by
a busy one; more threads pay off only for large batches on cores nothing else uses.

Example
-------
>>> auto_precision("cuda")
'fp32'
>>> import torch
>>> before = torch.get_num_threads()
>>> with decoding_threads(1):
...     torch.get_num_threads()
1
>>> torch.get_num_threads() == before
True
"""
from __future__ import annotations

import contextlib
import platform
from typing import Iterator, Optional

from surprisal_cc.checks import is_number

#: The ``precision`` values of training (the hparams key; fp16 on CUDA only) and of inference.
TRAINING_PRECISIONS = ("fp32", "bf16", "fp16", "auto")
INFERENCE_PRECISIONS = ("fp32", "bf16", "auto")

#: ``platform.machine()`` of x86 CPUs, whose bf16 instruction sets torch reports one by one.
X86_MACHINES = ("x86_64", "amd64", "i386", "i686", "x86")


def auto_precision(device="cpu") -> str:
    """What ``precision: auto`` means on ``device``: a fixed rule, never a timing. bf16 autocast on a CPU
    that computes bf16 natively (AVX-512-BF16 or AMX, :func:`native_bf16`), fp32 elsewhere: on CPUs
    without it (emulated bf16 is slower) and on CUDA, where these small networks (GRUs of 256 units)
    are bound by kernel launches and bf16 autocast only adds casts (1.39x slower than fp32 on an H100,
    ``python -m benchmarks.run_all --only training --device cuda``).

    Native bf16 does not promise a faster step: ``benchmarks/bench_training.py`` measured bf16 1.5x
    faster on an AMD EPYC with AVX-512-BF16, 1.1-1.5x faster on one Intel Xeon with AMX and 2x slower on
    another. That is why every hparams file says ``precision: fp32`` and bf16 is used only when asked
    (``--precision=bf16``, or ``auto`` by this rule); the training step is never timed to decide, so a
    command trains with the same arithmetic whatever the machine's load.

    >>> auto_precision("cuda")
    'fp32'
    """
    import torch  # in the functions that need it: the command line reads this module without loading torch

    if torch.device(device).type == "cuda" or not native_bf16(device):
        return "fp32"
    return "bf16"


def native_bf16(device="cpu") -> bool:
    """Whether ``device`` computes bf16 natively: an x86 CPU with AVX-512-BF16 or AMX tiles, another CPU
    (e.g. ARM) where oneDNN says so, or a CUDA GPU of the Ampere generation or newer. (On x86,
    oneDNN's check is also true on AVX-512 CPUs without bf16 instructions, which emulate it slowly,
    so the instruction sets are asked for directly there.)"""
    import torch

    if torch.device(device).type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported()
    checks = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if platform.machine().lower() in X86_MACHINES and any(check is not None for check in checks):
        return any(bool(check()) for check in checks if check is not None)
    try:  # other CPUs, and torch before 2.3
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # pragma: no cover - builds without oneDNN
        return False


DEFAULT_DECODING_THREADS = 1



def check_threads(threads: Optional[int]) -> Optional[int]:
    """``threads`` if it is None (torch's setting left alone) or a positive count; else ValueError.

    Example
    -------
    >>> check_threads(2), check_threads(None)
    (2, None)
    """
    if threads is not None and (not is_number(threads) or int(threads) != threads or threads < 1):
        raise ValueError(f"threads must be a positive number of threads (or None: torch's setting), got {threads!r}")
    return None if threads is None else int(threads)


@contextlib.contextmanager
def decoding_threads(threads: Optional[int] = DEFAULT_DECODING_THREADS) -> Iterator[int]:
    """Run the body with ``threads`` torch intra-op threads (None: torch's setting), then restore it.

    Arguments
    ---------
    threads : int, optional
        Intra-op threads; None leaves torch's setting (``torch.set_num_threads``, ``OMP_NUM_THREADS``).

    Yields
    ------
    int
        The thread count in effect.
    """
    threads = check_threads(threads)
    import torch  # here, so that the command line reads DEFAULT_DECODING_THREADS without loading torch

    before = torch.get_num_threads()
    if threads is not None and threads != before:
        torch.set_num_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
