"""Torch intra-op threads for decoding: one by default, so that decoding never oversubscribes the cores.

The GRUs run one small matrix product per time step; with torch's default (one thread per core)
every step synchronises all threads, and when another process keeps a core busy each step waits
for a thread that is not scheduled: decoding then runs tens of times slower (the inference
benchmark's busy-core rows). One thread is as fast on an idle machine at batch 1 and unaffected by
a busy one; more threads pay off only for large batches on cores nothing else uses.

Example
-------
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
from typing import Iterator, Optional

from .arguments import is_number

DEFAULT_DECODING_THREADS = 1

__all__ = ["DEFAULT_DECODING_THREADS", "decoding_threads", "check_threads"]


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
