package outbox_test

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/outbox"
)

// auditRow is a row of the audit table, as these tests look at it.
type auditRow struct {
	Actor, Action, Target, Reason string
	Detail                        map[string]any
}

func auditRows(t *testing.T, name string) []auditRow {
	t.Helper()
	rows, err := pgtest.Pool(t).Query(context.Background(), `SELECT actor, action, target, reason, detail FROM `+name+`.audit ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []auditRow
	for rows.Next() {
		var r auditRow
		var detail []byte
		require.NoError(t, rows.Scan(&r.Actor, &r.Action, &r.Target, &r.Reason, &detail))
		require.NoError(t, json.Unmarshal(detail, &r.Detail))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// kill makes the messages ids dead after attempts with lastError, as a dispatcher would.
func kill(t *testing.T, name, lastError string, ids ...string) {
	t.Helper()
	tag, err := pgtest.Pool(t).Exec(context.Background(), `UPDATE `+name+`.outbox SET state = 'dead', attempts = 5,
		last_error = $2 WHERE id = ANY ($1)`, ids, lastError)
	require.NoError(t, err)
	require.Equal(t, int64(len(ids)), tag.RowsAffected())
}

var oncall = outbox.Action{By: "oncall@example.com", Reason: "INC-7: endpoint fixed"}

// TestActionsAreAudited: requeue and discard change a dead message and write its audit row in the
// same statement; every refusal changes and records nothing.
func TestActionsAreAudited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	put(t, ctx, o, outbox.Message{ID: "dead1", Topic: "t", Payload: []byte("12345")}, outbox.Message{ID: "dead2", Topic: "t", OrderingKey: "k"},
		outbox.Message{ID: "pending", Topic: "t"})
	kill(t, name, "HTTP 503", "dead1", "dead2")

	// Refusals: no actor, no reason, not dead, unknown.
	require.ErrorIs(t, o.RequeueMessage(ctx, "dead1", outbox.Action{Reason: "x"}), outbox.ErrInvalidAction)
	require.ErrorIs(t, o.DiscardMessage(ctx, "dead1", outbox.Action{By: "x", Reason: "  "}), outbox.ErrInvalidAction)
	_, err := o.RequeueDead(ctx, outbox.ListFilter{}, outbox.Action{By: "x"})
	require.ErrorIs(t, err, outbox.ErrInvalidAction)
	err = o.RequeueMessage(ctx, "pending", oncall)
	require.ErrorIs(t, err, outbox.ErrNotDead)
	require.ErrorContains(t, err, "is pending")
	require.ErrorIs(t, o.DiscardMessage(ctx, "nope", oncall), outbox.ErrNoMessage)
	_, err = o.DiscardDead(ctx, outbox.ListFilter{State: outbox.StatePending}, oncall)
	require.ErrorIs(t, err, outbox.ErrInvalidFilter)
	require.Empty(t, auditRows(t, name), "a refused action was recorded")
	require.Equal(t, row{State: "dead", Attempts: 5, Error: "HTTP 503"}, rowOf(t, name, "dead1"))

	require.NoError(t, o.RequeueMessage(ctx, "dead1", oncall))
	require.Equal(t, row{State: "pending", Error: "HTTP 503"}, rowOf(t, name, "dead1"))
	require.NoError(t, o.DiscardMessage(ctx, "dead2", outbox.Action{By: "ops", Reason: "poison"}))
	require.Equal(t, 2, count(t, name))
	require.Equal(t, []auditRow{
		{Actor: oncall.By, Action: outbox.AuditRequeue, Target: "dead1", Reason: oncall.Reason,
			Detail: map[string]any{"attempts": 5.0, "last_error": "HTTP 503"}},
		{Actor: "ops", Action: outbox.AuditDiscard, Target: "dead2", Reason: "poison",
			Detail: map[string]any{"attempts": 5.0, "last_error": "HTTP 503", "topic": "t", "ordering_key": "k", "payload_bytes": 0.0}},
	}, auditRows(t, name))

	// Done once, refused the second time, recorded once.
	require.ErrorIs(t, o.RequeueMessage(ctx, "dead1", oncall), outbox.ErrNotDead)
	require.ErrorIs(t, o.DiscardMessage(ctx, "dead2", oncall), outbox.ErrNoMessage)
	require.Len(t, auditRows(t, name), 2)
}

// TestConcurrentRequeueOneWins: two operators requeue one dead message at the same moment (both
// statements wait on its row lock, then run): one requeues it, the other gets ErrNotDead, and
// the audit log has one row.
func TestConcurrentRequeueOneWins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	put(t, ctx, o, outbox.Message{ID: "m", Topic: "t"})
	kill(t, name, "boom", "m")

	pool := pgtest.Pool(t)
	holder, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, `SELECT FROM `+name+`.outbox WHERE id = 'm' FOR UPDATE`)
	require.NoError(t, err)

	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, by := range []string{"alice", "bob"} {
		wg.Go(func() { errs[i] = o.RequeueMessage(ctx, "m", outbox.Action{By: by, Reason: "fixed"}) })
	}
	// Both are blocked behind the holder's lock before it lets go (pg_blocking_pids is the signal).
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE cardinality(pg_blocking_pids(pid)) > 0 AND query LIKE '%WITH old AS%' AND strpos(query, $1) > 0`,
			name).Scan(&n))
		return n == 2
	}, 30*time.Second, 10*time.Millisecond, "the two requeues never both waited on the row lock")
	require.NoError(t, holder.Commit(ctx))
	wg.Wait()

	slices.SortFunc(errs, func(a, b error) int {
		if a == nil {
			return -1
		}
		return 1
	})
	require.NoError(t, errs[0])
	require.ErrorIs(t, errs[1], outbox.ErrNotDead)
	require.Len(t, auditRows(t, name), 1)
	require.Equal(t, row{State: "pending", Error: "boom"}, rowOf(t, name, "m"))
}

// TestBulkActionsMatchList: RequeueDead and DiscardDead act on exactly the dead messages that List
// shows for the same filter, up to its Limit, in its order, one audit row each; repeated until
// none is left, they act on all of them.
func TestBulkActionsMatchList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	rng := rand.New(rand.NewPCG(7, 40))
	ms := seedOutbox(t, ctx, o, name, rng, 80)
	for i := range 12 {
		f := randomFilter(rng)
		f.State = outbox.StateDead
		want := reference(ms, f)
		limit := f.Limit
		if limit == 0 {
			limit = outbox.ListLimitDefault
		}
		want = want[:min(limit, len(want))]
		act, verb := o.RequeueDead, outbox.AuditRequeue
		if i%2 == 1 {
			act, verb = o.DiscardDead, outbox.AuditDiscard
		}
		before := len(auditRows(t, name))
		n, err := act(ctx, f, outbox.Action{By: "ops", Reason: "bulk"})
		require.NoError(t, err)
		require.Equal(t, int64(len(want)), n, "filter %+v", f)
		var got []string
		for _, r := range auditRows(t, name)[before:] {
			require.Equal(t, verb, r.Action)
			got = append(got, r.Target)
		}
		slices.Sort(got)
		slices.Sort(want)
		require.Equal(t, want, got, "filter %+v", f)
		// The reference follows: requeued messages are pending, discarded ones gone.
		for _, id := range want {
			j := slices.IndexFunc(ms, func(m seeded) bool { return m.id == id })
			if verb == outbox.AuditDiscard {
				ms = slices.Delete(ms, j, j+1)
			} else {
				ms[j].state = outbox.StatePending
			}
		}
	}
	for {
		n, err := o.DiscardDead(ctx, outbox.ListFilter{Limit: 3}, outbox.Action{By: "ops", Reason: "drain"})
		require.NoError(t, err)
		if n == 0 {
			break
		}
	}
	st, err := o.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, st.Dead)
}

// TestConcurrentBulkActionsSplitTheWork: two operators requeue the same dead messages at once, a
// small batch at a time, until neither finds any: every message is requeued once, with one audit
// row, whoever took it.
func TestConcurrentBulkActionsSplitTheWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o, name := setup(t, nil)
	var ids []string
	var msgs []outbox.Message
	for i := range 200 {
		id := "m" + strconv.Itoa(i)
		ids = append(ids, id)
		msgs = append(msgs, outbox.Message{ID: id, Topic: "t"})
	}
	put(t, ctx, o, msgs...)
	kill(t, name, "boom", ids...)

	totals := make([]int64, 2)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, by := range []string{"alice", "bob"} {
		wg.Go(func() {
			for {
				n, err := o.RequeueDead(ctx, outbox.ListFilter{Limit: 7}, outbox.Action{By: by, Reason: "fixed"})
				if err != nil || n == 0 {
					errs[i] = err
					return
				}
				totals[i] += n
			}
		})
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.Equal(t, int64(200), totals[0]+totals[1])
	st, err := o.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.Stats{Pending: 200}, outbox.Stats{Pending: st.Pending, Dead: st.Dead})
	var targets []string
	for _, r := range auditRows(t, name) {
		targets = append(targets, r.Target)
	}
	slices.Sort(targets)
	slices.Sort(ids)
	require.Equal(t, ids, targets, "each requeued message has exactly one audit row")
}
