"""`runledger-beat doctor` against a healthy setup and against each broken part; help text on every option."""

from __future__ import annotations

import argparse
import json
import re
import uuid

import psycopg
import pytest
from psycopg import sql

from runledger_beat import cli
from runledger_beat.ops import doctor

from ..support.roles import limited_roles, role_dsn
from ..support.services import find_amqp


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def verdicts(out: str) -> dict[str, str]:
    return {c["name"]: c["verdict"] for c in json.loads(out)["checks"]}


def detail(out: str, name: str) -> str:
    return next(c["detail"] for c in json.loads(out)["checks"] if c["name"] == name)


@pytest.fixture
def alive(db):
    """A beat that ticked and a run a worker hook reported, as in a working deployment."""
    db.execute("INSERT INTO beats (id, host, pid, version) VALUES (gen_random_uuid(), 'node', 1, '0.1.0')")
    db.execute("INSERT INTO jobs (id, job_type, payload, status, started_at)"
               " VALUES (gen_random_uuid(), 't', '{}', 'started', now() - interval '5 minutes')")


def test_doctor_healthy_setup_is_all_ok(capsys, pg_dsn, schema, alive):
    find_amqp()
    code, out, err = run(capsys, "--dsn", pg_dsn, "--schema", schema, "doctor", "--app",
                         "tests.support.doctor_apps:good")
    assert code == 0, out + err
    lines = out.splitlines()
    assert [line.split()[0] for line in lines] == ["ok"] * 11, out
    assert [line.split(":")[0].split(None, 1)[1] for line in lines] == [
        "database", "pool mode", "migrations", "privileges", "functions", "clock", "listen", "beats", "worker hook",
        "broker", "beat_schedule"]
    code, out, _ = run(capsys, "--dsn", pg_dsn, "--schema", schema, "doctor", "--app", "tests.support.doctor_apps:good",
                       "--json")
    assert code == 0 and json.loads(out)["ok"] is True and set(verdicts(out).values()) == {"ok"}


def test_doctor_wrong_broker_url_fails_and_hides_the_password(capsys, pg_dsn, schema, alive):
    code, out, _ = run(capsys, "--dsn", pg_dsn, "--schema", schema, "doctor", "--app",
                       "tests.support.doctor_apps:wrong_broker", "--json")
    assert code == 1 and verdicts(out)["broker"] == "FAIL"
    assert "127.0.0.1:1" in detail(out, "broker") and "secret" not in out
    assert {k for k, v in verdicts(out).items() if v != "ok"} == {"broker"}


def test_doctor_missing_schema_exits_2_in_one_line(capsys, pg_dsn):
    missing = f"absent_{uuid.uuid4().hex[:8]}"
    code, out, err = run(capsys, "--dsn", pg_dsn, "--schema", missing, "doctor")
    assert (code, out) == (2, "")
    assert err.splitlines() == [f'error: schema "{missing}" has no runledger tables (run `runledger-beat migrate`)']


def test_doctor_pending_migration_warns(capsys, pg_dsn, schema, db, alive):
    db.execute("DELETE FROM schema_migrations WHERE version = 5")
    code, out, _ = run(capsys, "--dsn", pg_dsn, "--schema", schema, "doctor", "--json")
    assert code == 0 and verdicts(out)["migrations"] == "warn"
    assert "0005_operations.sql" in detail(out, "migrations")


def test_doctor_role_without_privileges_fails(capsys, pg_dsn, schema, db, alive):
    role = f"rl_doctor_{uuid.uuid4().hex[:8]}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        db.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(sql.Identifier(schema), sql.Identifier(role)))
        db.execute(sql.SQL("GRANT SELECT ON {}.jobs TO {}").format(sql.Identifier(schema), sql.Identifier(role)))
        dsn = psycopg.conninfo.make_conninfo(pg_dsn, user=role)
        code, out, _ = run(capsys, "--dsn", dsn, "--schema", schema, "doctor", "--json")
        assert code == 1 and verdicts(out)["privileges"] == "FAIL"
        assert detail(out, "privileges") == ("this role lacks SELECT/INSERT/UPDATE on job_schedules, "
                                             "INSERT/UPDATE on jobs, SELECT/INSERT/UPDATE/DELETE on beats")
        # What it may not read fails alone; the checks that need no table still pass.
        assert verdicts(out)["listen"] == "ok" and verdicts(out)["clock"] == "ok"
        assert verdicts(out)["beats"] == "FAIL" and "permission denied" in detail(out, "beats")
        db.execute(sql.SQL("REVOKE USAGE ON SCHEMA {} FROM {}").format(sql.Identifier(schema), sql.Identifier(role)))
        code, out, _ = run(capsys, "--dsn", dsn, "--schema", schema, "doctor", "--json")
        assert code == 1 and "may not use schema" in detail(out, "migrations")
    finally:
        db.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_doctor_names_the_grant_a_beat_role_lacks_on_its_functions(capsys, pg_dsn, schema, db, alive):
    with limited_roles(pg_dsn, schema, ("beat",)) as roles:
        dsn = role_dsn(pg_dsn, roles["beat"])
        code, out, _ = run(capsys, "--dsn", dsn, "--schema", schema, "doctor", "--json")
        assert code == 0 and verdicts(out)["functions"] == "ok", out
        db.execute(sql.SQL("REVOKE EXECUTE ON FUNCTION {}.runledger_advance_cursors FROM {}").format(
            sql.Identifier(schema), sql.Identifier(roles["beat"])))
        code, out, _ = run(capsys, "--dsn", dsn, "--schema", schema, "doctor", "--json")
        assert code == 0 and verdicts(out)["functions"] == "warn"  # beat still works: its cursor moves are audited
        assert detail(out, "functions") == (
            "this role may not EXECUTE runledger_advance_cursors(uuid[], timestamptz[], boolean[]) (its cursor moves "
            "are plain UPDATEs, each one logged in the audit log as a change): GRANT EXECUTE ON FUNCTION "
            f"{schema}.runledger_advance_cursors(uuid[], timestamptz[], boolean[]) TO {roles['beat']} "
            "(see `runledger-beat grants beat`)")


def test_doctor_unreachable_database_fails_in_one_line(capsys):
    code, out, _ = run(capsys, "--dsn", "postgresql://alice:hunter2@127.0.0.1:1/none", "doctor")
    assert code == 1
    assert out.splitlines()[0].startswith("FAIL  database: cannot connect to postgresql://alice:***@127.0.0.1:1/none")
    assert "hunter2" not in out


def test_doctor_warns_on_clock_skew_and_an_unseen_worker_hook(capsys, pg_dsn, schema, monkeypatch):
    real = doctor.time.time
    monkeypatch.setattr(doctor.time, "time", lambda: real() + 5.0)  # this host runs 5 s fast
    code, out, _ = run(capsys, "--dsn", pg_dsn, "--schema", schema, "doctor", "--json")
    assert code == 0
    skew = float(re.search(r"clock is ([0-9.]+)s ahead of", detail(out, "clock")).group(1))
    assert verdicts(out)["clock"] == "warn" and abs(skew - 5.0) < 0.5  # 5 s, give or take the query's round trip
    assert verdicts(out)["worker hook"] == "warn" and detail(out, "worker hook").startswith("unknown")
    assert verdicts(out)["beats"] == "warn"


def _all_actions(parser: argparse.ArgumentParser, path: str = "runledger-beat"):
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield f"{path} {name}", helps.get(name)
                yield from _all_actions(sub, f"{path} {name}")
            continue
        yield f"{path} {'/'.join(action.option_strings) or action.dest}", action.help


def test_every_option_and_subcommand_has_help():
    found = list(_all_actions(cli.build_parser()))
    assert len(found) > 100
    assert [where for where, text in found if not text or text == argparse.SUPPRESS] == []


def test_the_new_subcommands_explain_themselves(capsys):
    code, out, _ = run(capsys, "--help")
    assert code == 0
    for name in ("beats", "health", "doctor"):
        assert f"    {name} " in out
    code, out, _ = run(capsys, "health", "--help")
    assert code == 0 and "--max-age SECONDS" in out and "--this-host" in out
