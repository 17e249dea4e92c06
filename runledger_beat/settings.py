"""The Celery settings runledger_beat reads (``runledger_*`` in ``app.conf``), their defaults and checks.

README.md's "Settings" table says what each one means. A new setting gets a
default in ``_DEFAULTS``, a field on ``Settings``, a checked line in ``load()``
and a row in that table; a bad value raises ConfigError naming it, and beat
exits with that one line.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .db import DEFAULT_SCHEMA, ConfigError, check_schema_name
from .redaction import hide_dsn_settings
from .signing import key_from
from .store import DEFAULT_RETENTION_SECONDS

# Mask runledger_dsn (any *DSN* setting) in `celery inspect conf`, Flower and app.conf.table(censored=True):
# Celery's own pattern (celery.app.utils.HIDDEN_SETTINGS) covers PASS/SECRET/DATABASE... but not DSN.
hide_dsn_settings()

#: Shortest ledger retention accepted (seconds): the ledger is dropped a whole UTC day at a time.
MIN_RETENTION = 86400.0

#: Longest lookahead accepted: a fire's schedule row stays locked that long before its instant.
MAX_LOOKAHEAD = 60.0

_DEFAULTS: dict[str, Any] = {
    "runledger_schema": DEFAULT_SCHEMA,
    "runledger_batch_size": 1000,
    "runledger_auto_migrate": True,
    "runledger_listen": True,
    "runledger_poll_interval": 1.0,
    "runledger_recovery_grace": 30.0,
    "runledger_defer_seconds": 30.0,
    "runledger_lookahead": 2.0,
    "runledger_max_lookahead": 30.0,
    "runledger_fast_publish": True,
    "runledger_send_sent_events": None,  # None: follow Celery's task_send_sent_event
    "runledger_import_beat_schedule": True,
    "runledger_lost_after": 3600.0,
    "runledger_quarantine_after": 5,
    "runledger_max_publish_attempts": 10,
    "runledger_retention": DEFAULT_RETENTION_SECONDS,  # seconds of ledger kept (whole UTC days); 0 keeps it all
    "runledger_metrics_port": None,  # None: no metrics server
    "runledger_metrics_host": "127.0.0.1",
    "runledger_signing_key": None,  # None: fires are not signed (signing.py)
}


@dataclass(frozen=True)
class Settings:
    """Resolved runledger settings of one Celery app."""

    dsn: str
    schema: str
    batch_size: int
    auto_migrate: bool
    listen: bool
    poll_interval: float
    recovery_grace: float
    defer_seconds: float
    lookahead: float
    max_lookahead: float
    fast_publish: bool
    send_sent_events: bool
    import_beat_schedule: bool
    lost_after: float
    quarantine_after: int = 5
    max_publish_attempts: int = 10
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    retention: float | None = DEFAULT_RETENTION_SECONDS  # None: keep the whole ledger
    signed: bool = False  # runledger_signing_key is set (the key itself stays in app.conf, never here)


def _get(conf: Any, key: str) -> Any:
    value = conf.get(key) if hasattr(conf, "get") else None
    if value is None:
        value = conf.get(key.upper()) if hasattr(conf, "get") else None
    return _DEFAULTS.get(key) if value is None else value


def _number(conf: Any, key: str, kind: type, minimum: float) -> Any:
    value = _get(conf, key)
    try:
        number = kind(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{key}: expected a number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(number):
        raise ConfigError(f"{key}: expected a finite number, got {value!r}")
    if number < minimum:
        raise ConfigError(f"{key}: must be at least {minimum}, got {value!r}")
    return number


def _lookahead(conf: Any, key: str) -> float:
    value = _number(conf, key, float, 0)
    if value > MAX_LOOKAHEAD:
        raise ConfigError(f"{key}: at most {MAX_LOOKAHEAD:g} seconds "
                          f"(schedule rows stay locked that long), got {value!r}")
    return value


def _retention(conf: Any) -> float | None:
    value = _get(conf, "runledger_retention")
    if isinstance(value, timedelta):
        value = value.total_seconds()
    seconds = _number({"runledger_retention": value}, "runledger_retention", float, 0)
    if seconds == 0:
        return None
    if seconds < MIN_RETENTION:
        raise ConfigError(f"runledger_retention: at least {MIN_RETENTION:g} seconds (one day; 0 keeps the whole "
                          f"ledger), got {value!r}")
    return seconds


def _sent_events(conf: Any) -> bool:
    value = _get(conf, "runledger_send_sent_events")
    if value is None:
        value = conf.get("task_send_sent_event") if hasattr(conf, "get") else False
    return bool(value)


def _metrics_port(conf: Any) -> int | None:
    if _get(conf, "runledger_metrics_port") is None:
        return None
    port = _number(conf, "runledger_metrics_port", int, 0)
    if port > 65535:
        raise ConfigError(f"runledger_metrics_port: a TCP port is at most 65535, got {port!r}")
    return port


def _metrics_host(conf: Any) -> str:
    value = _get(conf, "runledger_metrics_host")
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"runledger_metrics_host: expected a host name or address, got {value!r}")
    return value.strip()


def dsn_from(conf: Any) -> str | None:
    """The DSN from runledger_dsn, else the RUNLEDGER_DSN environment variable."""
    return conf.get("runledger_dsn") or conf.get("RUNLEDGER_DSN") or os.environ.get("RUNLEDGER_DSN") or None


def load(conf: Any) -> Settings:
    """Read and check the settings; raises ConfigError naming the bad one."""
    dsn = dsn_from(conf)
    if not dsn:
        raise ConfigError("runledger_dsn: not set "
                          "(set app.conf.runledger_dsn or the RUNLEDGER_DSN environment variable)")
    lookahead = _lookahead(conf, "runledger_lookahead")
    return Settings(
        dsn=dsn,
        schema=check_schema_name(_get(conf, "runledger_schema")),
        batch_size=_number(conf, "runledger_batch_size", int, 1),
        auto_migrate=bool(_get(conf, "runledger_auto_migrate")),
        listen=bool(_get(conf, "runledger_listen")),
        poll_interval=_number(conf, "runledger_poll_interval", float, 0.05),
        recovery_grace=_number(conf, "runledger_recovery_grace", float, 1),
        defer_seconds=_number(conf, "runledger_defer_seconds", float, 1),
        lookahead=lookahead,
        max_lookahead=max(_lookahead(conf, "runledger_max_lookahead"), lookahead),
        fast_publish=bool(_get(conf, "runledger_fast_publish")),
        send_sent_events=bool(_sent_events(conf)),
        import_beat_schedule=bool(_get(conf, "runledger_import_beat_schedule")),
        lost_after=_number(conf, "runledger_lost_after", float, 1),
        quarantine_after=_number(conf, "runledger_quarantine_after", int, 1),
        max_publish_attempts=_number(conf, "runledger_max_publish_attempts", int, 1),
        metrics_port=_metrics_port(conf),
        metrics_host=_metrics_host(conf),
        retention=_retention(conf),
        signed=key_from(conf) is not None,
    )
