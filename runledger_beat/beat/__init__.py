"""The scheduler process: ``celery beat -S runledger_beat.Scheduler``.

``scheduler.py`` is the Celery glue; ``pipeline.py`` the loop over ``preparing.py`` (claim a coming instant
ahead, in an open transaction), ``outbox.py`` (commit at the instant, publish, settle, hold, backlog) and
``housekeeping.py`` (sweeps, pruning, partitions, the beat's row, metrics), with ``connections.py``,
``claim.py`` (one claim, plan and record pass), ``instant.py`` and ``overflow.py`` (an instant's fires, in
memory or past it), ``retention.py`` (old days dropped in a thread), ``listener.py`` (LISTEN wake-ups) and
``metrics.py`` (Prometheus). Imports from ``db``, ``publish``, ``timing``, ``settings``, ``payload``; nothing
imports it but the scheduler alias, ``testing`` and the command line.
"""
