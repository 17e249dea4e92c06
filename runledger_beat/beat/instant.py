"""An instant being prepared: the fires recorded in the still-open claim transaction, kept in memory, parked on
disk encoded, or by id (overflow.py), until the outbox commits and publishes them at their instant."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from ..publish.fires import Fire, Outgoing
from .overflow import PackedIds, ParkedFires


@dataclass
class Prepared:
    """Fires recorded in the still-open claim transaction; committed at the first one's instant."""

    start: datetime          # the instant further claims of this transaction are cut to
    commit_at: float         # local wall-clock time of the earliest fire
    outgoing: list[Outgoing]
    last: datetime           # the latest fire's instant
    parked: ParkedFires | None = None  # fires past max_prepared, encoded, on disk (a fast path: RabbitMQ or Redis)
    by_id: PackedIds = field(default_factory=PackedIds)  # fires past max_prepared by id (the other publishers)
    overlap: list[Fire] = field(default_factory=list)  # fires (in memory or not) an overlap policy may hold back
    by_id_range: tuple[datetime, datetime] | None = None    # the instants of those kept by id
    staged: int = 0          # fires handed to the broker ahead of the COMMIT (Preparer._stage), 0: none

    @property
    def size(self) -> int:
        """Fires recorded in the transaction."""
        return len(self.outgoing) + len(self.by_id) + (len(self.parked) if self.parked else 0)

    def discard(self) -> None:
        """Let go of what is parked on disk (the transaction rolled back)."""
        if self.parked is not None:
            self.parked.close()
