"""What moves through the fire pipeline: a recorded fire, the same fire ready for the broker, and what became
of a batch of them."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Fire:
    """A fire recorded in the ledger, to be published once its transaction commits.

    ``id`` is the ledger row id and the Celery task id; ``payload`` is the
    template plus ``_schedule``.
    """

    id: uuid.UUID
    schedule_id: uuid.UUID | None
    schedule_name: str | None
    job_type: str
    payload: Any
    options: dict[str, Any]
    scheduled_for: datetime | None
    overlap_skip: bool = False
    overlap_policy: str = "allow"

    @classmethod
    def from_job(cls, row: dict[str, Any]) -> Fire:
        """The fire of a ledger row (the recovery sweep republishes these)."""
        return cls(row["id"], row["schedule_id"], row["schedule_name"], row["job_type"], row["payload"],
                   row["options"] or {}, row["scheduled_for"])


@dataclass(slots=True)
class Outgoing:
    """A fire on its way to the broker: on the RabbitMQ fast path with its AMQP frames encoded ahead,
    on the Redis fast path with its LPUSH commands (key, payload), on Celery's path with its message built
    ahead (``message.BuiltMessage``, sent once)."""

    fire: Fire
    built: Any = None
    frames: bytes | None = None
    channel_id: int = 0
    declare: tuple = ()
    pushes: tuple = ()


#: Why a fire the broker nacked failed.
NACKED = "broker refused the message (basic.nack)"


@dataclass
class PublishResult:
    """Which fires reached the broker; failures are kept with their reason.

    ``error`` is set when the broker connection itself failed (the rest of the
    batch was not attempted and the caller should back off).
    """

    sent: list = field(default_factory=list)
    failed: list[tuple[Fire, str]] = field(default_factory=list)
    error: BaseException | None = None


def reason(exc: BaseException) -> str:
    """An error as one line for the ledger's last_error: its type and message, at most 1,000 characters."""
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:1000]
