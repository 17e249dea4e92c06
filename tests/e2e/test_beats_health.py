"""Beats visible: the beats table, `runledger-beat beats` and `runledger-beat health` against real beats."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid

from celery import Celery

import runledger_beat
from runledger_beat import Scheduler, cli

from ..support.e2e import delete_queue, prepare
from ..support.procs import ROOT, start_beat
from ..support.rows import insert_schedule
from ..support.services import wait_for


def _app(dsn: str, schema: str, **conf) -> Celery:
    app = Celery("beats", broker="memory://")
    app.conf.update(runledger_dsn=dsn, runledger_schema=schema, runledger_listen=False, **conf)
    return app


def _beats(db) -> list[dict]:
    return db.execute("SELECT * FROM beats ORDER BY started_at").fetchall()


def _cli(*argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "runledger_beat.cli", *argv], env=env, capture_output=True,
                          text=True, timeout=30)


def test_a_beat_keeps_its_row_fresh_prunes_stale_ones_and_removes_its_own_at_close(pg_dsn, schema, db):
    db.execute("INSERT INTO beats (id, host, pid, version, started_at, last_tick_at)"
               " VALUES (gen_random_uuid(), 'gone', 1, '0.0.1', now() - interval '3 hours',"
               " now() - interval '2 hours')")
    db.execute("INSERT INTO beats (id, host, pid, version, last_tick_at)"
               " VALUES (gen_random_uuid(), 'quiet', 2, '0.0.1', now() - interval '10 minutes')")
    scheduler = Scheduler(_app(pg_dsn, schema))
    try:
        scheduler.run_once()
        rows = _beats(db)
        assert sorted(r["host"] for r in rows) == sorted(["quiet", socket.gethostname()])  # the stale one pruned
        mine = next(r for r in rows if r["pid"] == os.getpid())
        assert mine["id"] == scheduler.pipeline.housekeeping.beat_id
        assert mine["version"] == runledger_beat.__version__ and mine["preparing"] is False
        first_tick = mine["last_tick_at"]
        scheduler.run_once()  # within the second: no write
        assert db.execute("SELECT last_tick_at FROM beats WHERE id = %s",
                          (mine["id"],)).fetchone()["last_tick_at"] == first_tick
        wait_for(lambda: scheduler.run_once() is not None and db.execute(
            "SELECT last_tick_at FROM beats WHERE id = %s", (mine["id"],)).fetchone()["last_tick_at"] > first_tick,
            timeout=5, interval=0.2, message="the next tick")
    finally:
        scheduler.close()
    assert [r["host"] for r in _beats(db)] == ["quiet"]


def test_preparing_shows_a_beat_holding_an_instant(pg_dsn, schema, db):
    scheduler = Scheduler(_app(pg_dsn, schema, runledger_lookahead=3.0))
    try:
        db.execute("INSERT INTO job_schedules (id, name, job_type, cron_expr, next_fire_at)"
                   " VALUES (gen_random_uuid(), 'soon', 'x', '0 0 1 1 *', now() + interval '2 seconds')")
        scheduler.run_once()  # the first step starts the retention drops; until they end fires are not prepared ahead
        scheduler.pipeline.housekeeping.wait_for_retention(10)
        scheduler.run_once()
        assert scheduler.pipeline.prepared is not None
        assert wait_for(lambda: scheduler.run_once() is not None and db.execute(
            "SELECT preparing FROM beats").fetchone()["preparing"], timeout=3, interval=0.2, message="preparing")
    finally:
        scheduler.close()


def test_beats_command_lists_rows(capsys, pg_dsn, schema, db):
    db.execute("INSERT INTO beats (id, host, pid, version) VALUES (gen_random_uuid(), 'node-a', 42, '9.9')")
    assert cli.main(["--dsn", pg_dsn, "--schema", schema, "beats", "--json"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["host"] == "node-a" and row["pid"] == 42 and row["version"] == "9.9" and row["age_seconds"] < 60
    assert cli.main(["--dsn", pg_dsn, "--schema", schema, "beats"]) == 0
    assert "node-a\tpid=42\tv9.9" in capsys.readouterr().out


def test_health_is_0_with_a_beat_running_and_1_after_it_stops(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url)
    insert_schedule(db, "ticking", cron="* * * * * *")
    base = ["--dsn", pg_dsn, "--schema", schema, "health"]
    none = _cli(*base)
    assert none.returncode == 1 and none.stdout.strip() == "unhealthy: no beat has registered"
    beat = start_beat(env)
    try:
        wait_for(lambda: db.execute("SELECT count(*) AS n FROM beats").fetchone()["n"] == 1, timeout=30,
                 message="the beat's row")
        ok = _cli(*base)
        assert ok.returncode == 0, ok.stdout + ok.stderr
        assert ok.stdout.startswith("ok: a beat ticked") and len(ok.stdout.strip().splitlines()) == 1
    finally:
        assert beat.stop() == 0, beat.log()
        delete_queue(amqp_url, queue)
    gone = _cli(*base)
    assert gone.returncode == 1 and gone.stdout.startswith("unhealthy:")


def test_health_max_age_catches_a_killed_beat_and_an_unreachable_database(db, pg_dsn, schema, amqp_url):
    env, queue = prepare(db, pg_dsn, schema, amqp_url)
    beat = start_beat(env)
    try:
        wait_for(lambda: db.execute("SELECT count(*) AS n FROM beats").fetchone()["n"] == 1, timeout=30,
                 message="the beat's row")
        beat.kill(signal.SIGKILL)  # no clean close: its row stays, and ages
        beat.popen.wait(10)
    finally:
        beat.stop()
        delete_queue(amqp_url, queue)
    db.execute("UPDATE beats SET last_tick_at = now() - interval '5 seconds'")
    assert _cli("--dsn", pg_dsn, "--schema", schema, "health").returncode == 0  # within the default 30 s
    stale = _cli("--dsn", pg_dsn, "--schema", schema, "health", "--max-age", "2", "--json")
    assert stale.returncode == 1 and json.loads(stale.stdout)["healthy"] is False
    down = _cli("--dsn", "postgresql://postgres@127.0.0.1:1/none", "health", "--max-age", "1")
    assert down.returncode == 1 and down.stdout.startswith("unhealthy: database")


def test_health_this_host_counts_only_beats_of_this_host(db, pg_dsn, schema):
    db.execute("INSERT INTO beats (id, host, pid, version) VALUES (gen_random_uuid(), 'elsewhere', 7, '9.9')")
    base = ["--dsn", pg_dsn, "--schema", schema, "health"]
    assert _cli(*base).returncode == 0
    here = _cli(*base, "--this-host")
    assert here.returncode == 1 and here.stdout.strip() == "unhealthy: no beat has registered on this host"
    db.execute("UPDATE beats SET host = %s", (socket.gethostname(),))
    assert _cli(*base, "--this-host").returncode == 0


def test_the_examples_probe_with_commands_the_cli_accepts():
    import re

    examples = [(ROOT / "examples/kubernetes/deployment.yaml").read_text(),
                (ROOT / "examples/docker-compose.yml").read_text()]
    probes = [json.loads(m) for text in examples for m in re.findall(r'\["(?:CMD", ")?runledger-beat"[^\]]*\]', text)
              for m in [m.replace('"CMD", ', "")]]
    assert len(probes) == 3 and all(p[:2] == ["runledger-beat", "health"] for p in probes)
    for probe in probes:
        args = cli.build_parser().parse_args(probe[1:])
        assert args.command == "health" and args.max_age > 0
    assert "replicas: 3" in examples[0]
    assert all(f"\n  {service}:" in examples[1] for service in ("postgres", "rabbitmq", "worker", "beat"))


def test_a_role_that_may_not_write_beats_still_schedules(pg_dsn, schema, db, caplog):
    import psycopg
    from psycopg import sql

    role = f"rl_nobeats_{uuid.uuid4().hex[:8]}"
    ident = sql.Identifier
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(ident(role)))
    try:
        # The beat grants of docs/security.md except the beats table.
        db.execute(sql.SQL("GRANT USAGE ON SCHEMA {s} TO {r}; GRANT SELECT, INSERT, UPDATE ON {s}.job_schedules,"
                           " {s}.jobs TO {r}; GRANT SELECT ON {s}.schema_migrations, {s}.workers TO {r};"
                           " GRANT SELECT, INSERT, UPDATE, DELETE ON {s}.schedule_faults TO {r};"
                           " GRANT SELECT ON {s}.calendars TO {r}")
                   .format(s=ident(schema), r=ident(role)))
        insert_schedule(db, "due-now", cron="* * * * * *", task="x")
        scheduler = Scheduler(_app(psycopg.conninfo.make_conninfo(pg_dsn, user=role), schema,
                                   runledger_auto_migrate=False, runledger_lookahead=0))
        try:
            wait_for(lambda: scheduler.run_once() is not None
                     and db.execute("SELECT count(*) AS n FROM jobs WHERE sent_at IS NOT NULL").fetchone()["n"] >= 1
                     and "cannot keep this beat's row" in caplog.text,
                     timeout=10, interval=0.2, message="a fire sent by the restricted beat, its row refused")
        finally:
            scheduler.close()
        assert _beats(db) == []
    finally:
        db.execute(sql.SQL("DROP OWNED BY {}").format(ident(role)))
        db.execute(sql.SQL("DROP ROLE {}").format(ident(role)))
