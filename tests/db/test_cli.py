"""The runledger-beat command line, run in-process against a real Postgres."""

from __future__ import annotations

import json

import pytest

from runledger_beat import cli


def run(capsys, pg_dsn, schema, *argv):
    code = cli.main(["--dsn", pg_dsn, "--schema", schema, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def count(db):
    return db.execute("SELECT count(*) AS n FROM job_schedules").fetchone()["n"]


def test_round_trip(capsys, pg_dsn, schema, db):
    code, out, err = run(capsys, pg_dsn, schema, "add", "r1", "--task", "t.report", "--cron", "*/5 * * * *",
                         "--args", "[1, 2]", "--kwargs", '{"a": 1}', "--queue", "q1", "--expires", "60",
                         "--json")
    assert code == 0, err
    row = json.loads(out)
    assert row["name"] == "r1" and row["args"] == [1, 2] and row["options"] == {"queue": "q1", "expires": 60.0}
    assert row["next_fire_at"].endswith("Z")
    assert run(capsys, pg_dsn, schema, "add", "r2", "--task", "t.x", "--every", "90s")[0] == 0
    code, out, _ = run(capsys, pg_dsn, schema, "list", "--json")
    assert [r["name"] for r in json.loads(out)] == ["r1", "r2"]
    code, out, _ = run(capsys, pg_dsn, schema, "update", "r2", "--every", "2m", "--json")
    assert code == 0 and json.loads(out)["every"] == 120.0
    code, out, _ = run(capsys, pg_dsn, schema, "show", "r1", "--json")
    shown = json.loads(out)
    assert set(shown) == {"schedule", "next_fires", "history"} and len(shown["next_fires"]) == 5
    code, out, _ = run(capsys, pg_dsn, schema, "pause", "r1", "--json")
    assert json.loads(out)["active"] is False and json.loads(out)["next_fire_at"] is None
    code, out, _ = run(capsys, pg_dsn, schema, "resume", "r1", "--json")
    assert json.loads(out)["active"] is True
    code, out, _ = run(capsys, pg_dsn, schema, "trigger", "r1", "--json")
    job = json.loads(out)
    assert code == 0 and job["stage"] == "manual" and job["status"] == "pending"
    assert job["payload"]["_schedule"]["schedule_name"] == "r1" and job["options"]["queue"] == "q1"
    code, out, _ = run(capsys, pg_dsn, schema, "history", "r1", "--json")
    assert [j["id"] for j in json.loads(out)] == [job["id"]]
    assert run(capsys, pg_dsn, schema, "history", "r1", "--status", "success", "--json")[1].strip() == "[]"
    code, out, _ = run(capsys, pg_dsn, schema, "remove", "r2", "--json")
    assert json.loads(out) == {"removed": "r2"} and count(db) == 1
    code, out, _ = run(capsys, pg_dsn, schema, "migrate", "--json")
    assert code == 0 and json.loads(out) == {"applied": []}
    assert run(capsys, pg_dsn, schema, "list")[0] == 0


BAD = [
    (["--cron", "61 * * * *"], "cron"),
    (["--cron", "* * * * *", "--tz", "Mars/Base"], "timezone"),
    (["--cron", "* * * * *", "--args", "[1,"], "args"),
    (["--cron", "* * * * *", "--args", '{"a": 1}'], "args"),
    (["--cron", "* * * * *", "--kwargs", "[1]"], "kwargs"),
    (["--cron", "* * * * *", "--misfire", "replay"], "misfire"),
    (["--every", "0"], "every"),
    (["--every", "-5"], "every"),
]


@pytest.mark.parametrize("extra,field", BAD)
def test_bad_input(capsys, pg_dsn, schema, db, extra, field):
    code, out, err = run(capsys, pg_dsn, schema, "add", "bad", "--task", "t.x", *extra)
    assert code == 2 and f"error: {field}:" in err
    assert count(db) == 0


def test_bad_names_and_duplicates(capsys, pg_dsn, schema, db):
    code, _, err = run(capsys, pg_dsn, schema, "add", " spaced ", "--task", "t.x", "--every", "5s")
    assert code == 2 and "error: name:" in err
    code, _, err = run(capsys, pg_dsn, schema, "add", "x", "--task", "", "--every", "5s")
    assert code == 2 and "error: task:" in err
    assert count(db) == 0
    assert run(capsys, pg_dsn, schema, "add", "x", "--task", "t.x", "--every", "5s")[0] == 0
    code, _, err = run(capsys, pg_dsn, schema, "add", "x", "--task", "t.y", "--every", "5s")
    assert code == 2 and "error: name:" in err and "use update" in err
    assert count(db) == 1


def test_unreachable_database_hides_password(capsys):
    code = cli.main(["--dsn", "postgresql://u:sekrit@127.0.0.1:1/db", "list"])
    _, err = capsys.readouterr()
    assert code == 1 and "sekrit" not in err and err.splitlines()[-1].startswith("error:")


def test_global_options_go_before_or_after_the_subcommand(capsys, pg_dsn, schema, db):
    assert cli.main(["add", "late", "--task", "t.x", "--every", "5s", "--dsn", pg_dsn, "--schema", schema]) == 0
    capsys.readouterr()
    assert cli.main(["migrate", "--dsn", pg_dsn, "--schema", schema, "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"applied": []}
    code = cli.main(["--dsn", pg_dsn, "list", "--schema", schema, "--json"])
    out = capsys.readouterr().out
    assert code == 0 and [r["name"] for r in json.loads(out)] == ["late"]


def test_the_dsn_from_a_file_and_a_warning_for_a_password_on_the_command_line(capsys, tmp_path, pg_dsn, schema, db):
    path = tmp_path / "dsn"
    path.write_text(pg_dsn + "\n")
    assert cli.main(["--dsn-file", str(path), "--schema", schema, "list"]) == 0
    assert "warning" not in capsys.readouterr().err
    code = cli.main(["--dsn", "postgresql://u:hunter2@127.0.0.1:1/db", "list"])
    err = capsys.readouterr().err
    assert code == 1 and "warning: --dsn carries a password" in err and "hunter2" not in err


def test_every_option_has_help():
    parser = cli.build_parser()
    actions = list(parser._actions)
    for sub in parser._subparsers._group_actions[0].choices.values():
        actions.extend(sub._actions)
    missing = [a.option_strings or a.dest for a in actions if not a.help and a.dest != "help"]
    assert missing == []


def test_list_and_stats_go_a_page_at_a_time(capsys, pg_dsn, schema, db):
    for i in range(7):
        assert run(capsys, pg_dsn, schema, "add", f"p{i}", "--task", "t.even" if i % 2 == 0 else "t.odd",
                   "--every", "60s")[0] == 0
    code, out, err = run(capsys, pg_dsn, schema, "list", "--limit", "3", "--json")
    assert code == 0 and [r["name"] for r in json.loads(out)] == ["p0", "p1", "p2"]
    assert "--after p2" in err
    names, after = [], None
    while True:
        code, out, err = run(capsys, pg_dsn, schema, "list", "--limit", "2", "--json", *(["--after", after] if after
                                                                                        else []))
        names += [r["name"] for r in json.loads(out)]
        if "--after" not in err:
            break
        after = err.split("--after ", 1)[1].strip()
    assert names == [f"p{i}" for i in range(7)]
    code, out, err = run(capsys, pg_dsn, schema, "list", "--task", "t.odd", "--after", "p1")
    assert code == 0 and [line.split("\t")[0] for line in out.splitlines()] == ["p3", "p5"] and err == ""
    code, out, _ = run(capsys, pg_dsn, schema, "list", "--search", "P6", "--json")
    assert [r["name"] for r in json.loads(out)] == ["p6"]
    code, out, _ = run(capsys, pg_dsn, schema, "list", "--after", "p6")
    assert code == 0 and out.strip() == "no schedules"
    for bad in ("0", "1000001", "x"):
        code, _, err = run(capsys, pg_dsn, schema, "list", "--limit", bad)
        assert code == 2 and "--limit" in err and "1..1000000" in err

    for name in ("p0", "p1", "p2"):
        assert run(capsys, pg_dsn, schema, "trigger", name)[0] == 0
    code, out, err = run(capsys, pg_dsn, schema, "stats", "--limit", "2", "--json")
    assert code == 0 and [i["name"] for i in json.loads(out)] == ["p0", "p1"] and "--after p1" in err
    code, out, err = run(capsys, pg_dsn, schema, "stats", "--after", "p1", "--limit", "2", "--json")
    assert [(i["name"], i["total"]) for i in json.loads(out)] == [("p2", 1)] and "--after p3" in err
    code, _, err = run(capsys, pg_dsn, schema, "stats", "--limit", "1001")
    assert code == 2 and "1..1000" in err
