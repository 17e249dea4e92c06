"""The old import path of the Celery scheduler class: ``runledger_beat.scheduler.Scheduler``."""

from __future__ import annotations

from .beat.scheduler import Scheduler

__all__ = ["Scheduler"]
