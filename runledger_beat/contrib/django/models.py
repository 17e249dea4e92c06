"""Unmanaged models over runledger's tables in ``RUNLEDGER_SCHEMA`` (Django never creates or alters them).

Each field is named after its column, so a model instance reads like the row the time engine takes
(``timing_from_row``). Write through ``runledger_beat.api`` (the admin's actions do): it validates, moves the
cursor and notifies the beats; a save through the ORM would bypass all three.
"""

from __future__ import annotations

from django.contrib.postgres.fields import ArrayField
from django.db import models

from . import conf

SCHEMA = conf.schema()


def table(name: str) -> str:
    """The quoted, schema-qualified table name (Django leaves a name that starts and ends in quotes alone)."""
    return f'"{SCHEMA}"."{name}"'


class Calendar(models.Model):
    """A named set of dates on which the schedules using it never fire."""

    name = models.TextField(primary_key=True)
    dates = ArrayField(models.DateField())
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = table("calendars")
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class Schedule(models.Model):
    """One row of ``job_schedules``: a task and when to run it."""

    KINDS = (("cron", "cron"), ("interval", "interval"), ("once", "once"))

    id = models.UUIDField(primary_key=True)
    name = models.TextField(unique=True)
    job_type = models.TextField("task")
    organization_id = models.UUIDField(null=True)
    payload_template = models.JSONField("arguments")
    kind = models.TextField(choices=KINDS)
    cron_expr = models.TextField("cron", null=True)
    cron_day_and = models.BooleanField("day fields ANDed")
    interval_seconds = models.FloatField("every (seconds)", null=True)
    run_at = models.DateTimeField("at", null=True)
    anchor_at = models.DateTimeField()
    timezone = models.TextField()
    is_active = models.BooleanField("active")
    next_fire_at = models.DateTimeField("cursor", null=True)
    last_fired_at = models.DateTimeField(null=True)
    max_jitter_seconds = models.IntegerField("max jitter (seconds)")
    options = models.JSONField()
    misfire_policy = models.TextField()
    misfire_grace_seconds = models.FloatField(null=True)
    overlap_policy = models.TextField()
    overlap_terminate = models.BooleanField()
    start_at = models.DateTimeField(null=True)
    end_at = models.DateTimeField(null=True)
    skip_dates = ArrayField(models.DateField())
    calendar = models.TextField(null=True)
    source = models.TextField()
    pause_note = models.TextField(null=True)
    paused_at = models.DateTimeField(null=True)
    paused_by = models.TextField(null=True)
    paused_by_application = models.TextField(null=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = table("job_schedules")
        ordering = ("name",)
        verbose_name = "schedule"

    def __str__(self) -> str:
        return self.name

    def row(self) -> dict:
        """The instance as a ``job_schedules`` row dict (column -> value)."""
        return {f.column: getattr(self, f.attname) for f in self._meta.concrete_fields}


class Job(models.Model):
    """One row of the ledger ``jobs``: a fire (or a manual trigger) and its outcome."""

    id = models.UUIDField(primary_key=True)
    schedule = models.ForeignKey(Schedule, models.DO_NOTHING, null=True, db_constraint=False, related_name="runs")
    schedule_name = models.TextField(null=True)
    scheduled_for = models.DateTimeField(null=True)
    job_type = models.TextField("task")
    organization_id = models.UUIDField(null=True)
    payload = models.JSONField()
    options = models.JSONField()
    stage = models.TextField()
    status = models.TextField()
    created_at = models.DateTimeField()
    sent_at = models.DateTimeField(null=True)
    started_at = models.DateTimeField(null=True)
    finished_at = models.DateTimeField(null=True)
    dispatch_attempts = models.IntegerField()
    last_error = models.TextField(null=True)
    worker = models.TextField(null=True)
    retries = models.IntegerField()
    duplicates = models.IntegerField()
    backfill = models.BooleanField()
    released_at = models.DateTimeField(null=True)

    class Meta:
        managed = False
        db_table = table("jobs")
        ordering = ("-scheduled_for",)
        verbose_name = "run"

    def __str__(self) -> str:
        return f"{self.schedule_name} {self.scheduled_for:%Y-%m-%d %H:%M:%S}" if self.scheduled_for else str(self.id)
