"""runledger_beat: a Celery beat scheduler backed by Postgres, with a run ledger.

Use ``celery -A proj beat -S runledger_beat.Scheduler`` (or ``-S runledger``).
"""

from __future__ import annotations

from typing import Any

from .version import __version__

__all__ = ["Scheduler", "install", "schedule_info", "__version__"]


def __getattr__(name: str) -> Any:
    # Imported lazily so `import runledger_beat` stays cheap for the CLI and workers.
    if name == "Scheduler":
        from .beat.scheduler import Scheduler
        return Scheduler
    if name == "schedule_info":
        from .payload import schedule_info
        return schedule_info
    if name == "install":
        from .worker import install
        return install
    raise AttributeError(name)
