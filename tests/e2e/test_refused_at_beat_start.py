"""A real `celery beat -S runledger` meeting beat_schedule entries it cannot store: one error line per refused
entry at start, naming it and why, and the other entries scheduled."""

from __future__ import annotations

import sys

from runledger_beat import api
from tests.support.procs import Proc, celery_env
from tests.support.services import wait_for


def test_beat_logs_one_error_per_refused_entry_and_schedules_the_rest(db, pg_dsn, schema):
    env = celery_env(pg_dsn, schema, "memory://", "unused")
    beat = Proc([sys.executable, "-m", "celery", "-A", "tests.support.refused_app", "beat", "-S", "runledger",
                 "--loglevel", "INFO", "--pidfile="], env, "refused-beat")
    try:
        wait_for(lambda: {s["name"] for s in api.list_schedules(db)} == {"weekly", "spread"}, timeout=60,
                 message="beat to import the two storable entries")
        wait_for(lambda: "beat_schedule imported" in beat.log(), timeout=30, message="the import's summary line")
        errors = [line for line in beat.log().splitlines() if "ERROR" in line and "refused" in line]
        assert len(errors) == 2, beat.log()
        assert any("beat_schedule['sunrise']: solar schedules are not supported" in e for e in errors)
        assert any("beat_schedule['moon']: custom schedule class" in e for e in errors)
        assert "refused=['moon', 'sunrise']" in beat.log() and beat.alive()
    finally:
        beat.stop()
