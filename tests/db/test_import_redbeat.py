"""`runledger-beat import-from redbeat`: entries saved by redbeat's own RedBeatSchedulerEntry, under a key
prefix of the test's own on the real Redis, brought across field by field; a second run changes nothing;
--dry-run writes nothing; Redis is only read."""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
import redis
from celery import Celery
from celery.schedules import crontab

from runledger_beat import api, cli
from tests.support.services import find_redis


@pytest.fixture
def saved(request):
    """(redis url, prefix): redbeat entries of each kind saved by redbeat itself; their keys deleted after."""
    url, prefix = find_redis(), f"rltest:{uuid.uuid4().hex[:10]}:"
    from redbeat import RedBeatSchedulerEntry
    from redbeat.schedules import rrule
    app = Celery("redbeat_source", broker="memory://", set_as_current=False)
    app.conf.update(redbeat_redis_url=url, redbeat_key_prefix=prefix, timezone="Europe/Lisbon")
    client = redis.Redis.from_url(url)
    try:
        for name, task, schedule, extra in (
            ("poll", "proj.poll", timedelta(seconds=90),
             {"args": [1, "a"], "kwargs": {"k": [1]},
              "options": {"queue": "q1", "routing_key": "rk", "priority": 3, "expires": 60,
                          "headers": {"h": "v"}}}),
            ("weekly", "proj.weekly", crontab(minute=15, hour=6, day_of_week="monday,friday"), {}),
            ("first monday", "proj.m", crontab(minute=0, hour=8, day_of_month="1-7", day_of_week="mon"), {}),
            ("off", "proj.off", timedelta(minutes=5), {"enabled": False}),
            ("rule", "proj.rule", rrule("MINUTELY", interval=5), {}),
        ):
            RedBeatSchedulerEntry(name, task, schedule, app=app, **extra).save()
        yield url, prefix
    finally:
        for key in client.scan_iter(match=prefix + "*"):
            client.delete(key)
        client.close()


def keys_and_values(url, prefix):
    client = redis.Redis.from_url(url)
    with client:
        return {k: client.dump(k) for k in client.scan_iter(match=prefix + "*")}


def run(capsys, pg_dsn, schema, url, prefix, *argv):
    code = cli.main(["--dsn", pg_dsn, "--schema", schema, "import-from", "redbeat", url, "--prefix", prefix,
                     "--tz", "Europe/Lisbon", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


ALL = ["first monday", "off", "poll", "weekly"]


def test_redbeat_entries_come_across_field_by_field(capsys, pg_dsn, schema, db, saved):
    url, prefix = saved
    before = keys_and_values(url, prefix)
    code, plan = run(capsys, pg_dsn, schema, url, prefix, "--dry-run", "--skip-invalid")
    assert code == 0 and sorted(plan["created"]) == ALL and not plan["written"]
    assert plan["refused"] == {"rule": "rrule schedules are not supported"}
    assert api.list_schedules(db) == []

    code, refused = run(capsys, pg_dsn, schema, url, prefix)
    assert code == 2 and not refused["written"] and api.list_schedules(db) == []

    code, report = run(capsys, pg_dsn, schema, url, prefix, "--skip-invalid")
    assert code == 0 and sorted(report["created"]) == ALL
    got = {s["name"]: s for s in api.list_schedules(db)}
    poll = got["poll"]
    assert (poll["kind"], poll["every"], poll["task"], poll["args"], poll["kwargs"]) == (
        "interval", 90.0, "proj.poll", [1, "a"], {"k": [1]})
    assert poll["options"] == {"queue": "q1", "routing_key": "rk", "priority": 3, "expires": 60.0,
                               "headers": {"h": "v"}}
    assert (got["weekly"]["cron"], got["weekly"]["day_and"], got["weekly"]["timezone"]) == (
        "15 6 * * 1,5", True, "Europe/Lisbon")
    assert got["first monday"]["cron"] == "0 8 1-7 * 1" and got["first monday"]["day_and"] is True
    assert got["off"]["active"] is False and got["poll"]["active"] is True

    code, again = run(capsys, pg_dsn, schema, url, prefix, "--skip-invalid")
    assert code == 0 and sorted(again["unchanged"]) == ALL and again["created"] == again["updated"] == []
    assert keys_and_values(url, prefix) == before


def test_an_unreachable_redis_hides_its_password(capsys, pg_dsn, schema, db):
    code = cli.main(["--dsn", pg_dsn, "--schema", schema, "import-from", "redbeat",
                     "redis://:hunter2@127.0.0.1:1/0"])
    err = capsys.readouterr().err
    assert code == 1 and "redis://:***@127.0.0.1:1/0" in err and "hunter2" not in err
