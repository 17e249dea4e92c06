"""Publishing fires to the Celery broker as ordinary task messages.

Every message is built by Celery itself: ``app.amqp.create_task_message`` and
``app.amqp.send_task_message`` (protocol 2, the app's routing, serializer,
compression and delivery mode), as ``task.apply_async`` would, with task_id =
ledger row id and the ledger id and ``_schedule`` metadata in message headers,
never in kwargs. Two ways lead to the broker:

* The Celery path: ``send_task_message`` on a kombu producer, message by
  message, with Celery's publish signals and task-sent events. It serves every
  transport but py-amqp and Redis, and is taken whenever sent events are on or
  a receiver listens to ``before_task_publish`` / ``after_task_publish`` /
  ``task_sent`` (tracing), so those fire at the real publish exactly as with
  stock beat. The messages are built (``create_task_message``) ahead of the
  instant; only ``send_task_message`` runs at it. On RabbitMQ with receivers
  (the "celery-amqp" road) each message is written to the socket from inside
  Celery's publish, between the two signals, on the fast path's confirm channel:
  the signals fire per message at its real write, the confirms and the ledger
  marks are batched.
* The fast path (py-amqp, i.e. RabbitMQ, nobody listening): the same
  ``send_task_message`` runs ahead of the fire's instant on a producer that
  captures the message instead of sending it, and py-amqp's own frame writer
  encodes it. At the instant the frames of many messages go out in one write
  per chunk on a channel in confirm mode; confirms are read as they arrive
  (send() then collect()), at most a window of messages unconfirmed. Only
  confirmed fires count as sent. If the channel breaks over a message the
  broker refuses (a missing exchange, say), the unconfirmed rest goes one
  message at a time until that one is found; it fails alone and the others go
  out. A broken connection gets one reconnect, then waits for the back-off.

See fastpath.py for the capture, the encoding and the confirm window.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from celery import Celery, signals

from . import amqp as fastpath
from . import redis as fastpath_redis
from .fires import Fire, Outgoing
from .message import build_message, send_message

log = logging.getLogger("runledger_beat.dispatch")

#: After a channel error, messages sent one by one to find the one the broker refuses.
SINGLES_AFTER_CHANNEL_ERROR = 100
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


def _publish_receivers() -> bool:
    """Whether anyone listens to Celery's publish signals (then the Celery path keeps their timing)."""
    return bool(signals.before_task_publish.receivers or signals.after_task_publish.receivers
                or signals.task_sent.receivers)


class Dispatcher:
    """Turns fires into Celery messages and publishes them on one broker connection."""

    def __init__(self, app: Celery, send_sent_events: bool = False, fast: bool = True) -> None:
        self.app = app
        self.send_sent_events = send_sent_events
        self.fast = fast
        self._conn: Any = None
        self._producer: Any = None
        self._fast: fastpath.ConfirmChannel | None = None
        self._encoder: fastpath.Encoder | None = None
        self._road: str | None = None    # "amqp" or "redis" (a fast path), "celery": found at first use
        self._redis: fastpath_redis.RedisRoad | None = None
        self._done = PublishResult()     # sent / failed since the last collect()

    # -- the broker connection ---------------------------------------------

    def _connection(self) -> Any:
        if self._conn is None:
            conn = self.app.connection_for_write()
            if fastpath_redis.supported(conn):
                # kombu's Redis client waits on a partitioned server with no timeout: give up after the wait
                # beat allows a RabbitMQ confirm, unless the app sets its own (broker_transport_options).
                conn.transport_options.setdefault("socket_timeout", fastpath.CONFIRM_TIMEOUT)
            try:
                conn.ensure_connection(max_retries=0)  # one attempt: the scheduler owns the back-off
            except BaseException:
                conn.release()
                raise
            self._conn = conn
        return self._conn

    def _celery_producer(self) -> Any:
        if self._producer is None:
            self._producer = self.app.amqp.Producer(self._connection(), auto_declare=False)
        return self._producer

    def road(self) -> str:
        """The road fires take now: "amqp" or "redis" (fast paths: no publish-signal listeners, no sent
        events); "celery-amqp" (RabbitMQ with publish-signal listeners: Celery's publish per message, the
        confirms windowed); else "celery" (Celery's producer, message by message)."""
        if not self.fast or self.send_sent_events:
            return "celery"
        if self._road is None:
            conn = self.app.connection_for_write()
            try:
                self._road = ("amqp" if fastpath.supported(conn) else
                              "redis" if fastpath_redis.supported(conn) else "celery")
            finally:
                conn.release()
        if _publish_receivers():
            return "celery-amqp" if self._road == "amqp" else "celery"
        return self._road

    def fast_path(self) -> bool:
        """Whether fires go by a fast path now (encoded ahead, no publish signals)."""
        return self.road() in ("amqp", "redis")

    def _redis_road(self) -> fastpath_redis.RedisRoad:
        if self._redis is None:
            self._redis = fastpath_redis.RedisRoad(self.app, self._connection())
        return self._redis

    def _fast_channel(self) -> fastpath.ConfirmChannel:
        if self._fast is None or not self._fast.usable():
            self._fast = fastpath.ConfirmChannel(self._connection())
        return self._fast

    def release(self) -> None:
        """Drop the broker connection (after an error, or at shutdown)."""
        if self._conn is not None:
            with contextlib.suppress(Exception):
                fastpath.release_within(self._conn)
        self._conn = None
        self._producer = None
        self._fast = None
        self._redis = None

    close = release

    # -- preparing and publishing ---------------------------------------------

    def prepare(self, fires: Sequence[Fire], encode: bool = True) -> list[Outgoing]:
        """Wrap fires for publishing; on the fast path build and encode them now, ahead of their instant.

        With ``encode`` false (the broker is known to be down), or a broker that
        cannot be reached, they stay unencoded: publish() encodes them (or
        reports the failure) later.
        """
        outgoing = [Outgoing(f) for f in fires]
        if not outgoing or not encode:
            return outgoing
        if not self.fast_path():  # Celery's path: built now, sent (signals and all) at the instant
            for item in outgoing:
                with contextlib.suppress(Exception):  # reported when it fails again at send
                    item.built = build_message(self.app, item.fire, self.send_sent_events)
            return outgoing
        if self.road() == "redis":
            with contextlib.suppress(Exception):  # unreachable: encoded (or reported) at send
                self._redis_road().encode(outgoing)
            return outgoing
        try:
            channel = self._fast_channel()
        except Exception as exc:
            log.debug("runledger: broker not reachable while preparing (%s); encoding later", exc)
            return outgoing
        channel.declare_ahead(self._encode(outgoing, channel, report=False))
        return outgoing

    def _encode(self, outgoing: Sequence[Outgoing], channel: fastpath.ConfirmChannel,
                report: bool = True) -> list[Outgoing]:
        """Encode (or retarget) ``outgoing`` for ``channel``; returns those ready. A fire whose message
        cannot be built fails alone (reported with ``report``, else left to be tried again at send)."""
        if self._encoder is None:
            self._encoder = fastpath.Encoder(self.app)
        ready = []
        for item in outgoing:
            try:
                if item.frames is None:
                    built, item.built = item.built, None
                    item.frames, item.declare = self._encoder.encode(item.fire, channel.channel_id,
                                                                     channel.frame_max, built)
                    item.channel_id = channel.channel_id
                elif item.channel_id != channel.channel_id:
                    item.frames = fastpath.retarget(item.frames, channel.channel_id)
                    item.channel_id = channel.channel_id
            except Exception as exc:
                if fastpath.is_connection_error(exc, self._conn):
                    raise
                if report:
                    log.warning("runledger: building the message of %s (%s) failed: %s", item.fire.id,
                                item.fire.job_type, _reason(exc))
                    self._merge(PublishResult(failed=[(item.fire, _reason(exc))]))
                continue
            ready.append(item)
        return ready

    def send(self, outgoing: Sequence[Outgoing]) -> None:
        """Start publishing; on the fast path return once written, confirms read later by collect()."""
        if not outgoing:
            return
        road = self.road()
        if road == "celery":
            self._merge(self._publish_celery(outgoing))
            return
        if road == "celery-amqp":
            self._send_through_celery(outgoing)
            return
        if road == "redis":
            self._send_redis(outgoing)
            return
        channel, ready = self._ready(outgoing)
        if channel is not None:
            channel.send(ready)
            self._settle(channel, wait=False)

    def _send_through_celery(self, outgoing: Sequence[Outgoing]) -> None:
        """Celery's ``send_task_message`` per fire, its publish signals around the socket write of that
        message (the same frames as the fast path); the confirms are read in windows as on the fast path."""
        try:
            channel = self._fast_channel()
        except Exception as exc:
            self._fail_all(outgoing, exc)
            return
        if self._encoder is None:
            self._encoder = fastpath.Encoder(self.app)
        channel_id, frame_max = channel.channel_id, channel.frame_max
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(channel.connection.transport.having_timeout(fastpath.CONFIRM_TIMEOUT))
            except Exception as exc:
                self._fail_all(outgoing, exc)
                return
            for index, item in enumerate(outgoing):
                if channel.error is not None:
                    channel.send(outgoing[index:])  # kept unsent by the broken channel, for _recover
                    break

                def write(frames: bytes, declare: tuple, item: Outgoing = item) -> None:
                    item.frames, item.declare, item.channel_id = frames, declare, channel_id
                    channel.write_one(item)

                built, item.built = item.built, None
                try:
                    self._encoder.encode(item.fire, channel_id, frame_max, built, sink=write)
                except Exception as exc:
                    if item.frames is None:  # the message could not be built: it fails alone
                        log.warning("runledger: building the message of %s (%s) failed: %s", item.fire.id,
                                    item.fire.job_type, _reason(exc))
                        self._merge(PublishResult(failed=[(item.fire, _reason(exc))]))
                    # else written, and a receiver of after_task_publish raised: the confirm decides
        self._settle(channel, wait=False)

    def _send_redis(self, outgoing: Sequence[Outgoing]) -> None:
        """Push the fires' LPUSH commands in pipelines; fires only Celery's path can route go that way."""
        try:
            road = self._redis_road()
            failed = road.encode(outgoing)
        except Exception as exc:
            self._fail_all(outgoing, exc)
            return
        refused = {fire.id for fire, _ in failed}
        ready = [o for o in outgoing if o.pushes and o.fire.id not in refused]
        others = [o for o in outgoing if not o.pushes and o.fire.id not in refused]
        sent, pushed_failed, error = road.push(ready)
        self._merge(PublishResult(sent=sent, failed=failed + pushed_failed, error=error))
        if error is not None:
            self.release()
            self._merge(PublishResult(failed=[(o.fire, _reason(error)) for o in others]))
        elif others:
            self._merge(self._publish_celery(others))

    def collect(self, wait: bool = True, timeout: float = fastpath.CONFIRM_TIMEOUT) -> PublishResult:
        """What became of the fires sent so far (with ``wait``, of all of them, unless ``timeout`` s pass without
        a confirm); resets the tally."""
        if self._fast is not None:
            self._settle(self._fast, wait, timeout)
        result, self._done = self._done, PublishResult()
        return result

    def in_flight(self) -> int:
        """Fires written to the broker and not yet confirmed."""
        return self._fast.in_flight if self._fast is not None and self._fast.error is None else 0

    def _merge(self, result: PublishResult) -> None:
        self._done.sent.extend(result.sent)
        self._done.failed.extend(result.failed)
        self._done.error = result.error or self._done.error

    def _fail_all(self, outgoing: Sequence[Outgoing], error: BaseException) -> None:
        """The broker connection is gone: drop it; these fires wait for the caller's back-off."""
        self.release()
        self._merge(PublishResult(failed=[(o.fire, _reason(error)) for o in outgoing], error=error))

    def _ready(self, outgoing: Sequence[Outgoing]) -> tuple[fastpath.ConfirmChannel | None, list[Outgoing]]:
        """A usable confirm channel and the fires encoded for it; (None, []) with all failed if unreachable."""
        try:
            channel = self._fast_channel()
            return channel, self._encode(outgoing, channel)
        except Exception as exc:
            self._fail_all(outgoing, exc)
            return None, []

    def _settle(self, channel: fastpath.ConfirmChannel, wait: bool, timeout: float = fastpath.CONFIRM_TIMEOUT) -> None:
        channel.settle(wait, timeout)
        self._tally(*channel.take())
        if channel.error is not None:
            if self._fast is channel:
                self._fast = None
            self._recover(channel.abandon(), channel.error)

    def _tally(self, acked: list[Outgoing], nacked: list[Outgoing]) -> None:
        self._merge(PublishResult(sent=[o.fire.id for o in acked], failed=[(o.fire, NACKED) for o in nacked]))

    def _recover(self, rest: list[Outgoing], error: BaseException) -> None:
        """The channel broke with ``rest`` unconfirmed: a connection error gets one reconnect (then it
        is the caller's to back off); a channel error means the broker refused some message, so go
        one message at a time, each awaiting its confirm, until it is found; it fails alone and the
        rest go in a batch again."""
        singles, reconnected = 0, False
        while True:
            if fastpath.is_connection_error(error, self._conn):
                if reconnected:
                    self._fail_all(rest, error)
                    return
                if rest:
                    log.warning("runledger: the broker connection failed (%s); reconnecting to publish again the %d "
                                "fire(s) it had not confirmed", _reason(error), len(rest))
                self.release()
                reconnected = True
            elif singles and rest:  # the broker closed the channel over this one message
                log.warning("runledger: publishing %s (%s) failed: %s", rest[0].fire.id, rest[0].fire.job_type,
                            _reason(error))
                self._merge(PublishResult(failed=[(rest[0].fire, _reason(error))]))
                rest, singles = rest[1:], 0
            else:  # a batch broke over some message: find it
                singles = SINGLES_AFTER_CHANNEL_ERROR
            while rest:
                channel, rest = self._ready(rest)
                if channel is None:
                    return
                chunk = rest[:1] if singles else rest
                acked, nacked, unresolved, error = channel.publish(chunk)
                self._tally(acked, nacked)
                rest = unresolved + rest[len(chunk):]
                if error is not None:
                    break
                singles = max(0, singles - 1)
            else:
                return

    def _publish_celery(self, outgoing: Sequence[Outgoing]) -> PublishResult:
        """Stock Celery publishing, one message at a time (built ahead where it could be). On RabbitMQ the
        messages go on a channel in confirm mode (``_publish_celery_confirmed``); on other transports a fire
        counts as sent once its transport's publish returns, and a channel error fails that fire alone."""
        try:
            if fastpath.supported(self._connection()):
                return self._publish_celery_confirmed(outgoing)
        except Exception as exc:
            self.release()
            return PublishResult(failed=[(o.fire, _reason(exc)) for o in outgoing], error=exc)
        result = PublishResult()
        for index, item in enumerate(outgoing):
            fire = item.fire
            built, item.built = item.built, None
            try:
                send_message(self.app, self._celery_producer(),
                             built or build_message(self.app, fire, self.send_sent_events))
            except Exception as exc:
                if fastpath.is_connection_error(exc, self._conn):
                    self.release()
                    result.error = exc
                    result.failed.extend((o.fire, _reason(exc)) for o in outgoing[index:])
                    return result
                log.warning("runledger: publishing %s (%s) failed: %s", fire.id, fire.job_type, _reason(exc))
                result.failed.append((fire, _reason(exc)))
                self._producer = None  # its channel may be closed by the broker
                continue
            result.sent.append(fire.id)
        return result

    def _publish_celery_confirmed(self, outgoing: Sequence[Outgoing]) -> PublishResult:
        """Celery's producer message by message (task-sent events and all) on a channel in confirm mode: a fire
        counts as sent once the broker confirms its message, and no wait is unbounded (a partitioned broker
        would otherwise hold beat in a declare or a socket write for good, and the messages written into the
        dead socket would count as sent). A broken channel fails every fire not yet confirmed: a connection
        error sends them to the outage backlog, a channel error (the broker refused something) leaves them
        to the recovery sweep."""
        channel = self._fast_channel()
        if self._producer is None or self._producer.channel is not channel.channel:
            self._producer = self.app.amqp.Producer(channel.channel, auto_declare=False)
        producer, result = self._producer, PublishResult()
        with channel.connection.transport.having_timeout(fastpath.CONFIRM_TIMEOUT):
            for item in outgoing:
                fire, built, item.built = item.fire, item.built, None
                try:
                    message = built or build_message(self.app, fire, self.send_sent_events)
                    channel.publish_through(item, lambda m=message: send_message(self.app, producer, m))
                except Exception as exc:
                    log.warning("runledger: publishing %s (%s) failed: %s", fire.id, fire.job_type, _reason(exc))
                    result.failed.append((fire, _reason(exc)))
        channel.settle(wait=True)
        acked, nacked = channel.take()
        result.sent.extend(o.fire.id for o in acked)
        result.failed.extend((o.fire, NACKED) for o in nacked)
        if channel.error is not None:
            error, rest = channel.error, channel.abandon()
            result.failed.extend((o.fire, _reason(error)) for o in rest)
            if fastpath.is_connection_error(error, self._conn):
                self.release()
                result.error = error
            else:
                self._fast = self._producer = None
                log.warning("runledger: the broker closed the publishing channel (%s); the %d fire(s) it had not "
                            "confirmed wait for the recovery sweep", _reason(error), len(rest))
        return result


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:1000]
