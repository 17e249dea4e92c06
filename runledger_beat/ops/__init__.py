"""What operators look at: ``web.py`` (the dashboard, its pages in templates/), ``doctor.py`` (can beat work
here?), ``stats.py`` (per-schedule lag from the ledger), ``preview.py`` (a timing's next fires) and
``output.py`` (tables and JSON for the command line and the dashboard).
Imports from ``api``, ``db``, ``timing``, ``spec``; only the command line imports it.
"""
