-- 0005: operating it. Each running beat keeps a row here (upserted at most once a second,
-- deleted on clean shutdown, pruned by any beat after an hour without a tick), so
-- `runledger-beat beats` can list them and `runledger-beat health` can probe them.
-- Runs with search_path set to the runledger schema; names are unqualified.

CREATE TABLE IF NOT EXISTS beats (
    id           uuid PRIMARY KEY,
    host         text NOT NULL,
    pid          integer NOT NULL,
    version      text NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    last_tick_at timestamptz NOT NULL DEFAULT now(),
    preparing    boolean NOT NULL DEFAULT false
);

-- health asks for the latest tick; pruning looks for the oldest.
CREATE INDEX IF NOT EXISTS beats_last_tick_idx ON beats (last_tick_at);
