"""Numeric command line options with a documented range, checked while the command line is parsed.

``Bounded(int, 1, 10000)`` is an argparse ``type``: a value outside the range,
not a number, NaN or infinite exits 2 with ``argument --limit: ...`` before any
work starts. Its ``bound`` text ("1..10000") appears in the option's help
(tests/test_input_attacks.py checks that every numeric option has one).
"""

from __future__ import annotations

import argparse
import math

from ..spec import shown


def _number(value: float) -> str:
    """A bound as help shows it: 86400, not 86400.0."""
    return str(int(value)) if float(value).is_integer() else str(value)


class Bounded:
    """An argparse type: an ``int`` or ``float`` within ``low``..``high`` (both included)."""

    def __init__(self, kind: type, low: float, high: float) -> None:
        self.kind, self.low, self.high = kind, low, high
        self.bound = f"{_number(low)}..{_number(high)}"
        self.__name__ = kind.__name__  # argparse names the type in its messages

    def __call__(self, text: str) -> int | float:
        """The value of ``text``, or ArgumentTypeError naming the range."""
        what = "an integer" if self.kind is int else "a number"
        try:
            value = self.kind(text)
        except (ValueError, OverflowError):  # also int() of more than 4,300 digits
            raise argparse.ArgumentTypeError(f"expected {what} in {self.bound}, got {shown(text)}") from None
        if not math.isfinite(value) or not self.low <= value <= self.high:
            raise argparse.ArgumentTypeError(f"must be {what} in {self.bound}, got {shown(text)}")
        return value

    def __repr__(self) -> str:
        return f"Bounded({self.kind.__name__}, {self.bound})"
