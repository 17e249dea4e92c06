"""Anchors: the burst of bench_burst.py under Celery's PersistentScheduler, django-celery-beat and redbeat.

Same broker (RabbitMQ), same task, same N, all entries crontab-due at one minute
boundary (they are minute-granular); timed from that instant until all N
messages are in the queue. These schedulers write no ledger. Bench-only extras:
`pip install -e .[bench]`.

    .venv/bin/python bench/bench_anchors.py --n 1000 10000 --schedulers persistent django redbeat
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import subprocess  # noqa: E402

from bench.common import (  # noqa: E402
    DepthProbe,
    Watch,
    celery_env,
    declare_queue,
    delete_queue,
    drop_schema,
    emit,
    start,
    status_kb,
    stop,
    token,
)

LEAD = 40.0        # at least this long between set-up and the instant: beat loads its entries meanwhile
GIVE_UP = 900.0    # seconds after the instant


def _instant() -> datetime:
    """The first minute boundary at least LEAD seconds away."""
    soon = datetime.now(timezone.utc) + timedelta(seconds=LEAD)
    return soon.replace(second=0, microsecond=0) + timedelta(minutes=1)


def _persistent(n: int, due: datetime, env: dict, tmp: Path) -> list[str]:
    env.update(BENCH_SCHEDULER="persistent", BENCH_N=str(n), BENCH_DUE_MINUTE=str(due.minute),
               BENCH_DUE_HOUR=str(due.hour))
    return ["-A", "bench.benchapp", "beat", "-s", str(tmp / "celerybeat-schedule")]


def _django(n: int, due: datetime, env: dict, tmp: Path) -> list[str]:
    env["BENCH_SCHEMA"] = f"bench_dj_{token()}"
    subprocess.run([sys.executable, "-m", "bench.django_seed", str(n), str(due.minute), str(due.hour)],
                   env=env, check=True, cwd=Path(__file__).resolve().parent.parent)
    return ["-A", "bench.djangoapp", "beat", "-S", "django_celery_beat.schedulers:DatabaseScheduler"]


def _redbeat(n: int, due: datetime, env: dict, tmp: Path) -> list[str]:
    from celery import Celery
    from celery.schedules import crontab
    from redbeat import RedBeatSchedulerEntry

    env["BENCH_REDBEAT_PREFIX"] = f"bench_rb_{token()}:"
    app = Celery("seed", broker=env["BENCH_AMQP"])
    app.conf.update(redbeat_redis_url=env["BENCH_REDIS"], redbeat_key_prefix=env["BENCH_REDBEAT_PREFIX"],
                    timezone="UTC")
    schedule = crontab(minute=due.minute, hour=due.hour, app=app)
    now = datetime.now(timezone.utc)
    for i in range(n):  # last_run_at set: redbeat fires a never-run entry at once
        RedBeatSchedulerEntry(f"s{i}", "bench.noop", schedule, app=app, last_run_at=now).save()
    return ["-A", "bench.benchapp", "beat", "-S", "redbeat.RedBeatScheduler"]


SETUP = {"persistent": ("Celery PersistentScheduler", _persistent),
         "django": ("django-celery-beat DatabaseScheduler", _django),
         "redbeat": ("celery-redbeat", _redbeat)}


def _cleanup(kind: str, env: dict) -> None:
    if kind == "django" and "BENCH_SCHEMA" in env:
        drop_schema(env["BENCH_SCHEMA"])
    if kind == "redbeat" and "BENCH_REDBEAT_PREFIX" in env:
        import redis
        client = redis.Redis.from_url(env["BENCH_REDIS"])
        for key in client.scan_iter(env["BENCH_REDBEAT_PREFIX"] + "*"):
            client.delete(key)


def anchor(kind: str, n: int) -> dict:
    label, setup = SETUP[kind]
    queue = f"benchq_{token()}"
    declare_queue(queue)
    tmp = Path(tempfile.mkdtemp(prefix=f"bench-{kind}-"))
    log = tmp / "beat.log"
    env = celery_env(BENCH_QUEUE=queue)
    procs = []
    try:
        due = _instant()
        argv = setup(n, due, env, tmp)
        procs.append(start([sys.executable, "-m", "celery", *argv, "--loglevel", "WARNING", "--pidfile="], env, log))
        begin = due.timestamp()
        depth = DepthProbe(queue)
        queued = Watch(depth, n, begin, begin + GIVE_UP, interval=0.01)
        queued.start()
        queued.join()
        depth.close()
        if procs[0].poll() is not None or queued.reached is None:
            raise RuntimeError(f"{label}: {queued.last}/{n} queued; log:\n{log.read_text(errors='replace')[-2000:]}")
        late = queued.reached - begin
        return emit({"bench": "anchor", "scheduler": kind, "label": label, "n": n, "beats": 1,
                     "seconds_after_due": round(late, 3), "fires_per_s": round(n / late),
                     "peak_rss_mb": round(status_kb(procs[0].pid, "VmHWM") / 1024, 1)})
    finally:
        stop(procs)
        delete_queue(queue)
        _cleanup(kind, env)


def main() -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--schedulers", nargs="+", choices=sorted(SETUP), default=["persistent", "django", "redbeat"])
    args = parser.parse_args()
    started = time.time()
    results = [anchor(kind, n) for n in args.n for kind in args.schedulers]
    print(f"# anchors took {time.time() - started:.0f} s", file=sys.stderr)
    return results


if __name__ == "__main__":
    main()
