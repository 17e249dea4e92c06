"""Exponential back-off between attempts at a service that failed, with one log line per outage."""

from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)


class Backoff:
    """Doubles the wait after each failure (``first`` up to ``cap`` seconds); resets on success."""

    def __init__(self, what: str, first: float = 0.5, cap: float = 10.0) -> None:
        self.what, self.first, self.cap = what, first, cap
        self.delay = 0.0
        self.until = 0.0

    @property
    def active(self) -> bool:
        """Whether the service should be left alone now."""
        return self.delay > 0 and time.monotonic() < self.until

    @property
    def failing(self) -> bool:
        """Whether the last attempt failed."""
        return self.delay > 0

    def failed(self, error: str) -> float:
        """Record a failure; returns the seconds to wait before the next attempt."""
        if self.delay == 0:
            log.warning("runledger: %s unavailable (%s); retrying with back-off", self.what, error)
        self.delay = min(self.cap, self.delay * 2 or self.first)
        self.until = time.monotonic() + self.delay
        return self.delay

    def succeeded(self) -> None:
        """Record a success (logged once after an outage)."""
        if self.delay:
            log.warning("runledger: %s reachable again", self.what)
        self.delay = 0.0
