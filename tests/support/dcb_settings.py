"""A minimal Django project holding django-celery-beat (tests only): its database from RUNLEDGER_DCB_DSN, its
tables in the schema RUNLEDGER_DCB_SCHEMA (default public)."""

from __future__ import annotations

import os

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ.get("RUNLEDGER_DCB_DSN", ""))

SECRET_KEY = "tests-only"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_celery_beat"]
DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": _db.get("dbname", ""),
                         "USER": _db.get("user", ""), "PASSWORD": _db.get("password", ""),
                         "HOST": _db.get("host", ""), "PORT": _db.get("port", ""),
                         "OPTIONS": {"options": f"-c search_path={os.environ.get('RUNLEDGER_DCB_SCHEMA', 'public')}"}}}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
