"""The admin: schedules listed with filters (task, active, kind), search, their next fires computed in-process by
the time engine, their latest runs, and pause / resume / trigger actions.

The pages only read (through the ORM, from ``RUNLEDGER_DATABASE``). Every change goes through
``runledger_beat.api`` on ``RUNLEDGER_DSN``: it validates, moves the cursor and notifies the beats, so a
pause or a trigger takes effect at once; an action needs the ``change_schedule`` permission. Schedules are
created and edited with the API, the ``runledger-beat`` command or ``beat_schedule``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import psycopg
from django.contrib import admin, messages
from django.db.models import OuterRef, QuerySet, Subquery
from django.forms.models import BaseInlineFormSet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html_join

from ... import api
from ...db.connect import APPLICATION_NAME
from ...db.redaction import safe_error
from ...errors import ScheduleError
from ...ops.pages import timing_words
from ...timing.cron import zone
from ...timing.rows import upcoming
from . import conf
from .models import Calendar, Job, Schedule

#: Runs shown on a schedule's page, newest first.
RUNS_SHOWN = 20
#: Next fires in the list, and on a schedule's page.
FIRES_LISTED = 3
FIRES_SHOWN = 10
#: The application_name of the admin's connections (the pause note and the audit log show it).
APPLICATION = "runledger_beat.django"


def local_time(instant: datetime, tz: str) -> str:
    """An instant on the schedule's wall clock: '2031-01-01 02:30:00 CET'."""
    try:
        local = instant.astimezone(zone(tz))
    except (ScheduleError, ValueError):
        local = instant
    return f"{local:%Y-%m-%d %H:%M:%S} {local.tzname()}"


def next_fires(schedule: Schedule, count: int) -> list[datetime]:
    """The schedule's next ``count`` fires from now, by the time engine ([] when paused, finished or invalid)."""
    row = dict(schedule.row(), calendar_dates=getattr(schedule, "calendar_dates", None))
    return upcoming(row, timezone.now(), count)


class LatestRuns(BaseInlineFormSet):
    """The schedule's runs, cut to the newest RUNS_SHOWN (a slice after the formset filtered them)."""

    def get_queryset(self) -> Any:
        return super().get_queryset()[:RUNS_SHOWN]


class RunInline(admin.TabularInline):
    """The latest ledger rows of the schedule, read-only."""

    model = Job
    formset = LatestRuns
    fields = ("scheduled_for", "stage", "status", "sent_at", "started_at", "finished_at", "worker", "retries",
              "last_error")
    readonly_fields = fields
    ordering = ("-scheduled_for",)
    extra = 0
    can_delete = False
    verbose_name_plural = f"latest runs (newest first, at most {RUNS_SHOWN})"

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        return super().get_queryset(request).using(conf.database())

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    """Schedules: read here, changed through runledger_beat.api by the actions."""

    list_display = ("name", "job_type", "kind", "timing", "is_active", "upcoming", "last_fired_at")
    list_filter = ("job_type", "is_active", "kind")
    search_fields = ("name", "job_type")
    inlines = (RunInline,)
    actions = ("pause", "resume", "trigger")
    readonly_fields = ("timing", "upcoming_fires")
    fieldsets = (
        (None, {"fields": ("name", "job_type", "kind", "timing", "is_active", "upcoming_fires", "next_fire_at",
                           "last_fired_at")}),
        ("Arguments and options", {"fields": ("payload_template", "options")}),
        ("Policies", {"fields": ("max_jitter_seconds", "misfire_policy", "misfire_grace_seconds", "overlap_policy",
                                 "overlap_terminate", "start_at", "end_at", "skip_dates", "calendar")}),
        ("Pause", {"fields": ("pause_note", "paused_at", "paused_by", "paused_by_application")}),
        ("Record", {"fields": ("id", "source", "organization_id", "anchor_at", "created_at", "updated_at")}),
    )

    def get_queryset(self, request: HttpRequest) -> QuerySet:
        """From RUNLEDGER_DATABASE, each row with its calendar's dates (one query for the page)."""
        dates = Calendar.objects.filter(name=OuterRef("calendar")).values("dates")[:1]
        return super().get_queryset(request).using(conf.database()).annotate(calendar_dates=Subquery(dates))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """Pause, resume and trigger need the change permission on schedules."""
        return request.user.has_perm(f"{self.opts.app_label}.change_schedule")

    @admin.display(description="timing")
    def timing(self, obj: Schedule) -> str:
        return timing_words({"cron": obj.cron_expr, "every": obj.interval_seconds, "at": obj.run_at,
                             "timezone": obj.timezone, "day_and": obj.cron_day_and})

    @admin.display(description="next fires")
    def upcoming(self, obj: Schedule) -> str:
        return self._fires(obj, FIRES_LISTED)

    @admin.display(description="next fires")
    def upcoming_fires(self, obj: Schedule) -> str:
        return self._fires(obj, FIRES_SHOWN)

    def _fires(self, obj: Schedule, count: int) -> str:
        fires = next_fires(obj, count)
        if not fires:
            return "paused" if not obj.is_active else "none"
        return format_html_join("", "<div>{}</div>", ((local_time(f, obj.timezone),) for f in fires))

    @admin.action(description="Pause the selected schedules", permissions=["operate"])
    def pause(self, request: HttpRequest, queryset: QuerySet) -> None:
        note = f"paused in the Django admin by {request.user.get_username()}"
        self._each(request, queryset, "paused", lambda dsn, name, schema: api.pause(dsn, name, note=note,
                                                                                     schema=schema))

    @admin.action(description="Resume the selected schedules", permissions=["operate"])
    def resume(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._each(request, queryset, "resumed", api.resume)

    @admin.action(description="Trigger the selected schedules now", permissions=["operate"])
    def trigger(self, request: HttpRequest, queryset: QuerySet) -> None:
        self._each(request, queryset, "triggered", api.trigger)

    def _each(self, request: HttpRequest, queryset: QuerySet, verb: str, call: Callable[..., Any]) -> None:
        """Apply ``call(dsn, name, schema=...)`` to each selected schedule, one transaction each; report which
        ones were done and why any was not."""
        dsn, schema = conf.dsn(), conf.schema()
        done: list[str] = []
        token = APPLICATION_NAME.set(APPLICATION)
        try:
            for name in queryset.values_list("name", flat=True):
                try:
                    call(dsn, name, schema=schema)
                except ScheduleError as exc:
                    self.message_user(request, f"{name}: not {verb}: {exc}", messages.ERROR)
                    continue
                except psycopg.Error as exc:
                    self.message_user(request, f"{name}: not {verb}: {safe_error(exc, dsn)}", messages.ERROR)
                    break
                done.append(name)
        finally:
            APPLICATION_NAME.reset(token)
        if done:
            self.message_user(request, f"{verb}: {', '.join(done)}", messages.SUCCESS)
