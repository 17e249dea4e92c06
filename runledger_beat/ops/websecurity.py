"""The dashboard's guards: allowed Host names, revocable sessions, a failed-login limit, the token's length, and
an outer ASGI layer that applies the Host check and turns every uncaught error into a plain, redacted 500.

- Host: a DNS-rebinding page (evil.example resolving to 127.0.0.1) makes the victim's browser send
  ``Host: evil.example`` to the dashboard's port; only the names the dashboard was started for pass
  (``served_hosts``), anything else gets 400 before any other work.
- Sessions: the signed session cookie carries a random id; the ids logged in live here, in the process, so
  logging out ends a session even for a copy of its cookie, and a restart or a new token ends them all.
- Failures: wrong tokens (login form or ``Authorization: Bearer``) are counted per client address (an IPv6
  address by its /64); the sixth within a minute answers 429 with Retry-After, whatever the token.

No web framework is imported here at module level (it is an optional dependency).
"""

from __future__ import annotations

import collections
import ipaddress
import logging
import math
import secrets
import threading
import time
from collections.abc import Iterable
from typing import Any

from ..db.redaction import safe_error
from ..errors import ConfigError

log = logging.getLogger("runledger_beat.ops.web")  # the dashboard's own log

TOKEN_ENV = "RUNLEDGER_WEB_TOKEN"
#: Shortest token accepted: a guessable token is no gate.
MIN_TOKEN_LEN = 16
#: Names every dashboard answers to, besides the address it is bound to and --allow-host.
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
#: Bound addresses that are no Host name (every interface).
WILDCARD_HOSTS = ("", "0.0.0.0", "::")
#: Failed logins or bearer tokens a client may make within FAILURE_WINDOW seconds.
MAX_FAILURES = 5
FAILURE_WINDOW = 60.0
#: Client addresses whose failures are remembered (the stalest are forgotten first).
MAX_CLIENTS = 10000
#: Sessions logged in at once (the oldest ends first).
MAX_SESSIONS = 1000
HSTS = b"max-age=31536000"
SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'none'; style-src 'unsafe-inline'; img-src 'self' data:; "
                                 b"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
]


def check_token(token: str | None) -> str | None:
    """The token (None when unset or blank); ConfigError, never showing it, when shorter than MIN_TOKEN_LEN."""
    token = (token or "").strip() or None
    if token is not None and len(token) < MIN_TOKEN_LEN:
        raise ConfigError(f"{TOKEN_ENV}: at least {MIN_TOKEN_LEN} characters, got {len(token)}; make one with "
                          "python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    return token


def served_hosts(names: Iterable[str]) -> frozenset[str]:
    """The Host names accepted: ``names`` (a wildcard address such as 0.0.0.0 is no name) and the loopback names."""
    given = (name for name in names if name.strip().strip("[]") not in WILDCARD_HOSTS)
    return frozenset({host_name(name) for name in (*LOOPBACK_HOSTS, *given)} - {""})


def host_name(value: str) -> str:
    """The name in a Host header, lower case and without its port: '[::1]:8080' is '::1', 'A.example:80' is
    'a.example'; '' when it is not one name."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1:] if end > 0 else "?"
        return value[1:end] if rest == "" or (rest[:1] == ":" and rest[1:].isdigit()) else ""
    name, colon, port = value.rpartition(":")
    if colon and ":" not in name:
        return name if port.isdigit() and name else ""
    return value


def client_key(address: str | None) -> str:
    """Whose failures these are: the client's IP address, an IPv6 one by its /64 (one host holds them all)."""
    try:
        ip = ipaddress.ip_address(address or "")
    except ValueError:
        return address or "unknown"
    if isinstance(ip, ipaddress.IPv6Address):
        mapped = ip.ipv4_mapped
        return str(mapped) if mapped else str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


class FailureLimiter:
    """Failed attempts per client: after ``limit`` within ``window`` seconds the client waits until the oldest
    leaves the window. At most ``clients`` clients are remembered (bounded memory)."""

    def __init__(self, limit: int = MAX_FAILURES, window: float = FAILURE_WINDOW, clients: int = MAX_CLIENTS) -> None:
        self.limit, self.window, self.clients = limit, window, clients
        self._failures: collections.OrderedDict[str, collections.deque[float]] = collections.OrderedDict()
        self._lock = threading.Lock()

    def _recent(self, key: str, now: float) -> collections.deque[float]:
        times = self._failures.get(key, collections.deque())
        while times and times[0] <= now - self.window:
            times.popleft()
        return times

    def retry_after(self, address: str | None) -> int:
        """Seconds until ``address`` may try again; 0 when it may now."""
        now = time.monotonic()
        with self._lock:
            times = self._recent(client_key(address), now)
            return math.ceil(times[0] + self.window - now) if len(times) >= self.limit else 0

    def failed(self, address: str | None) -> None:
        """Count one failed attempt of ``address``."""
        key, now = client_key(address), time.monotonic()
        with self._lock:
            times = self._recent(key, now)
            times.append(now)
            while len(times) > self.limit:
                times.popleft()
            self._failures[key] = times
            self._failures.move_to_end(key)
            while len(self._failures) > self.clients:
                self._failures.popitem(last=False)


class Sessions:
    """The logged-in sessions of this process: random ids and when they expire. A cookie whose id is not here
    (logged out, expired, from another process or token) is not logged in."""

    def __init__(self, max_age: float, limit: int = MAX_SESSIONS) -> None:
        self.max_age, self.limit = max_age, limit
        self._expiry: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._lock = threading.Lock()

    def start(self) -> str:
        """A new logged-in session's id."""
        sid, now = secrets.token_urlsafe(32), time.monotonic()
        with self._lock:
            for old in [s for s, expiry in self._expiry.items() if expiry <= now]:
                del self._expiry[old]
            while len(self._expiry) >= self.limit:
                self._expiry.popitem(last=False)
            self._expiry[sid] = now + self.max_age
        return sid

    def alive(self, sid: Any) -> bool:
        """Whether ``sid`` is a session logged in here and not expired."""
        if not isinstance(sid, str):
            return False
        with self._lock:
            expiry = self._expiry.get(sid)
            if expiry is not None and expiry <= time.monotonic():
                del self._expiry[sid]
                expiry = None
        return expiry is not None

    def end(self, sid: Any) -> None:
        """Log ``sid`` out (nothing when it is not logged in)."""
        if isinstance(sid, str):
            with self._lock:
                self._expiry.pop(sid, None)


async def plain_response(scope: dict, send: Any, status: int, text: str) -> None:
    """A minimal error answer without the framework: JSON for /api/*, else a small HTML page."""
    import html
    import json

    if scope.get("path", "").startswith("/api/"):
        body, kind = json.dumps({"error": text}).encode(), b"application/json"
    else:
        body = f"<!doctype html><title>{status}</title><h1>{status}</h1><p>{html.escape(text)}</p>".encode()
        kind = b"text/html; charset=utf-8"
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", kind), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Guard:
    """The outermost ASGI layer: a Host not in ``hosts`` gets 400 before anything else runs; every response gets
    the security headers (and HSTS with ``https``); an uncaught error is logged as one line through the
    redaction (``safe_error`` with the DSN) and answers a plain 500 without details."""

    def __init__(self, app: Any, hosts: frozenset[str], dsn: str, https: bool = False) -> None:
        self.app, self.hosts, self.dsn = app, hosts, dsn
        self.headers = SECURITY_HEADERS + ([(b"strict-transport-security", HSTS)] if https else [])

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def send_with_headers(message: dict) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message["headers"] = list(message.get("headers", [])) + self.headers
            await send(message)

        given = [value for name, value in scope["headers"] if name == b"host"]
        if len(given) != 1 or host_name(given[0].decode("latin-1")) not in self.hosts:
            await plain_response(scope, send_with_headers, 400, "Host header not allowed (start the dashboard "
                                                                "with --allow-host NAME to serve that name)")
            return
        try:
            await self.app(scope, receive, send_with_headers)
        except Exception as exc:  # noqa: BLE001 - the last line of defence: logged, answered, never re-raised
            log.error("%s %s failed: %s: %s", scope.get("method"), ascii(scope.get("path", ""))[:300],
                      type(exc).__name__, safe_error(exc, self.dsn))
            if not started:
                await plain_response(scope, send_with_headers, 500, "internal error (logged by the dashboard)")
