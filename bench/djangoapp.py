"""The benchmark's Celery app with Django set up, for django-celery-beat's DatabaseScheduler."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.django_settings")

import django  # noqa: E402

django.setup()

from bench.benchapp import app  # noqa: E402,F401
