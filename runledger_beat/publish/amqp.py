"""The fast path to RabbitMQ: stock Celery messages, encoded ahead, written in bulk, confirmed per window.

Three pieces, each small:

* ``Encoder`` runs Celery's own ``send_task_message`` (through
  ``messages.send_fire``) on a producer whose channel captures the
  ``amqp.Message`` instead of sending it, then encodes it to wire frames with
  py-amqp's own ``frame_writer``. The bytes are what ``basic_publish`` would
  have written, so a stock worker and Flower see a stock message.
* ``ConfirmChannel`` is a py-amqp channel in confirm mode. It writes the frames
  of up to CHUNK_MESSAGES messages per socket write and keeps at most
  WINDOW_MESSAGES unconfirmed; confirms are read as they arrive, so the
  scheduler records the next batch while the broker takes this one. It reports
  which fires the broker acked, which it refused, and which were left
  unresolved when the channel broke.
* Celery's own path on RabbitMQ (a publish-signal receiver connected) runs
  the same ``Encoder`` at the instant with a ``sink``: each message is written
  from inside Celery's publish, so the signals see the real publish, while the
  confirms are read in windows as on the fast path.
* ``retarget`` rewrites the channel id of encoded frames, for the rare case the
  channel was reopened between encoding and writing.

Why: building a Celery message costs ~35 µs and encoding its header table
~20 µs of pure Python. Done ahead of the fire's instant (see the scheduler's
lookahead), together with the declares their exchange and queue need
(``declare_ahead``), the instant itself costs one ``sendall`` per chunk, and
RabbitMQ's own ingest rate is the limit.
"""

from __future__ import annotations

import contextlib
import select
import time
from collections.abc import Callable, Sequence
from typing import Any

import amqp
from amqp import spec
from amqp.method_framing import frame_writer
from amqp.serialization import dumps
from kombu import Producer
from kombu.common import maybe_declare
from kombu.exceptions import OperationalError
from kombu.transport import pyamqp

from .fires import Outgoing
from .message import BuiltMessage, build_message, send_message
from .templates import Kinds, NotTemplatable, Template, kind_of

#: Messages whose frames are joined into one socket write.
CHUNK_MESSAGES = 500
#: Messages allowed in flight without a publisher confirm.
WINDOW_MESSAGES = 5000
#: Seconds without a confirm from the broker before its connection counts as lost (or a blocked socket write,
#: or a channel method without its reply).
CONFIRM_TIMEOUT = 10.0
#: Seconds a goodbye to the broker (closing a channel or the connection) may take before the socket is dropped.
CLOSE_TIMEOUT = 2.0
_PUBLISH_ARGS = "Bssbb"  # basic.publish: ticket, exchange, routing_key, mandatory, immediate


def supported(conn: Any) -> bool:
    """Whether the kombu connection ``conn`` uses py-amqp (RabbitMQ), the fast path's transport."""
    try:
        return isinstance(conn.transport, pyamqp.Transport)
    except Exception:
        return False


def is_connection_error(exc: BaseException, conn: Any) -> bool:
    """True when ``exc`` means the broker connection is gone (not a fault of one message)."""
    if isinstance(exc, (OSError, OperationalError, amqp.exceptions.ConnectionError)):
        return True
    if conn is None:
        return False
    try:
        return isinstance(exc, tuple(conn.connection_errors)) and not isinstance(exc, tuple(conn.channel_errors))
    except Exception:
        return False


def release_within(kombu_conn: Any, timeout: float = CLOSE_TIMEOUT) -> None:
    """Release ``kombu_conn``; on py-amqp its goodbyes to the broker get ``timeout`` seconds in all.

    Behind a network partition the broker never answers Channel.Close or
    Connection.Close, and py-amqp would wait for the reply forever (a read with
    no timeout): beat would stop recording fires until the partition healed.
    """
    sock = None
    with contextlib.suppress(Exception):
        if supported(kombu_conn) and kombu_conn.connected:
            sock = kombu_conn.connection.transport.sock
    if sock is not None:
        sock.settimeout(timeout)  # the connection is being closed: nothing restores it
    kombu_conn.release()


def retarget(frames: bytes, channel_id: int) -> bytes:
    """The same AMQP frames addressed to ``channel_id`` (frame: type, channel, size, payload, 0xCE)."""
    out = bytearray(frames)
    channel = channel_id.to_bytes(2, "big")
    i = 0
    while i < len(out):
        size = int.from_bytes(out[i + 3:i + 7], "big")
        out[i + 1:i + 3] = channel
        i += 8 + size
    return bytes(out)


class CaptureChannel:
    """Stands in for a channel whose basic_publish records the message instead of sending it.

    Alone it is a py-amqp channel (kombu's own prepare_message); around ``real`` (the Redis transport's
    channel) every other attribute is the real channel's, so the transport prepares the message as it would.
    """

    def __init__(self, real: Any = None) -> None:
        self._real = real
        self.captured: tuple | None = None
        self.on_publish: Callable[[], None] | None = None

    def __getattr__(self, name: str) -> Any:
        if self._real is None:
            raise AttributeError(name)
        return getattr(self._real, name)

    def prepare_message(self, *args: Any, **kwargs: Any) -> Any:
        """The transport's own message preparation."""
        if self._real is not None:
            return self._real.prepare_message(*args, **kwargs)
        return pyamqp.Channel.prepare_message(self, *args, **kwargs)

    def basic_publish(self, message: Any, exchange: str = "", routing_key: str = "",
                      mandatory: bool = False, immediate: bool = False, **_: Any) -> None:
        self.captured = (message, exchange, routing_key, mandatory, immediate)
        if self.on_publish is not None:
            self.on_publish()


class CaptureProducer(Producer):
    """A kombu Producer that records the entities it would declare instead of declaring them."""

    def __init__(self, channel: CaptureChannel, declared: list) -> None:
        self.declared = declared
        super().__init__(channel, auto_declare=False)

    def maybe_declare(self, entity: Any, retry: bool = False, **retry_policy: Any) -> None:
        self.declared.append(entity)


class _FrameLimits:
    """What frame_writer reads of a connection: the frame size and a sent-frames counter."""

    def __init__(self, frame_max: int) -> None:
        self.frame_max = frame_max
        self.bytes_sent = 0


class Encoder:
    """Celery's message for a fire, as the AMQP frames basic_publish would write.

    Fires of a kind already seen come from its ``message_template.Template``
    once Celery's own bytes confirmed it (VERIFY_FIRES times).
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.channel = CaptureChannel()
        self.declared: list = []
        self.producer = CaptureProducer(self.channel, self.declared)
        self.parts: list[bytes] = []
        self._writers: dict[int, Callable] = {}
        self._kinds = Kinds()

    def write(self, data: Any) -> None:  # frame_writer's transport
        self.parts.append(bytes(data))

    def encode(self, fire: Any, channel_id: int, frame_max: int, built: BuiltMessage | None = None,
               sink: Callable[[bytes, tuple], None] | None = None) -> tuple[bytes, tuple]:
        """(frames, entities to declare) of one fire's message on ``channel_id`` (``built``: made ahead).

        With ``sink``, the frames go to ``sink(frames, entities)`` from inside
        Celery's publish, between the before_task_publish and after_task_publish
        signals, as a stock producer's socket write would.
        """
        if sink is None and built is None:
            return self._by_kind(fire, channel_id, frame_max)
        return self._by_celery(fire, channel_id, frame_max, built, sink)

    def _by_kind(self, fire: Any, channel_id: int, frame_max: int) -> tuple[bytes, tuple]:
        """From the kind's template once it proved itself; else by Celery, checking the template against it."""
        key = kind_of(fire, channel_id, frame_max)
        kind = self._kinds.settled(key)
        if kind is not None:
            if kind.template is not None:
                return kind.template.frames(fire), kind.declare
            return self._by_celery(fire, channel_id, frame_max, None, None)
        built = build_message(self.app, fire, sent_event=False)
        embed = built.message.body[2] if isinstance(built.message.body, tuple) else None
        frames, declare = self._by_celery(fire, channel_id, frame_max, built, None)
        self._kinds.check(key, lambda: self._template(str(fire.id), embed, channel_id, frame_max),
                          lambda template: template.frames(fire) == frames, declare)
        return frames, declare

    def _template(self, fire_id: str, embed: Any, channel_id: int, frame_max: int) -> Template | None:
        """The template of the message just captured, or None when its kind cannot have one."""
        assert self.channel.captured is not None
        message, exchange, routing_key, mandatory, immediate = self.channel.captured
        try:
            return Template(self.app, fire_id, message, embed,
                            dumps(_PUBLISH_ARGS, (0, exchange, routing_key, mandatory, immediate)),
                            channel_id, frame_max)
        except (NotTemplatable, AttributeError, TypeError, ValueError, KeyError):
            return None

    def _by_celery(self, fire: Any, channel_id: int, frame_max: int, built: BuiltMessage | None,
                   sink: Callable[[bytes, tuple], None] | None) -> tuple[bytes, tuple]:
        self.declared.clear()
        self.channel.captured = None
        result: list[tuple[bytes, tuple]] = []
        if sink is not None:
            def publish() -> None:
                result.append(self._frames(channel_id, frame_max))
                sink(*result[0])
            self.channel.on_publish = publish
        try:
            send_message(self.app, self.producer, built or build_message(self.app, fire, sent_event=False))
        finally:
            self.channel.on_publish = None
        if self.channel.captured is None:
            raise RuntimeError("Celery's send_task_message published nothing")
        return result[0] if result else self._frames(channel_id, frame_max)

    def _frames(self, channel_id: int, frame_max: int) -> tuple[bytes, tuple]:
        assert self.channel.captured is not None
        message, exchange, routing_key, mandatory, immediate = self.channel.captured
        writer = self._writers.get(frame_max)
        if writer is None:
            writer = self._writers[frame_max] = frame_writer(_FrameLimits(frame_max), self)
        self.parts.clear()
        writer(1, channel_id, spec.Basic.Publish,
               dumps(_PUBLISH_ARGS, (0, exchange, routing_key, mandatory, immediate)), message)
        return b"".join(self.parts), tuple(self.declared)


class ConfirmChannel:
    """A py-amqp channel in confirm mode: writes encoded fires in chunks, tracks their confirms.

    ``send`` returns once the frames are written (blocking only while more than
    WINDOW_MESSAGES await a confirm), so the caller can do other work while the
    broker takes them; ``settle`` reads the confirms that arrived (or waits for
    all); ``take`` hands over the fires acked and refused so far. Neither raises:
    a broken channel or connection sets ``error``, after which ``abandon`` returns
    every fire not yet resolved, in order, and the channel is never used again.
    """

    def __init__(self, kombu_conn: Any) -> None:
        self.connection = kombu_conn.connection  # the amqp.Connection
        with self.connection.transport.having_timeout(CONFIRM_TIMEOUT):  # a partitioned broker never replies
            self.channel = self.connection.channel()
            self.channel.confirm_select()
        self.channel.events["basic_ack"].add(self._on_ack)
        self.channel.events["basic_nack"].add(self._on_nack)
        self.next_tag = 1
        self.error: BaseException | None = None
        self._low = 1                               # no tag below this awaits a confirm
        self._pending: dict[int, Outgoing] = {}     # delivery tag -> fire awaiting its confirm
        self._unsent: list[Outgoing] = []           # not written when an error struck
        self._acked: list[Outgoing] = []
        self._nacked: list[Outgoing] = []
        self._declared_last: tuple = ()            # ids of the entities write_one declared last

    @property
    def channel_id(self) -> int:
        return self.channel.channel_id

    @property
    def frame_max(self) -> int:
        return self.connection.frame_max

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def usable(self) -> bool:
        return self.error is None and self.channel.is_open and bool(self.connection.connected)

    def _resolve(self, delivery_tag: int, multiple: bool, into: list) -> None:
        if multiple:
            for tag in range(self._low, delivery_tag + 1):
                item = self._pending.pop(tag, None)
                if item is not None:
                    into.append(item)
            self._low = max(self._low, delivery_tag + 1)
        else:
            item = self._pending.pop(delivery_tag, None)
            if item is not None:
                into.append(item)

    def _on_ack(self, delivery_tag: int, multiple: bool) -> None:
        self._resolve(delivery_tag, multiple, self._acked)

    def _on_nack(self, delivery_tag: int, multiple: bool) -> None:
        self._resolve(delivery_tag, multiple, self._nacked)

    def _fail(self, exc: BaseException) -> None:
        self.error = exc
        if is_connection_error(exc, None):
            # Gone, or stuck behind a partition (a confirm or a reply timed out): drop the socket without a
            # word, since py-amqp's close would wait for the broker's reply forever.
            with contextlib.suppress(Exception):
                self.connection.collect()
            return
        try:  # after a channel error py-amqp reopens the channel without confirm mode: close it
            with self.connection.transport.having_timeout(CLOSE_TIMEOUT):
                self.channel.close()
        except Exception:
            with contextlib.suppress(Exception):
                self.connection.collect()

    def _read(self, until: Callable[[], bool], patience: float) -> None:
        """Read frames until ``until()``; give up after ``patience`` s without a confirm. A broker that keeps
        confirming is slow (three beats at once), not gone: a deadline on the whole wait would drop the
        connection and publish its unconfirmed fires again, the broker having queued most of them already."""
        deadline = time.monotonic() + patience
        while not until():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"no publisher confirm for {patience:g}s")
            before = len(self._pending)
            self.connection.drain_events(timeout=remaining)
            if len(self._pending) < before:
                deadline = time.monotonic() + patience

    def _declare(self, outgoing: Sequence[Outgoing]) -> None:
        entities: dict[int, Any] = {}
        for item in outgoing:
            for entity in item.declare:
                entities.setdefault(id(entity), entity)
        for entity in entities.values():
            maybe_declare(entity, self.channel)

    def declare_ahead(self, outgoing: Sequence[Outgoing]) -> None:
        """Declare now, ahead of their instant, the entities these fires need (kombu remembers them, so
        ``send`` finds them declared); only while nothing is in flight, and an error only drops the channel:
        ``send`` meets it again on a new one and fails the fires concerned."""
        if self.error is not None or self._pending:
            return
        try:
            with self.connection.transport.having_timeout(CONFIRM_TIMEOUT):
                self._declare(outgoing)
        except Exception as exc:
            self._fail(exc)

    def send(self, outgoing: Sequence[Outgoing]) -> None:
        """Write the fires' frames, a chunk per socket write; wait only to keep the window."""
        if self.error is not None:
            self._unsent.extend(outgoing)
            return
        written = 0
        try:
            transport = self.connection.transport
            with transport.having_timeout(CONFIRM_TIMEOUT):
                self._declare(outgoing)
            while written < len(outgoing):
                chunk = outgoing[written:written + CHUNK_MESSAGES]
                with transport.having_timeout(CONFIRM_TIMEOUT):
                    transport.write(b"".join([o.frames for o in chunk]))  # type: ignore[misc]
                written += len(chunk)
                self._written(chunk)
        except Exception as exc:
            self._unsent.extend(outgoing[written:])
            self._fail(exc)

    def _written(self, items: Sequence[Outgoing]) -> None:
        """Await the confirms of fires just written (delivery tags in order); past the window, read some."""
        for item in items:
            self._pending[self.next_tag] = item
            self.next_tag += 1
        self.connection.bytes_sent += len(items)
        self._keep_window()

    def _keep_window(self) -> None:
        if len(self._pending) > WINDOW_MESSAGES:
            self._read(lambda: len(self._pending) <= WINDOW_MESSAGES, CONFIRM_TIMEOUT)

    def publish_through(self, item: Outgoing, publish: Callable[[], None]) -> None:
        """Run Celery's own publish of one fire on this channel (``publish`` calls ``send_task_message`` on a
        producer of ``self.channel``): the first message it publishes awaits its confirm as the fire's, any
        after it (the task-sent event) only take a delivery tag. A broken channel or connection sets ``error``
        (the fire kept for ``abandon``); an error before anything was written, on a channel still open, is
        this message's alone and is raised. The caller holds the socket timeout (``transport.having_timeout``).
        """
        if self.error is not None:
            self._unsent.append(item)
            return
        first, original = self.next_tag, self.channel.basic_publish
        own = vars(self.channel).get("basic_publish")  # py-amqp sets one with confirm_publish on

        def counted(*args: Any, **kwargs: Any) -> Any:
            returned = original(*args, **kwargs)
            if self.next_tag == first:
                self._pending[first] = item
            self.next_tag += 1
            return returned

        self.channel.basic_publish = counted
        try:
            publish()
        except Exception as exc:
            if self.next_tag == first and self.channel.is_open and not is_connection_error(exc, None):
                raise
            if self.next_tag == first:
                self._unsent.append(item)
            self._fail(exc)
            return
        finally:
            if own is None:
                del self.channel.basic_publish  # the class's own again
            else:
                self.channel.basic_publish = own
        try:
            self._keep_window()
        except Exception as exc:
            self._fail(exc)

    def write_one(self, item: Outgoing) -> None:
        """Write one message's frames now (Celery's path, from inside its publish); like ``send`` for one fire,
        without its per-chunk bookkeeping. The caller holds the socket timeout (``transport.having_timeout``)."""
        if self.error is not None:
            self._unsent.append(item)
            return
        try:
            if item.declare:
                key = tuple(map(id, item.declare))
                if key != self._declared_last:
                    self._declare([item])
                    self._declared_last = key
            self.connection.transport.write(item.frames)  # type: ignore[arg-type]
        except Exception as exc:
            self._unsent.append(item)
            self._fail(exc)
            return
        try:
            self._written([item])
        except Exception as exc:
            self._fail(exc)

    def settle(self, wait: bool, timeout: float = CONFIRM_TIMEOUT) -> None:
        """Read the confirms that have arrived; with ``wait``, until none is outstanding (or ``timeout`` s pass
        without a confirm)."""
        if self.error is not None or not self._pending:
            return
        try:
            if wait:
                self._read(lambda: not self._pending, timeout)
                return
            sock = self.connection.transport.sock
            while self._pending and select.select([sock], [], [], 0)[0]:
                self.connection.drain_events(timeout=CONFIRM_TIMEOUT)
        except Exception as exc:
            self._fail(exc)

    def take(self) -> tuple[list[Outgoing], list[Outgoing]]:
        """The fires acked and those refused (basic.nack) since the last take."""
        acked, nacked = self._acked, self._nacked
        self._acked, self._nacked = [], []
        return acked, nacked

    def abandon(self) -> list[Outgoing]:
        """After an error: every fire written but unconfirmed, then those never written."""
        rest = [self._pending[tag] for tag in sorted(self._pending)] + self._unsent
        self._pending, self._unsent = {}, []
        return rest

    def publish(self, outgoing: Sequence[Outgoing]) -> tuple[list[Outgoing], list[Outgoing], list[Outgoing],
                                                             BaseException | None]:
        """Send and wait for every confirm: (acked, refused, unresolved, error)."""
        self.send(outgoing)
        self.settle(wait=True)
        acked, nacked = self.take()
        rest = self.abandon() if self.error is not None else []
        return acked, nacked, rest, self.error
