"""Least privilege tried as an attacker would: each role, holding exactly the README's grants, tries to do more.

Every test runs the attack as written against real PostgreSQL roles (and, where the attack goes through the
broker, a real RabbitMQ, a real worker with the ledger hook and a real beat), then checks that the attack
failed and left the data as it was. SECURITY.md lists the roles and what each must not be able to do.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg import sql

from runledger_beat import api

from ..support.e2e import delete_queue
from ..support.procs import celery_env, start_beat, start_worker
from ..support.roles import limited_roles, role_dsn
from ..support.services import wait_for

#: What an attacker sets up in its own session: temp tables named like the runledger ones (a role needs no
#: CREATE privilege for those), and a trigger of its own that makes it a superuser when it runs as one.
BAIT = """
CREATE TEMP TABLE job_schedules (id uuid, name text);
CREATE TEMP TABLE schedule_changes (who text, application_name text, operation text, schedule_id uuid,
                                    schedule_name text, before jsonb, after jsonb);
CREATE FUNCTION pg_temp.escalate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('ALTER ROLE %I SUPERUSER', session_user);
    RETURN NULL;
END
$$;
CREATE TRIGGER escalate AFTER INSERT ON pg_temp.schedule_changes FOR EACH ROW EXECUTE FUNCTION pg_temp.escalate();
INSERT INTO pg_temp.job_schedules VALUES (gen_random_uuid(), 'bait');
"""
#: The audit function attached to the attacker's own table, then made to fire (by function).
HOOKS = {
    "runledger_audit_schedules": "CREATE TRIGGER hijack AFTER INSERT ON pg_temp.job_schedules FOR EACH ROW"
                                 " EXECUTE FUNCTION {schema}.runledger_audit_schedules();"
                                 " INSERT INTO pg_temp.job_schedules VALUES (gen_random_uuid(), 'fire')",
    "runledger_audit_truncate": "CREATE TRIGGER hijack BEFORE TRUNCATE ON pg_temp.job_schedules FOR EACH STATEMENT"
                                " EXECUTE FUNCTION {schema}.runledger_audit_truncate();"
                                " TRUNCATE pg_temp.job_schedules",
}
KEY = "attack-test-signing-key-" + "k" * 16


def _as(pg_dsn: str, role: str, schema: str, autocommit: bool = True) -> psycopg.Connection:
    conn = psycopg.connect(role_dsn(pg_dsn, role), autocommit=autocommit)
    conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
    if not autocommit:
        conn.commit()
    return conn


def _superuser(db: psycopg.Connection, role: str) -> bool:
    return db.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone()["rolsuper"]


def _count(db: psycopg.Connection, query: str, *params) -> int:
    return db.execute(query, params).fetchone()["n"]


def _hijack(pg_dsn: str, schema: str, role: str, function: str) -> psycopg.Error | None:
    """The temp-table hijack, as the attacker runs it; the error that stopped it, or None."""
    with _as(pg_dsn, role, schema) as conn:
        conn.execute(BAIT)
        try:
            conn.execute(HOOKS[function].format(schema=sql.Identifier(schema).as_string(conn)))
        except psycopg.Error as exc:
            return exc
    return None


@pytest.mark.parametrize("function", sorted(HOOKS))
def test_worker_cannot_hijack_an_audit_function_with_temp_tables(pg_dsn, schema, db, function):
    before = _count(db, "SELECT count(*) AS n FROM schedule_changes")
    with limited_roles(pg_dsn, schema, ("worker",)) as roles:
        error = _hijack(pg_dsn, schema, roles["worker"], function)
        assert not _superuser(db, roles["worker"])
        assert isinstance(error, psycopg.errors.InsufficientPrivilege), error
        assert f"permission denied for function {schema}.{function}" in str(error)
    assert _count(db, "SELECT count(*) AS n FROM schedule_changes") == before


@pytest.mark.parametrize("function", sorted(HOOKS))
def test_an_audit_function_refuses_a_foreign_table_even_for_a_role_with_execute(pg_dsn, schema, db, function):
    """Even were EXECUTE granted by mistake, the function audits its own schema's job_schedules only."""
    before = _count(db, "SELECT count(*) AS n FROM schedule_changes")
    with limited_roles(pg_dsn, schema, ("worker",)) as roles:
        db.execute(sql.SQL("GRANT EXECUTE ON FUNCTION {}.{} TO {}").format(
            sql.Identifier(schema), sql.Identifier(function), sql.Identifier(roles["worker"])))
        error = _hijack(pg_dsn, schema, roles["worker"], function)
        assert not _superuser(db, roles["worker"])
        assert isinstance(error, psycopg.errors.InsufficientPrivilege), error
        assert f"audits {schema}.job_schedules only" in str(error)
    assert _count(db, "SELECT count(*) AS n FROM schedule_changes") == before


def _partitions(db: psycopg.Connection) -> list[str]:
    return [r["name"] for r in api.ledger_partitions(db)]


@pytest.mark.parametrize("call", [
    "runledger_maintain_ledger(interval '1 day', 7, as_of => '9999-01-01')",
    "runledger_maintain_ledger(retention => interval '1 day', as_of => '9999-01-01')",
    "runledger_maintain_ledger(interval '1 day', 7, '9999-01-01')",
], ids=["positional-and-named", "named", "positional"])
def test_beat_cannot_maintain_the_ledger_as_of_a_far_future_day(pg_dsn, schema, db, call):
    db.execute("INSERT INTO jobs (id, job_type, payload, scheduled_for, status)"
               " SELECT gen_random_uuid(), 'rl.record', '{}', now(), 'success' FROM generate_series(1, 50)")
    before = _partitions(db)
    with limited_roles(pg_dsn, schema, ("beat",)) as roles, _as(pg_dsn, roles["beat"], schema) as beat, \
            pytest.raises((psycopg.errors.InsufficientPrivilege, psycopg.errors.UndefinedFunction)):
        beat.execute(f"SELECT * FROM {call}")
    assert _partitions(db) == before
    assert _count(db, "SELECT count(*) AS n FROM jobs") == 50
    assert not [name for name in _partitions(db) if name.startswith("jobs_p9999")]


def test_beat_maintenance_stays_around_now_and_past_the_retention(pg_dsn, schema, db):
    """What beat may call takes no time from its caller, creates at most a month ahead, and drops only days
    past a retention of at least one day."""
    db.execute("INSERT INTO jobs (id, job_type, payload, scheduled_for, status)"
               " SELECT gen_random_uuid(), 'rl.record', '{}', now() - interval '20 hours', 'success'"
               " FROM generate_series(1, 50)")
    before = _partitions(db)
    with limited_roles(pg_dsn, schema, ("beat",)) as roles, _as(pg_dsn, roles["beat"], schema) as beat:
        for call, error in (("runledger_maintain_ledger(NULL, 366)", psycopg.errors.InvalidParameterValue),
                            ("runledger_maintain_ledger(NULL, 32)", psycopg.errors.InvalidParameterValue),
                            ("runledger_maintain_ledger(interval '1 hour')", psycopg.errors.InvalidParameterValue),
                            ("runledger_maintain_ledger(interval '-1 year')", psycopg.errors.InvalidParameterValue)):
            with pytest.raises(error):
                beat.execute(f"SELECT * FROM {call}")
        assert _partitions(db) == before
        done = beat.execute("SELECT * FROM runledger_maintain_ledger(interval '1 day', 31)").fetchall()
    assert done and {action for action, _ in done} == {"created"}  # days 8..31 ahead; nothing dropped
    assert set(before) <= set(_partitions(db))
    assert _count(db, "SELECT count(*) AS n FROM jobs") == 50
    last = (datetime.now(timezone.utc) + timedelta(days=32)).strftime("jobs_p%Y%m%d")
    assert max(name for name in _partitions(db) if name.startswith("jobs_p")) < last


def test_cli_cannot_skip_the_audit_with_the_internal_setting(pg_dsn, schema, db):
    with limited_roles(pg_dsn, schema, ("cli",)) as roles:
        cli_dsn = role_dsn(pg_dsn, roles["cli"])
        api.create(cli_dsn, "report", "rl.record", cron="0 3 * * *", args=["monthly"], schema=schema)
        with _as(pg_dsn, roles["cli"], schema, autocommit=False) as cli:
            cli.execute("SET LOCAL runledger.internal = 'on'")
            cli.execute("UPDATE job_schedules SET job_type = 'rl.evil',"
                        " payload_template = '{\"args\": [\"pwned\"], \"kwargs\": {}}' WHERE name = 'report'")
            cli.commit()
        entries = api.audit(db, "report")
        assert [e["operation"] for e in entries] == ["INSERT", "UPDATE"]
        change = entries[-1]
        assert change["who"] == roles["cli"]
        assert change["before"]["job_type"] == "rl.record" and change["after"]["job_type"] == "rl.evil"
        assert change["after"]["payload_template"] == {"args": ["pwned"], "kwargs": {}}


def _pending_job(db: psycopg.Connection, job_type: str = "rl.record") -> uuid.UUID:
    job_id = uuid.uuid4()
    db.execute("INSERT INTO jobs (id, schedule_name, scheduled_for, job_type, payload, options, stage, status)"
               " VALUES (%s, 'report', now(), %s, %s, '{}', 'manual', 'pending')",
               (job_id, job_type, json.dumps({"args": ["genuine"], "kwargs": {}})))
    return job_id


@pytest.mark.parametrize("change", [
    "job_type = 'rl.evil'",
    "payload = '{\"args\": [\"pwned\"], \"kwargs\": {}}'",
    "options = '{\"queue\": \"elsewhere\"}'",
    "schedule_name = 'other', stage = 'scheduled'",
])
def test_worker_cannot_rewrite_what_a_pending_fire_runs(pg_dsn, schema, db, change):
    job_id = _pending_job(db)
    row = db.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone()
    with limited_roles(pg_dsn, schema, ("worker",)) as roles, _as(pg_dsn, roles["worker"], schema) as worker:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            worker.execute(f"UPDATE jobs SET {change} WHERE id = %s", (job_id,))
        # What a worker's hook does is still allowed.
        worker.execute("UPDATE jobs SET status = 'sent', sent_at = now() WHERE id = %s AND false", (job_id,))
    assert db.execute("SELECT * FROM jobs WHERE id = %s", (job_id,)).fetchone() == row


# -- the broker: forged messages against a real worker with the ledger hook ---------------------


@pytest.fixture
def broker_app(amqp_url):
    from ..support.celeryapp import app
    app.conf.broker_url = amqp_url
    return app


class _Deployment:
    """A real worker (the worker role, with the ledger hook) and, on demand, a real beat (the beat role),
    for one schedule 'report' (rl.record, args ["genuine"]) the CLI role triggered: ledger row ``job_id``."""

    def __init__(self, pg_dsn: str, schema: str, db: psycopg.Connection, roles: dict[str, str], amqp_url: str,
                 extra: dict | None = None) -> None:
        self.pg_dsn, self.schema, self.db, self.roles, self.amqp_url = pg_dsn, schema, db, roles, amqp_url
        self.extra = extra
        self.queue = f"rlatk_{uuid.uuid4().hex[:10]}"
        self.hostname = f"{self.queue}@attack"
        cli_dsn = role_dsn(pg_dsn, roles["cli"])
        api.create(cli_dsn, "report", "rl.record", cron="0 0 1 1 *", args=["genuine"], schema=schema)
        self.job_id = api.trigger(cli_dsn, "report", schema=schema)["id"]
        self.worker = start_worker(self._env("worker", hook=True), "attack-worker", concurrency=1,
                                   hostname=self.hostname)
        self.beat = None

    def _env(self, kind: str, hook: bool = False) -> dict:
        return celery_env(role_dsn(self.pg_dsn, self.roles[kind]), self.schema, self.amqp_url, self.queue,
                          extra=self.extra, hook=hook)

    def wait_ready(self, app) -> None:
        wait_for(lambda: not self.worker.alive() or app.control.ping(destination=[self.hostname], timeout=0.5),
                 timeout=30, message="worker ready")
        assert self.worker.alive(), self.worker.log()

    def start_beat(self) -> None:
        self.beat = start_beat(self._env("beat"), "attack-beat")

    def row(self) -> dict:
        return self.db.execute("SELECT * FROM jobs WHERE id = %s", (self.job_id,)).fetchone()

    def executions(self, label: str) -> list[dict]:
        return self.db.execute("SELECT * FROM executions WHERE label = %s", (label,)).fetchall()

    def logs(self) -> str:
        return f"WORKER:\n{self.worker.log()}\nBEAT:\n{self.beat.log() if self.beat else '-'}"

    def stop(self) -> None:
        for proc in (self.beat, self.worker):
            if proc is not None:
                proc.stop()
        delete_queue(self.amqp_url, self.queue)


@pytest.fixture
def deployment(pg_dsn, schema, db, amqp_url, request):
    extra = getattr(request, "param", None)
    with limited_roles(pg_dsn, schema, ("beat", "worker", "cli")) as roles:
        deployed = _Deployment(pg_dsn, schema, db, roles, amqp_url, extra)
        try:
            yield deployed
        finally:
            deployed.stop()


def _untouched(row: dict) -> bool:
    return (row["status"] == "pending" and row["started_at"] is None and row["finished_at"] is None
            and row["worker"] is None and row["duplicates"] == 0 and row["last_error"] is None)


def _genuine_runs_once(deployed: _Deployment) -> None:
    """Beat publishes the pending row; the genuine task runs once and the ledger records it."""
    deployed.start_beat()
    wait_for(lambda: deployed.row()["status"] == "success", timeout=45, interval=0.2,
             message=f"the genuine fire to succeed\n{deployed.logs()}")
    row = deployed.row()
    assert row["duplicates"] == 0 and row["worker"] == deployed.hostname, row
    (genuine,) = deployed.executions("genuine")
    assert genuine["task_id"] == str(deployed.job_id)


def test_a_forged_message_of_another_task_leaves_the_ledger_row_alone(deployment, broker_app):
    deployment.wait_ready(broker_app)
    job_id = str(deployment.job_id)
    broker_app.send_task("rl.noop", args=["forged"], task_id=job_id, headers={"runledger_id": job_id},
                         queue=deployment.queue)
    wait_for(lambda: deployment.executions("forged"), timeout=20, message=f"the forged task\n{deployment.logs()}")
    assert _untouched(deployment.row()), deployment.row()
    _genuine_runs_once(deployment)
    assert len(deployment.executions("forged")) == 1  # anyone who may publish may run a task: it ran, once


def test_a_forged_expired_message_does_not_mark_the_ledger_row(deployment, broker_app):
    deployment.wait_ready(broker_app)
    job_id = str(deployment.job_id)
    broker_app.send_task("rl.noop", args=["expired"], task_id=job_id, headers={"runledger_id": job_id},
                         queue=deployment.queue, expires=datetime.now(timezone.utc) - timedelta(hours=1))
    # The worker takes messages in order: once a later one ran, the expired one was handled.
    broker_app.send_task("rl.noop", args=["after"], queue=deployment.queue)
    wait_for(lambda: deployment.executions("after"), timeout=20, message=f"the next task\n{deployment.logs()}")
    assert f"Discarding revoked task: rl.noop[{job_id}]" in deployment.worker.log()
    assert not deployment.executions("expired")
    assert _untouched(deployment.row()), deployment.row()


@pytest.mark.parametrize("deployment", [{"runledger_signing_key": KEY}], indirect=True, ids=["signed"])
def test_with_a_signing_key_a_forged_message_of_the_right_task_and_id_is_ignored(deployment, broker_app):
    deployment.wait_ready(broker_app)
    job_id = str(deployment.job_id)
    broker_app.send_task("rl.record", args=["forged"], task_id=job_id, headers={"runledger_id": job_id},
                         queue=deployment.queue)
    broker_app.send_task("rl.record", args=["forged"], task_id=job_id,
                         headers={"runledger_id": job_id, "runledger_sig": "0" * 64}, queue=deployment.queue)
    wait_for(lambda: len(deployment.executions("forged")) == 2, timeout=20,
             message=f"the forged tasks\n{deployment.logs()}")
    assert _untouched(deployment.row()), deployment.row()
    _genuine_runs_once(deployment)
    log = deployment.worker.log()
    assert log.count("carries no valid runledger_sig") == 1, log  # one warning per worker process
