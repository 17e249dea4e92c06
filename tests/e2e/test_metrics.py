"""Prometheus metrics scraped from a real `celery beat` while fires flow, checked against the ledger."""

from __future__ import annotations

import socket
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from runledger_beat import __version__
from runledger_beat.beat import metrics
from runledger_beat.settings import load

from ..support.e2e import count, delete_queue, prepare
from ..support.procs import start_beat
from ..support.rows import insert_schedule
from ..support.services import wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[tuple[str, tuple], float] | None:
    """{(sample name, sorted labels): value} from /metrics, None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as response:
            text = response.read().decode()
    except OSError:
        return None
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def fires(sample: dict, outcome: str) -> float:
    return sample[("runledger_fires_total", (("outcome", outcome),))]


def test_metrics_match_the_ledger_while_fires_flow(db, pg_dsn, schema, amqp_url):
    port = _free_port()
    env, queue = prepare(db, pg_dsn, schema, amqp_url, extra={"runledger_metrics_port": port})
    insert_schedule(db, "every-second", cron="* * * * * *")
    insert_schedule(db, "every-2s", cron="*/2 * * * * *")
    insert_schedule(db, "bad-zone", cron="* * * * * *", tz="Nowhere/Bogus")  # deferred, never fired
    db.execute("INSERT INTO job_schedules (id, name, job_type, cron_expr, misfire_policy, next_fire_at)"
               " VALUES (gen_random_uuid(), 'missed', 'rl.record', '0 0 1 1 *', 'skip',"
               " now() - interval '1 hour')")  # its missed slot is recorded as skipped
    beat = start_beat(env)
    try:
        first = wait_for(lambda: scrape(port), timeout=30, message="/metrics to answer")
        assert first[("runledger_quarantined_schedules", ())] == 0
        assert first[("runledger_build_info", (("version", __version__),))] == 1
        wait_for(lambda: count(db, "SELECT count(*) AS n FROM jobs WHERE sent_at IS NOT NULL") >= 6, timeout=30,
                 message="fires flowing")
        db.execute("UPDATE job_schedules SET is_active = false")

        def settled():
            sample = scrape(port)
            ledger = db.execute(
                "SELECT count(*) FILTER (WHERE sent_at IS NOT NULL) AS sent,"
                " count(*) FILTER (WHERE status = 'skipped') AS skipped,"
                " count(*) FILTER (WHERE status = 'pending') AS pending,"
                " sum(extract(epoch FROM sent_at - scheduled_for)) AS lag_sum,"
                " max(extract(epoch FROM sent_at - scheduled_for)) AS lag_max,"
                " count(*) FILTER (WHERE sent_at - scheduled_for <= interval '0.25 seconds') AS within_250ms"
                " FROM jobs").fetchone()
            again = scrape(port)  # the same before and after the ledger read: no fire landed in between
            ok = (sample and again and fires(sample, "sent") == fires(again, "sent") == ledger["sent"]
                  and ledger["pending"] == 0)
            return (sample, ledger) if ok else None

        sample, ledger = wait_for(settled, timeout=20, interval=0.2, message="metrics to catch up with the ledger")
        assert fires(sample, "sent") == ledger["sent"] >= 6
        assert fires(sample, "skipped") == ledger["skipped"] == 1
        assert fires(sample, "deferred") >= 1
        assert fires(sample, "failed") == 0 and sample[("runledger_publish_failures_total", ())] == 0
        assert sample[("runledger_fire_lag_seconds_count", ())] == ledger["sent"]
        # Lag is taken at the broker's confirm, the ledger's sent_at a moment later when the row is marked.
        lag_sum = sample[("runledger_fire_lag_seconds_sum", ())]
        assert 0 <= lag_sum <= float(ledger["lag_sum"]) + 0.01 * ledger["sent"]
        assert float(ledger["lag_sum"]) - lag_sum < 0.05 * ledger["sent"]
        buckets = {dict(k[1])["le"]: v for k, v in sample.items() if k[0] == "runledger_fire_lag_seconds_bucket"}
        assert buckets["+Inf"] == ledger["sent"]
        assert buckets["0.25"] >= ledger["within_250ms"]
        # Gauges (refreshed every few seconds): nothing due or pending once the schedules are paused.
        gauges = wait_for(lambda: (s := scrape(port)) and s[("runledger_due_schedules", ())] == 0
                          and s[("runledger_pending_fires", ())] == 0 and s, timeout=15, message="gauges")
        assert gauges[("runledger_quarantined_schedules", ())] == 0
        now = db.execute("SELECT extract(epoch FROM clock_timestamp()) AS t").fetchone()["t"]
        assert abs(float(now) - gauges[("runledger_last_tick_timestamp_seconds", ())]) < 10
        assert not any("schedule" in dict(k[1]) for k in gauges)  # no per-schedule labels
    finally:
        assert beat.stop() == 0, beat.log()
        delete_queue(amqp_url, queue)
    assert scrape(port) is None  # the server stops with the beat


def test_due_gauge_counts_schedules_due_now(db, pg_dsn, schema):
    from runledger_beat.db.beat_store import BeatStore
    insert_schedule(db, "due-1", cron="* * * * * *", next_fire_at="2020-01-01T00:00:00Z")
    insert_schedule(db, "due-2", cron="* * * * * *", next_fire_at="2020-01-01T00:00:00Z")
    insert_schedule(db, "later", cron="* * * * * *", next_fire_at="2999-01-01T00:00:00Z")
    assert BeatStore(db).operation_gauges() == {"due": 2, "pending": 0, "quarantined": 0}
    db.execute("INSERT INTO schedule_faults (schedule_id, last_error, retry_at, quarantined_at)"
               " SELECT id, 'cron: bad', now(), now() FROM job_schedules WHERE name = 'later'")
    assert BeatStore(db).operation_gauges()["quarantined"] == 1


def test_metrics_are_off_without_a_port_and_a_taken_port_does_not_stop_beat(caplog):
    conf = {"runledger_dsn": "postgresql://x@127.0.0.1:1/none"}
    assert type(metrics.from_settings(load(conf))) is metrics.NoMetrics
    served = metrics.from_settings(load(dict(conf, runledger_metrics_port=0)))
    try:
        assert served.enabled and scrape(served.port) is not None
        again = metrics.from_settings(load(dict(conf, runledger_metrics_port=served.port)))
        assert type(again) is metrics.NoMetrics
        assert "metrics are off for this beat" in caplog.text
    finally:
        served.close()


@pytest.mark.parametrize("value", [-1, 70000, "many"])
def test_a_bad_metrics_port_names_the_setting(value):
    from runledger_beat.errors import ConfigError
    with pytest.raises(ConfigError, match="runledger_metrics_port"):
        load({"runledger_dsn": "postgresql://x@h/db", "runledger_metrics_port": value})


def test_grafana_dashboard_queries_only_metrics_beat_serves():
    import json
    import re

    from ..support.procs import ROOT
    dashboard = json.loads((ROOT / "examples/grafana/runledger.json").read_text())
    served = {"runledger_fires_total", "runledger_fire_lag_seconds_bucket", "runledger_fire_lag_seconds_sum",
              "runledger_fire_lag_seconds_count", "runledger_publish_failures_total", "runledger_due_schedules",
              "runledger_pending_fires", "runledger_quarantined_schedules", "runledger_last_tick_timestamp_seconds"}
    used = {name for p in dashboard["panels"] for t in p["targets"] for name in re.findall(r"runledger_\w+", t["expr"])}
    assert used == served


def test_failed_publishes_are_counted_as_the_ledger_counts_them(db, pg_dsn, schema, amqp_url):
    port = _free_port()
    env, _ = prepare(db, pg_dsn, schema, amqp_url,
                     extra={"runledger_metrics_port": port, "runledger_recovery_grace": 1})
    # The broker refuses every message of this schedule (no such exchange): each attempt fails alone.
    insert_schedule(db, "unsendable", cron="* * * * * *",
                    options={"exchange": f"rl-missing-{uuid.uuid4().hex[:6]}", "routing_key": "x"})
    beat = start_beat(env)
    try:
        wait_for(lambda: scrape(port), timeout=30, message="/metrics to answer")
        wait_for(lambda: count(db, "SELECT coalesce(sum(dispatch_attempts), 0) AS n FROM jobs") >= 3, timeout=30,
                 message="failed publishes recorded in the ledger")
        db.execute("UPDATE job_schedules SET is_active = false")

        def agreed():  # between two attempts (the beat backs off) the ledger and /metrics hold still
            attempts = count(db, "SELECT sum(dispatch_attempts) AS n FROM jobs")
            sample = scrape(port)
            again = count(db, "SELECT sum(dispatch_attempts) AS n FROM jobs")
            return sample if attempts == again == fires(sample, "failed") else None

        sample = wait_for(agreed, timeout=20, interval=0.1, message="failed fires to match the ledger's attempts")
        assert fires(sample, "sent") == 0 and count(db, "SELECT count(*) AS n FROM jobs WHERE sent_at IS NOT NULL") == 0
        assert sample[("runledger_publish_failures_total", ())] >= 1
        assert sample[("runledger_fire_lag_seconds_count", ())] == 0
        pending = count(db, "SELECT count(*) AS n FROM jobs WHERE status = 'pending'")
        assert pending > 0
        wait_for(lambda: scrape(port)[("runledger_pending_fires", ())] == pending, timeout=15,
                 message="the pending gauge (refreshed every few seconds)")
    finally:
        assert beat.stop() == 0, beat.log()
