"""Create django-celery-beat's tables in BENCH_SCHEMA and N periodic tasks due at HOUR:MINUTE UTC.

    python -m bench.django_seed N MINUTE HOUR    (run by bench_anchors.py)
"""

import os
import sys

import psycopg
from psycopg import sql

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.django_settings")
schema = os.environ["BENCH_SCHEMA"]
with psycopg.connect(os.environ["BENCH_DSN"], autocommit=True) as conn:
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django_celery_beat.models import CrontabSchedule, PeriodicTask, PeriodicTasks  # noqa: E402

n, minute, hour = int(sys.argv[1]), sys.argv[2], sys.argv[3]
call_command("migrate", "django_celery_beat", verbosity=0)
crontab = CrontabSchedule.objects.create(minute=minute, hour=hour, day_of_week="*", day_of_month="*",
                                         month_of_year="*", timezone="UTC")
PeriodicTask.objects.bulk_create(
    [PeriodicTask(name=f"s{i}", task="bench.noop", crontab=crontab) for i in range(n)], batch_size=2000)
PeriodicTasks.update_changed()
