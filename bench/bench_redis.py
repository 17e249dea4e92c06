"""Redis: runledger's fast path against pipelined LPUSH of equal-size messages and Celery's send_task.

N stock Celery task messages are built and encoded ahead (as the lookahead does before an
instant), then timed from the first command until all N are pushed; the baseline pushes N
payloads of the same size in the same pipelines (CHUNK commands per round trip); send_task
is Celery's own per-message path. Repeated --runs times, interleaved; medians and min-max.

    .venv/bin/python bench/bench_redis.py --n 10000 --runs 5
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import redis  # noqa: E402
from celery import Celery  # noqa: E402

from bench.common import REDIS, RedisDepthProbe, Watch, emit  # noqa: E402
from runledger_beat.publish.dispatcher import Dispatcher  # noqa: E402
from runledger_beat.publish.fires import Fire  # noqa: E402
from runledger_beat.publish.redis import CHUNK  # noqa: E402


def _fires(n: int) -> list[Fire]:
    at = datetime.now(timezone.utc) + timedelta(minutes=5)
    return [Fire(uuid.uuid4(), uuid.uuid4(), f"s{i}", "bench.noop",
                 {"args": [], "kwargs": {}, "_schedule": {"schedule_id": str(uuid.uuid4()), "schedule_name": f"s{i}",
                                                          "scheduled_for": at.strftime("%Y-%m-%dT%H:%M:%SZ")}},
                 {}, at) for i in range(n)]


def fast_path(n: int) -> tuple[float, int]:
    """Seconds to push N pre-encoded fires; and the size of one message."""
    queue = f"bench_redis_{uuid.uuid4().hex[:8]}"
    app = Celery("bench_redis", broker=REDIS)
    app.conf.task_default_queue = queue
    dispatcher = Dispatcher(app)
    try:
        ready = dispatcher.prepare(_fires(n))
        size = len(ready[0].pushes[0][1])
        began = time.perf_counter()
        dispatcher.send(ready)
        result = dispatcher.collect(wait=True)
        elapsed = time.perf_counter() - began
        assert len(result.sent) == n and redis.Redis.from_url(REDIS).llen(queue) == n
        return elapsed, size
    finally:
        dispatcher.close()
        redis.Redis.from_url(REDIS).delete(queue)


def raw_lpush(n: int, size: int) -> float:
    """Seconds to LPUSH N payloads of ``size`` bytes in pipelines of CHUNK."""
    client, queue = redis.Redis.from_url(REDIS), f"bench_raw_{uuid.uuid4().hex[:8]}"
    payloads = [("x" * (size - 8) + f"{i:08d}") for i in range(n)]
    try:
        began = time.perf_counter()
        for start in range(0, n, CHUNK):
            pipe = client.pipeline(transaction=False)
            for payload in payloads[start:start + CHUNK]:
                pipe.lpush(queue, payload)
            pipe.execute()
        return time.perf_counter() - began
    finally:
        client.delete(queue)


def watched_lpush(n: int, size: int, every: float = 0.0005) -> float:
    """Seconds from the first of N pipelined LPUSH (as ``raw_lpush``) until a watcher polling the list's length
    every ``every`` s sees all N: the instrument that times a Redis burst (bench_burst), so the two are timed alike,
    as the RabbitMQ ceiling and its bursts are (a watcher's polls cost the pusher CPU on a small machine)."""
    client, queue = redis.Redis.from_url(REDIS), f"bench_raw_{uuid.uuid4().hex[:8]}"
    payloads = [("x" * (size - 8) + f"{i:08d}") for i in range(n)]
    depth = RedisDepthProbe(queue)
    try:
        began = time.time()
        watch = Watch(depth, n, began, began + 60, every)
        watch.start()
        for start in range(0, n, CHUNK):
            pipe = client.pipeline(transaction=False)
            for payload in payloads[start:start + CHUNK]:
                pipe.lpush(queue, payload)
            pipe.execute()
        watch.join()
        if watch.reached is None:
            raise RuntimeError(f"only {watch.last} of {n} payloads reached {queue}")
        return watch.reached - began
    finally:
        depth.close()
        client.delete(queue)


def send_task(n: int) -> float:
    """Seconds for Celery's app.send_task of N tasks on one producer."""
    queue = f"bench_send_{uuid.uuid4().hex[:8]}"
    app = Celery("bench_redis_send", broker=REDIS)
    try:
        with app.producer_or_acquire() as producer:
            began = time.perf_counter()
            for i in range(n):
                app.send_task("bench.noop", (i,), queue=queue, producer=producer)
            return time.perf_counter() - began
    finally:
        redis.Redis.from_url(REDIS).delete(queue)


def measure(n: int, runs: int) -> dict:
    """``runs`` interleaved rounds of the fast path, pipelined LPUSH and send_task; medians and ranges."""
    ours, raw, celery = [], [], []
    for _ in range(runs):
        seconds, size = fast_path(n)
        ours.append(n / seconds)
        raw.append(n / raw_lpush(n, size))
        celery.append(n / send_task(n))
    ratios = [o / r for o, r in zip(ours, raw, strict=True)]
    to_send_task = [o / c for o, c in zip(ours, celery, strict=True)]
    return emit({"bench": "redis", "n": n, "runs": runs, "message_bytes": size,
                 "fast_path_per_s": round(statistics.median(ours)),
                 "fast_path_range": [round(min(ours)), round(max(ours))],
                 "pipelined_lpush_per_s": round(statistics.median(raw)),
                 "send_task_per_s": round(statistics.median(celery)),
                 "ratio_to_lpush_median": round(statistics.median(ratios), 3),
                 "ratio_to_lpush_range": [round(min(ratios), 3), round(max(ratios), 3)],
                 "ratio_to_send_task_median": round(statistics.median(to_send_task), 2)})


def main() -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    return measure(args.n, args.runs)


if __name__ == "__main__":
    main()
