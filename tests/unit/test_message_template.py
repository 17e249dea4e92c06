"""Message templates: a fire's frames from its kind's cached pieces, byte for byte what Celery writes."""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

from celery import Celery
from kombu.serialization import register

from runledger_beat.publish import amqp
from runledger_beat.publish.fires import Fire
from runledger_beat.publish.templates import VERIFY_FIRES
from runledger_beat.signing import sign

AT = datetime(2026, 12, 3, 19, 58, 23, tzinfo=timezone.utc)


def _app(**conf) -> Celery:
    app = Celery(f"mt_{uuid.uuid4().hex[:6]}", broker="amqp://guest:guest@127.0.0.1:5672//")
    app.conf.update(task_default_queue="mt", **conf)
    return app


def _fire(i: int, options: dict | None = None, payload: object = None, task: str = "rl.record") -> Fire:
    if payload is None:
        meta = {"schedule_id": str(uuid.uuid4()), "schedule_name": "s" + "é✓" * (i % 9) + str(i),
                "scheduled_for": (AT + timedelta(seconds=i)).strftime("%Y-%m-%dT%H:%M:%SZ")}
        payload = {"args": [i, "x" * (i % 40)] if i % 3 else [],
                   "kwargs": {"n": i, "deep": {"list": [1.5, None, True]}} if i % 2 else {},
                   "_schedule": meta}
    ahead = datetime.now(timezone.utc) + timedelta(hours=1)  # ahead: an expiry counts from the instant
    return Fire(uuid.uuid4(), uuid.uuid4(), f"s{i}", task, payload, options or {}, ahead)


def _celerys(app: Celery, fires: list[Fire], frame_max: int) -> list[bytes]:
    """Each fire's frames with Celery building every message (no template)."""
    stock = amqp.Encoder(app)
    return [stock._by_celery(f, 3, frame_max, None, None)[0] for f in fires]


def test_templated_frames_are_celerys_bytes_for_every_fire_of_a_kind():
    app = _app()
    kinds = [
        [_fire(i) for i in range(60)],
        [_fire(i, {"priority": 7, "queue": "other", "headers": {"x-trace": "t"}, "time_limit": 9}) for i in range(30)],
        [_fire(i, {"ignore_result": True, "soft_time_limit": 3}) for i in range(30)],
        [_fire(i, payload={"payload": {"k": i}, "_schedule": {"schedule_name": f"w{i}"}}) for i in range(30)],
        [_fire(i, payload={"args": [i], "kwargs": {}, "_schedule": {"n": i, "nested": [i]}}) for i in range(30)],
        [_fire(i, payload=[i, "bare"]) for i in range(30)],
        [_fire(i, payload={"args": ["y" * (3000 + i)], "kwargs": {}}) for i in range(30)],  # bodies over a frame
    ]
    encoder = amqp.Encoder(app)
    for fires in kinds:
        assert [encoder.encode(f, 3, 4096)[0] for f in fires] == _celerys(app, fires, 4096)
    assert len(encoder._kinds) == 5  # the wrapped and the custom-_schedule payloads share the plain one's kind
    assert all(k.template is not None and k.checked == VERIFY_FIRES for k in encoder._kinds.values())


def test_kinds_that_depend_on_the_moment_are_always_built_by_celery():
    for app, options in ((_app(), {"expires": 30}), (_app(task_compression="zlib"), {})):
        encoder = amqp.Encoder(app)
        fires = [_fire(i, options) for i in range(5)]
        assert [encoder.encode(f, 3, 131072)[0] for f in fires] == _celerys(app, fires, 131072)
        assert [k.template for k in encoder._kinds.values()] == [None]


def test_a_template_that_disagrees_with_celery_is_dropped_for_good():
    """A serializer whose output changes from call to call: the check catches it on the kind's first fire,
    and every later fire of the kind is built by Celery."""
    calls = []

    def stamped(body):
        calls.append(1)
        return json.dumps([body, len(calls)])

    register("stamped", stamped, json.loads, content_type="application/x-stamped", content_encoding="utf-8")
    app = _app(task_serializer="stamped")
    encoder = amqp.Encoder(app)
    fires = [_fire(i) for i in range(6)]
    for fire in fires:
        frames, _ = encoder.encode(fire, 3, 131072)
        assert str(fire.id).encode() in frames
    (kind,) = encoder._kinds.values()
    assert kind.template is None
    assert len(calls) == 6 + 1  # Celery for each fire, and the template once, for the first


def test_signed_fires_keep_their_template_and_each_carries_its_own_signature():
    key = "template-test-signing-key-" + "t" * 10
    app = _app(runledger_signing_key=key)
    fires = [_fire(i) for i in range(30)] + [_fire(i, task="rl.other") for i in range(30)]
    encoder = amqp.Encoder(app)
    frames = [encoder.encode(f, 3, 4096)[0] for f in fires]
    assert frames == _celerys(app, fires, 4096)
    assert len(encoder._kinds) == 2
    assert all(k.template is not None and k.checked == VERIFY_FIRES for k in encoder._kinds.values())
    for fire, written in zip(fires, frames, strict=True):
        assert sign(key.encode(), str(fire.id), fire.job_type).encode() in written
        assert sign(key.encode(), str(fire.id), "rl.record" if fire.job_type != "rl.record" else "x").encode() \
            not in written
