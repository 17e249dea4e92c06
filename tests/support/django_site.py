"""A Django project of the tests' own, configured in-process: the admin and runledger_beat.contrib.django.

Django's own tables (auth, admin, contenttypes, sessions) go into a schema of the process's own (the
connection's search_path); the runledger tables are read from ``RUNLEDGER_SCHEMA`` by their qualified names.
Settings can be configured once per process, so both schema names are fixed per process.
"""

from __future__ import annotations

import os

import psycopg

#: Per process (an xdist worker is one): Django's tables, and the runledger schema the models name.
DJANGO_SCHEMA = f"dj_{os.getpid()}"
RUNLEDGER_SCHEMA = f"t_dj_{os.getpid()}"
#: application_name of the admin's Django connections (runledger's own are runledger_beat.django).
APPLICATION = "runledger_tests.django"


def settings_for(dsn: str) -> dict:
    """Django settings for the database of ``dsn``."""
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    database = {"ENGINE": "django.db.backends.postgresql", "NAME": params.get("dbname"),
                "USER": params.get("user", ""), "PASSWORD": params.get("password", ""),
                "HOST": params.get("host", ""), "PORT": params.get("port", ""),
                "OPTIONS": {"options": f"-c search_path={DJANGO_SCHEMA}", "application_name": APPLICATION}}
    return {
        "DEBUG": False,
        "SECRET_KEY": "runledger-tests-only",
        "ALLOWED_HOSTS": ["testserver"],
        "USE_TZ": True,
        "TIME_ZONE": "UTC",
        "ROOT_URLCONF": "tests.support.django_urls",
        "DATABASES": {"default": database},
        "RUNLEDGER_SCHEMA": RUNLEDGER_SCHEMA,
        "INSTALLED_APPS": ["django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
                           "django.contrib.sessions", "django.contrib.messages", "runledger_beat.contrib.django"],
        "MIDDLEWARE": ["django.contrib.sessions.middleware.SessionMiddleware",
                       "django.middleware.common.CommonMiddleware",
                       "django.middleware.csrf.CsrfViewMiddleware",
                       "django.contrib.auth.middleware.AuthenticationMiddleware",
                       "django.contrib.messages.middleware.MessageMiddleware"],
        "TEMPLATES": [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True,
                       "OPTIONS": {"context_processors": ["django.template.context_processors.request",
                                                          "django.contrib.auth.context_processors.auth",
                                                          "django.contrib.messages.context_processors.messages"]}}],
        "DEFAULT_AUTO_FIELD": "django.db.models.BigAutoField",
        "PASSWORD_HASHERS": ["django.contrib.auth.hashers.MD5PasswordHasher"],
    }


def start(dsn: str) -> None:
    """Configure Django for ``dsn`` (once per process), create its schema and migrate Django's own tables."""
    import django
    from django.conf import settings
    from django.core.management import call_command
    from django.test.utils import setup_test_environment

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(psycopg.sql.Identifier(DJANGO_SCHEMA)))
    if not settings.configured:
        settings.configure(**settings_for(dsn))
        django.setup()
        setup_test_environment()  # the test client then records each response's template context
    call_command("migrate", verbosity=0, interactive=False)


def stop(dsn: str) -> None:
    """Close Django's connections and drop its schema."""
    from django.db import connections

    connections.close_all()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(psycopg.sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(psycopg.sql.Identifier(DJANGO_SCHEMA)))
