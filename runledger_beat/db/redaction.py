"""Keeping database passwords out of logs, errors and Celery config dumps.

A DSN may carry its password in four places, and each is redacted:

- URL userinfo: ``postgresql://user:secret@host/db`` (also percent-encoded, ``p%40ss``);
- URL query: ``postgresql://host/db?password=secret`` (also ``&password=``);
- key=value: ``password=secret``, ``password = 'se cret'`` (quoted, with ``\\'`` escapes);
- ``sslpassword`` (the client key's passphrase), in any of these forms.

``safe_error`` also scrubs what libpq echoes back: errors such as
``invalid percent-encoded token: "pa%ss"`` or ``unexpected spaces found in "se cret"``
quote the password or the whole DSN, so every form of the secret (as written,
percent-decoded and unquoted) is replaced, as is any URL userinfo or
``password=`` the message itself contains.

Celery prints its configuration in ``celery inspect conf``, Flower and
``app.conf.table(censored=True)``; ``hide_dsn_settings`` adds ``DSN`` to Celery's
pattern of hidden setting names so ``runledger_dsn`` is masked there.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote

MASK = "***"
_SECRET_KEYS = r"(?<![A-Za-z0-9_])(?:sslpassword|password)"
_QUOTED = r"'(?:[^'\\]|\\.)*(?:'|$)"
#: key=value in a DSN: a quoted value (escapes allowed; unterminated runs to the end) or a bare word.
_KV_PASSWORD = re.compile(_SECRET_KEYS + r"(\s*=\s*)(" + _QUOTED + r"|\S+)")
#: password=... inside an error text: a bare value ends at a space, quote or &.
_KV_IN_TEXT = re.compile(_SECRET_KEYS + r"(\s*=\s*)(" + _QUOTED + r"|[^\s\"&]+)")
#: URL query: ?password=... or &password=... up to the next & (or space / quote inside error texts).
_QUERY_PASSWORD = re.compile(r"([?&](?:sslpassword|password)=)([^&\s\"]*)")
#: URL userinfo with a password, inside any text: scheme://user:secret@
_URL_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://[^\s:/@\"?]*:)([^\s\"?]*)@")
_URL_START = re.compile(r"^\s*[A-Za-z][A-Za-z0-9+.-]*://")


def _is_url(dsn: str) -> bool:
    """Whether the DSN is in URL form (scheme://...)."""
    return bool(_URL_START.match(dsn))


def _split_url(dsn: str) -> tuple[str, str | None, str]:
    """(prefix up to the password, the raw password or None, the rest) of a URL DSN."""
    start = _URL_START.match(dsn).end()
    end = dsn.find("?", start)
    head_end = len(dsn) if end < 0 else end
    at = dsn.rfind("@", start, head_end)
    colon = dsn.find(":", start, at) if at >= 0 else -1
    if at < 0 or colon < 0:
        return dsn, None, ""
    return dsn[:colon + 1], dsn[colon + 1:at], dsn[at:]


def _unescape_kv(value: str) -> str:
    """A key=value password as libpq reads it: quotes removed and backslash escapes undone."""
    if value.startswith("'"):
        value = value[1:-1] if value.endswith("'") and len(value) > 1 else value[1:]
        return re.sub(r"\\(.)", r"\1", value)
    return value


def _raw_secrets(dsn: str) -> list[str]:
    """Every password in the DSN, as written in it."""
    found = []
    if _is_url(dsn):
        _, password, _ = _split_url(dsn)
        if password:
            found.append(password)
        found += [m.group(2) for m in _QUERY_PASSWORD.finditer(dsn) if m.group(2)]
    else:
        found += [m.group(2) for m in _KV_PASSWORD.finditer(dsn) if m.group(2)]
    return found


def _secrets(dsn: str) -> list[str]:
    """Every form of the DSN's passwords (as written, decoded, unquoted), longest first."""
    forms: set[str] = set()
    for raw in _raw_secrets(dsn):
        forms.update({raw, unquote(raw), _unescape_kv(raw), unquote(_unescape_kv(raw))})
    try:
        import psycopg

        params = psycopg.conninfo.conninfo_to_dict(dsn)
        forms.update(str(params[key]) for key in ("password", "sslpassword") if params.get(key))
    except Exception:  # noqa: BLE001 - unparsable DSNs are handled lexically above
        pass
    return sorted((f for f in forms if f), key=len, reverse=True)


def _mask_value(match: re.Match) -> str:
    """The key and ``=`` of a key=value match, with the value masked."""
    return match.group(0)[: match.start(2) - match.start(0)] + MASK


def _redact_text(text: str) -> str:
    """Mask URL userinfo passwords and password= values wherever they appear in ``text``."""
    text = _URL_USERINFO.sub(lambda m: m.group(1) + MASK + "@", text)
    text = _QUERY_PASSWORD.sub(lambda m: m.group(1) + MASK, text)
    return _KV_IN_TEXT.sub(_mask_value, text)


def redact_dsn(dsn: str) -> str:
    """The DSN with every password replaced by ``***`` (URL userinfo, URL query or key=value form)."""
    if not dsn:
        return ""
    if _is_url(dsn):
        prefix, password, rest = _split_url(dsn)
        if password is not None:
            dsn = prefix + MASK + rest
        return _QUERY_PASSWORD.sub(lambda m: m.group(1) + MASK, dsn)
    return _KV_PASSWORD.sub(_mask_value, dsn)


def safe_error(exc: BaseException, dsn: str | None = None) -> str:
    """One-line text of an error with the DSN's password scrubbed out, in every form it may take."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if dsn:
        text = text.replace(dsn, redact_dsn(dsn)).replace(dsn.strip(), redact_dsn(dsn.strip()))
        for secret in _secrets(dsn):
            text = text.replace(secret, MASK)
    return _redact_text(text)


def dsn_has_password(dsn: str) -> bool:
    """Whether the DSN itself carries a password (PGPASSWORD and .pgpass are not looked at)."""
    return bool(dsn) and bool(_raw_secrets(dsn) or _secrets(dsn))


def read_dsn_file(path: str | Path) -> str:
    """The DSN in a file: its first non-empty line, stripped; ConfigError if unreadable or empty."""
    from ..errors import ConfigError

    try:
        lines = Path(path).read_text("utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"dsn file {str(path)!r}: cannot read it ({type(exc).__name__})") from None
    for line in lines:
        if line.strip():
            return line.strip()
    raise ConfigError(f"dsn file {str(path)!r}: holds no DSN (empty)")


def hide_dsn_settings() -> None:
    """Add ``DSN`` to Celery's hidden-settings pattern, so runledger_dsn is masked in config dumps (idempotent)."""
    from celery.app import utils

    pattern = utils.HIDDEN_SETTINGS
    if pattern.search("runledger_dsn"):
        return
    utils.HIDDEN_SETTINGS = re.compile(pattern.pattern + "|DSN", pattern.flags)
