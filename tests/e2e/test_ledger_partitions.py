"""The ledger's lifecycle: day partitions made ahead, days past the retention dropped, old ledgers migrated."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from itertools import pairwise

import psycopg
import pytest
from psycopg import sql

from runledger_beat import api
from runledger_beat.beat.retention import LEDGER_RETRY
from runledger_beat.db import check_version, connect, drop_schema, migrate, migration_files, queries
from runledger_beat.db.migrate import STEP_MARKER
from runledger_beat.errors import ConfigError, ScheduleError

from ..support.e2e import count, delete_queue, prepare
from ..support.procs import start_beat
from ..support.rows import insert_schedule
from ..support.services import wait_for


def _day(offset: int = 0) -> datetime:
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    return today + timedelta(days=offset)


def _part(offset: int) -> str:
    return "jobs_p" + _day(offset).strftime("%Y%m%d")


def _partitions(db) -> list[str]:
    return [r["name"] for r in db.execute(queries.ledger_partitions).fetchall()]


def _where(db, job_id) -> str:
    return db.execute("SELECT tableoid::regclass::text AS t FROM jobs WHERE id = %s", (job_id,)).fetchone()["t"]


def _insert_job(db, scheduled_for, *, schedule_id=None, status="success", stage="scheduled", created_at=None):
    job_id = uuid.uuid4()
    db.execute("INSERT INTO jobs (id, schedule_id, scheduled_for, job_type, payload, stage, status, created_at)"
               " VALUES (%s, %s, %s, 'x', '{}', %s, %s, coalesce(%s, now()))",
               (job_id, schedule_id, scheduled_for, stage, status, created_at))
    return job_id


def test_a_new_ledger_is_partitioned_by_day_and_keeps_one_fire_per_slot(db):
    names = _partitions(db)
    assert [_part(i) for i in range(-1, 8)] == names[:-1] and names[-1] == "jobs_default"
    sid = insert_schedule(db, "slot", cron="0 0 1 1 *")
    at = db.execute("SELECT date_trunc('second', now()) AS t").fetchone()["t"]
    first = _insert_job(db, at, schedule_id=sid)
    assert _where(db, first) == _part(0)
    with pytest.raises(psycopg.errors.UniqueViolation):
        _insert_job(db, at, schedule_id=sid)
    # A manual row written by raw SQL without scheduled_for lands in the default partition.
    assert _where(db, _insert_job(db, None, stage="manual", status="pending")) == "jobs_default"


def test_retention_drops_whole_days_and_deletes_old_rows_of_the_default(db):
    # Partitions made 40 days ago, as a beat running then would have.
    db.execute("SELECT count(*) FROM runledger_maintain_ledger_as_of(NULL, 7, now() - interval '40 days')")
    old = _insert_job(db, _day(-40) + timedelta(hours=3))
    assert _where(db, old) == _part(-40)
    stray = _insert_job(db, None, stage="manual", created_at=_day(-35))
    recent = _insert_job(db, _day(-1) + timedelta(hours=1))
    assert api.maintain_ledger(db, retention=0) == []  # 0 keeps everything; nothing to create either
    done = api.maintain_ledger(db, retention="30d")
    dropped = {r["partition_name"] for r in done if r["action"] == "dropped"}
    assert dropped == {_part(i) for i in range(-41, -32)}  # every day that ended 30 days ago or more
    assert {"action": "deleted 1", "partition_name": "jobs_default"} in done
    assert count(db, "SELECT count(*) AS n FROM jobs WHERE id = ANY(%s)", [old, stray]) == 0
    assert _where(db, recent) == _part(-1)
    assert api.maintain_ledger(db, retention="30d") == []  # nothing left to do
    with pytest.raises(ScheduleError) as bad:
        api.maintain_ledger(db, retention="1h")
    assert bad.value.field == "retention"


def test_a_day_written_before_its_partition_existed_moves_into_it(db):
    db.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(_part(7))))
    job = _insert_job(db, _day(7) + timedelta(hours=5), status="pending")
    assert _where(db, job) == "jobs_default"
    done = api.maintain_ledger(db, retention="30d")
    assert {"action": "created", "partition_name": _part(7)} in done
    assert _where(db, job) == _part(7)


def test_cli_lists_and_maintains_the_partitions(db, pg_dsn, schema):
    from runledger_beat.cli import main
    db.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(_part(6))))
    assert main(["--dsn", pg_dsn, "--schema", schema, "ledger", "--maintain", "--json"]) == 0
    assert _part(6) in _partitions(db)


@pytest.mark.slow(seconds=65)  # a drop that meets a busy lock is tried again a minute later (LEDGER_RETRY)
def test_a_beat_started_after_weeks_of_downtime_drops_the_old_days_and_fires_into_today(db, pg_dsn, schema,
                                                                                        amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url)
    # The ledger as a beat left it 40 days ago: partitions up to a week after that, none since.
    for name in _partitions(db)[:-1]:
        db.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(name)))
    db.execute("SELECT count(*) FROM runledger_maintain_ledger_as_of(NULL, 7, now() - interval '40 days')")
    old = _insert_job(db, _day(-40) + timedelta(hours=1))
    sid = insert_schedule(db, "every-second", cron="* * * * * *")
    beat = start_beat(env, "returning")
    try:
        # Only today's window left; a drop that met a busy lock is tried again a minute later (LEDGER_RETRY).
        window = [_part(i) for i in range(-1, 8)]
        wait_for(lambda: _partitions(db)[:-1] == window, timeout=30 + LEDGER_RETRY,
                 message="the beat to maintain the ledger")
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE schedule_id = %s AND status = 'sent'",
                               sid) >= 2, timeout=30, message="fires after the maintenance")
    finally:
        beat.stop()
        delete_queue(amqp_url, queue)
    assert _partitions(db)[:-1] == window  # only today's window is left
    assert count(db, "SELECT count(*) AS n FROM jobs WHERE id = %s", old) == 0
    homes = {r["t"] for r in db.execute("SELECT DISTINCT tableoid::regclass::text AS t FROM jobs"
                                        " WHERE schedule_id = %s", (sid,)).fetchall()}
    assert homes <= {_part(-1), _part(0), _part(1)}  # fires sit in their day, none left in the default


def _schema_at(pg_dsn: str, until: int) -> str:
    name = f"t_old_{uuid.uuid4().hex[:8]}"
    with connect(pg_dsn, "public", autocommit=True) as conn:
        migrate(conn, name, until=until)
    return name


def _drop(pg_dsn: str, name: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        drop_schema(conn, name)


@pytest.fixture
def old_schema(pg_dsn):
    """A schema at migration 5 (before partitioning), dropped afterwards."""
    name = _schema_at(pg_dsn, 5)
    yield name
    _drop(pg_dsn, name)


class Writer:
    """Records a manual run every 5 ms on its own connection and how long each insert waited.

    Commits do not wait for the disk (synchronous_commit off): what is measured is the wait for locks
    and the statement itself, not an fsync stalled by whatever else the machine writes.
    """

    def __init__(self, pg_dsn: str, schema: str) -> None:
        self.pg_dsn, self.schema = pg_dsn, schema
        self.waits: list[float] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run)

    def _run(self) -> None:
        with connect(self.pg_dsn, self.schema, autocommit=True) as conn:
            conn.execute("SET synchronous_commit = off")
            while not self.stop.is_set():
                started = time.perf_counter()
                conn.execute("INSERT INTO jobs (id, scheduled_for, job_type, payload, stage, status)"
                             " VALUES (gen_random_uuid(), now(), 'x', '{}', 'manual', 'pending')")
                self.waits.append(time.perf_counter() - started)
                time.sleep(0.005)

    def __enter__(self) -> Writer:
        self.thread.start()
        wait_for(lambda: len(self.waits) >= 5, timeout=10, message="the writer to start")
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()


ROWS = 200_000


@pytest.mark.serial
def test_a_populated_ledger_migrates_without_a_long_lock_and_loses_nothing(pg_dsn, old_schema):
    assert STEP_MARKER.strip() in dict((v, t) for v, _, t in migration_files())[6]
    with connect(pg_dsn, old_schema, autocommit=True) as conn:
        sid = insert_schedule(conn, "old", cron="* * * * *")
        conn.execute("INSERT INTO jobs (id, schedule_id, schedule_name, scheduled_for, job_type, payload, status,"
                     " created_at, finished_at) SELECT gen_random_uuid(), %s, 'old',"
                     " now() - make_interval(mins => g), 'x', '{}', 'success', now() - make_interval(mins => g),"
                     " now() FROM generate_series(1, %s) g", (sid, ROWS))
        live = _insert_job(conn, conn.execute("SELECT now() AS t").fetchone()["t"], schedule_id=sid, status="sent")
        manual = _insert_job(conn, None, stage="manual", status="pending")
        conn.execute("GRANT SELECT ON jobs TO PUBLIC")
        slot = conn.execute("SELECT scheduled_for FROM jobs WHERE schedule_id = %s AND status = 'success'"
                            " ORDER BY scheduled_for LIMIT 1", (sid,)).fetchone()["scheduled_for"]

    # A writer keeps recording manual runs while the migration runs; no insert may wait long.
    notices: list[str] = []
    with Writer(pg_dsn, old_schema) as writer:
        with connect(pg_dsn, "public", autocommit=True) as conn:
            conn.execute("SET synchronous_commit = off")  # its commits' fsyncs are the disk's time, not a lock's
            conn.execute("SET client_min_messages = debug1")  # Postgres says whether ATTACH scanned the table
            conn.add_notice_handler(lambda diag: notices.append(diag.message_primary or ""))
            assert migrate(conn, old_schema, until=6) == ["0006_ledger_partitions.sql"]
        time.sleep(0.2)
    waits = writer.waits
    assert len(waits) > 10 and max(waits) < 1.0
    # The old table joined without a scan under the exclusive lock: its valid check proved the range.
    assert 'partition constraint for table "jobs" is implied by existing constraints' in notices

    with connect(pg_dsn, old_schema, autocommit=True) as conn:
        names = _partitions(conn)
        assert names[0].startswith("jobs_before_") and names[-1] == "jobs_default"
        assert _part(3) in names
        assert count(conn, "SELECT count(*) AS n FROM jobs WHERE stage = 'scheduled'") == ROWS + 1
        assert count(conn, "SELECT count(*) AS n FROM jobs WHERE stage = 'manual'") == 1 + len(waits)
        assert _where(conn, live) == names[0]
        row = conn.execute("SELECT scheduled_for, created_at FROM jobs WHERE id = %s", (manual,)).fetchone()
        assert row["scheduled_for"] == row["created_at"]  # a range partition holds no NULL key
        with pytest.raises(psycopg.errors.UniqueViolation):  # the slot guarantee spans the old table
            _insert_job(conn, slot, schedule_id=sid)
        assert conn.execute("SELECT has_table_privilege('public', 'jobs', 'SELECT') AS ok").fetchone()["ok"]
        # The old table's indexes serve the partitioned ones (attached, not built anew).
        attached = conn.execute(
            "SELECT count(*) AS n FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE c.relname LIKE %s AND c.relkind = 'i'", (names[0] + "%",)).fetchone()["n"]
        assert attached == 7
        # Migrating again is a no-op; fires keep being recorded and the next day goes to its partition.
        assert migrate(conn, old_schema, until=6) == []
        assert _where(conn, _insert_job(conn, _day(3), schedule_id=sid)) == _part(3)


@pytest.mark.serial
def test_a_migration_behind_a_long_transaction_lets_writes_through_then_finishes(pg_dsn, old_schema, caplog):
    with connect(pg_dsn, old_schema, autocommit=True) as conn:
        conn.execute("INSERT INTO jobs (id, scheduled_for, job_type, payload, stage, status)"
                     " SELECT gen_random_uuid(), now() - make_interval(mins => g), 'x', '{}', 'manual', 'success'"
                     " FROM generate_series(1, 1000) g")
    reader = connect(pg_dsn, old_schema, autocommit=False)  # a report left open: it holds a lock on jobs
    reader.execute("SELECT count(*) FROM jobs").fetchone()
    try:
        with Writer(pg_dsn, old_schema) as writer, connect(pg_dsn, "public", autocommit=True) as conn:
            conn.execute("SET synchronous_commit = off")
            before = len(writer.waits)
            with pytest.raises(ConfigError) as gave_up:
                migrate(conn, old_schema, until=6, give_up_after=1.0)
            message = str(gave_up.value)
            assert "0006_ledger_partitions.sql (step 1 of 3)" in message and "long transaction" in message
            waited = writer.waits[before:]
            assert len(waited) > 20  # the writes went on while the migration waited
            # Nobody queued long behind the lock request (0.2 s bound each try), while a report held the table
            # for the whole second: without the bound, every insert would have waited for the report to end.
            assert max(waited) < 0.8
            assert check_version(conn, old_schema) == 5  # nothing half done is left recorded
            assert "retrying with back-off" in caplog.text

            result: list = []
            migrating = threading.Thread(target=lambda: result.append(migrate(conn, old_schema, until=6)))
            migrating.start()
            time.sleep(0.5)
            reader.rollback()  # the report ends: the migration goes through at its next try
            migrating.join(timeout=30)
            assert result == [["0006_ledger_partitions.sql"]]
        # Once the report ends the migration takes its locks for one short step; inserts wait for that step only.
        assert max(writer.waits) < 2.0
    finally:
        reader.close()
    with connect(pg_dsn, old_schema, autocommit=True) as conn:
        assert count(conn, "SELECT count(*) AS n FROM jobs") == 1000 + len(writer.waits)


@pytest.mark.slow(seconds=25)
def test_a_migration_gets_its_locks_while_a_beat_holds_instants_prepared(pg_dsn, amqp_url):
    # With a 5 s lookahead and a fire every 5 s, a beat holds a prepared instant open (its row locks on
    # job_schedules) all but a few milliseconds of each 5 s. A retried step waits for the prepare lock
    # instead of hoping for that gap; the fires stay on time. Each try still waits 0.2 s at most for a lock (writers
    # never queue longer), and on a loaded host a settle or a sweep can outlast that several tries running: the
    # bound on giving up is a minute.
    schema = _schema_at(pg_dsn, 6)
    try:
        with connect(pg_dsn, schema, autocommit=True) as db:
            env, queue = prepare(db, pg_dsn, schema, amqp_url,
                                 extra={"runledger_auto_migrate": False, "runledger_lookahead": 5})
            sid = insert_schedule(db, "every-5s", cron="*/5 * * * * *")
            beat = start_beat(env, "beat-at-6")
            # Cron slots only: insert_schedule makes the first fire at the row's now(), not on a whole second.
            fired = ("SELECT count(*) AS n FROM jobs WHERE schedule_id = %s AND status = 'sent'"
                     " AND scheduled_for = date_trunc('second', scheduled_for)")
            try:
                wait_for(lambda: count(db, fired, sid) >= 1, timeout=30, message="the beat to fire")
                with connect(pg_dsn, "public", autocommit=True) as conn:
                    assert migrate(conn, schema, give_up_after=60.0) == [n for v, n, _ in migration_files() if v > 6]
                done_at = db.execute("SELECT now() AS t").fetchone()["t"]
                wait_for(lambda: count(db, fired + " AND scheduled_for > %s", sid, done_at) >= 1, timeout=30,
                         message="a fire after the migration")
            finally:
                beat.stop()
                delete_queue(amqp_url, queue)
            slots = [r["scheduled_for"] for r in db.execute(
                "SELECT scheduled_for FROM jobs WHERE schedule_id = %s AND scheduled_for = date_trunc('second',"
                " scheduled_for) ORDER BY scheduled_for", (sid,)).fetchall()]
            assert slots[-1] > done_at and all(b - a == timedelta(seconds=5) for a, b in pairwise(slots))
    finally:
        _drop(pg_dsn, schema)
