"""Celery apps for the doctor tests: one whose broker answers, one whose broker URL is wrong."""

from __future__ import annotations

import os

from celery import Celery

good = Celery("doctor_good", broker=os.environ.get("RUNLEDGER_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672//"),
              set_as_current=False)
wrong_broker = Celery("doctor_wrong", broker="amqp://guest:secret@127.0.0.1:1//", set_as_current=False)
