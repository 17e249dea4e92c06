"""Fires recorded ahead past what a beat keeps in memory: parked on disk, or kept by id to be read back.

An instant of 100,000 fires is recorded ahead in one open transaction, but a
beat keeps only the first ``MAX_PREPARED`` of them in memory (pipeline.py).
The others take one of two forms:

* ``SpillFile``: on the RabbitMQ fast path a fire's AMQP frames are encoded
  ahead like any other, then written to an unlinked temporary file, with its
  id, instant, size, channel and entities to declare in compact arrays (about
  40 bytes a fire in memory). At the instant they are read back in chunks and
  written to the broker as they are: no Python work per fire beyond the
  bookkeeping, so the burst runs at the broker's pace while beat's memory stays
  flat (the frames sit in the page cache, not in beat).
* ids only (16 bytes a fire) on every other road, read back from the ledger
  after the commit (``Store.read_spilled``) and built then.

A parked fire carries no payload: should its publish fail, it is left pending in
the ledger, where the recovery sweep finds it, instead of in beat's backlog.
"""

from __future__ import annotations

import tempfile
import uuid
from array import array
from collections.abc import Iterator
from datetime import datetime, timezone

from .fires import Fire, Outgoing


class Parked:
    """The payload of a fire whose message was encoded and parked: it cannot be built again from it."""

    def __repr__(self) -> str:
        return "<parked: encoded ahead, its payload not kept>"


PARKED = Parked()


def is_parked(fire: Fire) -> bool:
    """Whether ``fire`` came out of a SpillFile (no payload to rebuild its message from)."""
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
        data = self._data
        return [uuid.UUID(bytes=bytes(data[i:i + 16])) for i in range(16 * start, 16 * min(end, len(self)), 16)]


class SpillFile:
    """Encoded fires on disk, in the order they were added; see the module docstring."""

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="runledger-spill-")  # noqa: SIM115 (lives until close())
        self._ids = PackedIds()
        self._sizes = array("I")
        self._instants = array("d")
        self._channels = array("H")
        self._declares = array("H")
        self._declare_sets: list[tuple] = []
        self._declare_index: dict[tuple, int] = {}

    def __len__(self) -> int:
        return len(self._sizes)

    def add(self, item: Outgoing) -> None:
        """Park one encoded fire (``item.frames`` set, its instant known)."""
        assert item.frames is not None and item.fire.scheduled_for is not None
        key = tuple(map(id, item.declare))
        index = self._declare_index.get(key)
        if index is None:
            index = self._declare_index[key] = len(self._declare_sets)
            self._declare_sets.append(item.declare)
        self._file.write(item.frames)
        self._ids.add(item.fire.id)
        self._sizes.append(len(item.frames))
        self._instants.append(item.fire.scheduled_for.timestamp())
        self._channels.append(item.channel_id)
        self._declares.append(index)

    def chunks(self, size: int) -> Iterator[list[Outgoing]]:
        """The parked fires, ``size`` at a time, ready to send (each fire's frames as written)."""
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
                frames = bytes(data[offset:offset + self._sizes[k]])
                offset += self._sizes[k]
                out.append(Outgoing(fire, frames=frames, channel_id=self._channels[k],
                                    declare=self._declare_sets[self._declares[k]]))
            yield out

    def close(self) -> None:
        self._file.close()
