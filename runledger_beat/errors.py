"""The errors runledger_beat raises on bad input: each names what was wrong and never holds a password."""

from __future__ import annotations


class ConfigError(Exception):
    """A setting is missing or wrong; the message names it and never holds a password."""


class ScheduleError(ValueError):
    """Invalid schedule input; names the field and a human reason."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class UsageError(Exception):
    """Bad command line input (exit 2)."""
