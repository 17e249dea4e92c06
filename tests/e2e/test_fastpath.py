"""The fast path to RabbitMQ: the same bytes as Celery's own path, confirms per window, failures isolated."""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit, urlunsplit

import pytest
from celery import Celery, signals
from kombu import Connection, Exchange, Queue

from runledger_beat.publish import amqp
from runledger_beat.publish.dispatcher import Dispatcher
from runledger_beat.publish.fires import Fire, Outgoing
from runledger_beat.publish.templates import VERIFY_FIRES
from runledger_beat.signing import sign

from ..support.netcut import Throttle

KEY = "fast-path-test-signing-key-" + "s" * 8


def _publish(dispatcher: Dispatcher, outgoing: list[Outgoing]):
    """Send and wait for every confirm."""
    dispatcher.send(outgoing)
    return dispatcher.collect(wait=True)


def _fire(name: str, options: dict | None = None, payload: object = None, at: datetime | None = None) -> Fire:
    at = at or datetime.now(timezone.utc) + timedelta(hours=1)  # ahead: expiry counts from the instant
    meta = {"schedule_id": str(uuid.uuid4()), "schedule_name": name,
            "scheduled_for": at.strftime("%Y-%m-%dT%H:%M:%SZ")}
    if payload is None:
        payload = {"args": [name, 1], "kwargs": {"k": [1, 2]}, "_schedule": meta}
    return Fire(uuid.uuid4(), uuid.uuid4(), name, "rl.record", payload, options or {}, at)


@pytest.fixture
def queues(amqp_url):
    names = [f"rlfp_{uuid.uuid4().hex[:8]}" for _ in range(2)]
    yield names
    with Connection(amqp_url) as conn:
        for name in names:
            with contextlib.suppress(Exception):
                conn.default_channel.queue_delete(name)


def _app(amqp_url: str, queue: str, **conf) -> Celery:
    app = Celery(f"fp_{uuid.uuid4().hex[:6]}", broker=amqp_url)
    app.conf.update(task_default_queue=queue, **conf)
    return app


def _drain(amqp_url: str, queue: str) -> list:
    """Every message in ``queue``, raw (body bytes, properties, delivery info)."""
    found = []
    with Connection(amqp_url) as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            found.append(message)
    return found


def _wire(message) -> dict:
    return {"body": message.body, "properties": message.properties,
            "exchange": message.delivery_info["exchange"], "routing_key": message.delivery_info["routing_key"]}


@pytest.mark.parametrize("conf", [{}, {"runledger_signing_key": KEY}], ids=["unsigned", "signed"])
def test_fast_path_writes_exactly_what_celery_sends(amqp_url, queues, conf):
    main, other = queues
    app = _app(amqp_url, main, **conf)
    fires = [
        _fire("plain"),
        _fire("options", {"priority": 5, "expires": 30, "headers": {"x-trace": "abc"},
                          "time_limit": 10, "soft_time_limit": 5, "ignore_result": True}),
        _fire("other-queue", {"queue": other}),
        _fire("compressed", {"compression": "zlib"}),
        _fire("wrapped", payload={"payload": [1, 2], "_schedule": {"schedule_name": "wrapped"}}),
        *[_fire(f"plain-{i}") for i in range(4)],  # past the first fires of a kind, its template builds them
    ]
    fast = Dispatcher(app, fast=True)
    stock = Dispatcher(app, fast=False)
    try:
        assert fast.fast_path() and not stock.fast_path()
        prepared = fast.prepare(fires)
        assert all(o.frames for o in prepared)
        result = _publish(fast, prepared)
        assert sorted(result.sent) == sorted(f.id for f in fires) and not result.failed and result.error is None
        by_fast = {m.properties["application_headers"]["id"]: _wire(m)
                   for q in (main, other) for m in _drain(amqp_url, q)}
        stock.send([Outgoing(f) for f in fires])
        result = stock.collect(wait=True)
        assert sorted(result.sent) == sorted(f.id for f in fires)
        by_stock = {m.properties["application_headers"]["id"]: _wire(m)
                    for q in (main, other) for m in _drain(amqp_url, q)}
    finally:
        fast.close()
        stock.close()
    assert set(by_fast) == {str(f.id) for f in fires}
    assert by_fast == by_stock  # byte for byte: body, every property and header, exchange, routing key
    options = by_fast[str(fires[1].id)]["properties"]
    assert options["priority"] == 5 and options["expiration"] == "30000"
    assert options["application_headers"]["x-trace"] == "abc"
    assert options["application_headers"]["timelimit"] == [10, 5]
    assert by_fast[str(fires[2].id)]["routing_key"] == other
    headers = by_fast[str(fires[0].id)]["properties"]["application_headers"]
    assert headers["runledger_id"] == str(fires[0].id) and headers["_schedule"] == fires[0].payload["_schedule"]
    # The kind of the plain fires settled on its template, which writes each fire's own signature when signing.
    kinds = fast._encoder._kinds.values()
    assert any(k.template is not None and k.checked >= VERIFY_FIRES for k in kinds)
    for fire in fires:
        sig = by_fast[str(fire.id)]["properties"]["application_headers"].get("runledger_sig")
        assert sig == (sign(KEY.encode(), str(fire.id), fire.job_type) if conf else None)


def test_retarget_readdresses_every_frame():
    app = Celery("retarget", broker="memory://")
    encoder = amqp.Encoder(app)
    big = _fire("big", payload={"args": ["x" * 5000], "kwargs": {}})  # body split over several frames
    on_one, _ = encoder.encode(big, 1, 4096)
    on_nine, _ = encoder.encode(big, 9, 4096)
    assert on_one != on_nine
    assert amqp.retarget(on_one, 9) == on_nine
    assert amqp.retarget(on_nine, 1) == on_one


def test_nacked_fires_fail_alone(amqp_url, queues):
    main, _ = queues
    app = _app(amqp_url, main)
    app.conf.task_queues = [Queue(main, routing_key=main,
                                  queue_arguments={"x-max-length": 3, "x-overflow": "reject-publish"})]
    fires = [_fire(f"n{i}") for i in range(6)]
    dispatcher = Dispatcher(app)
    try:
        result = _publish(dispatcher, dispatcher.prepare(fires))
    finally:
        dispatcher.close()
    assert result.sent == [f.id for f in fires[:3]]
    assert [f.id for f, _ in result.failed] == [f.id for f in fires[3:]]
    assert all("nack" in reason for _, reason in result.failed) and result.error is None
    assert len(_drain(amqp_url, main)) == 3


def test_a_slow_broker_that_keeps_confirming_is_not_taken_for_gone(amqp_url, queues, monkeypatch):
    """The confirm timeout counts from the last confirm, not from the first write: a broker that confirms 1,000
    messages over longer than it, confirms coming all along, keeps its connection, and no fire goes twice."""
    main, _ = queues
    patience = 1.5
    monkeypatch.setattr(amqp, "CONFIRM_TIMEOUT", patience)
    url = urlsplit(amqp_url)
    proxy = Throttle((url.hostname, url.port or 5672), rate=300_000)
    app = _app(urlunsplit(url._replace(netloc=f"{url.netloc.rsplit('@', 1)[0]}@127.0.0.1:{proxy.port}")), main)
    fires = [_fire(f"s{i}") for i in range(1000)]
    dispatcher = Dispatcher(app)
    try:
        outgoing = dispatcher.prepare(fires)
        started = time.monotonic()
        dispatcher.send(outgoing)
        result = dispatcher.collect(wait=True, timeout=patience)
        took = time.monotonic() - started
    finally:
        dispatcher.close()
        proxy.close()
    assert took > patience  # the wait as a whole outlasted the timeout
    assert result.error is None and not result.failed
    assert sorted(result.sent) == sorted(f.id for f in fires)
    assert len(_drain(amqp_url, main)) == len(fires)  # none went twice


def test_a_message_the_broker_refuses_does_not_hold_up_the_others(amqp_url, queues):
    main, _ = queues
    app = _app(amqp_url, main)
    fires = [_fire("a"), _fire("nowhere", {"exchange": f"rl-missing-{uuid.uuid4().hex[:6]}", "routing_key": "x"}),
             _fire("b"), _fire("c")]
    dispatcher = Dispatcher(app)
    try:
        result = _publish(dispatcher, dispatcher.prepare(fires))
        assert result.error is None
        assert [f.id for f, _ in result.failed] == [fires[1].id]
        assert "NotFound" in result.failed[0][1]
        assert sorted(result.sent) == sorted(f.id for f in (fires[0], fires[2], fires[3]))
        # the channel was replaced: the next batch goes by the fast path again
        more = [_fire("d")]
        assert _publish(dispatcher, dispatcher.prepare(more)).sent == [more[0].id]
    finally:
        dispatcher.close()
    delivered = {m.properties["application_headers"]["id"] for m in _drain(amqp_url, main)}
    assert delivered == {str(f.id) for f in (fires[0], fires[2], fires[3], more[0])}


def test_a_dead_broker_is_an_error_not_a_per_fire_failure(queues):
    app = _app("amqp://guest:guest@127.0.0.1:1//", queues[0])  # nothing listens on port 1
    dispatcher = Dispatcher(app)
    fires = [_fire("x"), _fire("y")]
    prepared = dispatcher.prepare(fires)
    assert all(o.frames is None for o in prepared)  # could not encode: left for publish time
    result = _publish(dispatcher, prepared)
    assert result.sent == [] and result.error is not None
    assert [f.id for f, _ in result.failed] == [f.id for f in fires]


def test_publish_signal_receivers_switch_to_celerys_own_path(amqp_url, queues):
    app = _app(amqp_url, queues[0])
    seen = []

    def receiver(sender=None, headers=None, **kwargs):
        seen.append(headers["id"])

    dispatcher = Dispatcher(app)
    try:
        assert dispatcher.fast_path()
        signals.before_task_publish.connect(receiver)
        try:
            assert not dispatcher.fast_path()
            fire = _fire("traced")
            prepared = dispatcher.prepare([fire])
            assert prepared[0].frames is None and seen == []  # nothing built ahead: the signal fires at publish
            assert _publish(dispatcher, prepared).sent == [fire.id]
            assert seen == [str(fire.id)]
        finally:
            signals.before_task_publish.disconnect(receiver)
        assert dispatcher.fast_path()
    finally:
        dispatcher.close()


def test_celerys_path_on_rabbitmq_fires_the_signals_at_each_write(amqp_url, queues):
    """A tracing receiver (before_task_publish adds a header, after_task_publish closes a span): each signal
    fires once per message, the write of that message between them, and the queue holds exactly what stock
    Celery's producer sends with the same receivers."""
    app = _app(amqp_url, queues[0])
    fires = [_fire(f"traced-{i}") for i in range(40)]
    fires.append(_fire("options", {"priority": 5, "expires": 30, "headers": {"x-trace": "abc"}}))
    events: list[tuple[str, str, int]] = []
    dispatcher = Dispatcher(app)
    stock = Dispatcher(app, fast=False)

    def written() -> int:  # messages this dispatcher's confirm channel has written so far
        return dispatcher.link.channel.next_tag - 1 if dispatcher.link.channel is not None else 0

    def before(sender=None, headers=None, **kwargs):
        headers["x-span"] = "span-" + headers["id"]
        events.append(("before", headers["id"], written()))

    def after(sender=None, headers=None, **kwargs):
        events.append(("after", headers["id"], written()))

    signals.before_task_publish.connect(before)
    signals.after_task_publish.connect(after)
    try:
        assert dispatcher.publisher() == "celery-amqp" and not dispatcher.fast_path()
        prepared = dispatcher.prepare(fires)
        assert all(o.built is not None and o.frames is None for o in prepared) and events == []
        result = _publish(dispatcher, prepared)
        assert sorted(result.sent) == sorted(f.id for f in fires) and not result.failed
        by_road = {m.properties["application_headers"]["id"]: _wire(m) for m in _drain(amqp_url, queues[0])}
        mine = list(events)
        events.clear()
        result = _publish(stock, [Outgoing(f) for f in fires])
        assert sorted(result.sent) == sorted(f.id for f in fires)
        by_stock = {m.properties["application_headers"]["id"]: _wire(m) for m in _drain(amqp_url, queues[0])}
    finally:
        signals.before_task_publish.disconnect(before)
        signals.after_task_publish.disconnect(after)
        dispatcher.close()
        stock.close()
    assert [(kind, task) for kind, task, _ in mine] == [
        (kind, str(f.id)) for f in fires for kind in ("before", "after")]
    for index in range(len(fires)):  # message i is written after its before signal and before its after signal
        assert mine[2 * index][2] == index and mine[2 * index + 1][2] == index + 1
    assert by_road == by_stock and set(by_road) == {str(f.id) for f in fires}
    assert by_road[str(fires[0].id)]["properties"]["application_headers"]["x-span"] == f"span-{fires[0].id}"


def test_sent_events_follow_celerys_setting(amqp_url, queues):
    from runledger_beat.settings import load
    conf = {"runledger_dsn": "postgresql://x@127.0.0.1/db"}
    assert load(_app(amqp_url, queues[0], **conf).conf).send_sent_events is False
    assert load(_app(amqp_url, queues[0], task_send_sent_event=True, **conf).conf).send_sent_events is True
    assert load(_app(amqp_url, queues[0], task_send_sent_event=True, runledger_send_sent_events=False,
                     **conf).conf).send_sent_events is False
    assert not Dispatcher(_app(amqp_url, queues[0]), send_sent_events=True).fast_path()


def test_celerys_own_producer_counts_a_fire_sent_once_confirmed_and_sends_its_sent_event(amqp_url, queues):
    """With task-sent events on, fires go through Celery's own producer on a channel in confirm mode: each
    fire's task message and its event are written there, and the fire counts as sent once confirmed."""
    main, monitor = queues
    # An event exchange of this test's own: other tests' task events (run in parallel) cannot reach its monitor.
    app = _app(amqp_url, main, event_exchange=f"rlev_{uuid.uuid4().hex[:8]}")
    with Connection(amqp_url) as conn:  # a monitor's queue on Celery's event exchange, as Flower binds one
        Queue(monitor, Exchange(app.conf.event_exchange, type="topic"), routing_key="task.#")(
            conn.default_channel).declare()
    fires = [_fire(f"evented-{i}") for i in range(30)]
    dispatcher = Dispatcher(app, send_sent_events=True)
    try:
        assert dispatcher.publisher() == "celery"
        dispatcher.send(dispatcher.prepare(fires))
        assert dispatcher.in_flight() == 0  # every confirm read before send returned
        result = dispatcher.collect(wait=True)
        written = dispatcher.link.channel.next_tag - 1
    finally:
        dispatcher.close()
    assert sorted(result.sent) == sorted(f.id for f in fires) and not result.failed and result.error is None
    assert written == 2 * len(fires)  # a task message and a task-sent event per fire, on the confirm channel
    assert {m.properties["application_headers"]["id"] for m in _drain(amqp_url, main)} == {str(f.id) for f in fires}
    sent_events = [json.loads(m.body) for m in _drain(amqp_url, monitor)]
    with Connection(amqp_url) as conn:
        conn.default_channel.exchange_delete(app.conf.event_exchange)
    assert sorted(e["uuid"] for e in sent_events if e["type"] == "task-sent") == sorted(str(f.id) for f in fires)
