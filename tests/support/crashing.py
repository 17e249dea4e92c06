"""A beat that SIGKILLs itself at a chosen point of the fire pipeline (crash-recovery tests).

Run as ``celery beat -S tests.support.crashing:Scheduler`` with RL_CRASH_POINT set to
``after_commit`` (fires committed, none published) or ``after_publish`` (the
broker confirmed, the ledger not yet marked sent).
"""

from __future__ import annotations

import os
import signal

from runledger_beat.beat.pipeline import FirePipeline
from runledger_beat.beat.scheduler import Scheduler as RunledgerScheduler

POINT = os.environ.get("RL_CRASH_POINT", "")


class CrashingPipeline(FirePipeline):
    """The fire pipeline with its hooks turned into SIGKILLs."""

    def after_commit(self) -> None:
        if POINT == "after_commit":
            os.kill(os.getpid(), signal.SIGKILL)

    def after_publish(self) -> None:
        if POINT == "after_publish":
            os.kill(os.getpid(), signal.SIGKILL)


class Scheduler(RunledgerScheduler):
    """runledger_beat's scheduler over the crashing pipeline."""

    pipeline_class = CrashingPipeline
