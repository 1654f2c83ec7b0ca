package outbox

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
)

// TestExploreDispatchers explores the dispatchers on the real Postgres, by model: seeded
// histories in which several dispatchers share one outbox of ordered and unordered messages,
// under leases short enough to end mid-batch, through publishers that answer at once, answer
// slowly, fail, fail permanently, panic or hang until their timeout; while each dispatcher, round
// after round, dispatches a batch (DispatchOnce), drains batch after batch with each batch's marks
// sent with the next claim (Drain), is shut down mid-batch or mid-drain (its context cancelled),
// runs Run for a while and is stopped, crashes between publishing and marking (it claims and
// publishes through the internals and never marks), or freezes there past its lease and then marks (a process
// paused and resumed); and meanwhile its connections are terminated (pg_terminate_backend), dead
// messages are requeued or discarded, and more messages are put. Then one dispatcher drains the
// outbox, discarding, as an operator would, the dead messages that hold a key.
//
// Every publish is observed when it starts and when it ends, on the database's clock, and these
// invariants are checked:
//
//   - a publish starts only under its own claim (the row pending, claimed by its dispatcher at
//     its attempt) and before that claim's lease has ended;
//   - while a claim's lease is live, nothing else changes its row: the publish ends under it;
//   - no message, and no ordering key, has two publishes in flight at once;
//   - a message of an ordering key is published only once every message before it on its key is
//     delivered;
//   - once drained, every message is delivered or dead; a delivered one was acknowledged by a
//     publish of the very claim that marked it (dispatcher and attempt); a dead one says why;
//   - an attempt is counted only for a publish that started: a message's attempts since its last
//     requeue are at most its publishes (less those a shutdown cut short, which are handed back),
//     plus the claims a crash left untried, and those still held by a dispatcher when one of
//     its dispatches failed (a terminated connection, a claim cancelled in flight: the claim's
//     reply or the hand-back may be lost).
//
// The choices of a history (configuration, messages, publisher answers per message and attempt,
// each dispatcher's rounds, the faults) follow from its seed; real timing varies from run to run.
// It runs TEMPOTENT_EXPLORE_OUTBOX_N histories (default 4, about twenty seconds under -race) from
// TEMPOTENT_EXPLORE_SEED (default 1); a failing history prints its seed and trace, and
// TEMPOTENT_EXPLORE_SEED=<seed> TEMPOTENT_EXPLORE_OUTBOX_N=1 replays its choices
// (TEMPOTENT_EXPLORE_OUTBOX_TRACE=1 and -v print every history's trace, passing or not).
//
// Removing the claimed_by/attempts fence of the delivered mark makes it fail (a frozen
// dispatcher's late mark records a delivery over the claim that followed).
func TestExploreDispatchers(t *testing.T) {
	t.Parallel()
	n := exploreEnv("TEMPOTENT_EXPLORE_OUTBOX_N", 4)
	seed := uint64(exploreEnv("TEMPOTENT_EXPLORE_SEED", 1))
	ctx := context.Background()
	name := pgtest.Schema(t)
	if err := migrate.Up(ctx, pgtest.Pool(t), name); err != nil {
		t.Fatal(err)
	}
	var pools []*pgxpool.Pool
	var apps []string
	for i := range exploreDispatchers {
		cfg, err := pgxpool.ParseConfig(pgtest.URL())
		if err != nil {
			t.Fatal(err)
		}
		app := fmt.Sprintf("tempotent-explore-%s-d%d", name, i)
		cfg.MaxConns = 2
		cfg.ConnConfig.RuntimeParams["application_name"] = app
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		pools, apps = append(pools, pool), append(apps, app)
	}
	var failed int
	for i := range uint64(n) {
		s := seed + i
		x := &dispatchExplorer{seed: s, schema: name, pools: pools, apps: apps, obs: pgtest.Pool(t)}
		err := x.history(ctx)
		if os.Getenv("TEMPOTENT_EXPLORE_OUTBOX_TRACE") != "" {
			t.Logf("explore: history with seed %d:\n%s", s, x.traced())
		}
		if err != nil {
			failed++
			t.Errorf("explore: history with seed %d failed: %v\n%s\nreplay it: TEMPOTENT_EXPLORE_SEED=%d TEMPOTENT_EXPLORE_OUTBOX_N=1 go test -race -v -run TestExploreDispatchers ./outbox/",
				s, err, x.traced(), s)
			if failed >= 3 {
				break
			}
		}
	}
	if failed == 0 {
		t.Logf("explore: %d histories from seed %d, every invariant held", n, seed)
	}
}

func exploreEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

const exploreDispatchers = 3

// answer is what the publisher does with one attempt of one message.
type answer int

const (
	answerOK answer = iota
	answerSlow
	answerFail
	answerPermanent
	answerPanic
	answerHang
)

var answerNames = [...]string{"ok", "slow", "fail", "permanent", "panic", "hang"}

// ack is a publish that succeeded: of message id, in its gen-th life (one more per requeue),
// at attempt, by dispatcher.
type ack struct {
	id           string
	gen, attempt int
	dispatcher   string
}

type dispatchExplorer struct {
	seed   uint64
	schema string
	pools  []*pgxpool.Pool // one per dispatcher, whose backends chaos terminates
	apps   []string        // their application names
	obs    *pgxpool.Pool   // the explorer's own: observations, puts, requeues and discards

	o     *Outbox // on the explorer's pool: puts, Stats, Requeue, Discard
	cfg   DispatcherConfig
	slow  bool // the receiver takes a third of PublishTimeout to acknowledge
	start time.Time
	until time.Time // the end of the rounds and the faults; the drain follows

	mu          sync.Mutex
	trace       []string
	violations  []string
	gen         map[string]int          // requeues so far
	starts      map[string]int          // publishes started in the current gen
	unreleased  map[string]map[int]bool // attempts of claims left held, in the current gen
	interrupted map[string]int          // publishes a shutdown cut short, in the current gen
	acks        map[ack]bool            // successful publishes
	started     map[ack]bool            // publishes started
	cut         map[ack]bool            // publishes a shutdown cut short
	inFlight    map[string]string       // "id:"+id and "key:"+key → the dispatcher publishing
	discarded   map[string]bool
	keyOf       map[string]string
	ids         []string
}

func (x *dispatchExplorer) logf(format string, args ...any) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.trace = append(x.trace, fmt.Sprintf("%6dms ", time.Since(x.start).Milliseconds())+fmt.Sprintf(format, args...))
}

func (x *dispatchExplorer) violated(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	x.logf("VIOLATION %s", msg)
	x.mu.Lock()
	x.violations = append(x.violations, msg)
	x.mu.Unlock()
}

func (x *dispatchExplorer) traced() string {
	x.mu.Lock()
	defer x.mu.Unlock()
	tr := x.trace
	if len(tr) > 300 {
		tr = append([]string{fmt.Sprintf("… %d lines before", len(tr)-300)}, tr[len(tr)-300:]...)
	}
	return strings.Join(tr, "\n")
}

// answerFor is the publisher's answer to attempt of id in its gen-th life: a function of the
// seed alone, so that a replay gives every attempt the same answer.
func (x *dispatchExplorer) answerFor(id string, gen, attempt int) answer {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%s/%d/%d", x.seed, id, gen, attempt)
	switch v := h.Sum64() % 100; {
	case v < 45:
		return answerOK
	case v < 60:
		return answerSlow
	case v < 78:
		return answerFail
	case v < 82:
		return answerPermanent
	case v < 86:
		return answerPanic
	default:
		return answerHang
	}
}

func (x *dispatchExplorer) history(ctx context.Context) error {
	x.start = time.Now()
	x.gen, x.starts, x.unreleased, x.interrupted = map[string]int{}, map[string]int{}, map[string]map[int]bool{}, map[string]int{}
	x.acks, x.started, x.cut = map[ack]bool{}, map[ack]bool{}, map[ack]bool{}
	x.inFlight, x.discarded, x.keyOf = map[string]string{}, map[string]bool{}, map[string]string{}
	rng := rand.New(rand.NewPCG(x.seed, 0))
	var err error
	if x.o, err = New(x.obs, &Config{Schema: x.schema}); err != nil {
		return err
	}
	if _, err := x.obs.Exec(ctx, "TRUNCATE "+x.o.table+" RESTART IDENTITY"); err != nil {
		return err
	}
	lease := []time.Duration{800 * time.Millisecond, time.Second}[rng.IntN(2)]
	publishTimeout := lease / time.Duration(3+rng.IntN(2))
	x.cfg = DispatcherConfig{
		Batch:          2 + rng.IntN(9),
		Concurrency:    1 + rng.IntN(3),
		Lease:          lease,
		PublishTimeout: publishTimeout,
		ShutdownGrace:  []time.Duration{20 * time.Millisecond, publishTimeout}[rng.IntN(2)],
		MaxAttempts:    3 + rng.IntN(3),
		BackoffMin:     time.Millisecond,
		BackoffMax:     20 * time.Millisecond,
		Poll:           20 * time.Millisecond,
		Maintenance:    -1,
	}
	x.slow = rng.IntN(2) == 0
	x.logf("seed %d: %+v, slow receiver %v", x.seed, x.cfg, x.slow)
	if err := x.put(ctx, rng, 8+rng.IntN(8)); err != nil {
		return err
	}

	x.until = time.Now().Add(time.Duration(2+rng.IntN(3)) * lease)
	var wg sync.WaitGroup
	for i := range exploreDispatchers {
		d, err := x.dispatcher(i)
		if err != nil {
			return err
		}
		drng := rand.New(rand.NewPCG(x.seed, uint64(i)+1))
		wg.Go(func() { x.rounds(ctx, d, drng) })
	}
	wg.Go(func() { x.chaos(ctx, rand.New(rand.NewPCG(x.seed, 100))) })
	wg.Wait()
	if err := x.drain(ctx); err != nil {
		return err
	}
	return x.check(ctx)
}

// put puts n messages, about half of them on three ordering keys, in one transaction.
func (x *dispatchExplorer) put(ctx context.Context, rng *rand.Rand, n int) error {
	var msgs []Message
	x.mu.Lock()
	for range n {
		m := Message{ID: fmt.Sprint("m", len(x.ids)), Topic: "t"}
		if rng.IntN(2) == 0 {
			m.OrderingKey = string(rune('a' + rng.IntN(3)))
			m.ID += m.OrderingKey
		}
		x.ids = append(x.ids, m.ID)
		x.keyOf[m.ID] = m.OrderingKey
		msgs = append(msgs, m)
	}
	x.mu.Unlock()
	x.logf("put %d messages", n)
	return pgx.BeginFunc(ctx, x.obs, func(tx pgx.Tx) error {
		for _, m := range msgs {
			if err := x.o.Put(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	})
}

// dispatcher returns dispatcher i, on its own pool, through the observing publisher.
func (x *dispatchExplorer) dispatcher(i int) (*Dispatcher, error) {
	o, err := New(x.pools[i], &Config{Schema: x.schema})
	if err != nil {
		return nil, err
	}
	cfg := x.cfg
	cfg.Name = fmt.Sprint("d", i)
	cfg.Logger = slog.New(failures{func() { x.abandoned(cfg.Name) }})
	return NewDispatcher(o, x.publisher(cfg.Name), &cfg)
}

// failures calls failed when Run logs a failed dispatch (in Run's loop, before its next
// claim), and logs nothing.
type failures struct{ failed func() }

func (f failures) Enabled(context.Context, slog.Level) bool { return true }
func (f failures) Handle(_ context.Context, r slog.Record) error {
	if strings.HasPrefix(r.Message, "dispatch failed") {
		f.failed()
	}
	return nil
}
func (f failures) WithAttrs([]slog.Attr) slog.Handler { return f }
func (f failures) WithGroup(string) slog.Handler      { return f }

// publisher observes each publish of dispatcher name and answers as answerFor says.
func (x *dispatchExplorer) publisher(name string) Publisher {
	return PublisherFunc(func(ctx context.Context, dl Delivery) (err error) {
		gen, leaseUntil := x.begin(name, dl)
		defer func() { x.end(name, dl, gen, leaseUntil, err) }()
		switch a := x.answerFor(dl.ID, gen, dl.Attempt); a {
		case answerOK:
			if !x.slow {
				return nil
			}
			select {
			case <-time.After(x.cfg.PublishTimeout / 3):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		case answerSlow:
			select {
			case <-time.After(x.cfg.PublishTimeout * 9 / 10):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		case answerFail:
			return fmt.Errorf("receiver failed attempt %d", dl.Attempt)
		case answerPermanent:
			return Permanent(errors.New("receiver refuses the message"))
		case answerPanic:
			panic("publisher bug")
		default: // hang until cancelled
			<-ctx.Done()
			return ctx.Err()
		}
	})
}

// begin records a publish's start and checks it against the row, on the database's clock, and
// returns the message's gen and the claim's lease_until.
func (x *dispatchExplorer) begin(name string, dl Delivery) (gen int, leaseUntil time.Time) {
	x.mu.Lock()
	gen = x.gen[dl.ID]
	x.starts[dl.ID]++
	x.started[ack{id: dl.ID, gen: gen, attempt: dl.Attempt, dispatcher: name}] = true
	var overlaps []string
	for _, k := range x.flightKeys(dl) {
		if other, busy := x.inFlight[k]; busy {
			overlaps = append(overlaps, fmt.Sprintf("%s: %s starts publishing attempt %d while %s publishes %s", dl.ID, name, dl.Attempt, other, k))
		}
		x.inFlight[k] = name
	}
	x.mu.Unlock()
	for _, o := range overlaps {
		x.violated("%s", o)
	}
	var (
		state, claimedBy string
		attempts         int
		leftUS           int64
		before           int
	)
	err := x.obs.QueryRow(context.Background(), `SELECT state, coalesce(claimed_by, ''), attempts, coalesce(lease_until, '-infinity'),
			coalesce((extract(epoch FROM lease_until - clock_timestamp()) * 1e6)::bigint, 0),
			(SELECT count(*) FROM `+x.o.table+` e WHERE e.ordering_key = o.ordering_key AND e.seq < o.seq AND e.state <> 'delivered')
		FROM `+x.o.table+` o WHERE id = $1`, dl.ID).Scan(&state, &claimedBy, &attempts, &leaseUntil, &leftUS, &before)
	x.logf("%s publishes %s attempt %d (%s): %s, claimed by %q at %d, lease left %dms, %d undelivered before it",
		name, dl.ID, dl.Attempt, answerNames[x.answerFor(dl.ID, gen, dl.Attempt)], state, claimedBy, attempts, leftUS/1000, before)
	switch {
	case err != nil:
		x.violated("%s: observe the start of a publish: %v", dl.ID, err)
	case state != "pending" || !claimedByName(claimedBy, name) || attempts != dl.Attempt:
		x.violated("%s: %s publishes attempt %d without its claim: the row is %s, claimed by %q at %d", dl.ID, name, dl.Attempt, state, claimedBy, attempts)
	case leftUS <= 0:
		x.violated("%s: %s starts publishing attempt %d %dms after its claim's lease ended", dl.ID, name, dl.Attempt, -leftUS/1000)
	case before > 0:
		x.violated("%s: published while %d messages before it on key %s are undelivered", dl.ID, before, dl.OrderingKey)
	}
	return gen, leaseUntil
}

// end records a publish's end and checks that nothing took its row while its claim's lease
// (leaseUntil, as begin saw it) was live.
func (x *dispatchExplorer) end(name string, dl Delivery, gen int, leaseUntil time.Time, err error) {
	var (
		state, claimedBy string
		attempts         int
		live             bool
	)
	qerr := x.obs.QueryRow(context.Background(), `SELECT state, coalesce(claimed_by, ''), attempts, clock_timestamp() < $2
		FROM `+x.o.table+` WHERE id = $1`, dl.ID, leaseUntil).Scan(&state, &claimedBy, &attempts, &live)
	if qerr == nil && live && (state != "pending" || !claimedByName(claimedBy, name) || attempts != dl.Attempt) {
		x.violated("%s: while %s's claim at attempt %d was live and publishing, the row became %s, claimed by %q at %d",
			dl.ID, name, dl.Attempt, state, claimedBy, attempts)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, k := range x.flightKeys(dl) {
		delete(x.inFlight, k)
	}
	switch {
	case err == nil:
		x.acks[ack{id: dl.ID, gen: gen, attempt: dl.Attempt, dispatcher: name}] = true
	case errors.Is(err, context.Canceled) && x.gen[dl.ID] == gen:
		// Cancelled, not timed out: the shutdown grace ended it.
		x.interrupted[dl.ID]++
		x.cut[ack{id: dl.ID, gen: gen, attempt: dl.Attempt, dispatcher: name}] = true
	}
	x.trace = append(x.trace, fmt.Sprintf("%6dms %s published %s attempt %d: %v", time.Since(x.start).Milliseconds(), name, dl.ID, dl.Attempt, err))
}

func (x *dispatchExplorer) flightKeys(dl Delivery) []string {
	if dl.OrderingKey == "" {
		return []string{"id:" + dl.ID}
	}
	return []string{"id:" + dl.ID, "key:" + dl.OrderingKey}
}

// rounds runs rounds of dispatcher d, each chosen by rng, until x.until.
func (x *dispatchExplorer) rounds(ctx context.Context, d *Dispatcher, rng *rand.Rand) {
	idle := func(claimed int) {
		if claimed == 0 {
			time.Sleep(d.cfg.Lease / 20)
		}
	}
	// Between two rounds, whatever d still holds is abandoned.
	defer x.abandoned(d.cfg.Name)
	for time.Now().Before(x.until) {
		x.abandoned(d.cfg.Name)
		switch r := rng.IntN(100); {
		case r < 30:
			k, err := d.DispatchOnce(ctx)
			x.logf("%s dispatched %d: %v", d.cfg.Name, k, err)
			x.failed(d.cfg.Name, err)
			idle(k)
		case r < 45:
			k, err := d.Drain(ctx)
			x.logf("%s drained %d: %v", d.cfg.Name, k, err)
			x.failed(d.cfg.Name, err)
			idle(k)
		case r < 60:
			after := time.Duration(rng.Int64N(int64(d.cfg.Lease / 2)))
			sctx, cancel := context.WithTimeout(ctx, after)
			once, how := d.DispatchOnce, "dispatch"
			if r%2 == 0 {
				once, how = d.Drain, "drain"
			}
			k, err := once(sctx)
			cancel()
			x.logf("%s shut down %s into a %s of %d: %v", d.cfg.Name, after, how, k, err)
			x.failed(d.cfg.Name, err) // cancelled in the claim: its reply may be lost
			idle(k)
		case r < 72:
			runFor := d.cfg.Lease/2 + time.Duration(rng.Int64N(int64(d.cfg.Lease/2)))
			rctx, cancel := context.WithTimeout(ctx, runFor)
			err := d.Run(rctx)
			cancel()
			x.logf("%s ran for %s: %v", d.cfg.Name, runFor, err)
			if err != nil {
				x.violated("Run: %v", err)
			}
		case r < 84:
			idle(x.crash(ctx, d, false))
		case r < 96:
			idle(x.crash(ctx, d, true))
		default:
			time.Sleep(time.Duration(rng.Int64N(int64(d.cfg.Lease / 4))))
		}
	}
}

// failed records, after a dispatch of dispatcher name failed with err, the claims it left held.
func (x *dispatchExplorer) failed(name string, err error) {
	if err != nil {
		x.abandoned(name)
	}
}

// abandoned records the claims that dispatcher name holds and will not release (it is between
// rounds, or its last dispatch failed) and never published: they counted an attempt without a
// publish.
func (x *dispatchExplorer) abandoned(name string) {
	rows, err := x.obs.Query(context.Background(), `SELECT id, attempts FROM `+x.o.table+`
		WHERE starts_with(claimed_by, $1 || '#') AND state = 'pending' AND lease_until IS NOT NULL`, name)
	if err != nil {
		x.violated("read %s's claims: %v", name, err)
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for rows.Next() {
		a := ack{dispatcher: name}
		if rows.Scan(&a.id, &a.attempt) != nil {
			continue
		}
		a.gen = x.gen[a.id]
		// A publish cut short by a shutdown is handed back like one never tried: still held,
		// its hand-back was lost.
		if !x.started[a] || x.cut[a] {
			x.unreleasedLocked(a.id, a.attempt)
		}
	}
	rows.Close()
}

func (x *dispatchExplorer) unreleasedLocked(id string, attempt int) {
	if x.unreleased[id] == nil {
		x.unreleased[id] = map[int]bool{}
	}
	x.unreleased[id][attempt] = true
}

// crash claims and publishes one batch of d as DispatchOnce does, and then either never marks
// it (the process died) or, frozen, marks it only after its lease has ended (the process was
// paused and resumed): the marks of a claim that ended must change nothing.
func (x *dispatchExplorer) crash(ctx context.Context, d *Dispatcher, frozen bool) (claimed int) {
	claimedAt := time.Now()
	batch, err := d.claim(ctx, nil)
	if err != nil {
		x.logf("%s crash round: claim: %v", d.cfg.Name, err)
		x.failed(d.cfg.Name, err)
		return 0
	}
	leaseEnd := claimedAt.Add(d.cfg.Lease)
	d.publish(ctx, ctx, leaseEnd, batch)
	x.mu.Lock()
	for _, c := range batch {
		if !c.tried {
			x.unreleasedLocked(c.delivery.ID, c.delivery.Attempt)
		}
	}
	x.mu.Unlock()
	if !frozen || len(batch) == 0 {
		x.logf("%s died after publishing %d, before marking", d.cfg.Name, len(batch))
		return len(batch)
	}
	x.logf("%s froze after publishing %d, before marking", d.cfg.Name, len(batch))
	// It resumes once another dispatcher has claimed one of its messages again, or two leases
	// later: its marks then meet the claim that followed, likely still publishing.
	time.Sleep(time.Until(leaseEnd))
	seqs, attempts, bys := claims(batch)
	for until := time.Now().Add(2 * d.cfg.Lease); time.Now().Before(until); time.Sleep(2 * time.Millisecond) {
		var taken bool
		err := x.obs.QueryRow(ctx, `SELECT EXISTS (SELECT FROM unnest($1::bigint[], $2::int[]) AS r(seq, attempts) JOIN `+x.o.table+` m USING (seq)
			WHERE m.attempts <> r.attempts OR m.claimed_by IS DISTINCT FROM $3)`, seqs, attempts, bys[0]).Scan(&taken)
		if err != nil || taken {
			break
		}
	}
	err = d.mark(ctx, batch)
	x.logf("%s resumed and marked late: %v", d.cfg.Name, err)
	x.failed(d.cfg.Name, err)
	return len(batch)
}

// chaos terminates connections, requeues and discards dead messages, and puts more messages,
// while the dispatchers run.
func (x *dispatchExplorer) chaos(ctx context.Context, rng *rand.Rand) {
	putAt := rng.IntN(4)
	for step := 0; time.Now().Before(x.until); step++ {
		time.Sleep(x.cfg.Lease/10 + time.Duration(rng.Int64N(int64(x.cfg.Lease/4))))
		if step == putAt {
			if err := x.put(ctx, rng, 2+rng.IntN(4)); err != nil {
				x.violated("put: %v", err)
			}
			continue
		}
		switch r := rng.IntN(100); {
		case r < 35:
			i := rng.IntN(len(x.apps))
			var killed int
			err := x.obs.QueryRow(ctx, "SELECT count(pg_terminate_backend(pid, 1000)) FROM pg_stat_activity WHERE application_name = $1", x.apps[i]).Scan(&killed)
			x.logf("terminated %d backends of d%d: %v", killed, i, err)
		case r < 65:
			x.settle(ctx, rng, "requeue")
		case r < 80:
			x.settle(ctx, rng, "discard")
		}
	}
}

// settle requeues or discards one dead message, chosen by rng.
func (x *dispatchExplorer) settle(ctx context.Context, rng *rand.Rand, how string) {
	rows, err := x.obs.Query(ctx, "SELECT id FROM "+x.o.table+" WHERE state = 'dead' ORDER BY seq")
	if err != nil {
		return
	}
	dead, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(dead) == 0 {
		return
	}
	x.settleOne(ctx, dead[rng.IntN(len(dead))], how)
}

func (x *dispatchExplorer) settleOne(ctx context.Context, id, how string) {
	var err error
	x.mu.Lock() // no publish of a dead message can start or end meanwhile; the lock orders the model
	defer x.mu.Unlock()
	if how == "requeue" {
		if err = x.o.Requeue(ctx, id); err == nil {
			x.gen[id]++
			x.starts[id], x.unreleased[id], x.interrupted[id] = 0, nil, 0
		}
	} else if err = x.o.Discard(ctx, id); err == nil {
		x.discarded[id] = true
	}
	x.trace = append(x.trace, fmt.Sprintf("%6dms %s %s: %v", time.Since(x.start).Milliseconds(), how, id, err))
}

// drain dispatches with d0 until nothing is pending, discarding the dead messages that hold
// their key, as an operator would.
func (x *dispatchExplorer) drain(ctx context.Context) error {
	x.logf("drain")
	d, err := x.dispatcher(0)
	if err != nil {
		return err
	}
	until := time.Now().Add(60 * time.Second)
	for {
		n, err := d.DispatchOnce(ctx)
		x.failed(d.cfg.Name, err)
		st, err := x.o.Stats(ctx)
		if err != nil {
			return err
		}
		if st.Pending == 0 {
			return nil
		}
		if time.Now().After(until) {
			return fmt.Errorf("the outbox did not drain: %d messages still pending", st.Pending)
		}
		if n > 0 {
			continue
		}
		rows, err := x.obs.Query(ctx, `SELECT id FROM `+x.o.table+` d WHERE state = 'dead' AND EXISTS (
			SELECT FROM `+x.o.table+` p WHERE p.ordering_key = d.ordering_key AND p.seq > d.seq AND p.state = 'pending') ORDER BY seq`)
		if err != nil {
			return err
		}
		holding, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, id := range holding {
			x.settleOne(ctx, id, "discard")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// check checks the drained outbox against the model.
func (x *dispatchExplorer) check(ctx context.Context) error {
	rows, err := x.obs.Query(ctx, "SELECT id, state, attempts, coalesce(claimed_by, ''), coalesce(last_error, '') FROM "+x.o.table)
	if err != nil {
		return err
	}
	type stored struct {
		state, claimedBy, lastError string
		attempts                    int
	}
	got := map[string]stored{}
	for rows.Next() {
		var id string
		var s stored
		if err := rows.Scan(&id, &s.state, &s.attempts, &s.claimedBy, &s.lastError); err != nil {
			return err
		}
		got[id] = s
	}
	if err := rows.Err(); err != nil {
		return err
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	errs := append([]string(nil), x.violations...)
	for _, id := range x.ids {
		s, ok := got[id]
		switch {
		case x.discarded[id]:
			if ok {
				errs = append(errs, fmt.Sprintf("%s: discarded, still in the outbox", id))
			}
			continue
		case !ok:
			errs = append(errs, fmt.Sprintf("%s: lost: neither delivered, dead nor discarded", id))
			continue
		case s.state == "delivered":
			name, _, _ := strings.Cut(s.claimedBy, "#") // the dispatcher's name, less the claim's identity
			if !x.acks[ack{id: id, gen: x.gen[id], attempt: s.attempts, dispatcher: name}] {
				errs = append(errs, fmt.Sprintf("%s: delivered by %s's claim at attempt %d, which no publish acknowledged", id, s.claimedBy, s.attempts))
			}
		case s.state == "dead":
			if s.lastError == "" {
				errs = append(errs, fmt.Sprintf("%s: dead without a reason", id))
			}
		default:
			errs = append(errs, fmt.Sprintf("%s: %s after the drain", id, s.state))
		}
		if limit := x.starts[id] - x.interrupted[id] + len(x.unreleased[id]); s.attempts > limit {
			errs = append(errs, fmt.Sprintf("%s: %d attempts counted for %d publishes started, of which %d a shutdown cut short, and %d claims left held",
				id, s.attempts, x.starts[id], x.interrupted[id], len(x.unreleased[id])))
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	return nil
}

// claimedByName reports whether claimedBy (a claim's identity) names a claim of the dispatcher
// called name.
func claimedByName(claimedBy, name string) bool { return strings.HasPrefix(claimedBy, name+"#") }
