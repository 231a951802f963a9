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
from typing import Callable, Optional, TypeVar

Number = TypeVar("Number", int, float)

__all__ = ["positive_int", "finite_float", "non_negative_float"]


def positive_int(text: str) -> int:
    """An integer of at least 1.

    >>> positive_int("two")
    Traceback (most recent call last):
        ...
    argparse.ArgumentTypeError: must be a positive integer, got two
    """
    value = _number(int, text)
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def finite_float(text: str) -> float:
    """A finite number (not nan or inf).

    >>> finite_float("nan")
    Traceback (most recent call last):
        ...
    argparse.ArgumentTypeError: must be a finite number, got nan
    """
    value = _number(float, text)
    if value is None or not math.isfinite(value):
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


def _number(kind: Callable[[str], Number], text: str) -> Optional[Number]:
    """``kind(text)``, or None where ``text`` is not such a number."""
    try:
        return kind(text)
    except ValueError:
        return None
