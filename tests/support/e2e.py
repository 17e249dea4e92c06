"""Helpers for tests that run real beats and workers."""

from __future__ import annotations

import uuid

import psycopg
from kombu import Connection

from .procs import EXECUTIONS_DDL, celery_env


def prepare(db: psycopg.Connection, pg_dsn: str, schema: str, broker: str, **kw) -> tuple[dict, str]:
    """Create the executions table and return (env, queue) for subprocesses of this test."""
    db.execute(EXECUTIONS_DDL)
    queue = f"rlq_{uuid.uuid4().hex[:10]}"
    return celery_env(pg_dsn, schema, broker, queue, **kw), queue


def delete_queue(broker: str, queue: str) -> None:
    try:
        with Connection(broker, connect_timeout=3) as conn:
            conn.default_channel.queue_delete(queue)
    except Exception:
        pass


def queued_ids(broker: str, queue: str) -> list[str]:
    """The task id of every message in a RabbitMQ queue (taken off it), in order, repeats included."""
    ids = []
    with Connection(broker) as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            ids.append(message.properties["application_headers"]["id"])
    return ids


def count(db: psycopg.Connection, query: str, *params) -> int:
    return db.execute(query, params).fetchone()["n"]
