"""A real `runledger-beat web` subprocess and plain HTTP calls to it (any header, any source address)."""

from __future__ import annotations

import http.client
import socket
import sys
import urllib.error
import urllib.request

from runledger_beat.ops import web as dashboard

from .procs import Proc, celery_env
from .services import wait_for

TOKEN = "test-token-0123456789abcdef"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url: str, method: str = "GET", data: bytes | None = None, headers: dict | None = None,
         opener: urllib.request.OpenerDirector | None = None) -> tuple[int, str]:
    """(status, body text) of one request through urllib (redirects followed); (0, "") when nothing answers."""
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with (opener or urllib.request.build_opener()).open(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()
    except OSError:
        return 0, ""


def raw(base: str, method: str, path: str, body: bytes | None = None, headers: dict | None = None,
        source: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request sent as written (no redirect followed, the path not re-encoded, ``Host`` as given, from the
    ``source`` address): (status, headers with lower-case names, body)."""
    host, port = base.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10,
                                      source_address=(source, 0) if source else None)
    try:
        given = dict(headers or {})
        conn.putrequest(method, path, skip_host="Host" in given, skip_accept_encoding=True)
        for name, value in given.items():
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def start_web(pg_dsn: str, schema: str, started: list[Proc], token: str | None = None, env: dict | None = None,
              args: tuple = (), dsn: str | None = None) -> str:
    """Start `runledger-beat web` on a free port (appended to ``started``); returns its base URL once it answers."""
    port = free_port()
    argv = [sys.executable, "-m", "runledger_beat.cli", "--schema", schema, "web", "--port", str(port), *args]
    env = dict(env or celery_env(pg_dsn, schema, "memory://", "unused"))
    env["RUNLEDGER_DSN"] = dsn or pg_dsn
    env.pop(dashboard.TOKEN_ENV, None)
    if token is not None:
        env[dashboard.TOKEN_ENV] = token
    proc = Proc(argv, env, "web")
    started.append(proc)
    base = f"http://127.0.0.1:{port}"
    wait_for(lambda: call(base + "/healthz")[0] == 200 or not proc.alive(), timeout=20, message="web to answer")
    assert proc.alive(), proc.log()
    return base
