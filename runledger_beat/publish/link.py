"""The broker connection of one beat and the confirm channel opened on it, each opened lazily.

One connection attempt at a time (the scheduler owns the back-off); after an error the caller drops
everything with ``release`` and the next use opens afresh.
"""

from __future__ import annotations

import contextlib
from typing import Any

from . import amqp
from .redis import supported as redis_supported


class BrokerLink:
    """Opens, hands out and drops the broker connection and its confirm channel (RabbitMQ)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.conn: Any = None
        self.channel: amqp.ConfirmChannel | None = None

    def connection(self) -> Any:
        """The kombu connection, connected (one attempt; raises on failure)."""
        if self.conn is None:
            conn = self.app.connection_for_write()
            if redis_supported(conn):
                # kombu's Redis client waits on a partitioned server with no timeout: give up after the wait
                # beat allows a RabbitMQ confirm, unless the app sets its own (broker_transport_options).
                conn.transport_options.setdefault("socket_timeout", amqp.CONFIRM_TIMEOUT)
            try:
                conn.ensure_connection(max_retries=0)  # one attempt: the scheduler owns the back-off
            except BaseException:
                conn.release()
                raise
            self.conn = conn
        return self.conn

    def confirm_channel(self) -> amqp.ConfirmChannel:
        """A usable channel in confirm mode on the connection (RabbitMQ), reopened when it broke."""
        if self.channel is None or not self.channel.usable():
            self.channel = amqp.ConfirmChannel(self.connection())
        return self.channel

    def forget_channel(self, channel: amqp.ConfirmChannel) -> None:
        """The broker closed ``channel``: the next use opens another."""
        if self.channel is channel:
            self.channel = None

    def is_connection_error(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the connection itself is gone (not just a channel)."""
        return amqp.is_connection_error(exc, self.conn)

    def release(self) -> None:
        """Drop the connection and the channel (after an error, or at shutdown), never waiting long."""
        if self.conn is not None:
            with contextlib.suppress(Exception):
                amqp.release_within(self.conn)
        self.conn = None
        self.channel = None
