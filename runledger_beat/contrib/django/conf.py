"""The Django settings the app reads, each checked with a clear error.

- ``RUNLEDGER_SCHEMA``: the schema of runledger's tables (default ``"runledger"``). The models name their
  tables ``"<schema>"."<table>"``, so the Django connection's search_path does not matter and Django's own
  tables stay where they are.
- ``RUNLEDGER_DATABASE``: the alias in ``DATABASES`` the admin reads them from (default ``"default"``).
- ``RUNLEDGER_DSN``: the DSN the admin's actions write through ``runledger_beat.api`` with (default: built
  from that alias's ``NAME``, ``USER``, ``PASSWORD``, ``HOST``, ``PORT`` and libpq ``OPTIONS``).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from psycopg import conninfo, pq

from ...db.connect import DEFAULT_SCHEMA, check_schema_name
from ...errors import ConfigError

#: The ``DATABASES`` entries that become libpq parameters of the DSN.
_PARAMETERS = {"NAME": "dbname", "USER": "user", "PASSWORD": "password", "HOST": "host", "PORT": "port"}


def schema() -> str:
    """``RUNLEDGER_SCHEMA``, checked to be a plain SQL identifier."""
    value = getattr(settings, "RUNLEDGER_SCHEMA", DEFAULT_SCHEMA)
    try:
        return check_schema_name(value)
    except ConfigError:
        raise ImproperlyConfigured(f"RUNLEDGER_SCHEMA: {value!r} is not a plain SQL identifier") from None


def database() -> str:
    """``RUNLEDGER_DATABASE``: the alias of the database holding runledger's tables."""
    alias = getattr(settings, "RUNLEDGER_DATABASE", "default")
    if alias not in settings.DATABASES:
        raise ImproperlyConfigured(f"RUNLEDGER_DATABASE: {alias!r} is not an alias in DATABASES")
    return alias


def dsn() -> str:
    """``RUNLEDGER_DSN``, else a DSN for the ``RUNLEDGER_DATABASE`` alias (its settings as the connection uses
    them now, so a test database Django created is the one used)."""
    given = getattr(settings, "RUNLEDGER_DSN", None)
    if given:
        return str(given)
    db = connections[database()].settings_dict
    params: dict[str, Any] = {key: db[name] for name, key in _PARAMETERS.items() if db.get(name)}
    keywords = {option.keyword.decode() for option in pq.Conninfo.get_defaults()}
    params.update({k: v for k, v in (db.get("OPTIONS") or {}).items()
                   if k in keywords and isinstance(v, (str, int))})
    return conninfo.make_conninfo(**params)
