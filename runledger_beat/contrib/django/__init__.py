"""A Django app over runledger's tables: add ``"runledger_beat.contrib.django"`` to ``INSTALLED_APPS``.

Unmanaged models over ``job_schedules``, ``jobs`` and ``calendars`` (``models.py``; Django never creates or
migrates them, runledger's own migrations do), and an admin (``admin.py``) that lists and searches the
schedules, shows their next fires and latest runs, and pauses, resumes or triggers them through
``runledger_beat.api``, so running beats hear of each change at once. Settings: ``conf.py``.
Needs the ``django`` extra (``pip install 'runledger-beat[django]'``).
"""

from __future__ import annotations

from ...extras import require

require("runledger_beat.contrib.django", "django", ImportError)
