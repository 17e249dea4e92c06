"""What the worker hook runs (sql/worker.sql), and the two outbox statements it shares with beat to publish
the fire its run released (overlap buffer_one)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from .store import Store


class WorkerStore(Store):
    """What the worker hook runs."""

    def start_run(self, job_id: str, task: str, worker: str | None, retries: int) -> bool:
        """Move a not-yet-started ledger row of ``task`` to started (the duplicate guard); False if it was not."""
        return self._one(self.q.worker_claim_job,
                         {"id": job_id, "task": task, "worker": worker, "retries": retries}) is not None

    def worker_seen(self, hostname: str, pid: int) -> None:
        """A worker with the ledger hook reports itself."""
        self.conn.execute(self.q.worker_seen, {"hostname": hostname, "pid": pid})

    def count_duplicate(self, job_id: str, task: str) -> str | None:
        """Count a delivery of a run already started or finished; its status, None when there is no row of ``task``."""
        row = self._one(self.q.worker_count_duplicate, {"id": job_id, "task": task})
        return None if row is None else row["status"]

    def mark_retry(self, job_id: str, task: str, retries: int, error: str) -> None:
        """A run of ``task`` asked to retry."""
        self.conn.execute(self.q.worker_mark_retry, {"id": job_id, "task": task, "retries": retries, "error": error})

    def mark_success(self, job_id: str, task: str) -> None:
        """A run of ``task`` finished successfully."""
        self.conn.execute(self.q.worker_mark_success, {"id": job_id, "task": task})

    def mark_failure(self, job_id: str, task: str, error: str) -> None:
        """A run of ``task`` failed."""
        self.conn.execute(self.q.worker_mark_failure, {"id": job_id, "task": task, "error": error})

    def mark_revoked(self, job_id: str, task: str, note: str | None) -> None:
        """A run of ``task`` was revoked or expired."""
        self.conn.execute(self.q.worker_mark_revoked, {"id": job_id, "task": task, "error": note})

    def release_buffered(self, finished_job_id: str, task: str, limit: int = 1) -> list[dict]:
        """The buffered fire of the schedule of this finished run of ``task`` becomes pending (released), unless
        the schedule has another live run; returns it to publish."""
        return self._all(self.q.overlap_release_buffered, {"job_id": finished_job_id, "task": task, "limit": limit})

    def mark_sent(self, fire_ids: Sequence[uuid.UUID]) -> None:
        """Fires the broker confirmed."""
        self.conn.execute(self.q.mark_sent, {"ids": list(fire_ids)})
