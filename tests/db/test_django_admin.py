"""runledger_beat.contrib.django: Django's test client, logged in, against the real Postgres.

The changelist filters (task, active, kind) and searches; a schedule's page shows its next fires (from the time
engine) and its latest runs; pause / resume / trigger change the row through runledger_beat.api and wake the
beats (NOTIFY). Django's own tables live in a schema of the process's own (tests/support/django_site.py).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from celery import Celery

from runledger_beat import api
from runledger_beat.db import connect, drop_schema, migrate
from runledger_beat.testing import run_due

from ..support import django_site

LIST = "/admin/runledger/schedule/"


def utc(*args):
    return datetime(*args, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def site(pg_dsn):
    """Django configured on the session's database; yields a logged-in superuser's client factory."""
    django_site.start(pg_dsn)
    from django.contrib.auth import get_user_model

    user_model = get_user_model()
    admin_user = user_model.objects.filter(username="admin").first() or user_model.objects.create_superuser(
        "admin", "admin@example.com", "pw")
    yield admin_user
    django_site.stop(pg_dsn)


@pytest.fixture
def rl(pg_dsn, site):
    """The runledger tables, migrated afresh for this test in the schema the models name."""
    with connect(pg_dsn, "public") as conn:
        migrate(conn, django_site.RUNLEDGER_SCHEMA)
    yield django_site.RUNLEDGER_SCHEMA
    with connect(pg_dsn, "public", autocommit=True) as conn:
        drop_schema(conn, django_site.RUNLEDGER_SCHEMA)


@pytest.fixture
def client(site):
    from django.test import Client

    client = Client()
    client.force_login(site)
    return client


def three(dsn, schema):
    """A cron in Paris, an interval (paused) and a one-off, over two tasks."""
    api.create(dsn, "nightly-report", "proj.report", cron="30 2 * * *", timezone="Europe/Paris",
               start=utc(2031, 1, 1), schema=schema)
    api.create(dsn, "poll", "proj.poll", every=60, start=utc(2031, 1, 1), schema=schema)
    api.pause(dsn, "poll", schema=schema)
    api.create(dsn, "year-end", "proj.report", at=utc(2031, 12, 31, 23), schema=schema)


def listed(client, query=""):
    response = client.get(LIST + query)
    assert response.status_code == 200
    return sorted(s.name for s in response.context["cl"].result_list), response.content.decode()


def test_the_changelist_filters_by_task_active_and_kind_and_searches(client, pg_dsn, rl):
    three(pg_dsn, rl)
    names, page = listed(client)
    assert names == ["nightly-report", "poll", "year-end"]
    # The next fires, computed by the time engine on the schedule's wall clock; a paused schedule has none.
    for day in (1, 2, 3):
        assert f"2031-01-0{day} 02:30:00 CET" in page
    assert "2031-01-04 02:30:00 CET" not in page  # three listed per row
    assert "2031-12-31 23:00:00 UTC" in page
    assert listed(client, "?job_type__exact=proj.report")[0] == ["nightly-report", "year-end"]
    assert listed(client, "?is_active__exact=0")[0] == ["poll"]
    assert listed(client, "?is_active__exact=1")[0] == ["nightly-report", "year-end"]
    assert listed(client, "?kind__exact=once")[0] == ["year-end"]
    assert listed(client, "?kind__exact=cron&is_active__exact=1")[0] == ["nightly-report"]
    assert listed(client, "?q=nightly")[0] == ["nightly-report"]
    assert listed(client, "?q=proj.poll")[0] == ["poll"]


def test_a_schedules_page_shows_its_next_fires_and_latest_runs(client, pg_dsn, rl):
    three(pg_dsn, rl)
    app = Celery("admin", set_as_current=False)
    app.conf.task_always_eager = True

    @app.task(name="proj.poll")
    def poll_task():
        return None

    api.resume(pg_dsn, "poll", schema=rl)
    api.update(pg_dsn, "poll", start=utc(2031, 1, 1), schema=rl)
    fired = [run_due(app, pg_dsn, utc(2031, 1, 1) + timedelta(minutes=k), schema=rl) for k in range(23)]
    runs = [row for rows in fired for row in rows]
    assert len(runs) == 23
    poll = api.get(pg_dsn, "poll", schema=rl)
    response = client.get(f"{LIST}{poll['id']}/change/")
    assert response.status_code == 200
    (inline,) = response.context["inline_admin_formsets"]
    shown = [str(job.id) for job in inline.formset.get_queryset()]
    assert shown == [r["id"] for r in sorted(runs, key=lambda r: r["scheduled_for"], reverse=True)[:20]]
    page = response.content.decode()
    assert "latest runs (newest first, at most 20)" in page.lower()
    # The next ten fires, on the wall clock of the schedule's zone, its calendar's dates left out.
    api.add_calendar(pg_dsn, "holidays", ["2031-01-02"], schema=rl)
    nightly = api.update(pg_dsn, "nightly-report", calendar="holidays", schema=rl)
    page = client.get(f"{LIST}{nightly['id']}/change/").content.decode()
    days = [1, *range(3, 12)]
    assert all(f"2031-01-{day:02d} 02:30:00 CET" in page for day in days)
    assert "2031-01-02 02:30:00 CET" not in page and "2031-01-12 02:30:00 CET" not in page
    assert page.count("02:30:00 CET") == 10


def listen(pg_dsn):
    conn = psycopg.connect(pg_dsn, autocommit=True)
    conn.execute("LISTEN runledger_schedules")
    return conn


def heard(beat, count):
    """The payloads of the next ``count`` notifications (within 5 s each)."""
    payloads = []
    while len(payloads) < count:
        got = [n.payload for n in beat.notifies(timeout=5, stop_after=count - len(payloads))]
        assert got, f"heard {payloads}, expected {count} notifications"
        payloads += got
    return payloads


def act(client, action, *names, pg_dsn, schema):
    ids = [api.get(pg_dsn, n, schema=schema)["id"] for n in names]
    return client.post(LIST, {"action": action, "_selected_action": ids, "index": "0"}, follow=True)


def test_the_actions_change_rows_through_the_api_and_wake_the_beats(client, pg_dsn, rl):
    three(pg_dsn, rl)
    beat = listen(pg_dsn)
    try:
        response = act(client, "pause", "nightly-report", "year-end", pg_dsn=pg_dsn, schema=rl)
        assert [str(m) for m in response.context["messages"]] == ["paused: nightly-report, year-end"]
        for name in ("nightly-report", "year-end"):
            row = api.get(pg_dsn, name, schema=rl)
            assert row["active"] is False and row["next_fire_at"] is None
            assert row["pause_note"] == "paused in the Django admin by admin"
            assert row["paused_by_application"] == "runledger_beat.django"
        assert heard(beat, 2) == [rl, rl]  # one transaction, one wake-up per schedule

        act(client, "resume", "poll", "nightly-report", pg_dsn=pg_dsn, schema=rl)
        for name in ("poll", "nightly-report"):
            row = api.get(pg_dsn, name, schema=rl)
            assert row["active"] is True and row["next_fire_at"] is not None and row["pause_note"] is None
        assert api.get(pg_dsn, "nightly-report", schema=rl)["next_fire_at"] == utc(2031, 1, 1, 1, 30)
        assert heard(beat, 2) == [rl, rl]

        response = act(client, "trigger", "poll", pg_dsn=pg_dsn, schema=rl)
        assert [str(m) for m in response.context["messages"]] == ["triggered: poll"]
        (run,) = api.history(pg_dsn, "poll", schema=rl)
        assert run["stage"] == "manual" and run["status"] == "pending" and run["task"] == "proj.poll"
        assert heard(beat, 1) == ["outbox"]  # the beats publish a trigger at once
    finally:
        beat.close()


def test_actions_need_the_change_permission(pg_dsn, rl, site):
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Permission
    from django.test import Client

    three(pg_dsn, rl)
    viewer = get_user_model().objects.create_user("viewer", password="pw", is_staff=True)
    try:
        viewer.user_permissions.add(Permission.objects.get(codename="view_schedule"))
        client = Client()
        client.force_login(viewer)
        names, page = listed(client)
        assert names == ["nightly-report", "poll", "year-end"] and 'value="pause"' not in page
        act(client, "pause", "nightly-report", pg_dsn=pg_dsn, schema=rl)
        assert api.get(pg_dsn, "nightly-report", schema=rl)["active"] is True
    finally:
        viewer.delete()
