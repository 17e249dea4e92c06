"""`runledger-beat demo`: the scheduler at work with no installed service (kept apart from the library).

runner.py starts an embedded PostgreSQL, a real `celery worker` and a real
`celery beat -S runledger` on kombu's filesystem broker in a temporary folder;
app.py is the Celery app they run.
"""

from __future__ import annotations

from .runner import main, run_demo

__all__ = ["main", "run_demo"]
