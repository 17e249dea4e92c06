"""The fast path to Redis: stock Celery messages, built ahead, pushed in pipelines.

``RedisRoad.encode`` runs Celery's own ``send_task_message`` (through
``messages.send_fire``) on a producer whose channel captures the message
instead of publishing it, then does what kombu's Redis transport would do at
publish — the same ``_inplace_augment_message``, routing lookup, priority queue
name and JSON ``dumps`` of the real channel — so each fire becomes the exact
``LPUSH key payload`` commands the transport would send (only the random
``delivery_tag`` differs, as it does between any two publishes). At the
instant ``push`` sends them in non-transactional pipelines of CHUNK commands.

Redis answers every LPUSH, so a fire counts as sent when all its commands
succeeded; a command Redis refuses fails that fire alone; a lost connection
fails the rest and the caller backs off. Fires routed through a fanout or
topic exchange, or to a queue with an expiry, take Celery's own path.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kombu.common import maybe_declare
from kombu.utils.json import dumps

from .fastpath import CaptureProducer
from .fires import Fire, Outgoing
from .messages import send_fire

#: LPUSH commands per pipeline round trip.
CHUNK = 1000


def supported(conn: Any) -> bool:
    """Whether the kombu connection ``conn`` uses the Redis transport."""
    try:
        from kombu.transport import redis as kombu_redis
        return isinstance(conn.transport, kombu_redis.Transport)
    except Exception:
        return False


class _CaptureChannel:
    """The real Redis channel, except that basic_publish records the message instead of sending it."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.captured: tuple | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def basic_publish(self, message: Any, exchange: str = "", routing_key: str = "", **_: Any) -> None:
        self.captured = (message, exchange, routing_key)


class RedisRoad:
    """Encodes fires into LPUSH commands ahead of their instant and pushes them in pipelines."""

    def __init__(self, app: Any, kombu_conn: Any) -> None:
        self.app = app
        self.channel = kombu_conn.default_channel
        self._capture = _CaptureChannel(self.channel)
        self._declared: list = []
        self._producer = CaptureProducer(self._capture, self._declared)
        self._routes: dict[tuple[str, str], list[str]] = {}

    def encode(self, outgoing: Sequence[Outgoing]) -> list[tuple[Fire, str]]:
        """Give each fire its LPUSH commands (``pushes``); returns the fires whose message cannot be built.

        A fire routed where only Celery's path goes keeps ``pushes`` empty.
        """
        self._routes.clear()
        failed = []
        for item in outgoing:
            if item.pushes:
                continue
            try:
                item.pushes = self._commands(item.fire)
            except Exception as exc:
                failed.append((item.fire, f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:1000]))
        return failed

    def _commands(self, fire: Fire) -> tuple[tuple[str, str], ...]:
        self._declared.clear()
        self._capture.captured = None
        send_fire(self.app, self._producer, fire, sent_event=False)
        if self._capture.captured is None:
            raise RuntimeError("Celery's send_task_message published nothing")
        for entity in self._declared:
            maybe_declare(entity, self.channel)  # binds the queue, so the lookup below finds it
        message, exchange, routing_key = self._capture.captured
        queues = self._queues(exchange, routing_key)
        if queues is None:
            return ()
        channel = self.channel
        channel._inplace_augment_message(message, exchange, routing_key)
        priority = channel._get_message_priority(message, reverse=False)
        payload = dumps(message)
        return tuple((channel._q_for_pri(queue, priority), payload) for queue in queues)

    def _queues(self, exchange: str, routing_key: str) -> list[str] | None:
        """The queues a message goes to, as the transport routes it; None where Celery's path must go."""
        key = (exchange, routing_key)
        if key not in self._routes:
            channel = self.channel
            if exchange and channel.typeof(exchange).type != "direct":
                return None
            queues = list(channel._lookup(exchange, routing_key)) if exchange else [routing_key]
            if channel._expires and any(q in channel._expires for q in queues):
                return None
            self._routes[key] = queues
        return self._routes[key]

    def push(self, outgoing: Sequence[Outgoing]) -> tuple[list, list[tuple[Fire, str]], BaseException | None]:
        """LPUSH every fire's commands: (ids sent, (fire, reason) refused, connection error or None)."""
        sent: list = []
        failed: list[tuple[Fire, str]] = []
        client = self.channel.client
        for start in range(0, len(outgoing), CHUNK):
            chunk = outgoing[start:start + CHUNK]
            pipe = client.pipeline(transaction=False)
            for item in chunk:
                for key, payload in item.pushes:
                    pipe.lpush(key, payload)
            try:
                results = iter(pipe.execute(raise_on_error=False))
            except Exception as exc:  # the connection: nothing of this chunk on is known to be queued
                failed.extend((o.fire, f"{type(exc).__name__}: {exc}"[:1000]) for o in outgoing[start:])
                return sent, failed, exc
            for item in chunk:
                errors = [r for r in (next(results) for _ in item.pushes) if isinstance(r, Exception)]
                if errors:
                    failed.append((item.fire, f"{type(errors[0]).__name__}: {errors[0]}"[:1000]))
                else:
                    sent.append(item.fire.id)
        return sent, failed, None
