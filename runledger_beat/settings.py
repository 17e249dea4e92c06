"""The Celery settings runledger_beat reads (``runledger_*`` in ``app.conf``): each one's default and check, once.

``SETTINGS`` is the table: a setting's name (``runledger_<name>`` in ``app.conf``, upper case accepted too),
its default, and the check that turns the configured value into the one used; ``load()`` reads them all into a
``Settings``. A bad value raises ConfigError naming the setting, and beat exits with that one line. A new
setting is a row in ``SETTINGS``, a field on ``Settings``, and a row in docs/reference/settings.md and in the
README's table (tests/unit/test_docs.py checks both).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any

from .db.connect import DEFAULT_SCHEMA, check_dsn, check_pool_mode, check_schema_name, schema_of
from .db.redaction import hide_dsn_settings
from .errors import ConfigError
from .extras import require
from .signing import key_from

# Mask runledger_dsn (any *DSN* setting) in `celery inspect conf`, Flower and app.conf.table(censored=True):
# Celery's own pattern (celery.app.utils.HIDDEN_SETTINGS) covers PASS/SECRET/DATABASE... but not DSN.
hide_dsn_settings()

#: How long the ledger and the schedule audit log are kept unless told otherwise (30 days; runledger_retention).
DEFAULT_RETENTION_SECONDS = 30 * 86400.0
#: Shortest ledger retention accepted (seconds): the ledger is dropped a whole UTC day at a time.
MIN_RETENTION = 86400.0
#: Longest lookahead accepted: a fire's schedule row stays locked that long before its instant.
MAX_LOOKAHEAD = 60.0


@dataclass(frozen=True)
class Settings:
    """Resolved runledger settings of one Celery app (see SETTINGS for each one's default and check)."""

    dsn: str
    schema: str
    batch_size: int
    auto_migrate: bool
    listen: bool
    listen_dsn: str | None  # LISTEN over this (direct) connection; None: the DSN's, unless pooled
    pool_mode: str  # "session" or "transaction" (a transaction-mode pooler: no prepared statements, no LISTEN)
    poll_interval: float
    recovery_grace: float
    defer_seconds: float
    lookahead: float
    max_lookahead: float
    fast_publish: bool
    send_sent_events: bool
    import_beat_schedule: bool
    lost_after: float
    quarantine_after: int
    max_publish_attempts: int
    retention: float | None  # None: keep the whole ledger
    max_fires_per_second: float | None  # None: publish every burst at once
    metrics_port: int | None
    metrics_host: str
    signed: bool  # runledger_signing_key is set (the key itself stays in app.conf, never here)

    @property
    def listens(self) -> bool:
        """Whether beats LISTEN for schedule changes (else they poll every poll_interval): listening is on and
        there is a connection that keeps a session (runledger_listen_dsn, or the DSN outside pool mode
        "transaction")."""
        return self.listen and (self.pool_mode != "transaction" or self.listen_dsn is not None)

    @property
    def pooled(self) -> bool:
        """Whether a transaction-mode pooler stands between beat and Postgres (runledger_pool_mode)."""
        return self.pool_mode == "transaction"


# ---------------------------------------------------------------------------
# Checks: each takes the configured value (the default when unset), the setting's name and the app's conf


def _number(kind: type, minimum: float, maximum: float | None = None, why: str = "") -> Callable[..., Any]:
    def check(value: Any, key: str, conf: Any) -> Any:
        try:
            number = kind(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        if isinstance(value, bool) or not math.isfinite(number):
            raise ConfigError(f"{key}: expected a finite number, got {value!r}")
        if number < minimum:
            raise ConfigError(f"{key}: must be at least {minimum}, got {value!r}")
        if maximum is not None and number > maximum:
            raise ConfigError(f"{key}: at most {maximum:g}{why}, got {value!r}")
        return number
    return check


def _flag(value: Any, key: str, conf: Any) -> bool:
    return bool(value)


def _schema(value: Any, key: str, conf: Any) -> str:
    """The configured schema; unset, the one the DSN names (``-c runledger.schema=``), else "runledger"."""
    if _configured(conf, "schema") is None:
        return schema_of(dsn_from(conf) or "")
    return check_schema_name(value)


_LOOKAHEAD = _number(float, 0, MAX_LOOKAHEAD, " seconds (schedule rows stay locked that long)")


def _max_lookahead(value: Any, key: str, conf: Any) -> float:
    return max(_LOOKAHEAD(value, key, conf), _LOOKAHEAD(_get(conf, "lookahead"), "runledger_lookahead", conf))


def _retention(value: Any, key: str, conf: Any) -> float | None:
    seconds = _number(float, 0)(value.total_seconds() if isinstance(value, timedelta) else value, key, conf)
    if seconds == 0:
        return None
    if seconds < MIN_RETENTION:
        raise ConfigError(f"{key}: at least {MIN_RETENTION:g} seconds (one day; 0 keeps the whole ledger), "
                          f"got {value!r}")
    return seconds


def _rate(value: Any, key: str, conf: Any) -> float | None:
    if value in (None, 0):
        return None
    rate = _number(float, 0)(value, key, conf)
    if rate < 1:
        raise ConfigError(f"{key}: at least 1 fire per second (0 or unset: no cap), got {value!r}")
    return rate


def _sent_events(value: Any, key: str, conf: Any) -> bool:
    if value is None:  # follow Celery's own setting
        value = conf.get("task_send_sent_event") if hasattr(conf, "get") else False
    return bool(value)


def _metrics_port(value: Any, key: str, conf: Any) -> int | None:
    if value is None:
        return None
    port = _number(int, 0, 65535, " (a TCP port)")(value, key, conf)
    require(key, "metrics", ConfigError)  # beat exits at start with the one line
    return port


def _signed(value: Any, key: str, conf: Any) -> bool:
    return key_from(conf) is not None  # checks the key, from the setting or the environment


def _pool_mode(value: Any, key: str, conf: Any) -> str:
    return check_pool_mode(value, key)


def _listen_dsn(value: Any, key: str, conf: Any) -> str | None:
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{key}: expected a DSN string, got a {type(value).__name__}")
    return check_dsn(value)


def _host(value: Any, key: str, conf: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}: expected a host name or address, got {value!r}")
    return value.strip()


@dataclass(frozen=True)
class Setting:
    """One setting: ``runledger_<name>`` in app.conf, its default, and the check that reads it."""

    name: str
    default: Any
    check: Callable[[Any, str, Any], Any]
    into: str = ""  # the Settings field it fills, when not the same name

    @property
    def field(self) -> str:
        """The ``Settings`` field this setting fills."""
        return self.into or self.name

    @property
    def key(self) -> str:
        """Its name in ``app.conf``."""
        return f"runledger_{self.name}"


SETTINGS: tuple[Setting, ...] = (
    Setting("schema", DEFAULT_SCHEMA, _schema),
    Setting("batch_size", 1000, _number(int, 1)),
    Setting("auto_migrate", True, _flag),
    Setting("listen", True, _flag),
    Setting("listen_dsn", None, _listen_dsn),  # None: LISTEN on runledger_dsn (none in pool mode "transaction")
    Setting("pool_mode", None, _pool_mode),  # None: env RUNLEDGER_POOL_MODE, else "session"
    Setting("poll_interval", 1.0, _number(float, 0.05)),
    Setting("recovery_grace", 30.0, _number(float, 1)),
    Setting("defer_seconds", 30.0, _number(float, 1)),
    Setting("lookahead", 2.0, _LOOKAHEAD),
    Setting("max_lookahead", 30.0, _max_lookahead),
    Setting("fast_publish", True, _flag),
    Setting("send_sent_events", None, _sent_events),  # None: follow Celery's task_send_sent_event
    Setting("import_beat_schedule", True, _flag),
    Setting("lost_after", 3600.0, _number(float, 1)),
    Setting("quarantine_after", 5, _number(int, 1)),
    Setting("max_publish_attempts", 10, _number(int, 1)),
    Setting("retention", DEFAULT_RETENTION_SECONDS, _retention),  # seconds (whole UTC days); 0 keeps it all
    Setting("max_fires_per_second", None, _rate),  # None: no cap
    Setting("metrics_port", None, _metrics_port),  # None: no metrics server
    Setting("metrics_host", "127.0.0.1", _host),
    # Env RUNLEDGER_SIGNING_KEY too; only whether it is set is kept, the key stays in app.conf (signing.py).
    Setting("signing_key", None, _signed, into="signed"),
)
#: ``runledger_<name>``: default, for every setting but the DSN (which has none).
DEFAULTS: dict[str, Any] = {s.key: s.default for s in SETTINGS}
_BY_NAME = {s.name: s for s in SETTINGS}
assert {f.name for f in fields(Settings)} == {"dsn", *(s.field for s in SETTINGS)}, "Settings and SETTINGS disagree"


def _configured(conf: Any, name: str) -> Any:
    """The configured value of ``runledger_<name>`` (either case), None when unset."""
    key = f"runledger_{name}"
    value = conf.get(key) if hasattr(conf, "get") else None
    if value is None and hasattr(conf, "get"):
        value = conf.get(key.upper())
    return value


def _get(conf: Any, name: str) -> Any:
    """The configured value of ``runledger_<name>`` (either case), else its default."""
    value = _configured(conf, name)
    return _BY_NAME[name].default if value is None else value


def dsn_from(conf: Any) -> str | None:
    """The DSN from runledger_dsn, else the RUNLEDGER_DSN environment variable."""
    return conf.get("runledger_dsn") or conf.get("RUNLEDGER_DSN") or os.environ.get("RUNLEDGER_DSN") or None


#: Broker URL schemes whose kombu transport needs redis-py.
REDIS_SCHEMES = frozenset({"redis", "rediss", "redis+socket", "sentinel"})


def check_broker(conf: Any) -> None:
    """At beat's start: a Redis broker without redis-py stops with the one line naming the extra (kombu would
    fail later, at the first publish, with a traceback)."""
    url = conf.get("broker_url") if hasattr(conf, "get") else None
    first = (url[0] if isinstance(url, (list, tuple)) and url else url) or ""
    scheme = str(first).split(";", 1)[0].partition("://")[0].lower()
    if scheme in REDIS_SCHEMES:
        require(f"broker_url ({scheme}://)", "redis", ConfigError)


def load(conf: Any) -> Settings:
    """Read and check the settings; raises ConfigError naming the bad one."""
    dsn = dsn_from(conf)
    if not dsn:
        raise ConfigError("runledger_dsn: not set "
                          "(set app.conf.runledger_dsn or the RUNLEDGER_DSN environment variable)")
    return Settings(dsn=dsn, **{s.field: s.check(_get(conf, s.name), s.key, conf) for s in SETTINGS})
