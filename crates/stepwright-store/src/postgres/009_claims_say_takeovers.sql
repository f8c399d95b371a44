-- A claim says whom it took a run from: the worker whose lapsed lease it replaced on a run
-- that was executing (for the lease-takeover metric and the runner's log). The function's
-- result gains a column, so it is dropped and created again; its logic is 007's.
DROP FUNCTION stepwright_claim_due(TEXT, BIGINT, BIGINT, TEXT);

CREATE FUNCTION stepwright_claim_due(p_owner TEXT, p_lease_for BIGINT, p_limit BIGINT, p_tenant TEXT)
RETURNS TABLE (run_id UUID, run_token BIGINT, run_expires BIGINT, run_taken_from TEXT)
LANGUAGE plpgsql AS $$
DECLARE
    taken BIGINT;
    got BIGINT;
    room BIGINT;
    grp RECORD;
BEGIN
    RETURN QUERY
    WITH due AS (
        SELECT d.id, CASE WHEN d.status = 'running' AND d.lease_owner <> '' AND d.lease_owner <> p_owner
            THEN d.lease_owner END AS taken_from
        FROM stepwright_runs d
        WHERE d.status IN ('pending', 'running', 'suspended')
          AND (d.lease_expires IS NULL OR d.lease_expires <= stepwright_now_us())
          AND ((d.status = 'pending' AND d.concurrency_key IS NULL
                AND (d.wake_at IS NULL OR d.wake_at <= stepwright_now_us()))
               OR d.status = 'running'
               OR (d.status = 'suspended' AND d.wake_at <= stepwright_now_us()))
          AND (p_tenant IS NULL OR d.caller->>'tenant' = p_tenant)
        ORDER BY d.priority DESC, d.created_at LIMIT p_limit FOR UPDATE SKIP LOCKED)
    UPDATE stepwright_runs r SET lease_owner = p_owner, lease_token = r.lease_token + 1,
        lease_expires = stepwright_now_us() + p_lease_for,
        status = CASE WHEN r.status = 'pending' THEN 'running' ELSE r.status END,
        wake_at = CASE WHEN r.status = 'pending' THEN NULL ELSE r.wake_at END,
        updated_at = CASE WHEN r.status = 'pending' THEN stepwright_now_us() ELSE r.updated_at END
    FROM due WHERE r.id = due.id RETURNING r.id, r.lease_token, r.lease_expires, due.taken_from;
    GET DIAGNOSTICS taken = ROW_COUNT;
    FOR grp IN
        SELECT g.concurrency_key AS key, MAX(g.concurrency_limit) AS lim
        FROM stepwright_runs g
        WHERE g.concurrency_key IS NOT NULL AND g.status = 'pending'
          AND (g.wake_at IS NULL OR g.wake_at <= stepwright_now_us())
          AND (g.lease_expires IS NULL OR g.lease_expires <= stepwright_now_us())
          AND (p_tenant IS NULL OR g.caller->>'tenant' = p_tenant)
        GROUP BY g.concurrency_key
        ORDER BY MAX(g.priority) DESC, MIN(g.created_at)
    LOOP
        EXIT WHEN taken >= p_limit;
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(hashtextextended('stepwright.concurrency:' || grp.key, 0));
        SELECT grp.lim - COUNT(*) INTO room FROM stepwright_runs h
            WHERE h.concurrency_key = grp.key AND h.status IN ('running', 'suspended');
        CONTINUE WHEN room <= 0;
        RETURN QUERY
        WITH due AS (
            SELECT d.id FROM stepwright_runs d
            WHERE d.concurrency_key = grp.key AND d.status = 'pending'
              AND (d.wake_at IS NULL OR d.wake_at <= stepwright_now_us())
              AND (d.lease_expires IS NULL OR d.lease_expires <= stepwright_now_us())
              AND (p_tenant IS NULL OR d.caller->>'tenant' = p_tenant)
            ORDER BY d.priority DESC, d.created_at LIMIT LEAST(room, p_limit - taken) FOR UPDATE SKIP LOCKED)
        UPDATE stepwright_runs r SET lease_owner = p_owner, lease_token = r.lease_token + 1,
            lease_expires = stepwright_now_us() + p_lease_for, status = 'running', wake_at = NULL,
            updated_at = stepwright_now_us()
        FROM due WHERE r.id = due.id RETURNING r.id, r.lease_token, r.lease_expires, NULL::TEXT;
        GET DIAGNOSTICS got = ROW_COUNT;
        taken := taken + got;
    END LOOP;
END $$;
