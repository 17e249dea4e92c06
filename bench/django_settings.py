"""Django settings for the django-celery-beat anchor: its tables in a schema of the benchmark's own."""

import os
from urllib.parse import urlsplit

_dsn = urlsplit(os.environ.get("BENCH_DSN", "postgresql://postgres@127.0.0.1:5432/test"))

SECRET_KEY = "bench-only"
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django_celery_beat"]
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _dsn.path.lstrip("/") or "postgres",
        "USER": _dsn.username or "postgres",
        "PASSWORD": _dsn.password or "",
        "HOST": _dsn.hostname or "127.0.0.1",
        "PORT": str(_dsn.port or 5432),
        "OPTIONS": {"options": f"-c search_path={os.environ.get('BENCH_SCHEMA', 'public')}"},
    }
}
