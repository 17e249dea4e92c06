"""The Django app config (label ``runledger``)."""

from __future__ import annotations

from django.apps import AppConfig


class RunledgerConfig(AppConfig):
    """runledger_beat's schedules and ledger in the Django admin."""

    name = "runledger_beat.contrib.django"
    label = "runledger"
    verbose_name = "Schedules (runledger)"
    default_auto_field = "django.db.models.BigAutoField"
