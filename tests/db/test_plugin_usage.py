# tests/test_schedules.py in your project: the runledger fixtures come with runledger-beat.
from datetime import datetime, timezone

from celery import Celery

from runledger_beat import api, schedule_info
from runledger_beat.testing import run_due

app = Celery("proj")                  # yours: from proj.celery import app
app.conf.task_always_eager = True     # run_due then runs each fired task right here
runs = []


@app.task(bind=True, name="proj.report")
def report(self, kind, recipients=()):
    runs.append((kind, list(recipients), schedule_info(self.request)["scheduled_for"]))


def utc(*args):
    return datetime(*args, tzinfo=timezone.utc)


def nightly(dsn, start):
    # runledger_dsn names the test's schema, so neither api.* nor run_due needs schema=.
    return api.create(dsn, "nightly-report", "proj.report", cron="30 2 * * *", timezone="Europe/Paris",
                      args=["daily"], kwargs={"recipients": ["ops@example.com"]}, start=start)


def test_nightly_report_runs_at_half_past_two_in_paris(runledger_dsn):
    runs.clear()
    nightly(runledger_dsn, start=utc(2030, 1, 1))
    # 02:29 in Paris (CET, UTC+1): nothing is due yet.
    assert run_due(app, runledger_dsn, utc(2030, 1, 1, 1, 29)) == []
    (row,) = run_due(app, runledger_dsn, utc(2030, 1, 1, 1, 30))
    assert row["schedule_name"] == "nightly-report" and row["status"] == "sent"
    assert row["scheduled_for"] == utc(2030, 1, 1, 1, 30)
    assert runs == [("daily", ["ops@example.com"], "2030-01-01T01:30:00Z")]


def test_on_the_spring_forward_night_it_runs_once_right_after_the_gap(runledger_dsn):
    runs.clear()
    nightly(runledger_dsn, start=utc(2030, 3, 30, 12))
    # 2030-03-31: Paris skips from 02:00 to 03:00, so 02:30 never happens; like cron it runs at 03:00 CEST.
    (row,) = run_due(app, runledger_dsn, utc(2030, 3, 31, 1, 0))
    assert row["scheduled_for"] == utc(2030, 3, 31, 1, 0)
    # The next night, 02:30 CEST is 00:30 UTC.
    (row,) = run_due(app, runledger_dsn, utc(2030, 4, 1, 0, 30))
    assert row["scheduled_for"] == utc(2030, 4, 1, 0, 30)
    assert [r[2] for r in runs] == ["2030-03-31T01:00:00Z", "2030-04-01T00:30:00Z"]
