"""Everything that talks SQL: connections, migrations, the named statements and the stores that run them.

``connect.py`` opens connections (search_path, keepalives, timeouts), ``loaders.py`` keeps one bad value
from breaking a fetch, ``migrate.py`` applies ``sql/migrations/``, ``queries.py`` loads the named
statements of ``sql/*.sql``, ``store.py`` runs them, ``redaction.py`` keeps passwords out of text.
Imports from this package: ``errors``, ``backoff``; nothing above it.
The names below are re-exported for ``from runledger_beat.db import connect, migrate, ...``.
"""

from __future__ import annotations

from ..errors import ConfigError
from .connect import (
    APPLICATION_NAME,
    DEFAULT_SCHEMA,
    check_dsn,
    check_schema_name,
    connect,
    schema_of,
    set_search_path,
)
from .loaders import (
    OUT_OF_RANGE_HIGH,
    OUT_OF_RANGE_LOW,
    OUT_OF_RANGE_REASON,
    UNREADABLE_JSON,
    is_out_of_range,
    is_unreadable,
    register_safe_loaders,
)
from .migrate import check_version, drop_schema, migrate, migration_files, require_schema, schema_ready
from .redaction import dsn_has_password, read_dsn_file, redact_dsn, safe_error

__all__ = ["APPLICATION_NAME", "ConfigError", "DEFAULT_SCHEMA", "OUT_OF_RANGE_HIGH", "OUT_OF_RANGE_LOW",
           "OUT_OF_RANGE_REASON", "UNREADABLE_JSON", "check_dsn", "check_schema_name", "check_version", "connect",
           "drop_schema", "dsn_has_password", "is_out_of_range", "is_unreadable", "migrate", "migration_files",
           "read_dsn_file", "redact_dsn", "register_safe_loaders", "require_schema", "safe_error", "schema_of",
           "schema_ready", "set_search_path"]
