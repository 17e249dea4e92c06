-- Reading django-celery-beat's tables for `runledger-beat import-from django-celery-beat` (through
-- db.source_store), read-only, with search_path set to the schema holding them. Rows come whole as JSON so
-- any django-celery-beat version reads the same way (older ones lack some columns).

-- dcb_tables --
-- The django-celery-beat tables the source schema holds.
SELECT c.relname AS name
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'v')
   AND c.relname LIKE 'django\_celery\_beat\_%';

-- dcb_periodic_tasks --
-- Every PeriodicTask, by name.
SELECT to_jsonb(t) AS row FROM django_celery_beat_periodictask t ORDER BY t.name;

-- dcb_intervals --
-- Every IntervalSchedule.
SELECT to_jsonb(t) AS row FROM django_celery_beat_intervalschedule t;

-- dcb_crontabs --
-- Every CrontabSchedule.
SELECT to_jsonb(t) AS row FROM django_celery_beat_crontabschedule t;

-- dcb_clocked --
-- Every ClockedSchedule.
SELECT to_jsonb(t) AS row FROM django_celery_beat_clockedschedule t;

-- dcb_solar --
-- Every SolarSchedule.
SELECT to_jsonb(t) AS row FROM django_celery_beat_solarschedule t;
