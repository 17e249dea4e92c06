"""Commands on a database without the runledger tables: one line naming the schema and `runledger-beat migrate`.

Every command that reads the tables (all but migrate, preview and demo) checks the schema first and exits 2
with one line, writing nothing; `web` checks at start, and a request that later meets a missing table answers
503 with the same line, not a traceback.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg import sql

from runledger_beat import cli
from runledger_beat.db import connect, drop_schema, migrate, migration_files

from ..support.dashboard import get

LATEST = max(version for version, _, _ in migration_files())
#: The arguments each command needs to get as far as the schema check.
ARGS = {
    "add": ["s", "--task", "t.x", "--every", "5s"], "update": ["s", "--every", "9s"], "list": [], "show": ["s"],
    "pause": ["s"], "resume": ["s"], "remove": ["s"], "trigger": ["s"], "history": ["s"], "sync": [],
    "stats": [], "beats": [], "health": [], "doctor": [], "web": ["--port", "1"],
    "backfill": ["s", "--from", "2026-01-01T00:00:00Z", "--to", "2026-01-02T00:00:00Z"],
    "calendar": ["list"], "audit": [], "ledger": [], "import-from": ["redbeat", "redis://127.0.0.1:1/0"],
}


def missing_line(schema: str) -> str:
    return f'error: schema "{schema}" has no runledger tables (run `runledger-beat migrate`)'


def run(capsys, pg_dsn: str, schema: str, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["--dsn", pg_dsn, "--schema", schema, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def schema_exists(pg_dsn: str, schema: str) -> bool:
    with psycopg.connect(pg_dsn) as conn:
        return conn.execute("SELECT to_regnamespace(%s) IS NOT NULL", (schema,)).fetchone()[0]


def test_the_check_covers_every_command_that_reads_the_tables():
    assert set(ARGS) == set(cli.COMMANDS) - {"migrate", "preview", "demo", "grants"}


@pytest.mark.parametrize("command", sorted(ARGS))
def test_every_command_on_an_unmigrated_schema_exits_2_in_one_line(capsys, pg_dsn, bare_schema, command):
    code, out, err = run(capsys, pg_dsn, bare_schema, command, *ARGS[command])
    assert (code, out, err.splitlines()) == (2, "", [missing_line(bare_schema)])
    assert not schema_exists(pg_dsn, bare_schema)  # nothing was written


@pytest.fixture
def foreign(pg_dsn, bare_schema):
    """A schema of another application: a Rails-like schema_migrations (text versions) and its own jobs table."""
    with connect(pg_dsn, "public", autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(bare_schema)))
    with connect(pg_dsn, bare_schema, autocommit=True) as conn:
        conn.execute("CREATE TABLE schema_migrations (version varchar PRIMARY KEY)")
        conn.execute("INSERT INTO schema_migrations VALUES ('20240101120000')")
        conn.execute("CREATE TABLE jobs (id bigserial PRIMARY KEY, handler text)")
    return bare_schema


def test_a_foreign_schema_is_refused_in_one_line(capsys, pg_dsn, foreign):
    for command in ("list", "doctor", "health", "stats"):
        code, out, err = run(capsys, pg_dsn, foreign, command, *ARGS[command])
        assert (code, out, err.splitlines()) == (2, "", [missing_line(foreign)]), command
    # With a job_schedules table of its own too, the text versions give it away.
    with connect(pg_dsn, foreign, autocommit=True) as conn:
        conn.execute("CREATE TABLE job_schedules (id bigserial PRIMARY KEY)")
    code, out, err = run(capsys, pg_dsn, foreign, "list")
    assert (code, out) == (2, "") and err.splitlines() == [
        f"error: runledger_schema: the schema_migrations table of schema {foreign!r} is not runledger_beat's; "
        "choose another runledger_schema"]
    # migrate refuses it the same way, and creates nothing in it.
    code, out, err = run(capsys, pg_dsn, foreign, "migrate")
    assert code == 2 and "is not runledger_beat's" in err
    with connect(pg_dsn, foreign, autocommit=True) as conn:
        assert conn.execute("SELECT to_regclass('calendars') IS NULL AS absent").fetchone()["absent"]


def test_an_older_schema_asks_for_migrate_and_doctor_reports_it(capsys, pg_dsn, bare_schema):
    with connect(pg_dsn, "public") as conn:
        migrate(conn, bare_schema, until=LATEST - 1)
    code, out, err = run(capsys, pg_dsn, bare_schema, "list")
    assert (code, out, err.splitlines()) == (2, "", [
        f'error: schema "{bare_schema}" is at migration {LATEST - 1} of {LATEST} (run `runledger-beat migrate`)'])
    # doctor keeps its report: the pending migration is its warning.
    code, out, _ = run(capsys, pg_dsn, bare_schema, "doctor", "--json")
    checks = {c["name"]: c for c in json.loads(out)["checks"]}
    assert checks["migrations"]["verdict"] == "warn" and "not applied" in checks["migrations"]["detail"]
    assert run(capsys, pg_dsn, bare_schema, "migrate")[0] == 0
    code, out, err = run(capsys, pg_dsn, bare_schema, "list")
    assert (code, out.strip(), err) == (0, "no schedules", "")


def test_web_answers_503_when_the_tables_go_away(web, pg_dsn, schema):
    base = web()
    assert get(base + "/")[0] == 200
    with connect(pg_dsn, "public", autocommit=True) as conn:
        drop_schema(conn, schema)
    line = f'schema "{schema}" has no runledger tables (run `runledger-beat migrate`)'
    for path in ("/", "/beats", "/problems", "/schedules/x"):
        status, body = get(base + path)
        assert status == 503 and line.replace('"', "&#34;") in body, (path, body)
        assert "Traceback" not in body
    status, body = get(base + "/api/schedules")
    assert (status, json.loads(body)) == (503, {"error": line})
    assert get(base + "/healthz")[0] == 200
