"""The time engine: when a schedule fires next, computed without I/O or clock reads.

``cron.py`` parses cron expressions and finds the next match under Debian cron's DST rules, ``engine.py``
turns a schedule's timing (cron, interval, one-off, jitter, misfire policy, bounds, skip dates) into its next
fire, ``rows.py`` reads that timing from a ``job_schedules`` row, ``formats.py`` holds the text forms of
durations and instants every interface shares, ``limits.py`` the bounds the SQL constraints repeat.
Imports from this package: ``errors`` only. Everything else may import it.
"""
