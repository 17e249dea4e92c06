"""Migrate a database with django-celery-beat's own migrations and save one PeriodicTask of each kind through
its models; run as ``python -m tests.support.dcb_project`` with RUNLEDGER_DCB_DSN and RUNLEDGER_DCB_SCHEMA set
(Django stays out of the test process)."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone


def populate() -> None:
    from django.core.management import call_command
    call_command("migrate", verbosity=0)
    from django_celery_beat.models import (
        ClockedSchedule,
        CrontabSchedule,
        IntervalSchedule,
        PeriodicTask,
        SolarSchedule,
    )
    ten_minutes = IntervalSchedule.objects.create(every=10, period=IntervalSchedule.MINUTES)
    two_days = IntervalSchedule.objects.create(every=2, period=IntervalSchedule.DAYS)
    first_monday = CrontabSchedule.objects.create(minute="0", hour="8", day_of_month="1-7", day_of_week="mon",
                                                  month_of_year="*", timezone="Europe/Berlin")
    weekdays = CrontabSchedule.objects.create(minute="*/30", hour="9-17", day_of_week="mon-fri", timezone="UTC")
    new_year = ClockedSchedule.objects.create(clocked_time=datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc))
    sunrise = SolarSchedule.objects.create(event="sunrise", latitude=52.5, longitude=13.4)
    PeriodicTask.objects.create(
        name="report", task="proj.report", interval=ten_minutes, args=json.dumps([1, "two"]),
        kwargs=json.dumps({"k": "v", "n": [1, 2]}), queue="reports", exchange="reports-x", routing_key="rk.report",
        priority=5, expire_seconds=120, headers=json.dumps({"team": "data"}))
    PeriodicTask.objects.create(name="first monday", task="proj.monthly", crontab=first_monday)
    PeriodicTask.objects.create(name="new year", task="proj.greet", clocked=new_year, one_off=True)
    PeriodicTask.objects.create(name="sunrise", task="proj.sun", solar=sunrise)
    PeriodicTask.objects.create(name="switched off", task="proj.off", interval=ten_minutes, enabled=False)
    PeriodicTask.objects.create(
        name="campaign", task="proj.campaign", crontab=weekdays,
        start_time=datetime(2030, 3, 1, tzinfo=timezone.utc), expires=datetime(2030, 6, 1, tzinfo=timezone.utc))
    PeriodicTask.objects.create(name="once later", task="proj.once", interval=two_days, one_off=True,
                                start_time=datetime(2030, 5, 5, 5, 5, tzinfo=timezone.utc))


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.support.dcb_settings")
    import django
    django.setup()
    populate()
