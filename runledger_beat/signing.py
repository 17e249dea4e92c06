"""Signed fires: with ``runledger_signing_key`` set, beat signs each fire's message and workers trust only those.

The signature is a message header, ``runledger_sig``: the hex HMAC-SHA256, under the key, of
``"<ledger id>\\n<task name>"``. A worker whose app has the same key acts on the ledger only for a message whose
signature verifies (compared in constant time); any other message still runs its task (whoever may publish to
the broker may run a task anyway) but never touches the ledger. Without the setting nothing is signed and the
worker hook trusts a message whose task id and task name match the ledger row.

The key is a string of at least 32 characters, from ``app.conf.runledger_signing_key`` or the environment
variable ``RUNLEDGER_SIGNING_KEY``; Celery hides settings named ``*KEY*`` in ``celery inspect conf``.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Any

from .errors import ConfigError

#: Message header carrying the fire's signature.
SIG_HEADER = "runledger_sig"
SETTING = "runledger_signing_key"
ENV = "RUNLEDGER_SIGNING_KEY"
#: Shortest key accepted (characters).
MIN_KEY_LENGTH = 32
_APP_KEY = "_runledger_signing_key"


def key_from(conf: Any) -> bytes | None:
    """The signing key of a Celery app's configuration (else the environment), None when unset; ConfigError
    naming the setting when it is not a string of at least MIN_KEY_LENGTH characters (never showing it)."""
    value = (conf.get(SETTING) if hasattr(conf, "get") else None) or os.environ.get(ENV) or None
    if value is None:
        return None
    if not isinstance(value, str) or len(value) < MIN_KEY_LENGTH:
        raise ConfigError(f"{SETTING}: expected a string of at least {MIN_KEY_LENGTH} characters "
                          f"(python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return value.encode("utf-8", "surrogatepass")


def app_key(app: Any) -> bytes | None:
    """The app's signing key, read once per app (beat checks it at start, so a bad one stops beat there)."""
    try:
        return app.__dict__[_APP_KEY]
    except KeyError:
        key = app.__dict__[_APP_KEY] = key_from(app.conf)
        return key


def sign(key: bytes, ledger_id: str, task: str) -> str:
    """The ``runledger_sig`` of a fire: hex HMAC-SHA256 of ``"<ledger id>\\n<task name>"``."""
    text = f"{ledger_id}\n{task}".encode("utf-8", "surrogatepass")
    return hmac.new(key, text, hashlib.sha256).hexdigest()


def verify(key: bytes, ledger_id: str, task: str, signature: Any) -> bool:
    """Whether ``signature`` is the fire's own (constant-time compare)."""
    if not isinstance(signature, str):
        return False
    return hmac.compare_digest(sign(key, ledger_id, task).encode(), signature.encode("utf-8", "surrogatepass"))
