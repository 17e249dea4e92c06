"""A fire's message from cached pieces of Celery's own message for fires of its kind.

Fires of one *kind* (task, schedule options, payload shape, channel) make
messages that differ in a few places only: the task id (``id``, ``root_id``,
the ledger header, ``correlation_id``), ``argsrepr``/``kwargsrepr``, the
``_schedule`` header, the signature (``runledger_sig``, with a signing key) and
the body. A ``Template`` keeps everything else as the
bytes py-amqp wrote for a fire Celery built in full, and encodes only those
places per fire: about a fifth of the cost of running ``send_task_message``
and py-amqp's header-table encoder per fire.

Templates are checked, never trusted: ``amqp.Encoder`` builds the first
fires of each kind both ways and keeps the template only when the bytes are
identical; a kind whose message depends on the fire elsewhere (an ``expires``
counted from the instant, compression, another protocol, a serializer that
does not round-trip) fails that check and is always built by Celery. ``Kinds``
keeps that book for both fast paths.

``RedisTemplate`` does the same for kombu's Redis transport, whose message is a
JSON document: the captured dict with the per-fire places replaced, dumped as
the transport dumps it (``redis_publisher.RedisPublisher`` checks it the same way).
"""

from __future__ import annotations

import json
from base64 import b64encode
from collections.abc import Callable
from struct import Struct
from typing import Any

from amqp import spec
from amqp.basic_message import Message
from amqp.serialization import dumps
from celery.utils.saferepr import saferepr
from kombu.serialization import dumps as serialize
from kombu.serialization import registry
from kombu.utils.json import dumps as json_dumps

from ..payload import LEDGER_HEADER, SCHEDULE_HEADER, task_arguments
from ..signing import SIG_HEADER, app_key, sign

_FRAME = Struct(">BHI")
_U16 = Struct(">H")
_U32 = Struct(">I")
_HEADER_START = Struct(">HHQ")
_FRAME_END = b"\xce"
#: Headers that carry the task id.
ID_HEADERS = frozenset({"id", "root_id", LEDGER_HEADER})
_SCHEDULE_KEY = bytes((len(SCHEDULE_HEADER),)) + SCHEDULE_HEADER.encode()
#: Distinct argument lists whose argsrepr/kwargsrepr entries are remembered (saferepr is the dearest part).
MAX_REPRS = 4096
#: Headers a template encodes per fire (everything else is fixed for the kind).
PER_FIRE_HEADERS = ID_HEADERS | {"argsrepr", "kwargsrepr", SCHEDULE_HEADER, SIG_HEADER}
#: Headers whose value depends on the moment of building: a kind that sets one is not templated.
TIMED_HEADERS = ("eta", "expires")
#: Fires of a kind built by Celery in full, and compared byte for byte with the kind's template, before the
#: template alone builds them.
VERIFY_FIRES = 2
#: Kinds remembered at most (past that the book starts afresh).
MAX_KINDS = 1000


def kind_of(fire: Any, channel_id: int, frame_max: int) -> tuple:
    """What fires must share to share a template: task, options, payload shape, channel."""
    options = fire.options
    payload = fire.payload
    # The payload's shape decides which headers the message has (task_arguments, messages.message_headers).
    shape = (type(payload) is dict, isinstance(payload, dict) and SCHEDULE_HEADER in payload)
    return (fire.job_type, json.dumps(options, sort_keys=True) if options else "", shape, channel_id, frame_max)


class Kind:
    """One kind of fire: its template (None: Celery builds every one), how many fires Celery's own bytes
    confirmed it, and what else the publisher keeps for the kind (the entities its messages need declared)."""

    __slots__ = ("template", "checked", "declare")

    def __init__(self, template: Any, declare: tuple) -> None:
        self.template, self.checked, self.declare = template, 0, declare


class Kinds(dict):
    """The kinds a publisher has met (``kind_of`` key -> ``Kind``), for both fast paths: a template is used
    once VERIFY_FIRES fires built by Celery matched it; one that cannot be made, or missed once, leaves
    its kind to Celery for good."""

    def settled(self, key: tuple) -> Kind | None:
        """The kind once its template proved itself or failed (``template`` says which); None while checked."""
        kind = self.get(key)
        return kind if kind is not None and kind.checked >= VERIFY_FIRES else None

    def check(self, key: tuple, make: Callable[[], Any], matches: Callable[[Any], bool],
              declare: tuple = ()) -> None:
        """Fold in one fire Celery just built: the kind's template is made from the first (``make``), then
        compared with each (``matches``) until it is settled."""
        kind = self.get(key)
        if kind is None:
            if len(self) >= MAX_KINDS:
                self.clear()
            kind = self[key] = Kind(make(), declare)
        if kind.template is not None and matches(kind.template):
            kind.checked += 1
        else:
            kind.template = None
            kind.checked = VERIFY_FIRES  # settled: Celery builds every fire of this kind


def _shortstr(value: str) -> bytes:
    data = value.encode("utf-8", "surrogatepass")
    return bytes((len(data),)) + data


def _str_item(key: str, value: str) -> bytes:
    """One header-table entry with a string value, as py-amqp's _write_table writes it."""
    data = value.encode("utf-8", "surrogatepass")
    return _shortstr(key) + b"S" + _U32.pack(len(data)) + data


def _schedule_item(value: Any) -> bytes:
    """The ``_schedule`` entry: a table of strings written directly, anything else by py-amqp."""
    if type(value) is dict and all(type(k) is str and type(v) is str for k, v in value.items()):
        table = b"".join([_str_item(k, v) for k, v in value.items()])
        return _SCHEDULE_KEY + b"F" + _U32.pack(len(table)) + table
    return _item(SCHEDULE_HEADER, value)


def _item(key: str, value: Any) -> bytes:
    """One header-table entry of any value, by py-amqp itself (a one-entry table without its length)."""
    return dumps("F", [{key: value}])[4:]


class NotTemplatable(ValueError):
    """The captured message has a part that depends on the fire where a template cannot follow it."""


def _check_templatable(headers: dict, props: dict, fire_id: str, key: bytes | None) -> None:
    """Refuse a message whose fixed parts would differ per fire, or whose id is not where Celery puts it."""
    if "compression" in headers or any(headers.get(k) is not None for k in TIMED_HEADERS):
        raise NotTemplatable("a compressed or timed message")
    if (SIG_HEADER in headers) != (key is not None):
        raise NotTemplatable("a signature without the app's key, or the key without a signature")
    if any(headers.get(k) != fire_id for k in ID_HEADERS if k in headers) \
            or props.get("correlation_id") != fire_id:
        raise NotTemplatable("the task id is not where Celery puts it")


class Template:
    """The frames of one kind's messages, all but the per-fire places encoded once."""

    def __init__(self, app: Any, fire_id: str, message: Message, embed: Any, method_args: bytes,
                 channel_id: int, frame_max: int) -> None:
        props = dict(message.properties)
        headers = props.get("application_headers") or {}
        self.key = app_key(app)
        _check_templatable(headers, props, fire_id, self.key)
        self.channel_id = channel_id
        self.chunk = frame_max - 8
        self.parts = FireParts(app, props.get("content_type"), props.get("content_encoding"), embed)
        # The header table: runs of fixed entries as bytes, per-fire entries by name.
        self.table: list[bytes | str] = []
        fixed: list[bytes] = []
        for key, value in headers.items():
            if key in PER_FIRE_HEADERS:
                if fixed:
                    self.table.append(b"".join(fixed))
                    fixed = []
                self.table.append(key)
            else:
                fixed.append(_item(key, value))
        if fixed:
            self.table.append(b"".join(fixed))
        # The properties around the table; correlation_id, the only other per-fire one, comes after it.
        flags, before, after = 0, [], []
        shift, side = 15, before
        for key, kind in Message.PROPERTIES:
            value = props.get(key)
            if value is not None:
                if shift == 0:
                    raise NotTemplatable("more properties than one flag word holds")
                flags |= 1 << shift
                if key == "application_headers":
                    side = after
                elif key == "correlation_id":
                    after.append(None)
                else:
                    side.append(dumps(kind, [value]))
            shift -= 1
        if "application_headers" not in props:
            raise NotTemplatable("no header table")
        self.props_before = _U16.pack(flags) + b"".join(before)
        self.props_after = after
        self.method_frame = _FRAME.pack(1, channel_id, len(method_args) + 4) \
            + spec.Basic.Publish[0].to_bytes(2, "big") + spec.Basic.Publish[1].to_bytes(2, "big") \
            + method_args + _FRAME_END

    def frames(self, fire: Any) -> bytes:
        """The frames of ``fire``'s message (a fire of this template's kind)."""
        fire_id = str(fire.id)
        body, reprs = self.parts.of(fire, _amqp_reprs)
        parts = []
        for part in self.table:
            if type(part) is bytes:
                parts.append(part)
            elif part in ID_HEADERS:
                parts.append(_str_item(part, fire_id))
            elif part == "argsrepr":
                parts.append(reprs[0])
            elif part == "kwargsrepr":
                parts.append(reprs[1])
            elif part == SIG_HEADER:
                parts.append(_str_item(SIG_HEADER, sign(self.key, fire_id, fire.job_type)))  # type: ignore[arg-type]
            else:
                parts.append(_schedule_item(fire.payload[SCHEDULE_HEADER]))
        table = b"".join(parts)
        correlation = _shortstr(fire_id)
        props = b"".join([self.props_before, _U32.pack(len(table)), table,
                          *(correlation if p is None else p for p in self.props_after)])
        header = _HEADER_START.pack(spec.Basic.Publish[0], 0, len(body)) + props
        channel = self.channel_id
        out = [self.method_frame, _FRAME.pack(2, channel, len(header)), header, _FRAME_END]
        for i in range(0, len(body), self.chunk):
            piece = body[i:i + self.chunk]
            out += [_FRAME.pack(3, channel, len(piece)), piece, _FRAME_END]
        return b"".join(out)


def _amqp_reprs(argsrepr: str, kwargsrepr: str) -> tuple[bytes, bytes]:
    return _str_item("argsrepr", argsrepr), _str_item("kwargsrepr", kwargsrepr)


class FireParts:
    """The per-fire body of a kind's messages and its argsrepr/kwargsrepr, as Celery makes them.

    ``of(fire, shape)`` serializes the body and gives the reprs in the form ``shape``
    makes of them, remembered by body (saferepr is the dearest part of a message).
    """

    def __init__(self, app: Any, content_type: Any, content_encoding: Any, embed: Any) -> None:
        self.argsrepr_max = app.amqp.argsrepr_maxsize
        self.kwargsrepr_max = app.amqp.kwargsrepr_maxsize
        self.repr_levels = app.conf.task_repr_maxlevels
        self.content_encoding = content_encoding or "utf-8"
        self.serializer = _serializer_of(content_type)
        self.embed = embed
        self._reprs: dict[bytes, Any] = {}

    def of(self, fire: Any, shape: Any) -> tuple[bytes, Any]:
        """(body bytes, ``shape(argsrepr, kwargsrepr)``) of ``fire``'s message."""
        args, kwargs = task_arguments(fire.payload)
        body = serialize((args, kwargs, self.embed), serializer=self.serializer)[2]
        if isinstance(body, str):
            body = body.encode(self.content_encoding)
        reprs = self._reprs.get(body)
        if reprs is None:
            if len(self._reprs) >= MAX_REPRS:
                self._reprs.clear()
            # As Celery's as_task_v2 writes them: empty arguments as () and {}.
            reprs = self._reprs[body] = shape(
                saferepr(args or (), self.argsrepr_max, maxlevels=self.repr_levels),
                saferepr(kwargs or {}, self.kwargsrepr_max, maxlevels=self.repr_levels))
        return body, reprs


class RedisTemplate:
    """One kind's messages as kombu's Redis transport writes them: the captured message (a dict, after the
    transport's augmenting) with the per-fire places replaced, then dumped as the transport dumps it."""

    def __init__(self, app: Any, fire_id: str, message: dict, embed: Any, keys: tuple[str, ...]) -> None:
        headers = message.get("headers") or {}
        props = message.get("properties") or {}
        self.key = app_key(app)
        _check_templatable(headers, props, fire_id, self.key)
        if props.get("body_encoding") != "base64" or "delivery_tag" not in props:
            raise NotTemplatable("a body encoding the template does not follow")
        self.keys = keys
        self.message, self.headers, self.props = dict(message), dict(headers), dict(props)
        self.ids = [k for k in ID_HEADERS if k in headers]
        self.schedule = SCHEDULE_HEADER in headers
        self.parts = FireParts(app, message.get("content-type"), message.get("content-encoding"), embed)

    def payload(self, fire: Any, delivery_tag: str) -> str:
        """The JSON text LPUSHed for ``fire`` (a fire of this template's kind)."""
        fire_id = str(fire.id)
        body, (argsrepr, kwargsrepr) = self.parts.of(fire, _pair)
        headers = self.headers.copy()
        for key in self.ids:
            headers[key] = fire_id
        headers["argsrepr"], headers["kwargsrepr"] = argsrepr, kwargsrepr
        if self.schedule:
            headers[SCHEDULE_HEADER] = fire.payload[SCHEDULE_HEADER]
        if self.key is not None:
            headers[SIG_HEADER] = sign(self.key, fire_id, fire.job_type)
        props = self.props.copy()
        props["correlation_id"], props["delivery_tag"] = fire_id, delivery_tag
        message = self.message.copy()
        message["body"], message["headers"], message["properties"] = b64encode(body).decode(), headers, props
        return json_dumps(message)


def _pair(argsrepr: str, kwargsrepr: str) -> tuple[str, str]:
    return argsrepr, kwargsrepr


def _serializer_of(content_type: Any) -> str:
    name = registry.type_to_name.get(content_type)
    if name is None:
        raise NotTemplatable(f"no serializer for content type {content_type!r}")
    return name

