"""Schedules brought in from elsewhere: a Celery app's ``beat_schedule``, django-celery-beat's tables, redbeat's
Redis keys. Each source is read, turned into validated job_schedules columns, and applied by ``plan``."""
