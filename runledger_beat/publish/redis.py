"""The fast path to Redis: stock Celery messages, built ahead, pushed in pipelines.

``RedisPublisher.encode`` runs Celery's own ``send_task_message`` (through
``messages.send_fire``) on a producer whose channel captures the message
instead of publishing it, then does what kombu's Redis transport would do at
publish — the same ``_inplace_augment_message``, routing lookup, priority queue
name and JSON ``dumps`` of the real channel — so each fire becomes the exact
``LPUSH key payload`` commands the transport would send (only the random
``delivery_tag`` differs, as it does between any two publishes). Past the
first fires of a kind, ``message_template.RedisTemplate`` makes the same text
from the kind's captured message. At the instant ``push`` writes them as one
packed round of CHUNK commands at a time, as a non-transactional pipeline does.

An instant that fits one round is staged (``stage``) once prepared, ahead of
its COMMIT: MULTI and its commands go to Redis then, held unexecuted, and
``push`` of those very fires, once the COMMIT returned, sends only EXEC (a beat
gone before that leaves Redis a closed connection, whose MULTI it drops).

Redis answers every LPUSH, so a fire counts as sent when all its commands
succeeded; a command Redis refuses fails that fire alone (in a staged round, a
command refused as it is queued fails them all: Redis aborts the EXEC); a lost
connection fails the rest and the caller backs off. Fires routed through a fanout or
topic exchange, or to a queue with an expiry, take Celery's own path.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from kombu.common import maybe_declare
from kombu.utils.json import dumps

from .amqp import CaptureChannel, CaptureProducer
from .fires import Fire, Outgoing
from .message import build_message, send_message
from .templates import Kinds, NotTemplatable, RedisTemplate, kind_of

#: LPUSH commands per round trip, at most; and bytes, at most.
CHUNK = 1000
CHUNK_BYTES = 4 << 20
#: Rounds written before the first of them is answered.
IN_FLIGHT = 2
MULTI = b"*1\r\n$5\r\nMULTI\r\n"
EXEC = b"*1\r\n$4\r\nEXEC\r\n"


def supported(conn: Any) -> bool:
    """Whether the kombu connection ``conn`` uses the Redis transport."""
    try:
        from kombu.transport import redis as kombu_redis
        return isinstance(conn.transport, kombu_redis.Transport)
    except Exception:
        return False


class RedisPublisher:
    """Encodes fires into LPUSH commands ahead of their instant and pushes them in pipelines."""

    def __init__(self, app: Any, kombu_conn: Any) -> None:
        self.app = app
        self.channel = kombu_conn.default_channel
        self._capture = CaptureChannel(self.channel)
        self._declared: list = []
        self._producer = CaptureProducer(self._capture, self._declared)
        self._routes: dict[tuple[str, str], list[str]] = {}
        self._kinds = Kinds()
        self._heads: dict[str, bytes] = {}
        self._staged: _Staged | None = None

    def encode(self, outgoing: Sequence[Outgoing]) -> list[tuple[Fire, str]]:
        """Give each fire its LPUSH commands (``pushes``); returns the fires whose message cannot be built.

        A fire routed where only Celery's path goes keeps ``pushes`` empty.
        """
        self._routes.clear()  # bindings and templates are looked up afresh for each batch
        self._kinds.clear()
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
        """From the kind's template once it proved itself; else by Celery, checking the template against it."""
        key = kind_of(fire, 0, 0)
        kind = self._kinds.settled(key)
        if kind is not None:
            template = kind.template
            if template is None:
                return self._by_celery(fire)[0]
            payload = template.payload(fire, self.channel._next_delivery_tag())
            return tuple((queue, payload) for queue in template.keys)
        commands, message, embed = self._by_celery(fire)
        self._kinds.check(key, lambda: self._template(fire, message, embed, commands),
                          lambda template: message is not None
                          and template.payload(fire, message["properties"]["delivery_tag"]) == commands[0][1])
        return commands

    def _template(self, fire: Fire, message: dict | None, embed: Any,
                  commands: tuple[tuple[str, str], ...]) -> RedisTemplate | None:
        if message is None or not commands:
            return None
        try:
            return RedisTemplate(self.app, str(fire.id), message, embed, tuple(q for q, _ in commands))
        except (NotTemplatable, AttributeError, TypeError, ValueError, KeyError):
            return None

    def _by_celery(self, fire: Fire) -> tuple[tuple[tuple[str, str], ...], dict | None, Any]:
        """(commands, the message as the transport augmented it, the body's embed) by Celery's own publish."""
        self._declared.clear()
        self._capture.captured = None
        built = build_message(self.app, fire, sent_event=False)
        embed = built.message.body[2] if isinstance(built.message.body, tuple) else None
        send_message(self.app, self._producer, built)
        if self._capture.captured is None:
            raise RuntimeError("Celery's send_task_message published nothing")
        for entity in self._declared:
            maybe_declare(entity, self.channel)  # binds the queue, so the lookup below finds it
        message, exchange, routing_key, _, _ = self._capture.captured
        queues = self._queues(exchange, routing_key)
        if queues is None:
            return (), None, None
        channel = self.channel
        channel._inplace_augment_message(message, exchange, routing_key)
        priority = channel._get_message_priority(message, reverse=False)
        payload = dumps(message)
        return tuple((channel._q_for_pri(queue, priority), payload) for queue in queues), message, embed

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

    def stage(self, outgoing: Sequence[Outgoing]) -> bool:
        """Write MULTI and the fires' LPUSH commands now, held unexecuted by Redis until ``push`` of the same
        fires sends EXEC (or ``discard_staged``): for an instant prepared, ahead of its ledger COMMIT. Only fires
        all encoded that fit one round; False, with nothing written, otherwise."""
        self.discard_staged()
        if not outgoing or len(outgoing) > CHUNK or any(not item.pushes for item in outgoing):
            return False  # (past CHUNK fires no round holds them all: known before packing any)
        end, (packed, commands) = self._round(outgoing, 0)
        if end < len(outgoing):
            return False
        pool = self.channel.client.connection_pool
        try:
            conn = _connection(pool)
        except Exception:
            return False  # push() meets the error again and reports it
        if getattr(conn, "_sock", None) is None:  # replies read by redis-py's parser: no staging
            pool.release(conn)
            return False
        try:
            conn.send_packed_command([MULTI + packed], check_health=False)
        except Exception:
            conn.disconnect()
            pool.release(conn)
            return False
        self._staged = _Staged(conn, tuple(outgoing), commands)
        return True

    def discard_staged(self) -> None:
        """Drop staged commands unexecuted (their instant changed or rolled back): the connection closes, and Redis
        drops the MULTI with it."""
        staged, self._staged = self._staged, None
        if staged is not None:
            staged.conn.disconnect()
            self.channel.client.connection_pool.release(staged.conn)

    def push(self, outgoing: Sequence[Outgoing]) -> tuple[list, list[tuple[Fire, str]], BaseException | None]:
        """LPUSH every fire's commands: (ids sent, (fire, reason) refused, connection error or None).

        The commands go out packed as RESP (``_pack``) in rounds of at most CHUNK
        commands or CHUNK_BYTES, one write each; a round's replies are read at once
        (``_Replies``) after the next round is written, so Redis runs one round while
        beat packs the next (redis-py's pipeline waits for each round's replies, with
        Python per command). Fires staged by ``stage`` only need EXEC.
        """
        from redis.exceptions import ResponseError  # only on this road: a base install has no redis-py

        staged, self._staged = self._staged, None
        if staged is not None:
            if staged.holds(outgoing):
                return self._execute(staged, ResponseError)
            self._staged = staged
            self.discard_staged()
        sent: list = []
        failed: list[tuple[Fire, str]] = []
        pool = self.channel.client.connection_pool
        try:
            conn = _connection(pool)  # may connect now: a server away (restarting) refuses
        except Exception as exc:
            return sent, [(o.fire, f"{type(exc).__name__}: {exc}"[:1000]) for o in outgoing], exc
        in_flight: list[tuple[int, int, int]] = []  # (first fire, past the last, commands) written, not answered
        replies_of = _Replies(conn, ResponseError)
        try:
            start = 0
            while start < len(outgoing) or in_flight:
                try:
                    if start < len(outgoing):
                        end, packed = self._round(outgoing, start)
                        conn.send_packed_command([packed[0]], check_health=False)
                        in_flight.append((start, end, packed[1]))
                        start = end
                        if len(in_flight) < IN_FLIGHT and start < len(outgoing):
                            continue
                    first, last, commands = in_flight[0]
                    replies = iter(replies_of.take(commands))
                    in_flight.pop(0)
                except Exception as exc:  # the connection: nothing unanswered is known to be queued
                    conn.disconnect()
                    unanswered = in_flight[0][0] if in_flight else start
                    failed.extend((o.fire, f"{type(exc).__name__}: {exc}"[:1000]) for o in outgoing[unanswered:])
                    return sent, failed, exc
                _tally(outgoing[first:last], replies, sent, failed)
        finally:
            pool.release(conn)
        return sent, failed, None

    def _execute(self, staged: _Staged, refused: type[Exception]) -> tuple[list, list[tuple[Fire, str]],
                                                                           BaseException | None]:
        """EXEC a staged round and read its replies: MULTI's OK, a QUEUED (or a refusal) per command, then EXEC's
        array of LPUSH replies, or its refusal when a command was refused as it was queued."""
        conn, outgoing = staged.conn, staged.outgoing
        sent: list = []
        failed: list[tuple[Fire, str]] = []
        try:
            try:
                conn.send_packed_command([EXEC], check_health=False)
                replies = _Replies(conn, refused)
                replies.take(1 + staged.commands)
                (done,) = replies.lines(1)
                results = iter(replies.take(staged.commands)) if done.startswith(b"*") else None
            except Exception as exc:  # the connection: nothing is known to be queued
                conn.disconnect()
                return sent, [(o.fire, f"{type(exc).__name__}: {exc}"[:1000]) for o in outgoing], exc
            if results is None:
                why = f"ResponseError: {done[1:].decode(errors='replace')}"[:1000]
                return sent, [(o.fire, why) for o in outgoing], None
            _tally(outgoing, results, sent, failed)
        finally:
            self.channel.client.connection_pool.release(conn)
        return sent, failed, None

    def _round(self, outgoing: Sequence[Outgoing], start: int) -> tuple[int, tuple[bytes, int]]:
        """The fires from ``start`` that fill one round: (past the last, (their packed commands, how many))."""
        packed, end, size = [], start, 0
        while end < len(outgoing) and len(packed) < CHUNK and size < CHUNK_BYTES:
            for key, payload in outgoing[end].pushes:
                packed.append(self._pack(key, payload))
                size += len(packed[-1])
            end += 1
        return end, (b"".join(packed), len(packed))

    def _pack(self, key: str, payload: str | bytes) -> bytes:
        """``LPUSH key payload`` in RESP, as redis-py would encode it (UTF-8)."""
        head = self._heads.get(key)
        if head is None:
            name = key.encode()
            head = self._heads[key] = b"*3\r\n$5\r\nLPUSH\r\n$%d\r\n%s\r\n" % (len(name), name)
        data = payload.encode() if isinstance(payload, str) else payload
        return b"%s$%d\r\n%s\r\n" % (head, len(data), data)


def _tally(items: Sequence[Outgoing], replies: Iterator[Any], sent: list, failed: list[tuple[Fire, str]]) -> None:
    """Each fire into ``sent`` when every reply to its commands is a success, else into ``failed`` with the first
    refusal."""
    for item in items:
        errors = [r for r in (next(replies) for _ in item.pushes) if isinstance(r, Exception)]
        if errors:
            failed.append((item.fire, f"{type(errors[0]).__name__}: {errors[0]}"[:1000]))
        else:
            sent.append(item.fire.id)


def _connection(pool: Any) -> Any:
    try:
        return pool.get_connection()
    except TypeError:  # redis-py before 5.3 wants a command name
        return pool.get_connection("LPUSH")


class _Staged:
    """A round written inside MULTI, not yet executed: its connection, its fires and how many commands."""

    def __init__(self, conn: Any, outgoing: tuple[Outgoing, ...], commands: int) -> None:
        self.conn, self.outgoing, self.commands = conn, outgoing, commands

    def holds(self, outgoing: Sequence[Outgoing]) -> bool:
        """Whether these are the fires staged, in order."""
        return len(outgoing) == len(self.outgoing) and all(
            a is b for a, b in zip(outgoing, self.outgoing, strict=True))


class _Replies:
    """The replies to rounds of LPUSH commands, in order: an integer or an error each, so one line each.

    Read from the socket in large reads and counted by their line ends (a reply to LPUSH never spans lines, and
    a count is never negative, so a '-' can only start an error). With rounds in flight, a read may bring the
    start of the next round's replies: it stays here for that round. redis-py's parser, one reply per call, is
    kept for a connection whose socket is not at hand.
    """

    def __init__(self, conn: Any, refused: type[Exception]) -> None:
        self.conn, self.refused = conn, refused
        self.sock = getattr(conn, "_sock", None)
        self.buffer = bytearray()

    def take(self, n: int) -> list[Any]:
        """The next ``n`` replies: None for each LPUSH done, the error for each refused."""
        if self.sock is None:
            return [_reply(self.conn, self.refused) for _ in range(n)]
        lines, any_refused = self._lines(n)
        if not any_refused:
            return [None] * n
        return [self.refused(line[1:].decode(errors="replace")) if line.startswith(b"-") else None
                for line in lines]

    def lines(self, n: int) -> list[bytes]:
        """The next ``n`` reply lines as they came (without their line ends)."""
        return self._lines(n)[0]

    def _lines(self, n: int) -> tuple[list[bytes], bool]:
        """The next ``n`` lines, and whether any is a refusal."""
        while self.buffer.count(b"\r\n") < n:
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("Redis closed the connection")
            self.buffer += data
        data = bytes(self.buffer)
        lines = data.split(b"\r\n", n)
        rest = lines.pop()  # past the n-th reply: the next round's
        self.buffer = bytearray(rest)
        return lines, data.find(b"-", 0, len(data) - len(rest)) >= 0


def _reply(conn: Any, refused: type[Exception]) -> Any:
    """One reply; a command Redis refused (``refused``: redis-py's ResponseError) gives its error, not raised."""
    try:
        return conn.read_response()
    except refused as exc:
        return exc
