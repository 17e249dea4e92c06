"""The Redis fast path writes exactly what kombu's Redis transport writes, fails a refused fire alone,
and a real beat on a Redis broker feeds a real worker through it."""

from __future__ import annotations

import json
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from celery import Celery

from runledger_beat.publish import redis as redis_publisher
from runledger_beat.publish.amqp import CONFIRM_TIMEOUT
from runledger_beat.publish.dispatcher import Dispatcher
from runledger_beat.publish.fires import Fire, Outgoing
from runledger_beat.publish.templates import VERIFY_FIRES
from runledger_beat.signing import sign

from ..support.e2e import prepare
from ..support.netcut import Proxy
from ..support.private import RedisServer
from ..support.procs import start_beat, start_worker
from ..support.rows import insert_schedule
from ..support.services import wait_for

KEY = "redis-fast-path-test-signing-key-" + "s" * 8


def _fire(name: str, options: dict | None = None, payload: object = None) -> Fire:
    payload = payload if payload is not None else {
        "args": [name, 1], "kwargs": {"k": "v"},
        "_schedule": {"schedule_id": str(uuid.uuid4()), "schedule_name": name, "scheduled_for": "2026-02-01T00:00:00Z"}}
    # An instant ahead: expiry counts from it, so both roads compute the same expires header.
    return Fire(uuid.uuid4(), uuid.uuid4(), name, "rl.record", payload, options or {},
                datetime.now(timezone.utc) + timedelta(minutes=5))


def _publish(dispatcher: Dispatcher, outgoing: list[Outgoing]):
    dispatcher.send(outgoing)
    return dispatcher.collect(wait=True)


@pytest.fixture
def queues(redis_url):
    """Two queue names under a prefix of this test's own (tests run in parallel on the same Redis)."""
    prefix = f"rlr_{uuid.uuid4().hex[:8]}"
    yield [f"{prefix}_main", f"{prefix}_other"]
    client = redis.Redis.from_url(redis_url)
    for key in client.keys(f"{prefix}_*"):
        client.delete(key)


def _keys(client: redis.Redis, queues: list[str]) -> list[bytes]:
    """The Redis keys of these queues (priority sub-lists too)."""
    return client.keys(queues[0].rsplit("_", 1)[0] + "_*")


def _app(redis_url: str, queue: str, **conf) -> Celery:
    app = Celery(f"rr_{uuid.uuid4().hex[:6]}", broker=redis_url)
    app.conf.update(task_default_queue=queue, **conf)
    return app


def _raw(redis_url: str, queues: list[str]) -> dict[str, str]:
    """Every message in the queues' lists (priority sub-lists too), raw JSON text keyed by task id."""
    client = redis.Redis.from_url(redis_url)
    found = {}
    for key in _keys(client, queues):
        if client.type(key) != b"list":
            continue
        for raw in client.lrange(key, 0, -1):
            text = raw.decode()
            message = json.loads(text)
            found[message["headers"]["id"]] = (key.decode(), text, message["properties"]["delivery_tag"])
    return found


@pytest.mark.parametrize("conf", [{}, {"runledger_signing_key": KEY}], ids=["unsigned", "signed"])
def test_the_redis_fast_path_writes_what_kombu_writes(redis_url, queues, conf):
    main, other = queues
    fires = [_fire("plain"),
             _fire("options", {"priority": 5, "expires": 30, "headers": {"x-trace": "abc"},
                               "time_limit": 10, "soft_time_limit": 5, "ignore_result": True}),
             _fire("other-queue", {"queue": other}),
             _fire("wrapped", payload={"payload": [1, 2], "_schedule": {"schedule_name": "wrapped"}}),
             # Past VERIFY_FIRES of one kind the rest come from its template (message_template.RedisTemplate).
             *[_fire(f"templated-{i}", payload={"args": [i, "é" * i], "kwargs": {"n": i},
                                                "_schedule": {"schedule_name": f"t{i}"}}) for i in range(5)]]
    app = _app(redis_url, main, **conf)
    fast, stock = Dispatcher(app, fast=True), Dispatcher(app, fast=False)
    try:
        assert fast.publisher() == "redis" and stock.publisher() == "celery"
        prepared = fast.prepare(fires)
        assert all(o.pushes for o in prepared)  # built and encoded ahead of the instant
        kinds = fast._redis_publisher()._kinds.values()
        assert any(k.template is not None and k.checked >= VERIFY_FIRES for k in kinds)
        result = _publish(fast, prepared)
        assert sorted(result.sent) == sorted(f.id for f in fires) and not result.failed
        by_fast = _raw(redis_url, queues)
        client = redis.Redis.from_url(redis_url)
        for key in _keys(client, queues):
            if client.type(key) == b"list":
                client.delete(key)
        result = _publish(stock, [Outgoing(f) for f in fires])
        assert sorted(result.sent) == sorted(f.id for f in fires)
        by_stock = _raw(redis_url, queues)
    finally:
        fast.close()
        stock.close()
    assert set(by_fast) == set(by_stock) == {str(f.id) for f in fires}
    for task_id, (key, text, tag) in by_fast.items():
        stock_key, stock_text, stock_tag = by_stock[task_id]
        assert key == stock_key  # the same list (priority lists included)
        assert text.replace(tag, "TAG") == stock_text.replace(stock_tag, "TAG")  # byte for byte but the tag
        sig = json.loads(text)["headers"].get("runledger_sig")
        assert sig == (sign(KEY.encode(), task_id, "rl.record") if conf else None)


def test_a_command_redis_refuses_fails_that_fire_alone(redis_url, queues):
    main, other = queues
    client = redis.Redis.from_url(redis_url)
    client.set(other, "not a list")  # LPUSH onto it: WRONGTYPE
    fires = [_fire("a"), _fire("wrongtype", {"queue": other}), _fire("b")]
    dispatcher = Dispatcher(_app(redis_url, main), fast=True)
    try:
        result = _publish(dispatcher, dispatcher.prepare(fires))
    finally:
        dispatcher.close()
    assert sorted(result.sent) == sorted([fires[0].id, fires[2].id]) and result.error is None
    assert [f.id for f, _ in result.failed] == [fires[1].id] and "WRONGTYPE" in result.failed[0][1]
    assert client.llen(main) == 2


def test_rounds_in_flight_each_get_their_own_replies(redis_url, queues, monkeypatch):
    """Small rounds, two in flight: a socket read that brings the next round's replies keeps them for that round,
    and a refusal in the middle fails its fire alone (the fires on either side, in other rounds, go out)."""
    main, other = queues
    monkeypatch.setattr(redis_publisher, "CHUNK", 7)
    redis.Redis.from_url(redis_url).set(other, "not a list")
    fires = [_fire(f"f{i}", {"queue": other} if i == 1000 else None) for i in range(2001)]
    dispatcher = Dispatcher(_app(redis_url, main), fast=True)
    try:
        result = _publish(dispatcher, dispatcher.prepare(fires))
    finally:
        dispatcher.close()
    assert result.error is None and [f.id for f, _ in result.failed] == [fires[1000].id]
    assert sorted(result.sent) == sorted(f.id for i, f in enumerate(fires) if i != 1000)
    assert {json.loads(raw)["headers"]["id"] for raw in redis.Redis.from_url(redis_url).lrange(main, 0, -1)} == {
        str(f.id) for i, f in enumerate(fires) if i != 1000}


def test_a_staged_round_waits_unexecuted_until_sent_and_a_discarded_one_never_arrives(redis_url, queues):
    """What a beat does around an instant's COMMIT: staged commands stay out of the queue until send() of the same
    fires (EXEC), each arriving once; discarded ones never arrive; a command Redis refuses fails its fire alone."""
    main, other = queues
    client = redis.Redis.from_url(redis_url)
    dispatcher = Dispatcher(_app(redis_url, main), fast=True)
    try:
        first = dispatcher.prepare([_fire(f"a{i}") for i in range(50)] + [_fire("wrongtype", {"queue": other})])
        assert dispatcher.stage(first)
        client.set(other, "not a list")  # between the staging and the EXEC: that LPUSH meets WRONGTYPE
        time.sleep(0.2)  # what Redis would have done with them by now, were they not held
        assert client.llen(main) == 0
        result = _publish(dispatcher, first)
        assert sorted(result.sent) == sorted(o.fire.id for o in first[:50]) and result.error is None
        assert [f.id for f, _ in result.failed] == [first[50].fire.id] and "WRONGTYPE" in result.failed[0][1]

        dropped = dispatcher.prepare([_fire(f"d{i}") for i in range(20)])
        assert dispatcher.stage(dropped)
        dispatcher.discard_staged()
        later = dispatcher.prepare([_fire(f"b{i}") for i in range(20)])
        assert dispatcher.stage(later)
        other_fires = dispatcher.prepare([_fire(f"c{i}") for i in range(5)])
        result = _publish(dispatcher, other_fires)  # not what was staged: that is dropped, these go out
        assert sorted(result.sent) == sorted(o.fire.id for o in other_fires)
    finally:
        dispatcher.close()
    arrived = [json.loads(raw)["headers"]["id"] for raw in client.lrange(main, 0, -1)]
    assert sorted(arrived) == sorted(str(o.fire.id) for o in first[:50] + other_fires)


def test_only_an_instant_of_one_round_is_staged(redis_url, queues, monkeypatch):
    monkeypatch.setattr(redis_publisher, "CHUNK", 7)
    dispatcher = Dispatcher(_app(redis_url, queues[0]), fast=True)
    try:
        assert dispatcher.stage(dispatcher.prepare([_fire(f"f{i}") for i in range(7)]))
        assert not dispatcher.stage(dispatcher.prepare([_fire(f"f{i}") for i in range(8)]))
        assert not dispatcher.stage([Outgoing(_fire("not encoded"))])
    finally:
        dispatcher.close()
    assert redis.Redis.from_url(redis_url).llen(queues[0]) == 0  # nothing staged was ever executed


@pytest.mark.parametrize("fast", [True, False], ids=["fast path", "celery producer"])
def test_a_partitioned_redis_fails_the_publish_within_the_timeout_and_heals(redis_url, queues, fast):
    """Behind a partition (sockets open, nothing relayed) kombu's Redis client would wait for a reply for good,
    holding beat: the publish fails as a broker outage within CONFIRM_TIMEOUT, and goes out once healed."""
    parts = urlsplit(redis_url)
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 6379))
    behind = urlunsplit(parts._replace(netloc=f"127.0.0.1:{proxy.port}"))
    dispatcher = Dispatcher(_app(behind, queues[0]), fast=fast)
    before, during = [_fire("before")], [_fire(f"during-{i}") for i in range(3)]
    try:
        assert _publish(dispatcher, dispatcher.prepare(before)).sent == [before[0].id]
        prepared = dispatcher.prepare(during)
        proxy.cut()
        started = time.monotonic()
        result = _publish(dispatcher, prepared)
        took = time.monotonic() - started
        assert result.error is not None and not result.sent
        assert sorted(f.id for f, _ in result.failed) == sorted(f.id for f in during)
        assert CONFIRM_TIMEOUT - 1 < took < CONFIRM_TIMEOUT + 5
        proxy.heal()
        again = _publish(dispatcher, dispatcher.prepare(during))  # the outage backlog's retry: a new connection
        assert sorted(again.sent) == sorted(f.id for f in during) and again.error is None
    finally:
        dispatcher.close()
        proxy.close()
    assert set(_raw(redis_url, queues)) == {str(f.id) for f in before + during}


def test_a_beat_on_redis_feeds_a_worker_through_the_fast_path(db, pg_dsn, schema, redis_url):
    env, queue = prepare(db, pg_dsn, schema, redis_url, hook=True)
    sid = insert_schedule(db, "on-redis", cron="* * * * * *")
    beat, worker = start_beat(env, "redis-beat"), start_worker(env, concurrency=2)
    try:
        wait_for(lambda: db.execute("SELECT count(*) AS n FROM jobs WHERE schedule_id = %s AND status = 'success'",
                                    (sid,)).fetchone()["n"] >= 3, timeout=40, message="three runs through Redis")
        rows = db.execute("SELECT sent_at, started_at FROM jobs WHERE status = 'success'").fetchall()
        assert all(r["sent_at"] is not None or r["started_at"] is not None for r in rows)
        executed = db.execute("SELECT count(*) AS n, count(DISTINCT task_id) AS d FROM executions").fetchone()
        assert executed["n"] == executed["d"] >= 3  # one execution per fire
    finally:
        beat.stop()
        worker.stop()
        redis.Redis.from_url(redis_url).delete(queue)


def _watch_commands(url: str, seen: list[tuple[float, str, str]], until: threading.Event) -> None:
    """MONITOR a Redis: (server time, client, command name) of every command as it runs, until ``until`` is set.
    A command queued inside MULTI runs, and shows, at the EXEC."""
    with redis.Redis.from_url(url).monitor() as monitor:
        for entry in monitor.listen():
            seen.append((float(entry["time"]), f"{entry.get('client_address')}:{entry.get('client_port')}",
                         entry["command"].split()[0]))
            if until.is_set():
                return


def test_a_beat_hands_redis_a_small_instant_before_its_commit_and_execs_it_after(db, pg_dsn, schema):
    """On a Redis of the test's own: an instant of 40 fires goes to Redis inside MULTI once prepared, before the
    instant, and the EXEC after the COMMIT runs all 40 at once (MONITOR: one client's MULTI before the instant,
    then its 40 LPUSH back to back and its EXEC), each fire once."""
    server = RedisServer()
    seen: list[tuple[float, str, str]] = []
    done = threading.Event()
    monitor = threading.Thread(target=_watch_commands, args=(server.url, seen, done), daemon=True)
    try:
        client = redis.Redis.from_url(server.url)
        monitor.start()
        env, queue = prepare(db, pg_dsn, schema, server.url, extra={"runledger_lookahead": 5})
        at = db.execute("SELECT date_trunc('second', now()) + interval '8 seconds' AS t").fetchone()["t"]
        ids = [insert_schedule(db, f"instant-{i:02d}", cron="0 0 1 1 *", next_fire_at=at) for i in range(40)]
        beat = start_beat(env, "staging-beat")
        try:
            wait_for(lambda: client.llen(queue) >= 40, timeout=40, message="the instant's 40 messages")
            wait_for(lambda: db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'sent'").fetchone()["n"] == 40,
                     timeout=20, message="the 40 fires marked sent")
        finally:
            beat.stop()
            done.set()
            client.ping()  # one more command, for the monitor to see the event set
            monitor.join(10)
        pushes = [i for i, (_, _, name) in enumerate(seen) if name == "LPUSH"]
        assert len(pushes) == 40 and pushes == list(range(pushes[0], pushes[0] + 40))
        beat_client = seen[pushes[0]][1]
        block = seen[pushes[0]:pushes[-1] + 2]
        assert [name for _, _, name in block] == ["LPUSH"] * 40 + ["EXEC"]
        assert {who for _, who, _ in block} == {beat_client}
        multi = [t for t, who, name in seen[:pushes[0]] if who == beat_client and name == "MULTI"]
        assert multi and multi[-1] < at.timestamp() <= block[-1][0]  # handed over before the instant, run after
        assert client.llen(queue) == 40
        sent = db.execute("SELECT id, schedule_id, sent_at, scheduled_for FROM jobs").fetchall()
        assert sorted(r["schedule_id"] for r in sent) == sorted(ids)
        assert all(r["scheduled_for"] == at and r["sent_at"] >= at for r in sent)
        queued = {json.loads(raw)["headers"]["id"] for raw in client.lrange(queue, 0, -1)}
        assert queued == {str(r["id"]) for r in sent}
    finally:
        server.close()
