-- Migration 0042: order_events storage tuning + loader checkpoint table
-- Ticket: DATA-1463 (vacuum tuning), DATA-1484 (overnight loader restarts)
-- Author: dana.kowalski   Reviewed-by: kwame.asante   Date: 2026-01-26
--
-- Never edit after merge. Fix forward with 0043+.

BEGIN;

-- ---------------------------------------------------------------------------
-- 1. Per-table autovacuum settings for the high-churn event table.
--    Default scale factor 0.2 meant ~240M dead tuples before autovacuum started.
-- ---------------------------------------------------------------------------
ALTER TABLE warehouse.order_events SET (
    autovacuum_vacuum_scale_factor  = 0.01,
    autovacuum_vacuum_threshold     = 100000,
    autovacuum_vacuum_cost_limit    = 2000,
    autovacuum_vacuum_cost_delay    = 2,
    autovacuum_analyze_scale_factor = 0.02,
    fillfactor                      = 85      -- leave room for HOT updates
);

-- The status_updated_at index blocked HOT updates and was used by one dashboard.
DROP INDEX IF EXISTS warehouse.ix_order_events_status_updated_at;

-- ---------------------------------------------------------------------------
-- 2. Checkpoint table for the overnight loader.
-- ---------------------------------------------------------------------------
CREATE TABLE IF NOT EXISTS public.loader_checkpoint (
    run_day      date        PRIMARY KEY,
    last_offset  bigint      NOT NULL CHECK (last_offset >= 0),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

COMMENT ON TABLE public.loader_checkpoint IS
    'Last archive offset fully written to the scratch partition per business day. '
    'Written in the same transaction as the rows. See notes/ops/overnight-loader-restarts.md';

CREATE SCHEMA IF NOT EXISTS staging;
CREATE SCHEMA IF NOT EXISTS archive;

-- ---------------------------------------------------------------------------
-- 3. Deterministic surrogate key so reruns produce identical rows.
-- ---------------------------------------------------------------------------
ALTER TABLE warehouse.fact_orders
    ADD COLUMN IF NOT EXISTS order_key text
    GENERATED ALWAYS AS (md5(order_id || ':' || line_no::text)) STORED;

CREATE UNIQUE INDEX IF NOT EXISTS ux_fact_orders_order_key_day
    ON warehouse.fact_orders (order_key, business_date);

-- ---------------------------------------------------------------------------
-- 4. Housekeeping: drop archived day partitions older than 3 days.
-- ---------------------------------------------------------------------------
CREATE OR REPLACE FUNCTION archive.drop_old_fact_orders(keep_days int DEFAULT 3)
RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    dropped int := 0;
BEGIN
    FOR r IN
        SELECT c.relname
        FROM pg_class c
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = 'archive'
          AND c.relname ~ '^fact_orders_[0-9]{8}$'
          AND to_date(right(c.relname, 8), 'YYYYMMDD') < current_date - keep_days
    LOOP
        EXECUTE format('DROP TABLE archive.%I', r.relname);
        dropped := dropped + 1;
    END LOOP;
    RETURN dropped;
END;
$$;

COMMIT;

-- Down (manual, do NOT run on prod without Kwame):
-- ALTER TABLE warehouse.order_events RESET (autovacuum_vacuum_scale_factor, autovacuum_vacuum_threshold,
--     autovacuum_vacuum_cost_limit, autovacuum_vacuum_cost_delay, autovacuum_analyze_scale_factor, fillfactor);
-- DROP TABLE public.loader_checkpoint;
-- DROP FUNCTION archive.drop_old_fact_orders(int);
