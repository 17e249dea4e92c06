"""Every form Celery's crontab accepts imports as the cron Celery means: the stored expression's field sets
equal Celery's own expanded sets, and its fires equal the ones Celery's crontab computes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import crontab, schedule, solar

from runledger_beat.imports.celery_schedules import Refused, timing_of
from runledger_beat.timing.cron import compile_cron

FORMS = {
    "day name full": dict(day_of_week="monday"),
    "day name short, any case": dict(day_of_week="Mon,FRI,wed"),
    "day names full, upper case": dict(day_of_week="MONDAY,Friday"),
    "wrap-around range of names": dict(day_of_week="tuesday-sunday"),
    "wrap-around short range": dict(day_of_week="fri-mon"),
    "day range with step": dict(minute=0, hour=9, day_of_week="mon-fri/2"),
    "month names": dict(minute=0, hour=0, day_of_month=1, month_of_year="jan,Jul"),
    "month names full, any case": dict(minute=0, hour=0, day_of_month=1, month_of_year="January,DECEMBER"),
    "wrap-around month range": dict(minute=0, hour=6, day_of_month=15, month_of_year="nov-feb"),
    "day step": dict(minute=0, hour=0, day_of_week="*/2"),
    "month step": dict(minute=0, hour=0, day_of_month=1, month_of_year="*/3"),
    "minute step": dict(minute="*/15"),
    "range with step": dict(minute="5-55/10", hour="8-18/2"),
    "python list": dict(minute=[0]),
    "python list of every day": dict(minute=0, hour=12, day_of_week=[0, 1, 2, 3, 4, 5, 6]),
    "python set": dict(minute={0, 30}, hour={1, 13}),
    "python range": dict(minute=0, hour=range(9, 17)),
    "ints": dict(minute=7, hour=3, day_of_month=15),
    "positional": ("30", "2", "1-5"),
    "positional ints": (0, 0),
    "day of month AND day of week": dict(minute=0, hour=8, day_of_month="1-7", day_of_week="mon"),
    "day of month step": dict(minute=0, hour=0, day_of_month="2-30/3"),
    "day 31 only": dict(minute=0, hour=0, day_of_month="31"),
    "comma list with ranges": dict(minute="1,2,3,10-12,40", hour="0-3,22-23"),
    "every minute": dict(),
}


def app(zone: str = "Europe/Berlin") -> Celery:
    celery = Celery("forms", set_as_current=False)
    celery.conf.timezone = zone
    return celery


def build(form) -> crontab:
    return crontab(*form) if isinstance(form, tuple) else crontab(**form)


def celery_fires(sched: crontab, start: datetime, count: int) -> list[datetime]:
    """The fires Celery's own crontab computes, one after another, from ``start`` (aware)."""
    fires, last = [], start
    for _ in range(count):
        last, delta, _now = sched.remaining_delta(last)
        last = (last + delta).replace(second=0, microsecond=0)
        fires.append(last.astimezone(timezone.utc))
    return fires


@pytest.mark.parametrize("form", FORMS.values(), ids=FORMS.keys())
def test_crontab_form_imports_as_celery_expands_it(form):
    the_app = app()
    sched = build(form)
    sched.app = the_app
    got = timing_of(the_app, sched)
    assert got["day_and"] is True and got["timezone"] == "Europe/Berlin"
    cron = compile_cron(got["cron"], got["timezone"], got["day_and"])
    assert set(cron.minutes) == sched.minute
    assert set(cron.hours) == sched.hour
    assert set(cron.days_of_month) == sched.day_of_month
    assert set(cron.months) == sched.month_of_year
    assert set(cron.days_of_week) == sched.day_of_week
    start = datetime(2026, 1, 1, 0, 0, 30, tzinfo=ZoneInfo("Europe/Berlin"))
    ours, instant = [], start
    for _ in range(6):
        instant = cron.next_after(instant)
        ours.append(instant.astimezone(timezone.utc))
    assert ours == celery_fires(sched, start, 6)


def test_day_of_month_and_day_of_week_are_anded_like_celery():
    """crontab(0, 8, day_of_month='1-7', day_of_week='mon') is the first Monday only, never every Monday."""
    the_app = app("UTC")
    got = timing_of(the_app, build(FORMS["day of month AND day of week"]))
    cron = compile_cron(got["cron"], "UTC", got["day_and"])
    fires, instant = [], datetime(2026, 1, 1, tzinfo=timezone.utc)
    for _ in range(4):
        instant = cron.next_after(instant)
        fires.append(instant)
    assert [f.date().isoformat() for f in fires] == ["2026-01-05", "2026-02-02", "2026-03-02", "2026-04-06"]


def test_zone_is_the_given_apps_not_the_current_one():
    from celery import _state
    before = _state.get_current_app()
    current = Celery("current", set_as_current=True)
    current.conf.timezone = "Asia/Tokyo"
    try:
        given = app("America/New_York")
        assert timing_of(given, crontab(minute=0))["timezone"] == "America/New_York"
        assert timing_of(given, timedelta(minutes=5)) == {"every": 300.0, "timezone": "America/New_York"}
    finally:
        before.set_current()
    utc_app = Celery("utc", set_as_current=False)
    assert timing_of(utc_app, crontab(minute=0))["timezone"] == "UTC"


def test_a_crontab_carrying_its_own_zone_keeps_it():
    class ZonedCrontab(crontab):
        def __init__(self, *args, tz=None, **kwargs):
            self.tz = tz
            super().__init__(*args, **kwargs)
    assert timing_of(app(), ZonedCrontab(minute=0, tz=ZoneInfo("Asia/Kolkata")))["timezone"] == "Asia/Kolkata"


def test_intervals_numbers_and_schedules():
    the_app = app("UTC")
    assert timing_of(the_app, 10)["every"] == 10.0
    assert timing_of(the_app, 2.5)["every"] == 2.5
    assert timing_of(the_app, schedule(run_every=timedelta(hours=1)))["every"] == 3600.0
    assert timing_of(the_app, schedule(run_every=timedelta(hours=1), relative=True))["every"] == 3600.0


def test_solar_and_custom_schedules_are_refused_with_the_reason():
    class EveryFullMoon(schedule):
        def is_due(self, last_run_at):
            return False, 3600.0

    try:
        sun = solar("sunrise", 52.5, 13.4)
    except Exception:  # ephem is not installed; the importer never needs it
        sun = object.__new__(solar)
    with pytest.raises(Refused, match="solar schedules are not supported"):
        timing_of(app(), sun)
    with pytest.raises(Refused, match=r"custom schedule class .*EveryFullMoon is not supported"):
        timing_of(app(), EveryFullMoon(run_every=60))
    with pytest.raises(Refused, match="unsupported schedule type str"):
        timing_of(app(), "every day")
