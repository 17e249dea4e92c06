"""django-celery-beat's tables as `import-from django-celery-beat` reads them (sql/imports.sql), read-only."""

from __future__ import annotations

from typing import Any

import psycopg

from . import queries

#: Schedule tables by the PeriodicTask column that points at them (older versions lack some).
SCHEDULE_TABLES = {"interval_id": ("django_celery_beat_intervalschedule", "dcb_intervals"),
                   "crontab_id": ("django_celery_beat_crontabschedule", "dcb_crontabs"),
                   "clocked_id": ("django_celery_beat_clockedschedule", "dcb_clocked"),
                   "solar_id": ("django_celery_beat_solarschedule", "dcb_solar")}
TASKS_TABLE = "django_celery_beat_periodictask"


class DjangoCeleryBeatStore:
    """PeriodicTask rows and the schedules they point at, as plain dicts (columns by name, whatever version)."""

    def __init__(self, conn: psycopg.Connection) -> None:
        self.conn = conn

    def _rows(self, statement: str) -> list[dict[str, Any]]:
        return [r["row"] for r in self.conn.execute(statement).fetchall()]

    def tables(self) -> set[str]:
        """Names of the django-celery-beat tables in the schema."""
        return {r["name"] for r in self.conn.execute(queries.dcb_tables).fetchall()}

    def periodic_tasks(self) -> list[dict[str, Any]]:
        """Every PeriodicTask row, by name."""
        return self._rows(queries.dcb_periodic_tasks)

    def schedules(self, tables: set[str]) -> dict[str, dict[Any, dict[str, Any]]]:
        """{task column: {id: schedule row}} for each schedule table present."""
        return {column: ({r["id"]: r for r in self._rows(getattr(queries, statement))} if table in tables else {})
                for column, (table, statement) in SCHEDULE_TABLES.items()}
