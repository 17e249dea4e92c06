"""Publishing fires to the Celery broker as ordinary task messages.

Every message is built by Celery itself: ``app.amqp.create_task_message`` and
``app.amqp.send_task_message`` (protocol 2, the app's routing, serializer,
compression and delivery mode), as ``task.apply_async`` would, with task_id =
ledger row id and the ledger id and ``_schedule`` metadata in message headers,
never in kwargs. Two ways lead to the broker:

* The Celery path (celery.py): ``send_task_message`` on a kombu producer, message by
  message, with Celery's publish signals and task-sent events. It serves every
  transport but py-amqp and Redis, and is taken whenever sent events are on or
  a receiver listens to ``before_task_publish`` / ``after_task_publish`` /
  ``task_sent`` (tracing), so those fire at the real publish exactly as with
  stock beat. The messages are built (``create_task_message``) ahead of the
  instant; only ``send_task_message`` runs at it. On RabbitMQ with receivers
  (the "celery-amqp" publisher) each message is written to the socket from inside
  Celery's publish, between the two signals, on the fast path's confirm channel:
  the signals fire per message at its real write, the confirms and the ledger
  marks are batched.
* The fast path (amqp.py; py-amqp, i.e. RabbitMQ, nobody listening): the same
  ``send_task_message`` runs ahead of the fire's instant on a producer that
  captures the message instead of sending it, and py-amqp's own frame writer
  encodes it. At the instant the frames of many messages go out in one write
  per chunk on a channel in confirm mode; confirms are read as they arrive
  (send() then collect()), at most a window of messages unconfirmed. Only
  confirmed fires count as sent. If the channel breaks over a message the
  broker refuses (a missing exchange, say), the unconfirmed rest goes one
  message at a time until that one is found; it fails alone and the others go
  out. A broken connection gets one reconnect, then waits for the back-off.

Redis has a fast path of its own (redis.py). See amqp.py for the capture, the encoding and the confirm window,
link.py for the connection and channel both paths share.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

from celery import Celery, signals

from . import amqp
from . import redis as redis_publisher
from .celery import CeleryPublisher
from .fires import NACKED, Fire, Outgoing, PublishResult, reason
from .link import BrokerLink
from .message import build_message

log = logging.getLogger(__name__)

#: After a channel error, messages sent one by one to find the one the broker refuses.
SINGLES_AFTER_CHANNEL_ERROR = 100


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
        self.link = BrokerLink(app)
        self.celery = CeleryPublisher(app, self.link, send_sent_events)
        self._encoder: amqp.Encoder | None = None
        self._kind: str | None = None    # "amqp" or "redis" (a fast path), "celery": found at first use
        self._redis: redis_publisher.RedisPublisher | None = None
        self._done = PublishResult()     # sent / failed since the last collect()

    # -- the broker connection ---------------------------------------------

    def publisher(self) -> str:
        """The publisher fires take now: "amqp" or "redis" (fast paths: no publish-signal listeners, no sent
        events); "celery-amqp" (RabbitMQ with publish-signal listeners: Celery's publish per message, the
        confirms windowed); else "celery" (Celery's producer, message by message)."""
        if not self.fast or self.send_sent_events:
            return "celery"
        if self._kind is None:
            conn = self.app.connection_for_write()
            try:
                self._kind = ("amqp" if amqp.supported(conn) else
                              "redis" if redis_publisher.supported(conn) else "celery")
            finally:
                conn.release()
        if _publish_receivers():
            return "celery-amqp" if self._kind == "amqp" else "celery"
        return self._kind

    def fast_path(self) -> bool:
        """Whether fires go by a fast path now (encoded ahead, no publish signals)."""
        return self.publisher() in ("amqp", "redis")

    def _redis_publisher(self) -> redis_publisher.RedisPublisher:
        if self._redis is None:
            self._redis = redis_publisher.RedisPublisher(self.app, self.link.connection())
        return self._redis

    def release(self) -> None:
        """Drop the broker connection (after an error, or at shutdown)."""
        self.discard_staged()
        self.link.release()
        self.celery.reset()
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
        if self.publisher() == "redis":
            with contextlib.suppress(Exception):  # unreachable: encoded (or reported) at send
                self._redis_publisher().encode(outgoing)
            return outgoing
        try:
            channel = self.link.confirm_channel()
        except Exception as exc:
            log.debug("runledger: broker not reachable while preparing (%s); encoding later", exc)
            return outgoing
        channel.declare_ahead(self._encode(outgoing, channel, report=False))
        return outgoing

    def _encode(self, outgoing: Sequence[Outgoing], channel: amqp.ConfirmChannel,
                report: bool = True) -> list[Outgoing]:
        """Encode (or retarget) ``outgoing`` for ``channel``; returns those ready. A fire whose message
        cannot be built fails alone (reported with ``report``, else left to be tried again at send)."""
        if self._encoder is None:
            self._encoder = amqp.Encoder(self.app)
        ready = []
        for item in outgoing:
            try:
                if item.frames is None:
                    built, item.built = item.built, None
                    item.frames, item.declare = self._encoder.encode(item.fire, channel.channel_id,
                                                                     channel.frame_max, built)
                    item.channel_id = channel.channel_id
                elif item.channel_id != channel.channel_id:
                    item.frames = amqp.retarget(item.frames, channel.channel_id)
                    item.channel_id = channel.channel_id
            except Exception as exc:
                if self.link.is_connection_error(exc):
                    raise
                if report:
                    log.warning("runledger: building the message of %s (%s) failed: %s", item.fire.id,
                                item.fire.job_type, reason(exc))
                    self._merge(PublishResult(failed=[(item.fire, reason(exc))]))
                continue
            ready.append(item)
        return ready

    def stages(self) -> bool:
        """Whether the road fires take now can be handed an instant ahead of its COMMIT (``stage``): Redis's."""
        return self._redis is not None and self.publisher() == "redis"

    def stage(self, outgoing: Sequence[Outgoing]) -> bool:
        """Hand the broker a prepared instant's fires ahead of their ledger COMMIT, for send() of the same fires
        to publish once it returned: on Redis, MULTI and their commands, held unexecuted until EXEC. False where
        the road has no such step (nothing is written then)."""
        if not self.stages():
            return False
        try:
            return self._redis.stage(outgoing)
        except Exception:
            return False

    def discard_staged(self) -> None:
        """What ``stage`` wrote is dropped unexecuted (the instant changed, or its COMMIT failed)."""
        if self._redis is not None:
            self._redis.discard_staged()

    def send(self, outgoing: Sequence[Outgoing]) -> None:
        """Start publishing; on the fast path return once written, confirms read later by collect()."""
        if not outgoing:
            return
        publisher = self.publisher()
        if publisher == "celery":
            self._merge(self._celery_publish(outgoing))
            return
        if publisher == "celery-amqp":
            self._send_through_celery(outgoing)
            return
        if publisher == "redis":
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
            channel = self.link.confirm_channel()
        except Exception as exc:
            self._fail_all(outgoing, exc)
            return
        if self._encoder is None:
            self._encoder = amqp.Encoder(self.app)
        channel_id, frame_max = channel.channel_id, channel.frame_max
        with contextlib.ExitStack() as stack:
            try:
                stack.enter_context(channel.connection.transport.having_timeout(amqp.CONFIRM_TIMEOUT))
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
                                    item.fire.job_type, reason(exc))
                        self._merge(PublishResult(failed=[(item.fire, reason(exc))]))
                    # else written, and a receiver of after_task_publish raised: the confirm decides
        self._settle(channel, wait=False)

    def _send_redis(self, outgoing: Sequence[Outgoing]) -> None:
        """Push the fires' LPUSH commands in pipelines; fires only Celery's path can route go that way."""
        try:
            redis = self._redis_publisher()
            failed = redis.encode(outgoing)
        except Exception as exc:
            self._fail_all(outgoing, exc)
            return
        refused = {fire.id for fire, _ in failed}
        ready = [o for o in outgoing if o.pushes and o.fire.id not in refused]
        others = [o for o in outgoing if not o.pushes and o.fire.id not in refused]
        sent, pushed_failed, error = redis.push(ready)
        self._merge(PublishResult(sent=sent, failed=failed + pushed_failed, error=error))
        if error is not None:
            self.release()
            self._merge(PublishResult(failed=[(o.fire, reason(error)) for o in others]))
        elif others:
            self._merge(self._celery_publish(others))

    def collect(self, wait: bool = True, timeout: float = amqp.CONFIRM_TIMEOUT) -> PublishResult:
        """What became of the fires sent so far (with ``wait``, of all of them, unless ``timeout`` s pass without
        a confirm); resets the tally."""
        if self.link.channel is not None:
            self._settle(self.link.channel, wait, timeout)
        result, self._done = self._done, PublishResult()
        return result

    def in_flight(self) -> int:
        """Fires written to the broker and not yet confirmed."""
        channel = self.link.channel
        return channel.in_flight if channel is not None and channel.error is None else 0

    def _merge(self, result: PublishResult) -> None:
        self._done.sent.extend(result.sent)
        self._done.failed.extend(result.failed)
        self._done.error = result.error or self._done.error

    def _fail_all(self, outgoing: Sequence[Outgoing], error: BaseException) -> None:
        """The broker connection is gone: drop it; these fires wait for the caller's back-off."""
        self.release()
        self._merge(PublishResult(failed=[(o.fire, reason(error)) for o in outgoing], error=error))

    def _ready(self, outgoing: Sequence[Outgoing]) -> tuple[amqp.ConfirmChannel | None, list[Outgoing]]:
        """A usable confirm channel and the fires encoded for it; (None, []) with all failed if unreachable."""
        try:
            channel = self.link.confirm_channel()
            return channel, self._encode(outgoing, channel)
        except Exception as exc:
            self._fail_all(outgoing, exc)
            return None, []

    def _settle(self, channel: amqp.ConfirmChannel, wait: bool, timeout: float = amqp.CONFIRM_TIMEOUT) -> None:
        channel.settle(wait, timeout)
        self._tally(*channel.take())
        if channel.error is not None:
            self.link.forget_channel(channel)
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
            if self.link.is_connection_error(error):
                if reconnected:
                    self._fail_all(rest, error)
                    return
                if rest:
                    log.warning("runledger: the broker connection failed (%s); reconnecting to publish again the %d "
                                "fire(s) it had not confirmed", reason(error), len(rest))
                self.release()
                reconnected = True
            elif singles and rest:  # the broker closed the channel over this one message
                log.warning("runledger: publishing %s (%s) failed: %s", rest[0].fire.id, rest[0].fire.job_type,
                            reason(error))
                self._merge(PublishResult(failed=[(rest[0].fire, reason(error))]))
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

    def _celery_publish(self, outgoing: Sequence[Outgoing]) -> PublishResult:
        """Celery's own producer, message by message; a failed connection is dropped."""
        result = self.celery.publish(outgoing)
        if result.error is not None:
            self.release()
        return result
