"""Fires parked on disk until their instant: what comes back is what went in, and cannot be rebuilt."""

from __future__ import annotations

import os
import uuid
from datetime import datetime, timedelta, timezone

from runledger_beat.beat.overflow import ParkedFires, is_parked
from runledger_beat.publish.fires import Fire, Outgoing

AT = datetime(2026, 12, 3, 12, 0, tzinfo=timezone.utc)


def test_parked_fires_come_back_in_order_with_their_frames_instants_and_entities():
    entities = [(object(),), (object(), object())]
    items = [Outgoing(Fire(uuid.uuid4(), uuid.uuid4(), f"s{i}", "t", {"args": [i]}, {},
                           AT + timedelta(milliseconds=10 * (i % 3))),
                      frames=os.urandom(1 + i * 37 % 900), channel_id=1 + i % 2, declare=entities[i % 2])
             for i in range(25)]
    spill = ParkedFires()
    try:
        for item in items:
            spill.add(item)
        assert len(spill) == 25
        chunks = list(spill.chunks(10))
    finally:
        spill.close()
    assert [len(c) for c in chunks] == [10, 10, 5]
    back = [o for c in chunks for o in c]
    assert [o.fire.id for o in back] == [o.fire.id for o in items]
    assert [o.frames for o in back] == [o.frames for o in items]
    assert [o.fire.scheduled_for for o in back] == [o.fire.scheduled_for for o in items]
    assert [o.channel_id for o in back] == [o.channel_id for o in items]
    assert all(b.declare is o.declare for b, o in zip(back, items, strict=True))
    assert all(is_parked(o.fire) for o in back) and not any(is_parked(o.fire) for o in items)


def test_parked_redis_commands_come_back_with_their_lists():
    items = [Outgoing(Fire(uuid.uuid4(), uuid.uuid4(), f"s{i}", "t", {"args": [i]}, {}, AT),
                      pushes=tuple((queue, f'{{"n": {i}, "text": "{"é" * i}"}}') for queue in
                                   (("celery",) if i % 2 else ("a", "b\x06\x169"))))
             for i in range(7)]
    spill = ParkedFires()
    try:
        for item in items:
            spill.add(item)
        back = [o for c in spill.chunks(3) for o in c]
    finally:
        spill.close()
    assert [o.fire.id for o in back] == [o.fire.id for o in items]
    assert [tuple((q, p.decode()) for q, p in o.pushes) for o in back] == [o.pushes for o in items]
    assert all(o.frames is None and is_parked(o.fire) for o in back)
