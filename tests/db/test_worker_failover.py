"""The worker hook's ledger connection across a failover: the step that meets the lost (or read-only) primary fails
(the task is unaffected), the next ones wait out a back-off without touching the database, then the hook reconnects
through the multi-host DSN to the promoted standby and writes there."""

from __future__ import annotations

import uuid

import pytest
from celery import Celery

from runledger_beat import worker
from runledger_beat.db import connect, migrate

from ..support.replication import StandbyPair
from ..support.services import wait_for


@pytest.mark.parametrize("old_primary", ["stopped", "read-only"])
def test_the_worker_hook_reconnects_to_the_promoted_standby(old_primary):
    pair = StandbyPair()
    try:
        schema = f"t_{uuid.uuid4().hex[:12]}"
        ha = pair.ha_dsn()
        with connect(ha, "public") as conn:
            migrate(conn, schema)
        ids = [uuid.uuid4() for _ in range(2)]
        with connect(ha, schema, autocommit=True) as db:
            for job in ids:
                db.execute("INSERT INTO jobs (id, job_type, payload, status) VALUES (%s, 'rl.record', '{}', 'sent')",
                           (job,))
        app = Celery("failover", set_as_current=False)
        app.conf.update(runledger_dsn=ha, runledger_schema=schema)
        ledger = worker._Ledger(app)
        assert ledger.run(lambda store: store.start_run(str(ids[0]), "rl.record", "w1", 0)) is True
        assert ledger.conn.info.port == pair.primary.port
        ledger.backoff.first = 10.0  # a first wait no slow step of this test outlasts

        pair.fail_over(old_primary)
        with pytest.raises(worker._LedgerUnavailable):  # the old primary is gone, or refuses writes (25006)
            ledger.run(lambda store: store.start_run(str(ids[1]), "rl.record", "w1", 0))
        assert ledger.backoff.active and ledger.conn is None
        with pytest.raises(worker._LedgerUnavailable):  # in back-off: not even tried
            ledger.run(lambda store: pytest.fail("the database was tried during the back-off"))
        assert ledger.conn is None  # no connection was opened
        ledger.backoff.until = 0.0  # the wait is over (cut short: the test need not sit it out)

        def started() -> bool:
            try:
                return ledger.run(lambda store: store.start_run(str(ids[1]), "rl.record", "w1", 0))
            except worker._LedgerUnavailable:
                return False
        wait_for(started, timeout=20, interval=0.1, message="the hook writing to the new primary")
        assert ledger.conn.info.port == pair.port and not ledger.backoff.failing
        with connect(pair.dsn, schema, autocommit=True) as new:
            assert new.execute("SELECT count(*) AS n FROM jobs WHERE status = 'started'").fetchone()["n"] == 2
    finally:
        pair.close()
