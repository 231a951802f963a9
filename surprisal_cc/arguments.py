"""argparse value types shared by ``surprisal-cc`` and the experiment tools' parsers (grid, analysis).

A value that does not fit is argparse's usage error: one line, exit status 2.

Example
-------
>>> positive_int("3"), finite_float("-1.5"), non_negative_float("0")
(3, -1.5, 0.0)
"""
from __future__ import annotations

import argparse
import math

__all__ = ["positive_int", "finite_float", "non_negative_float"]


def positive_int(text: str) -> int:
    """An integer of at least 1.

    >>> positive_int("two")
    Traceback (most recent call last):
        ...
    argparse.ArgumentTypeError: must be a positive integer, got two
    """
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def finite_float(text: str) -> float:
    """A finite number (not nan or inf).

    >>> finite_float("nan")
    Traceback (most recent call last):
        ...
    argparse.ArgumentTypeError: must be a finite number, got nan
    """
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number of at least 0.

    >>> non_negative_float("-5")
    Traceback (most recent call last):
        ...
    argparse.ArgumentTypeError: must be 0 or more, got -5
    """
    value = finite_float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value
