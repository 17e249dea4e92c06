"""Upgrades: a database at every earlier migration level, with rows in it, migrated to the current level.

For each level N below the latest: migrate to N, write rows with raw SQL valid at N (a cron, an interval and a
one-off schedule, a paused one; ledger rows of several statuses; where the tables exist a fault and a
quarantine, a worker, a calendar and skip dates, a paused note, audit rows, a beat row), then run the current
`runledger-beat migrate`: every row keeps its values, each migration is recorded once and in order, and a
real `celery beat` fires every schedule that should fire (and not the paused or quarantined ones).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from runledger_beat.db import connect, migrate, migration_files

from ..support.e2e import delete_queue, prepare
from ..support.procs import ROOT, start_beat
from ..support.services import wait_for

SHIPPED = migration_files()
LATEST = SHIPPED[-1][0]
CLI = Path(sys.executable).parent / "runledger-beat"
#: Each table's key, and the level that created it.
TABLES = {"job_schedules": ("id", 1), "jobs": ("id", 1), "schedule_faults": ("schedule_id", 3),
          "workers": ("hostname", 3), "calendars": ("name", 4), "schedule_changes": ("id", 4), "beats": ("id", 5)}

#: (first level the statement is valid at, SQL). Runs with search_path on the schema; now() is the seeding time.
SEED = [
    (1, """INSERT INTO job_schedules (id, name, job_type, payload_template, kind, cron_expr, timezone, next_fire_at,
                                      options, max_jitter_seconds, source)
           VALUES (gen_random_uuid(), 'up-cron', 'rl.record', '{"args": ["cron"], "kwargs": {"n": 1}}', 'cron',
                   '* * * * * *', 'Europe/Paris', now(), '{"expires": 3600}', 0, 'config')"""),
    (1, """INSERT INTO job_schedules (id, name, job_type, payload_template, kind, interval_seconds, anchor_at,
                                      next_fire_at)
           VALUES (gen_random_uuid(), 'up-interval', 'rl.record', '{"args": ["interval"], "kwargs": {}}',
                   'interval', 1, now() - interval '1 hour', now())"""),
    (1, """INSERT INTO job_schedules (id, name, job_type, payload_template, kind, cron_expr, run_at, next_fire_at)
           VALUES (gen_random_uuid(), 'up-once', 'rl.record', '{"args": ["once"], "kwargs": {}}', 'once', NULL,
                   now(), now())"""),
    (1, """INSERT INTO job_schedules (id, name, job_type, cron_expr, is_active, next_fire_at)
           VALUES (gen_random_uuid(), 'up-paused', 'rl.record', '* * * * * *', false, NULL)"""),
    # Ledger rows of the cron schedule: finished, failed, revoked, skipped, sent, and one still pending.
    (1, """INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, payload, options, status,
                             created_at, sent_at, started_at, finished_at, dispatch_attempts, last_error, worker,
                             retries)
           SELECT gen_random_uuid(), s.id, s.name, now() - v.ago, s.job_type,
                  jsonb_build_object('args', '["cron"]'::jsonb, 'kwargs', '{}'::jsonb), '{"expires": 3600}',
                  v.status, now() - v.ago, now() - v.ago + v.sent, now() - v.ago + v.started,
                  now() - v.ago + v.finished, v.attempts, v.error, v.worker, v.retries
             FROM job_schedules s,
                  (VALUES (interval '2 days', 'success', interval '5 ms', interval '1 s', interval '3 s', 1, NULL,
                           'celery@w1', 0),
                          (interval '1 day', 'failure', interval '5 ms', interval '1 s', interval '2 s', 1,
                           'ValueError: boom', 'celery@w2', 2),
                          (interval '20 hours', 'revoked', interval '5 ms', NULL, NULL, 1, NULL, NULL, 0),
                          (interval '10 hours', 'skipped', NULL, NULL, NULL, 0, NULL, NULL, 0),
                          (interval '3 hours', 'sent', interval '7 ms', NULL, NULL, 1, NULL, NULL, 0),
                          (interval '1 hour', 'pending', NULL, NULL, NULL, 3, 'broker down', NULL, 0))
                  AS v(ago, status, sent, started, finished, attempts, error, worker, retries)
            WHERE s.name = 'up-cron'"""),
    # A manual trigger written without an instant (migration 0006 gives it its created_at).
    (1, """INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, payload, stage, status,
                             created_at, sent_at)
           SELECT gen_random_uuid(), id, name, NULL, job_type, '{"args": [], "kwargs": {}}', 'manual', 'sent',
                  now() - interval '30 minutes', now() - interval '30 minutes'
             FROM job_schedules WHERE name = 'up-interval'"""),
    (2, """UPDATE jobs SET options = '{"expires": 3600, "priority": 3}' WHERE status = 'failure'"""),
    # A schedule whose last try failed (retry due: it fires, which clears the fault) and a quarantined one.
    (3, """INSERT INTO job_schedules (id, name, job_type, cron_expr, next_fire_at)
           VALUES (gen_random_uuid(), 'up-faulted', 'rl.record', '* * * * * *', now()),
                  (gen_random_uuid(), 'up-quarantined', 'rl.record', '* * * * * *', now())"""),
    (3, """INSERT INTO schedule_faults (schedule_id, failures, last_error, failed_at, retry_at, quarantined_at)
           SELECT id, CASE WHEN name = 'up-faulted' THEN 2 ELSE 5 END, 'planning failed: ' || name,
                  now() - interval '2 minutes', now() - interval '1 minute',
                  CASE WHEN name = 'up-quarantined' THEN now() - interval '1 minute' END
             FROM job_schedules WHERE name IN ('up-faulted', 'up-quarantined')"""),
    (3, "UPDATE jobs SET last_attempt_at = created_at + interval '1 second' WHERE status = 'pending'"),
    (3, "INSERT INTO workers (hostname, pid, seen_at) VALUES ('celery@w1', 4242, now() - interval '1 day')"),
    (4, "INSERT INTO calendars (name, dates) VALUES ('holidays', '{2001-01-01,2001-12-25}')"),
    (4, """INSERT INTO job_schedules (id, name, job_type, cron_expr, skip_dates, calendar, overlap_policy,
                                      overlap_terminate, next_fire_at)
           VALUES (gen_random_uuid(), 'up-calendar', 'rl.record', '* * * * * *', '{2001-07-04}', 'holidays',
                   'buffer_one', true, now())"""),
    (4, """UPDATE job_schedules SET pause_note = 'waiting for the new API', paused_at = now() - interval '1 hour',
                                    paused_by = 'alice', paused_by_application = 'runledger-beat'
            WHERE name = 'up-paused'"""),  # also an UPDATE in the audit log
    (4, """INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, payload, status, created_at,
                             sent_at, started_at, finished_at, backfill)
           SELECT gen_random_uuid(), id, name, now() - interval '3 days', job_type, '{"args": [], "kwargs": {}}',
                  'success', now() - interval '2 hours', now() - interval '2 hours', now() - interval '2 hours',
                  now() - interval '2 hours', true
             FROM job_schedules WHERE name = 'up-calendar'"""),
    (5, """INSERT INTO beats (id, host, pid, version, started_at, last_tick_at)
           VALUES (gen_random_uuid(), 'old-node', 99, '0.0.9', now() - interval '1 day', now() - interval '5 minutes')
    """),
]
#: The schedules that must fire once migrated, by the level that wrote them; paused and quarantined ones never do.
FIRES = {"up-cron": 1, "up-interval": 1, "up-once": 1, "up-faulted": 3, "up-calendar": 4}
SILENT = {"up-paused": 1, "up-quarantined": 3}


def snapshot(conn: psycopg.Connection) -> dict[str, dict[str, dict]]:
    """{table: {key: row as JSON}} of every table of TABLES the schema holds."""
    out = {}
    for table, (key, _) in TABLES.items():
        if conn.execute("SELECT to_regclass(%s) IS NOT NULL AS here", (table,)).fetchone()["here"]:
            rows = conn.execute(f"SELECT to_jsonb(t) AS row FROM {table} t").fetchall()
            out[table] = {str(r["row"][key]): r["row"] for r in rows}
    return out


def cli(pg_dsn: str, schema: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(CLI), "--dsn", pg_dsn, "--schema", schema, *argv], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)


@pytest.mark.parametrize("level", range(1, LATEST), ids=[f"from-{v:04d}" for v, _, _ in SHIPPED[:-1]])
def test_a_database_at_an_earlier_level_migrates_without_loss_and_fires(pg_dsn, bare_schema, amqp_url, level):
    with connect(pg_dsn, "public") as conn:
        migrate(conn, bare_schema, until=level)
    db = connect(pg_dsn, bare_schema, autocommit=True)
    try:
        for since, statement in SEED:
            if since <= level:
                db.execute(statement)
        before = snapshot(db)
        assert set(before) == {t for t, (_, since) in TABLES.items() if since <= level}
        assert len(before["jobs"]) == 7 + (level >= 4) and len(before["job_schedules"]) == 4 + 2 * (level >= 3) + (
            level >= 4)

        # The command line asks for the migration first, then runs it: the missing ones, in order.
        asked = cli(pg_dsn, bare_schema, "list")
        assert (asked.returncode, asked.stderr.strip()) == (
            2, f'error: schema "{bare_schema}" is at migration {level} of {LATEST} (run `runledger-beat migrate`)')
        done = cli(pg_dsn, bare_schema, "migrate")
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == "applied: " + ", ".join(name for v, name, _ in SHIPPED if v > level)
        again = cli(pg_dsn, bare_schema, "migrate")
        assert again.stdout.strip() == "applied: nothing (up to date)"

        recorded = db.execute("SELECT version, name FROM schema_migrations ORDER BY applied_at, version").fetchall()
        assert [(r["version"], r["name"]) for r in recorded] == [(v, name) for v, name, _ in SHIPPED]
        after = snapshot(db)
        assert set(after) == set(TABLES)
        for table, rows in before.items():
            assert set(rows) <= set(after[table]), table
            for key, row in rows.items():
                expected = dict(row)
                if table == "jobs" and row["scheduled_for"] is None and level < 6:
                    expected["scheduled_for"] = row["created_at"]  # 0006: a range partition holds no NULL key
                assert {c: after[table][key][c] for c in expected} == expected, (table, key)
        assert len(after["schedule_changes"]) == len(before.get("schedule_changes", {}))

        # A real beat on the migrated database fires every schedule that should fire, and only those.
        migrated_at = db.execute("SELECT clock_timestamp() AS t").fetchone()["t"]
        env, queue = prepare(db, pg_dsn, bare_schema, amqp_url)
        beat = start_beat(env, f"upgrade-beat-{level}")
        expected = {name for name, since in FIRES.items() if since <= level}
        try:
            def fired() -> set[str]:
                rows = db.execute("SELECT DISTINCT schedule_name AS name FROM jobs WHERE status = 'sent'"
                                  " AND created_at > %s", (migrated_at,)).fetchall()
                return {r["name"] for r in rows}

            wait_for(lambda: expected <= fired(), timeout=45, interval=0.2,
                     message=f"every schedule to fire after the upgrade\n{beat.log()}")
            # The fire left pending before the upgrade goes out too (the recovery sweep republishes it).
            wait_for(lambda: db.execute("SELECT count(*) AS n FROM jobs WHERE status = 'pending'").fetchone()["n"]
                     == 0, timeout=45, interval=0.2, message=f"the old pending fire to be published\n{beat.log()}")
        finally:
            assert beat.stop() == 0, beat.log()
            delete_queue(amqp_url, queue)
        assert "Traceback" not in beat.log()
        assert fired() == expected  # paused and quarantined schedules stayed silent
        assert {name for name, since in SILENT.items() if since <= level}.isdisjoint(fired())
        once = db.execute("SELECT is_active FROM job_schedules WHERE name = 'up-once'").fetchone()
        assert once["is_active"] is False  # the one-off fired once and retired
        faults = db.execute("SELECT s.name FROM schedule_faults f JOIN job_schedules s ON s.id = f.schedule_id"
                            ).fetchall()
        assert [r["name"] for r in faults] == (["up-quarantined"] if level >= 3 else [])
    finally:
        db.close()
