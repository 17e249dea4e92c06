"""Forged input through the Python API and the command line: a field error, and every row as it was.

- NUL, lone surrogates and format characters (bidi controls, zero-width, BOM) in names, tasks, notes, calendar
  names, option strings and every JSON string (keys and values, nested): test_api_refuses_forged_characters,
  test_api_lookups_with_unstorable_characters_are_field_errors, test_cli_refuses_forged_characters,
  test_cli_refuses_undecodable_argv_bytes
- the same through a Celery beat_schedule: test_the_importer_skips_forged_entries_and_imports_the_rest
- JSON nested too deep, integers beyond 64 bits or 4,300 digits: test_api_refuses_deep_json_and_huge_integers,
  test_cli_refuses_deep_json_and_huge_integers
- numeric options beyond their documented bounds: test_cli_numeric_options_out_of_range_exit_2,
  test_cli_numeric_options_at_their_bounds_work, test_every_numeric_option_documents_its_bound
- a DSN psycopg cannot parse never shows its password: test_an_unparsable_dsn_never_shows_the_password,
  test_the_command_never_shows_an_unparsable_dsns_password
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import pytest

from runledger_beat import api, cli, spec
from runledger_beat.db import connect
from runledger_beat.errors import ScheduleError

from ..support.procs import ROOT
from ..support.rows import snapshot

#: (character, the words its refusal uses)
FORGED = [("\x00", "NUL"), ("\ud800", "lone surrogate"), ("\udcff", "lone surrogate"), ("\u202e", "U+202E"),
          ("\u2066", "U+2066"), ("\u200b", "U+200B"), ("\u200d", "U+200D"), ("\ufeff", "U+FEFF"),
          ("\u00ad", "U+00AD")]


def _seed(db, schema: str) -> dict:
    """A schedule, a calendar and a manual run; returns every row."""
    api.create(db, "kept", "proj.kept", every="1h", kwargs={"user": "ada"}, schema=schema)
    api.add_calendar(db, "holidays", "2026-12-25", schema=schema)
    api.trigger(db, "kept", schema=schema)
    return snapshot(db)


@pytest.fixture
def seeded(db, schema):
    return _seed(db, schema)


@pytest.fixture(scope="module")
def kept(pg_dsn, module_schema):
    """The module's schema, seeded, for the cases below whose input is all refused: each checks that every row is
    as it was."""
    with connect(pg_dsn, module_schema, autocommit=True) as db:
        yield SimpleNamespace(db=db, schema=module_schema, rows=_seed(db, module_schema))


def _refused(call, field: str, words: str) -> None:
    with pytest.raises(ScheduleError) as info:
        call()
    assert info.value.field == field and words in info.value.reason, (info.value.field, info.value.reason)


@pytest.mark.parametrize("char,words", FORGED, ids=[f"U+{ord(c):04X}" for c, _ in FORGED])
def test_api_refuses_forged_characters(kept, char, words):
    db, schema, seeded = kept.db, kept.schema, kept.rows
    bad = f"a{char}b"
    create = {"every": "1m", "schema": schema}
    attempts = [
        (lambda: api.create(db, bad, "proj.x", **create), "name"),
        (lambda: api.create(db, "new", f"proj.{bad}", **create), "task"),
        (lambda: api.create(db, "new", "proj.x", kwargs={"user": bad}, **create), "kwargs.user"),
        (lambda: api.create(db, "new", "proj.x", kwargs={bad: 1}, **create), "kwargs"),
        (lambda: api.create(db, "new", "proj.x", kwargs={"deep": {"list": [1, [bad]]}}, **create),
         "kwargs.deep.list[1][0]"),
        (lambda: api.create(db, "new", "proj.x", args=[1, bad], **create), "args[1]"),
        (lambda: api.create(db, "new", "proj.x", options={"queue": bad}, **create), "queue"),
        (lambda: api.create(db, "new", "proj.x", options={"routing_key": bad}, **create), "routing_key"),
        (lambda: api.create(db, "new", "proj.x", options={"headers": {"trace": bad}}, **create), "headers.trace"),
        (lambda: api.create(db, "new", "proj.x", options={"headers": {bad: "v"}}, **create), "headers"),
        (lambda: api.create(db, "new", "proj.x", calendar=bad, **create), "calendar"),
        (lambda: api.update(db, "kept", kwargs={"user": bad}, schema=schema), "kwargs.user"),
        (lambda: api.update(db, "kept", options={"queue": bad}, schema=schema), "queue"),
        (lambda: api.pause(db, "kept", note=f"deploy {bad}", schema=schema), "note"),
        (lambda: api.add_calendar(db, bad, "2026-12-26", schema=schema), "calendar"),
        (lambda: api.upsert(db, "kept", "proj.kept", every="1h", kwargs={"user": bad}, schema=schema), "kwargs.user"),
    ]
    for attempt, field in attempts:
        _refused(attempt, field, words)
    assert snapshot(db) == seeded


@pytest.mark.parametrize("char,words", FORGED[:3], ids=["NUL", "U+D800", "U+DCFF"])
def test_api_lookups_with_unstorable_characters_are_field_errors(db, schema, seeded, char, words):
    """A name Postgres cannot hold is refused as a field error, not a psycopg or UnicodeEncodeError."""
    bad = f"kept{char}"
    end = datetime.now(timezone.utc) - timedelta(hours=1)
    attempts = [
        (lambda: api.get(db, bad, schema=schema), "name"), (lambda: api.pause(db, bad, schema=schema), "name"),
        (lambda: api.resume(db, bad, schema=schema), "name"), (lambda: api.remove(db, bad, schema=schema), "name"),
        (lambda: api.trigger(db, bad, schema=schema), "name"),
        (lambda: api.update(db, bad, task="proj.x", schema=schema), "name"),
        (lambda: api.history(db, bad, schema=schema), "name"),
        (lambda: api.history(db, "kept", status=f"failed{char}", schema=schema), "status"),
        (lambda: api.next_fires(db, bad, schema=schema), "name"),
        (lambda: api.backfill(db, bad, end - timedelta(hours=1), end, schema=schema), "name"),
        (lambda: api.list_schedules(db, task=bad, schema=schema), "task"),
        (lambda: api.remove_calendar(db, f"holidays{char}", schema=schema), "calendar"),
        (lambda: api.audit(db, bad, schema=schema), "name"),
    ]
    for attempt, field in attempts:
        _refused(attempt, field, words)
    assert snapshot(db) == seeded
    # a name that merely looks odd (an existing row may hold one) is still found and removable
    db.execute("UPDATE job_schedules SET name = 'kept\u200b' WHERE name = 'kept'")
    assert api.get(db, "kept\u200b", schema=schema)["name"] == "kept\u200b"
    assert api.remove(db, "kept\u200b", schema=schema) is True


def test_api_refuses_deep_json_and_huge_integers(db, schema, seeded):
    deep: list = []
    for _ in range(3000):
        deep = [deep]
    create = {"every": "1m", "schema": schema}
    _refused(lambda: api.create(db, "new", "proj.x", kwargs={"tree": deep}, **create), "kwargs", "nested deeper")
    for value in (2**63, -(2**63) - 1, 10**30, 10**5000, -(10**5000)):
        _refused(lambda v=value: api.create(db, "new", "proj.x", args=[v], **create), "args[0]", "64-bit")
        _refused(lambda v=value: api.create(db, "new", "proj.x", kwargs={"n": [v]}, **create), "kwargs.n[0]", "64-bit")
        _refused(lambda v=value: api.create(db, "new", "proj.x", options={"headers": {"n": v}}, **create),
                 "headers.n", "64-bit")
        _refused(lambda v=value: api.create(db, "new", "proj.x", options={"priority": v}, **create), "priority",
                 "0..255")
        _refused(lambda v=value: api.create(db, "new", "proj.x", options={"expires": v}, **create), "expires",
                 "seconds")
        _refused(lambda v=value: api.create(db, "new", "proj.x", options={"ignore_result": v}, **create),
                 "ignore_result", "true or false")
        _refused(lambda v=value: api.create(db, "new", "proj.x", grace=v, **create), "grace", "seconds")
        _refused(lambda v=value: api.history(db, "kept", limit=v, schema=schema), "limit", "")
        _refused(lambda v=value: api.create(db, "new", "proj.x", overlap=v, **create), "overlap", "")
    assert snapshot(db) == seeded
    edge = api.create(db, "edge", "proj.x", args=[2**63 - 1, -(2**63)], **create)
    assert edge["args"] == [2**63 - 1, -(2**63)]


def test_the_importer_skips_forged_entries_and_imports_the_rest(db, schema, seeded):
    from celery import Celery

    from runledger_beat.importer import sync_beat_schedule

    app = Celery("forged", broker="memory://")
    entries = {"ok": {"task": "t.ok", "schedule": 60.0},
               "nul": {"task": "t.x", "schedule": 60.0, "kwargs": {"user": "a\x00b"}},
               "bidi\u202e": {"task": "t.x", "schedule": 60.0},
               "deep": {"task": "t.x", "schedule": 60.0, "args": [2**64]},
               "queue": {"task": "t.x", "schedule": 60.0, "options": {"queue": "q\u200b"}}}
    report = sync_beat_schedule(db, app, entries)
    assert report["created"] == 1 and set(report["errors"]) == {"nul", "bidi\u202e", "deep", "queue"}
    assert "kwargs.user: contains a NUL character" in report["errors"]["nul"]
    assert "args[0]:" in report["errors"]["deep"] and "queue:" in report["errors"]["queue"]
    after = snapshot(db)
    assert [r["name"] for r in after["job_schedules"]] == ["kept", "ok"]
    assert after["jobs"] == seeded["jobs"] and after["calendars"] == seeded["calendars"]


def test_spec_parse_json_turns_every_json_failure_into_a_field_error():
    for text, words in (("[" * 3000 + "]" * 3000, "nested"), ("[" + "9" * 5000 + "]", "digits"),
                        ('{"a": ', "not valid JSON"), (b"\xff\xfe", "not valid JSON"), ("[1e400]", "")):
        with pytest.raises(ScheduleError) as info:
            spec.check_json("kwargs", spec.parse_json("kwargs", text))
        assert info.value.field == "kwargs" or info.value.field.startswith("kwargs["), info.value
        assert words in info.value.reason
    assert spec.parse_json("args", '[1, "x", {"k": null}]') == [1, "x", {"k": None}]


# ---------------------------------------------------------------------------
# The command line


def run(capsys, pg_dsn: str, schema: str, *argv: str) -> tuple[int, str, str]:
    code = cli.main(["--dsn", pg_dsn, "--schema", schema, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _exit_2(result: tuple[int, str, str], field: str) -> None:
    code, out, err = result
    assert code == 2 and f"error: {field}:" in err, (code, out, err)
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_cli_refuses_forged_characters(capsys, pg_dsn, schema, db, seeded):
    for char, _ in FORGED:
        bad = f"a{char}b"
        add = ("add", "new", "--task", "proj.x", "--every", "1m")
        if char != "\x00":  # argv cannot carry NUL; JSON escapes can (below)
            _exit_2(run(capsys, pg_dsn, schema, "add", bad, "--task", "proj.x", "--every", "1m"), "name")
            _exit_2(run(capsys, pg_dsn, schema, *add, "--queue", bad), "queue")
            _exit_2(run(capsys, pg_dsn, schema, "pause", "kept", "--note", bad), "note")
            _exit_2(run(capsys, pg_dsn, schema, "calendar", "add", bad, "--dates", "2026-12-26"), "calendar")
        escaped = json.dumps(bad)  # "a\u0000b", "a\ud800b", "a\u202eb": JSON escapes of the character
        _exit_2(run(capsys, pg_dsn, schema, *add, "--kwargs", f'{{"user": {escaped}}}'), "kwargs.user")
        _exit_2(run(capsys, pg_dsn, schema, *add, "--args", f"[[{escaped}]]"), "args[0][0]")
        _exit_2(run(capsys, pg_dsn, schema, "update", "kept", "--kwargs", f"{{{escaped}: 1}}"), "kwargs")
    for char in ("\ud800", "\udcff"):
        for argv in (("show", f"kept{char}"), ("remove", f"kept{char}"), ("history", f"kept{char}"),
                     ("trigger", f"kept{char}"), ("stats", f"kept{char}"), ("audit", f"kept{char}"),
                     ("list", "--task", f"proj{char}"), ("history", "kept", "--status", f"x{char}")):
            code, out, err = run(capsys, pg_dsn, schema, *argv)
            assert code == 2 and "error: " in err and "Traceback" not in err, (argv, code, err)
    assert snapshot(db) == seeded


def test_cli_refuses_undecodable_argv_bytes(pg_dsn, schema, db, seeded):
    """The bytes as a shell passes them: Python decodes invalid UTF-8 in argv to lone surrogates."""
    for argv in ([b"add", b"caf\xe9", b"--task", b"proj.x", b"--every", b"1m"], [b"show", b"\xff"],
                 [b"pause", b"kept", b"--note", b"\xfe\xff"]):
        done = subprocess.run([sys.executable.encode(), b"-m", b"runledger_beat.cli", b"--schema", schema.encode(),
                               *argv], env={"RUNLEDGER_DSN": pg_dsn, "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
                              cwd=ROOT, capture_output=True, timeout=60)
        assert done.returncode == 2 and b"Traceback" not in done.stderr, done.stderr.decode(errors="replace")
        assert len(done.stderr.strip().splitlines()) == 1
    assert snapshot(db) == seeded


def test_cli_refuses_deep_json_and_huge_integers(capsys, pg_dsn, schema, db, seeded):
    add = ("add", "new", "--task", "proj.x", "--every", "1m")
    _exit_2(run(capsys, pg_dsn, schema, *add, "--kwargs", '{"a": ' + "[" * 3000 + "]" * 3000 + "}"), "kwargs")
    _exit_2(run(capsys, pg_dsn, schema, *add, "--args", "[" * 3000 + "]" * 3000), "args")
    _exit_2(run(capsys, pg_dsn, schema, *add, "--args", "[" + "9" * 5000 + "]"), "args")
    _exit_2(run(capsys, pg_dsn, schema, *add, "--args", "[9223372036854775808]"), "args[0]")
    _exit_2(run(capsys, pg_dsn, schema, *add, "--kwargs", '{"n": -9223372036854775809}'), "kwargs.n")
    _exit_2(run(capsys, pg_dsn, schema, *add, "--kwargs", '{"n": 1e400}'), "kwargs.n")
    _exit_2(run(capsys, pg_dsn, schema, *add, "--expires", "9" * 400), "expires")
    assert snapshot(db) == seeded


OUT_OF_RANGE = [
    (("history", "kept", "--limit", "99999999999999999999"), "--limit"),
    (("history", "kept", "--limit", "10001"), "--limit"),
    (("history", "kept", "--limit", "0"), "--limit"),
    (("history", "kept", "--limit", "9" * 5000), "--limit"),
    (("preview", "--every", "1s", "--count", "100000000"), "--count"),
    (("preview", "--every", "1s", "--count", "0"), "--count"),
    (("preview", "--every", "1s", "--jitter", "86401"), "--jitter"),
    (("backfill", "kept", "--from", "2020-01-01", "--to", "2020-01-02", "--max", "99999999999"), "--max"),
    (("add", "new", "--task", "t", "--every", "1m", "--priority", "256"), "--priority"),
    (("add", "new", "--task", "t", "--every", "1m", "--priority", "-1"), "--priority"),
    (("update", "kept", "--priority", "99999999999999999999"), "--priority"),
    (("add", "new", "--task", "t", "--every", "1m", "--jitter", "86401"), "--jitter"),
    (("update", "kept", "--jitter", "-1"), "--jitter"),
    (("health", "--max-age", "1e400"), "--max-age"),
    (("health", "--max-age", "nan"), "--max-age"),
    (("health", "--max-age", "0"), "--max-age"),
    (("health", "--max-age", "86401"), "--max-age"),
    (("web", "--port", "0"), "--port"),
    (("web", "--port", "65536"), "--port"),
    (("demo", "--seconds", "1e9"), "--seconds"),
    (("demo", "--seconds", "inf"), "--seconds"),
    (("stats", "--since", "99999999999999999999d"), "since"),
]


@pytest.mark.parametrize("argv,option", OUT_OF_RANGE, ids=[" ".join(a)[:50] for a, _ in OUT_OF_RANGE])
def test_cli_numeric_options_out_of_range_exit_2(capsys, pg_dsn, kept, argv, option):
    code, out, err = run(capsys, pg_dsn, kept.schema, *argv)
    assert code == 2 and option in err and "Traceback" not in err, (code, err[-500:])
    assert snapshot(kept.db) == kept.rows


def test_cli_numeric_options_at_their_bounds_work(capsys, pg_dsn, schema, db, seeded):
    code, out, _ = run(capsys, pg_dsn, schema, "history", "kept", "--limit", "10000", "--json")
    assert code == 0 and len(json.loads(out)) == 1
    code, out, _ = run(capsys, pg_dsn, schema, "preview", "--every", "1s", "--count", "10000", "--json")
    assert code == 0 and len(json.loads(out)) == 10000
    code, out, err = run(capsys, pg_dsn, schema, "add", "edge", "--task", "t", "--every", "1m", "--priority", "255",
                         "--jitter", "86400", "--json")
    assert code == 0 and json.loads(out)["options"]["priority"] == 255, err
    code, _, err = run(capsys, pg_dsn, schema, "health", "--max-age", "86400")
    assert code == 1 and "--max-age" not in err  # no beat: unhealthy, but the option is fine


def test_every_numeric_option_documents_its_bound():
    parser = cli.build_parser()
    parsers = [parser]
    while parsers:
        current = parsers.pop()
        for action in current._actions:
            if isinstance(action, type(parser._subparsers._group_actions[0])):
                parsers.extend(action.choices.values())
                continue
            if action.type in (int, float):
                pytest.fail(f"{action.option_strings} takes a number without a bound")
            bound = getattr(action.type, "bound", None)
            if bound is not None:
                assert bound in action.help, (action.option_strings, action.help)


BAD_DSNS = ["postgresql://runledger:pa%zz{m}@127.0.0.1:5432/test", "postgresql://runledger:{m}%@127.0.0.1:5432/test",
            "postgresql://runledger:{m}%g1@127.0.0.1:5432/test?sslmode=disable",
            "host=127.0.0.1 dbname=test password='{m}", "host=127.0.0.1 password={m} dbname='test",
            "host=127.0.0.1 password = '{m}\\' dbname=test"]


MARKER = "Marker7d1c"


def _refused_without_the_password(code: int, out: str, err: str) -> None:
    assert code in (1, 2), (code, err)
    assert MARKER not in out + err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith("error: ")


@pytest.mark.parametrize("template", BAD_DSNS)
@pytest.mark.parametrize("command", ["web", "list", "migrate", "doctor", "health"])
def test_an_unparsable_dsn_never_shows_the_password(template, command, capfd, monkeypatch):
    """Every command that connects, with the DSN in RUNLEDGER_DSN and then in --dsn (the same main() the
    installed command runs; the whole program is run as a process below)."""
    dsn = template.format(m=MARKER)
    monkeypatch.setenv("RUNLEDGER_DSN", dsn)
    monkeypatch.setenv("RUNLEDGER_WEB_TOKEN", "")
    code = cli.main([command, *(["--port", "1"] if command == "web" else [])])
    _refused_without_the_password(code, *capfd.readouterr())
    monkeypatch.delenv("RUNLEDGER_DSN")
    code = cli.main(["--dsn", dsn, command])
    out, err = capfd.readouterr()
    # with --dsn a warning line comes first (the password shows in ps), and still no password
    assert code in (1, 2) and MARKER not in out + err, err


@pytest.mark.parametrize("template", BAD_DSNS)
def test_the_command_never_shows_an_unparsable_dsns_password(template):
    """The installed program as a process: whatever the interpreter or a library prints, no password."""
    dsn = template.format(m=MARKER)
    done = subprocess.run([sys.executable, "-m", "runledger_beat.cli", "doctor"],
                          env={"RUNLEDGER_DSN": dsn, "PATH": "/usr/bin:/bin"}, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    _refused_without_the_password(done.returncode, done.stdout, done.stderr)
    done = subprocess.run([sys.executable, "-m", "runledger_beat.cli", "--dsn", dsn, "list"], cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=60)
    assert done.returncode in (1, 2) and MARKER not in done.stdout + done.stderr, done.stderr


def test_a_row_nested_900_deep_by_raw_sql_prints_without_a_traceback(capsys, pg_dsn, schema, db, seeded):
    """Raw SQL can store JSON deeper than the API accepts; show and list print it, cut at the depth limit."""
    db.execute("UPDATE job_schedules SET payload_template"
               " = jsonb_build_object('args', %s::jsonb, 'kwargs', '{}'::jsonb)", ("[" * 900 + "]" * 900,))
    for argv in (("show", "kept", "--json"), ("show", "kept"), ("list", "--json")):
        code, out, err = run(capsys, pg_dsn, schema, *argv)
        assert code == 0 and "nested deeper than 64 levels" in out, (argv, err[-300:])
