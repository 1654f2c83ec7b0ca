package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/keys"
)

// schema holds everything the benchmarks write; it is dropped before and after a run.
const schema = "tempotent_bench"

// db is one way of talking to Postgres: a pool whose sessions commit synchronously or not,
// its round-trip counter, and a receipt store on it.
type db struct {
	pool    *pgxpool.Pool
	counter *pgtest.Counter
	tracer  *tracer // counter's, which also counts the attempts per receipt statement
	store   *activity.Store
	// async is a second pool whose sessions commit asynchronously, for the receipt written by
	// hand (receiptByHand): its reservation commits as tempotent's does for a deduplicating
	// downstream.
	async *pgxpool.Pool
}

func openDB(ctx context.Context, url string, synchronousCommit bool) *db {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		fatalf("database URL: %v", err)
	}
	cfg.MaxConns = 80
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = map[bool]string{true: "on", false: "off"}[synchronousCommit]
	tr := newTracer()
	cfg.ConnConfig.Tracer = tr
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fatalf("connect: %v", err)
	}
	if err := pool.Ping(ctx); err != nil {
		fatalf("Postgres at %s does not answer: %v (set TEST_DATABASE_URL)", url, err)
	}
	store, err := activity.NewStore(pool, &activity.Config{Schema: schema})
	if err != nil {
		fatalf("store: %v", err)
	}
	asyncCfg := cfg.Copy()
	asyncCfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
	async, err := pgxpool.NewWithConfig(ctx, asyncCfg)
	if err != nil {
		fatalf("connect: %v", err)
	}
	return &db{pool: pool, counter: &tr.Counter, tracer: tr, store: store, async: async}
}

// prepare creates the benchmark schema afresh: the receipts table, a table for bare INSERTs, and
// the stock and shipments tables of the DoInNewTx business transaction. (Not "outbox": the
// migrations create the outbox package's table of that name in the same schema.)
func prepare(ctx context.Context, d *db) {
	if _, err := d.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE"); err != nil {
		fatalf("drop schema: %v", err)
	}
	if err := d.store.Migrate(ctx); err != nil {
		fatalf("migrate: %v", err)
	}
	_, err := d.pool.Exec(ctx, `
		CREATE TABLE `+schema+`.bare (id text PRIMARY KEY, body bytea);
		CREATE TABLE `+schema+`.stock (sku text PRIMARY KEY, units bigint NOT NULL);
		CREATE TABLE `+schema+`.shipments (id bigserial PRIMARY KEY, kind text NOT NULL);
		INSERT INTO `+schema+`.stock SELECT 'sku-' || i, 1000000000 FROM generate_series(1, 64) i;`)
	if err != nil {
		fatalf("create tables: %v", err)
	}
}

var seq atomic.Int64

// next returns a name no other operation of this run has used.
func next(prefix string) string { return fmt.Sprint(prefix, seq.Add(1)) }

// downstream is the external call every step makes: an HTTP POST to a payments-like server in
// this process, which counts the requests it got per idempotency key.
type downstream struct {
	server *httptest.Server
	client *http.Client
	mu     sync.Mutex
	byKey  map[string]int
}

type charge struct {
	ID     string `json:"id"`
	Status string `json:"status"`
}

func startDownstream() *downstream {
	d := &downstream{byKey: map[string]int{}}
	d.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("Idempotency-Key")
		d.mu.Lock()
		d.byKey[key]++
		d.mu.Unlock()
		if delay, err := time.ParseDuration(r.URL.Query().Get("delay")); err == nil {
			time.Sleep(delay)
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(charge{ID: "ch_" + key, Status: "succeeded"})
	}))
	d.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	return d
}

// charge posts one charge under key; delay makes the server take that long to answer.
func (d *downstream) charge(ctx context.Context, key string, delay time.Duration) (charge, error) {
	url := d.server.URL + "/v1/charges"
	if delay > 0 {
		url += "?delay=" + delay.String()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader([]byte(`{"amount":4200,"currency":"eur"}`)))
	if err != nil {
		return charge{}, err
	}
	req.Header.Set("Idempotency-Key", key)
	res, err := d.client.Do(req)
	if err != nil {
		return charge{}, err
	}
	defer res.Body.Close()
	var c charge
	return c, json.NewDecoder(res.Body).Decode(&c)
}

func (d *downstream) requests(key string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.byKey[key]
}

// fingerprint is the request every benchmark call makes.
var fingerprint = func() keys.Fingerprint {
	fp, err := keys.FingerprintOf(map[string]any{"amount": 4200, "currency": "eur"})
	if err != nil {
		panic(err)
	}
	return fp
}()

func call(id string) activity.Call {
	return activity.Call{
		Key:                    keys.Key{Namespace: "bench", Operation: "Charge", ID: id},
		Fingerprint:            fingerprint,
		DownstreamDeduplicates: true,
	}
}

// step is the external call made through tempotent: a receipt around the downstream call,
// which carries the receipt's token as its idempotency key.
func step(s *activity.Store, d *downstream, c activity.Call) op {
	return func(ctx context.Context) error {
		_, err := activity.Do(ctx, s, c, func(ctx context.Context) (charge, error) {
			token, _ := keys.TokenFrom(ctx)
			return d.charge(ctx, string(token), 0)
		})
		return err
	}
}

// firstStep is step on a new key each time.
func firstStep(s *activity.Store, d *downstream) op {
	return func(ctx context.Context) error { return step(s, d, call(next("first-")))(ctx) }
}

// firstStepNoDedup is firstStep for a downstream that does not deduplicate on the token, whose
// reservation must be durable before the call.
func firstStepNoDedup(s *activity.Store, d *downstream) op {
	return func(ctx context.Context) error {
		c := call(next("nodedup-"))
		c.DownstreamDeduplicates = false
		return step(s, d, c)(ctx)
	}
}

// bareCall is the downstream call alone, under a key of its own.
func bareCall(d *downstream) op {
	return func(ctx context.Context) error {
		_, err := d.charge(ctx, next("bare-"), 0)
		return err
	}
}

// receipt is a first execution whose downstream call costs nothing: the receipt alone.
func receipt(s *activity.Store) op {
	return func(ctx context.Context) error {
		_, err := activity.Do(ctx, s, call(next("receipt-")), func(context.Context) (int, error) { return 1, nil })
		return err
	}
}

// receiptByHand is the receipt's own SQL written by hand, one attempt at a time: the pending
// row inserted on a session that commits asynchronously (as a reservation for a deduplicating
// downstream is), then its outcome written on pool. Two round trips and one flush, as a receipt
// through tempotent, but no statement shared with another attempt and nothing around them: what
// the table's two writes cost without group commit.
func receiptByHand(async, pool *pgxpool.Pool) op { return stepByHand(async, pool, nil) }

// receiptsBatchedByHand is n attempts' receipts written by hand in the largest batches they can
// make: one statement reserves all n (on a session that commits asynchronously), one completes
// all n (durably). It is group commit at its best for n attempts in flight, with nothing around
// the two statements (no queue, no goroutine hand-offs, no lookup before the insert, no
// skipping of locked rows): what this table's writes cost when batched, whoever batches them.
// One op is n receipts.
func receiptsBatchedByHand(async, pool *pgxpool.Pool, n int) op {
	reserve := `INSERT INTO ` + schema + `.receipts (namespace, tenant, operation, id, token, fingerprint,
	fingerprint_version, state, reservation, lease_expires_at, expires_at)
SELECT 'bench', '', 'Charge', id, token, $3, 1, 'pending', reservation, now() + interval '1 minute', now() + interval '7 days'
FROM unnest($1::text[], $2::text[], $4::uuid[]) AS b(id, token, reservation)
ORDER BY id
ON CONFLICT DO NOTHING`
	// Each row found by its key, as tempotent's batches find theirs: a join of the ids against
	// the table may be planned as a scan of the whole table while it has not been analyzed.
	complete := `UPDATE ` + schema + `.receipts AS r SET state = 'completed', result = $3, lease_expires_at = NULL,
	completed_at = now(), updated_at = now(), expires_at = greatest(r.expires_at, now() + interval '7 days')
FROM unnest($1::text[], $2::uuid[]) AS b(id, reservation) CROSS JOIN LATERAL (
	SELECT ctid AS tid FROM ` + schema + `.receipts
	WHERE (namespace, tenant, operation, id) = ('bench', '', 'Charge', b.id) AND reservation = b.reservation
		AND state = 'pending'
	OFFSET 0) AS t
WHERE r.ctid = t.tid`
	result := []byte(`{"id":"ch_1"}`)
	return func(ctx context.Context) error {
		ids, tokens, reservations := make([]string, n), make([]string, n), make([]pgtype.UUID, n)
		for i := range n {
			reservation, token := randomReservation()
			ids[i], tokens[i], reservations[i] = next("batched-"), token, pgtype.UUID{Bytes: reservation, Valid: true}
		}
		if _, err := async.Exec(ctx, reserve, ids, tokens, fingerprint.Sum[:], reservations); err != nil {
			return err
		}
		tag, err := pool.Exec(ctx, complete, ids, reservations, result)
		if err == nil && tag.RowsAffected() != int64(n) {
			err = fmt.Errorf("batched by hand: %d of %d receipts completed", tag.RowsAffected(), n)
		}
		return err
	}
}

// stepByHand is receiptByHand around a downstream call (when d is not nil) that carries the
// receipt's token: the least a step costs with this table.
func stepByHand(async, pool *pgxpool.Pool, d *downstream) op {
	reserve := `INSERT INTO ` + schema + `.receipts (namespace, tenant, operation, id, token, fingerprint,
	fingerprint_version, state, reservation, lease_expires_at, expires_at)
VALUES ('bench', '', 'Charge', $1, $2, $3, 1, 'pending', $4, now() + interval '1 minute', now() + interval '7 days')
ON CONFLICT DO NOTHING`
	complete := `UPDATE ` + schema + `.receipts SET state = 'completed', result = $3, lease_expires_at = NULL,
	completed_at = now(), updated_at = now(), expires_at = greatest(expires_at, now() + interval '7 days')
WHERE (namespace, tenant, operation, id) = ('bench', '', 'Charge', $1) AND reservation = $2 AND state = 'pending'`
	result := []byte(`{"id":"ch_1"}`)
	return func(ctx context.Context) error {
		id := next("by-hand-")
		reservation, token := randomReservation()
		if _, err := async.Exec(ctx, reserve, id, token, fingerprint.Sum[:], reservation); err != nil {
			return err
		}
		if d != nil {
			if _, err := d.charge(ctx, token, 0); err != nil {
				return err
			}
		}
		_, err := pool.Exec(ctx, complete, id, reservation, result)
		return err
	}
}

// randomReservation returns a reservation identity and a token as long as a real one.
func randomReservation() ([16]byte, string) {
	var random [48]byte
	_, _ = rand.Read(random[:])
	return [16]byte(random[:16]), base64.RawURLEncoding.EncodeToString(random[16:])
}

// txByHand is DoInNewTx's work written by hand: the business transaction with the receipt's
// read at its start and the receipt's INSERT at its end, sent with BEGIN and with COMMIT so that
// it takes the bare transaction's round trips, as DoInNewTx does.
func txByHand(p *pgxpool.Pool) op {
	read := `SELECT state, result FROM ` + schema + `.receipts WHERE (namespace, tenant, operation, id) = ('bench', '', 'Charge', $1)`
	insert := `INSERT INTO ` + schema + `.receipts (namespace, tenant, operation, id, token, fingerprint,
	fingerprint_version, state, result, completed_at, expires_at)
VALUES ('bench', '', 'Charge', $1, $2, $3, 1, 'completed', $4, now(), now() + interval '7 days')`
	return func(ctx context.Context) error {
		conn, err := p.Acquire(ctx)
		if err != nil {
			return err
		}
		defer conn.Release()
		id := next("tx-by-hand-")
		_, token := randomReservation()
		begin := &pgx.Batch{}
		begin.BeginTx(pgx.TxOptions{})
		begin.Queue(read, id)
		results := conn.Conn().SendBatch(ctx, begin)
		tx := results.Tx()
		_, err = results.Exec()
		if err == nil {
			if err = results.QueryRow().Scan(new(string), new([]byte)); errors.Is(err, pgx.ErrNoRows) {
				err = nil
			} else if err == nil {
				err = fmt.Errorf("receipt %s exists", id)
			}
		}
		if err = errors.Join(err, results.Close()); err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		left, err := business(ctx, tx)
		if err != nil {
			_ = tx.Rollback(ctx)
			return err
		}
		end := &pgx.Batch{}
		end.Queue(insert, id, token, fingerprint.Sum[:], []byte(strconv.FormatInt(left, 10)))
		end.Queue("COMMIT")
		err = conn.Conn().SendBatch(ctx, end).Close()
		if conn.Conn().PgConn().TxStatus() != 'I' { // the INSERT failed and the COMMIT was skipped
			_, _ = conn.Conn().Exec(ctx, "ROLLBACK")
		}
		return err
	}
}

// floor is the least a recorded external call can cost: a round trip to check for an earlier
// outcome, the call, a durable INSERT of the outcome.
func floor(p *pgxpool.Pool, d *downstream) op {
	return func(ctx context.Context) error {
		if err := selectOne(p)(ctx); err != nil {
			return err
		}
		if _, err := d.charge(ctx, next("floor-"), 0); err != nil {
			return err
		}
		return insert(p)(ctx)
	}
}

func selectOne(p *pgxpool.Pool) op {
	return func(ctx context.Context) error {
		var one int
		return p.QueryRow(ctx, "SELECT 1").Scan(&one)
	}
}

// completed records a new receipt through a step and returns its ID, for the replays and reads.
func completed(s *activity.Store, d *downstream) string {
	id := next("replayed-")
	if err := step(s, d, call(id))(context.Background()); err != nil {
		fatalf("replay set-up: %v", err)
	}
	return id
}

// keyedProbe is the least any read of a receipt by its key costs: the key's index probed, the
// row visited, and nothing returned but a constant. No replay can cost less.
func keyedProbe(p *pgxpool.Pool, id string) op {
	return func(ctx context.Context) error {
		var one int
		return p.QueryRow(ctx, `SELECT 1 FROM `+schema+`.receipts
	WHERE (namespace, tenant, operation, id) = ('bench', '', 'Charge', $1)`, id).Scan(&one)
	}
}

// readByHand is a replay's read written by hand: by its key, the columns a replay needs (the
// fingerprint to check, the state, the stored outcome), and nothing around it.
func readByHand(p *pgxpool.Pool, id string) op { return readByHandAs(p, id, false) }

// readByHandWithCompensation is readByHand with what else a replay must know of the receipt:
// whether a compensation of its step completed (a replay of a compensated step is refused, see
// activity's CompensatedError), one more probe, of the compensations' partial index, in the
// same statement, as the replay's lookup makes it.
func readByHandWithCompensation(p *pgxpool.Pool, id string) op { return readByHandAs(p, id, true) }

// readByHandAs is readByHand, with the compensation probe when compensation is set.
func readByHandAs(p *pgxpool.Pool, id string, compensation bool) op {
	probe, column := "", "NULL::text"
	if compensation {
		probe = ` LEFT JOIN LATERAL (SELECT token FROM ` + schema + `.receipts
		WHERE compensates = r.token AND state = 'completed' LIMIT 1) AS c ON true`
		column = "c.token"
	}
	read := `SELECT r.fingerprint, r.fingerprint_version, r.state, r.result, r.failure, r.error_type,
	r.error_message, ` + column + `
	FROM ` + schema + `.receipts AS r` + probe + `
	WHERE (r.namespace, r.tenant, r.operation, r.id) = ('bench', '', 'Charge', $1)`
	return func(ctx context.Context) error {
		var (
			fp, result, failure []byte
			version             int16
			state               string
			errType, errMessage *string
			compensatedBy       *string
		)
		return p.QueryRow(ctx, read, id).Scan(&fp, &version, &state, &result, &failure, &errType, &errMessage, &compensatedBy)
	}
}

// insert is the bare durable INSERT: one row, committed on its own.
func insert(p *pgxpool.Pool) op {
	return func(ctx context.Context) error {
		_, err := p.Exec(ctx, "INSERT INTO "+schema+".bare VALUES ($1, $2)", next("row-"), []byte(`{"id":"ch_1"}`))
		return err
	}
}

// business is DoInNewTx's benchmark transaction: take a unit of stock, queue a shipment.
func business(ctx context.Context, tx pgx.Tx) (int64, error) {
	var left int64
	sku := fmt.Sprint("sku-", 1+seq.Add(1)%64)
	if err := tx.QueryRow(ctx, "UPDATE "+schema+".stock SET units = units - 1 WHERE sku = $1 RETURNING units", sku).Scan(&left); err != nil {
		return 0, err
	}
	_, err := tx.Exec(ctx, "INSERT INTO "+schema+".shipments (kind) VALUES ('ship')")
	return left, err
}

func bareTx(p *pgxpool.Pool) op {
	return func(ctx context.Context) error {
		return pgx.BeginFunc(ctx, p, func(tx pgx.Tx) error {
			_, err := business(ctx, tx)
			return err
		})
	}
}

func doTx(s *activity.Store) op {
	return func(ctx context.Context) error {
		_, err := activity.DoInNewTx(ctx, s, call(next("tx-")), business)
		return err
	}
}

// replay is Do on a key whose receipt is completed, as attempt number attempt: a retry
// (attempt 2, where replays happen: the worker crashed after the call, or the activity's report
// was lost) reads with the plain lookup; a first attempt (a workflow reset runs its activities
// again from attempt 1) goes through the statement that reserves.
func replay(s *activity.Store, d *downstream, attempt int32) op {
	c := call(completed(s, d))
	c.Attempt = attempt
	return func(ctx context.Context) error {
		_, err := activity.Do(ctx, s, c, func(context.Context) (charge, error) {
			return charge{}, fmt.Errorf("a replay called the downstream")
		})
		return err
	}
}
