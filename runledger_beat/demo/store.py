"""The demo's own statements (demo.sql): its runs table, its schedules, what it prints."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from importlib import resources

from psycopg.types.json import Jsonb

from ..db.queries import named_statements
from ..db.store import Store

_SQL = named_statements([resources.files("runledger_beat.demo").joinpath("demo.sql")])


class DemoStore(Store):
    """The demo's statements over one connection (search_path on the demo's schema)."""

    def demo_setup(self, schedules: Sequence[tuple[str, str, int]]) -> None:
        """Create the demo's runs table and its (name, cron, max jitter) schedules."""
        self.conn.execute(_SQL["demo_create_runs_table"])
        for name, cron, jitter in schedules:
            self.conn.execute(_SQL["demo_insert_schedule"], {
                "id": uuid.uuid4(), "name": name, "template": Jsonb({"args": [name], "kwargs": {}}),
                "cron": cron, "jitter": jitter})

    def demo_record_run(self, task_id: str, who: str, scheduled_for: str | None, worker: str) -> None:
        """The demo task ran."""
        self.conn.execute(_SQL["demo_record_run"],
                          {"task_id": task_id, "who": who, "scheduled_for": scheduled_for, "worker": worker})

    def demo_progress(self) -> list[dict]:
        """Every fire with its sent and run times."""
        return self._all(_SQL["demo_progress"])

    def demo_unfinished(self) -> int:
        """Fires sent but not yet run."""
        return int(self._one(_SQL["demo_unfinished"])["n"])

    def demo_summary(self) -> list[dict]:
        """Per schedule: fires, sent, executed, slots."""
        return self._all(_SQL["demo_summary"])
