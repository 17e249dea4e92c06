"""Celery's in-process fixtures beside pytest-celery and runledger's plugin, as a user's conftest.py has them.

pytest-celery 1.x's plugin re-exports Celery's in-process fixtures (``celery_app``, ``celery_config``, ...) but
its own ``celery_worker`` starts a Docker container and shadows Celery's (pytest-celery#442). A fixture a
conftest.py names wins over a plugin's, so importing Celery's here brings the in-process worker back for the
tests in this folder, with no command-line flags.
"""

from __future__ import annotations

import logging
import uuid

import pytest
from celery.contrib.pytest import celery_worker  # noqa: F401 -- the in-process worker, not pytest-celery's Docker one
from kombu import Connection

QUEUE = f"rl_inproc_{uuid.uuid4().hex[:10]}"


@pytest.fixture(scope="session")
def celery_config(amqp_url):
    """Celery's fixtures on the real RabbitMQ, on a queue of this session's own (results come back over rpc)."""
    yield {"broker_url": amqp_url, "result_backend": "rpc://", "task_default_queue": QUEUE,
           "broker_connection_retry_on_startup": False}
    with Connection(amqp_url) as conn:
        conn.default_channel.queue_delete(QUEUE)


@pytest.fixture(autouse=True)
def _logging_as_pytest_left_it():
    """Celery's in-process worker sets up logging for its whole process (the root logger's level among it: ERROR);
    the tests that run after it in the same process keep pytest's."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    root.setLevel(level)
    root.handlers[:] = handlers
