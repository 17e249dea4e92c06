"""Importing a real Celery app's beat_schedule."""

from __future__ import annotations

from datetime import timedelta

from celery import Celery
from celery.schedules import crontab, solar

from runledger_beat import api
from runledger_beat.importer import sync_beat_schedule


def make_app(entries):
    app = Celery("x", broker="memory://")
    app.conf.timezone = "Europe/Berlin"
    app.conf.beat_schedule = entries
    return app


ENTRIES = {
    "nightly": {"task": "t.nightly", "schedule": crontab(minute=30, hour=2, day_of_week="mon-fri"),
                "args": (1,), "options": {"queue": "reports", "expires": 300}},
    "often": {"task": "t.often", "schedule": timedelta(seconds=45), "kwargs": {"k": "v"}},
    "number": {"task": "t.number", "schedule": 10.0},
}


def test_import_twice_and_deactivate(db):
    app = make_app(dict(ENTRIES))
    api.upsert(db, "mine", "t.mine", every=60)
    report = sync_beat_schedule(db, app, app.conf.beat_schedule)
    assert (report["created"], report["errors"]) == (3, {})
    nightly = api.get(db, "nightly")
    assert nightly["cron"] == "30 2 * * 1-5" and nightly["day_and"] and nightly["timezone"] == "Europe/Berlin"
    assert nightly["options"] == {"queue": "reports", "expires": 300.0} and nightly["source"] == "config"
    assert api.get(db, "often")["every"] == 45.0 and api.get(db, "number")["every"] == 10.0
    before = {s["name"]: (s["next_fire_at"], s["updated_at"]) for s in api.list_schedules(db)}
    again = sync_beat_schedule(db, app, app.conf.beat_schedule)
    assert again["unchanged"] == 3 and again["created"] == again["updated"] == again["deactivated"] == 0
    assert {s["name"]: (s["next_fire_at"], s["updated_at"]) for s in api.list_schedules(db)} == before
    smaller = {k: v for k, v in ENTRIES.items() if k != "number"}
    assert sync_beat_schedule(db, app, smaller)["deactivated"] == 1
    assert api.get(db, "number")["active"] is False
    assert api.get(db, "mine")["active"] is True


def _solar():
    """A solar schedule; built without ephem (not installed), which the importer never needs."""
    try:
        return solar("sunrise", 52.5, 13.4)
    except Exception:
        return object.__new__(solar)


def test_solar_is_a_clear_error_and_others_import(db):
    app = make_app({"sun": {"task": "t.sun", "schedule": _solar()},
                    "ok": {"task": "t.ok", "schedule": 30}})
    report = sync_beat_schedule(db, app, app.conf.beat_schedule)
    assert report["created"] == 1
    assert "beat_schedule['sun']: solar schedules are not supported" in report["errors"]["sun"]
    assert api.get(db, "sun") is None
