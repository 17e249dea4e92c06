"""Fires recorded ahead past what a beat keeps in memory: parked on disk, or kept by id to be read back.

An instant of 100,000 fires is recorded ahead in one open transaction, but a
beat keeps only the first ``MAX_PREPARED`` of them in memory (pipeline.py).
The others take one of two forms:

* ``ParkedFires``: on a fast path a fire's message is encoded ahead like any
  other (AMQP frames on RabbitMQ, the JSON text LPUSHed on Redis), then written
  to an unlinked temporary file, with its id, instant, size, channel and route
  (entities to declare, or Redis lists) in compact arrays (about 40 bytes a
  fire in memory). At the instant they are read back in chunks and written to
  the broker as they are: no Python work per fire beyond the bookkeeping, so
  the burst runs at the broker's pace while beat's memory stays flat (the
  messages sit in the page cache, not in beat).
* ids only (16 bytes a fire) on every other publisher, read back from the ledger
  after the commit (``Store.read_kept_by_id``) and built then.

A parked fire carries no payload: should its publish fail, it is left pending in
the ledger, where the recovery sweep finds it, instead of in beat's backlog.
"""

from __future__ import annotations

import tempfile
import uuid
from array import array
from collections.abc import Callable, Iterator
from datetime import datetime, timezone

from ..publish.fires import Fire, Outgoing


class Parked:
    """The payload of a fire whose message was encoded and parked: it cannot be built again from it."""

    def __repr__(self) -> str:
        return "<parked: encoded ahead, its payload not kept>"


PARKED = Parked()


def is_parked(fire: Fire) -> bool:
    """Whether ``fire`` came out of a ParkedFires (no payload to rebuild its message from)."""
    return fire.payload is PARKED


class PackedIds:
    """Fire ids packed 16 bytes each (a UUID object costs ~100): hundreds of thousands fit in a few MB."""

    __slots__ = ("_data",)

    def __init__(self) -> None:
        self._data = bytearray()

    def __len__(self) -> int:
        return len(self._data) // 16

    def add(self, fire_id: uuid.UUID) -> None:
        self._data += fire_id.bytes

    def extend(self, fire_ids: list[uuid.UUID]) -> None:
        self._data += b"".join([fire_id.bytes for fire_id in fire_ids])

    def slice(self, start: int, end: int) -> list[uuid.UUID]:
        """The ids at positions ``start`` up to ``end`` (exclusive, clipped to the length)."""
        data, from_int = self._data, int.from_bytes
        return [_uuid_of_int(from_int(data[i:i + 16])) for i in range(16 * start, 16 * min(end, len(self)), 16)]


def _fast_uuid_of_int(value: int) -> uuid.UUID:
    """``uuid.UUID(int=value)`` without its argument checks (a third of a burst's bookkeeping otherwise)."""
    made = object.__new__(uuid.UUID)
    object.__setattr__(made, "int", value)
    object.__setattr__(made, "is_safe", uuid.SafeUUID.unknown)
    return made


def _checked_uuid_of_int() -> Callable[[int], uuid.UUID]:
    """The fast constructor where it makes what ``uuid.UUID`` makes on this Python, else ``uuid.UUID`` itself."""
    sample = uuid.uuid4()
    try:
        made = _fast_uuid_of_int(sample.int)
        if made == sample and hash(made) == hash(sample) and str(made) == str(sample) and made.bytes == sample.bytes:
            return _fast_uuid_of_int
    except (AttributeError, TypeError):
        pass
    return lambda value: uuid.UUID(int=value)


_uuid_of_int = _checked_uuid_of_int()


class ParkedFires:
    """Encoded fires on disk, in the order they were added; see the module docstring."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="runledger-parked-")  # noqa: SIM115 (lives until close())
        self._ids = PackedIds()
        self._sizes = array("I")
        self._instants = array("d")
        self._channels = array("H")
        self._route_of = array("H")
        self._routes: list[tuple[bool, tuple]] = []  # (True, entities to declare) or (False, Redis lists)
        self._route_index: dict[tuple, int] = {}

    def __len__(self) -> int:
        return len(self._sizes)

    def add(self, item: Outgoing) -> None:
        """Park one encoded fire (``item.frames`` or ``item.pushes`` set, its instant known)."""
        assert (item.frames is not None or item.pushes) and item.fire.scheduled_for is not None
        if item.frames is not None:
            data, route, key = item.frames, (True, item.declare), (True, tuple(map(id, item.declare)))
        else:
            payload = item.pushes[0][1]  # the same message for each of the fire's queues
            data = payload.encode() if isinstance(payload, str) else payload
            route = key = (False, tuple(queue for queue, _ in item.pushes))
        index = self._route_index.get(key)
        if index is None:
            index = self._route_index[key] = len(self._routes)
            self._routes.append(route)
        self._file.write(data)
        self._ids.add(item.fire.id)
        self._sizes.append(len(data))
        self._instants.append(item.fire.scheduled_for.timestamp())
        self._channels.append(item.channel_id)
        self._route_of.append(index)

    def chunks(self, size: int) -> Iterator[list[Outgoing]]:
        """The parked fires, ``size`` at a time, ready to send (each fire's frames or commands as written)."""
        self._file.seek(0)
        instants: dict[float, datetime] = {}
        for start in range(0, len(self), size):
            end = min(start + size, len(self))
            data = memoryview(self._file.read(sum(self._sizes[start:end])))
            ids = self._ids.slice(start, end)
            out, offset = [], 0
            for k in range(start, end):
                at = self._instants[k]
                when = instants.get(at)
                if when is None:
                    when = instants[at] = datetime.fromtimestamp(at, timezone.utc)
                fire = Fire(ids[k - start], None, None, "", PARKED, {}, when)
                blob = bytes(data[offset:offset + self._sizes[k]])
                offset += self._sizes[k]
                amqp, route = self._routes[self._route_of[k]]
                if amqp:
                    out.append(Outgoing(fire, frames=blob, channel_id=self._channels[k], declare=route))
                else:
                    out.append(Outgoing(fire, pushes=tuple((queue, blob) for queue in route)))
            yield out

    def close(self) -> None:
        self._file.close()
