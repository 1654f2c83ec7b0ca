-- Tenant fences: a shard's own record of the tenants moved away from it (shard.Move, tempotent
-- shard move), so that a worker still holding the old shard's store cannot write a receipt there
-- after the move copied the tenant's receipts. A store opened with Config.TenantFences checks this
-- table in the same statement as each receipt write, and the statement fails with SQLSTATE TT001
-- (raised by tenant_moved, below) when its tenant is fenced: the caller looks its route up again.
-- A move writes a tenant's row in two steps on the shard it leaves: first draining (sealed false:
-- nothing new is reserved, taken over or read-and-taken-over; attempts that reserved before go on
-- and complete), then, once those have drained and right before the copy, sealed (no receipt
-- write or read of the tenant at all). A move into a shard deletes the tenant's row there. The
-- table holds one row per tenant that ever moved away; stores that are not sharded never read it.
-- {{schema}} is replaced by the quoted schema name.
CREATE TABLE {{schema}}.tenant_fences (
    tenant    text        PRIMARY KEY,
    -- The shard the tenant moved to, named in the error.
    moved_to  text        NOT NULL,
    sealed    boolean     NOT NULL DEFAULT false,
    fenced_at timestamptz NOT NULL DEFAULT now(),
    moved_by  text        NOT NULL
);

-- tenant_moved refuses a receipt statement of a fenced tenant: it is called only for a fence row
-- found (a scalar subquery over tenant_fences that returns no row costs no call), and raises
-- TT001 naming the tenant and its new shard; its DETAIL is a JSON object {"tenant": …,
-- "moved_to": …}, which the store turns into a shard.MovedError of that tenant.
CREATE FUNCTION {{schema}}.tenant_moved(tenant text, moved_to text) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'tenant % moved from this shard to shard %', tenant, moved_to
        USING ERRCODE = 'TT001', DETAIL = json_build_object('tenant', tenant, 'moved_to', moved_to)::text,
        HINT = 'look the tenant''s shard up again (shard.Router) and retry there';
END
$$;

-- tenant_fences_read_committed refuses a fenced store's receipt statement run outside READ
-- COMMITTED (the statements call it only then): a REPEATABLE READ or SERIALIZABLE transaction
-- keeps a snapshot that may predate a tenant's fence, which it would not see.
CREATE FUNCTION {{schema}}.tenant_fences_read_committed() RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RAISE EXCEPTION 'a receipt statement of a sharded store (activity.Config.TenantFences) must run under READ COMMITTED, not %: begin the transaction given to DoInTx at READ COMMITTED, and keep default_transaction_isolation at read committed for the workers'' role', current_setting('transaction_isolation')
        USING ERRCODE = 'feature_not_supported',
        HINT = 'a snapshot taken before a tenant''s fence (shard move) committed does not see it, and would write a receipt the move does not copy';
END
$$;
