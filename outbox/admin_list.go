// Finding messages that are stuck: List and Get, for operators (tempotent outbox list, show).

package outbox

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Page sizes of List.
const (
	// ListLimitDefault is List's page size when ListFilter.Limit is 0.
	ListLimitDefault = 100
	// ListLimitMax is the largest page List returns, and the most messages one RequeueDead or
	// DiscardDead changes.
	ListLimitMax = 1000
)

// States a message is in (StoredMessage.State), and the values of ListFilter.State.
const (
	StatePending   = "pending"   // waiting for its delivery, or for a retry after a failed one
	StateDead      = "dead"      // out of attempts or failed for good: waits for RequeueMessage or DiscardMessage
	StateDelivered = "delivered" // delivered, kept for the retention
	// StateAll, as ListFilter.State, lists every message, delivered ones included.
	StateAll = "all"
)

// Errors of List, Get and the operator's actions, matched with errors.Is.
var (
	// ErrInvalidFilter: a ListFilter field out of range; the error names it.
	ErrInvalidFilter = errors.New("outbox: invalid filter")
	// ErrNoMessage: no message with this ID in the outbox (never put, discarded, or pruned).
	ErrNoMessage = errors.New("outbox: no such message")
)

// ListFilter selects the messages List returns, and those RequeueDead and DiscardDead act on.
// The zero ListFilter lists the undelivered messages (pending and dead), oldest first, a page of
// ListLimitDefault.
//
// Reads go through the index of undelivered messages (in seq order), and through the index of an
// ordering key's undelivered messages when Key is given. Topic, ErrorContains and the ages are
// checked on the rows read in seq order: a filter that matches few of many undelivered messages
// reads many to fill a page. StateDelivered and StateAll read the table in seq order (its
// primary key), delivered messages kept for the retention included: on a large outbox, give
// them a narrow filter and a small Limit.
type ListFilter struct {
	// State is StatePending, StateDead, StateDelivered or StateAll; empty means pending and dead.
	State string
	// Topic, when set, keeps the messages of this topic only.
	Topic string
	// Key, when set, keeps the messages of this ordering key only.
	Key string
	// ErrorContains, when set, keeps the messages whose last error contains it, ignoring case.
	ErrorContains string
	// OlderThan and NewerThan, when positive, keep the messages put longer ago than OlderThan,
	// and at most NewerThan ago, by the database's clock.
	OlderThan, NewerThan time.Duration
	// Newest lists the newest messages first; the default is oldest first.
	Newest bool
	// Limit is the page size: 0 means ListLimitDefault; at most ListLimitMax.
	Limit int
	// After is the cursor: the Page.Next of the page before (a seq), 0 for the first page. It
	// keeps its meaning while messages come and go: the next page starts after that message
	// in the order asked, whether or not it is still there.
	After int64
}

// Page is one page of List.
type Page struct {
	Messages []StoredMessage
	// Next is the cursor of the next page (ListFilter.After), 0 when this page is the last.
	Next int64
}

// StoredMessage is a message as the outbox holds it.
type StoredMessage struct {
	// Seq is the message's position in the outbox: insertion order, and List's cursor.
	Seq         int64
	ID          string
	Topic       string
	OrderingKey string // "" for an unordered message
	State       string // StatePending, StateDead or StateDelivered
	// Attempts counts the claims of the message since it was put or last requeued.
	Attempts  int
	CreatedAt time.Time
	// AvailableAt is when a pending message may be claimed next (the backoff after a failure).
	AvailableAt time.Time
	// LastError is the error of its last failed attempt, as the publisher returned it; it may
	// hold what a downstream said, so escape it before printing it to a terminal.
	LastError   string
	DeliveredAt *time.Time
	// BlockedBy is the ID of the first dead message before this one on its ordering key, which
	// holds it back until it is requeued or discarded; "" when none does (and for a delivered
	// message).
	BlockedBy string
	// Headers and Payload are filled by Get only; List leaves them nil. Both are the
	// producer's, as put: escape them before printing them.
	Headers map[string]string
	Payload []byte
}

// List returns a page of the messages f selects; see ListFilter for the indexes it reads. A
// filter out of range fails with ErrInvalidFilter, before anything is read.
func (o *Outbox) List(ctx context.Context, f ListFilter) (Page, error) {
	q, err := selectMessages(o.table, f, "")
	if err != nil {
		return Page{}, err
	}
	limit := listLimit(f.Limit)
	var page Page
	err = o.byIndex(ctx, q.sql+" LIMIT "+strconv.Itoa(limit+1), q.args, func(rows pgx.Rows) error {
		var err error
		page.Messages, err = pgx.CollectRows(rows, scanStored)
		return err
	})
	if err != nil {
		return Page{}, fmt.Errorf("outbox: list: %w", err)
	}
	if len(page.Messages) > limit {
		page.Messages = page.Messages[:limit]
		page.Next = page.Messages[limit-1].Seq
	}
	return page, nil
}

// Get returns the message with id, its headers and payload included, in whatever state it is;
// ErrNoMessage if the outbox holds none.
func (o *Outbox) Get(ctx context.Context, id string) (StoredMessage, error) {
	rows, err := o.db.Query(ctx, `SELECT `+storedColumns(o.table)+`, headers, payload FROM `+o.table+` m WHERE id = $1`, id)
	if err != nil {
		return StoredMessage{}, fmt.Errorf("outbox: get %q: %w", id, err)
	}
	m, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (StoredMessage, error) {
		var m StoredMessage
		err := row.Scan(append(m.fields(), &m.Headers, &m.Payload)...)
		return m, err
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return StoredMessage{}, fmt.Errorf("%w: %q (never put, discarded, or pruned after its retention)", ErrNoMessage, id)
	}
	if err != nil {
		return StoredMessage{}, fmt.Errorf("outbox: get %q: %w", id, err)
	}
	return m, nil
}

// storedColumns are the columns of a StoredMessage but its headers and payload, in the order of
// StoredMessage.fields, read from table under the alias m. BlockedBy is looked up through the
// index of undelivered messages by ordering key, one probe per message listed.
func storedColumns(table string) string {
	return `m.seq, m.id, m.topic, coalesce(m.ordering_key, ''), m.state, m.attempts, m.created_at, m.available_at,
	coalesce(m.last_error, ''), m.delivered_at,
	CASE WHEN m.state <> 'delivered' AND m.ordering_key IS NOT NULL THEN coalesce((
		SELECT e.id FROM ` + table + ` e
		WHERE e.ordering_key = m.ordering_key AND e.seq < m.seq AND e.state <> 'delivered' AND e.state = 'dead'
		ORDER BY e.seq LIMIT 1), '') ELSE '' END`
}

func (m *StoredMessage) fields() []any {
	return []any{&m.Seq, &m.ID, &m.Topic, &m.OrderingKey, &m.State, &m.Attempts, &m.CreatedAt, &m.AvailableAt,
		&m.LastError, &m.DeliveredAt, &m.BlockedBy}
}

func scanStored(row pgx.CollectableRow) (StoredMessage, error) {
	var m StoredMessage
	err := row.Scan(m.fields()...)
	return m, err
}

func listLimit(n int) int {
	if n == 0 {
		return ListLimitDefault
	}
	return n
}

// query is a statement and its arguments.
type query struct {
	sql  string
	args []any
}

// selectMessages is the SELECT of f's messages on table, ordered and after the cursor, without
// its LIMIT; lock is appended to its WHERE clause's statement ("FOR UPDATE SKIP LOCKED" or "").
// Only the conditions f sets are in it, so that the planner sees each as a constant to match
// against the partial indexes (a "$1 IS NULL OR …" form would hide them from a generic plan).
func selectMessages(table string, f ListFilter, lock string) (query, error) {
	if err := f.validate(); err != nil {
		return query{}, err
	}
	var where []string
	var args []any
	arg := func(cond string, v any) {
		args = append(args, v)
		where = append(where, strings.ReplaceAll(cond, "?", "$"+strconv.Itoa(len(args))))
	}
	// The states are literals (validated above), so that even a generic plan matches the
	// partial indexes' predicates: TestListFindsStuckMessagesByTheIndex.
	switch f.State {
	case "":
		where = append(where, "state <> 'delivered'")
	case StatePending, StateDead:
		where = append(where, "state <> 'delivered'", "state = '"+f.State+"'")
	case StateDelivered:
		where = append(where, "state = 'delivered'")
	}
	if f.Key != "" {
		arg("ordering_key = ?", f.Key)
	}
	if f.Topic != "" {
		arg("topic = ?", f.Topic)
	}
	if f.ErrorContains != "" {
		// strpos, not LIKE: the text is the operator's, and % or _ in it mean themselves.
		arg("strpos(lower(last_error), lower(?)) > 0", f.ErrorContains)
	}
	if f.OlderThan > 0 {
		arg("created_at < now() - ?::bigint * interval '1 microsecond'", f.OlderThan.Microseconds())
	}
	if f.NewerThan > 0 {
		arg("created_at >= now() - ?::bigint * interval '1 microsecond'", f.NewerThan.Microseconds())
	}
	order := "seq"
	if f.After > 0 {
		cmp := "seq > ?"
		if f.Newest {
			cmp = "seq < ?"
		}
		arg(cmp, f.After)
	}
	if f.Newest {
		order = "seq DESC"
	}
	sql := `SELECT ` + storedColumns(table) + ` FROM ` + table + ` m`
	if len(where) > 0 {
		sql += ` WHERE ` + strings.Join(where, " AND ")
	}
	sql += ` ORDER BY ` + order
	if lock != "" {
		sql += ` LIMIT ` + strconv.Itoa(listLimit(f.Limit)) + ` ` + lock
	}
	return query{sql, args}, nil
}

func (f ListFilter) validate() error {
	switch {
	case f.State != "" && f.State != StatePending && f.State != StateDead && f.State != StateDelivered && f.State != StateAll:
		return fmt.Errorf("%w: State %q; give %q, %q, %q, %q, or empty for pending and dead",
			ErrInvalidFilter, f.State, StatePending, StateDead, StateDelivered, StateAll)
	case f.Limit < 0 || f.Limit > ListLimitMax:
		return fmt.Errorf("%w: Limit %d; give 1 to %d, or 0 for %d", ErrInvalidFilter, f.Limit, ListLimitMax, ListLimitDefault)
	case f.OlderThan < 0 || f.NewerThan < 0:
		return fmt.Errorf("%w: OlderThan and NewerThan must be positive, or 0 for no bound", ErrInvalidFilter)
	case f.After < 0:
		return fmt.Errorf("%w: After %d; give the Next of the page before, or 0", ErrInvalidFilter, f.After)
	}
	return nil
}

// byIndex runs the statement sql behind byIndex (see there: the undelivered messages are read
// through their index even on a table never analyzed), in one transaction, and hands its rows to
// scan.
func (o *Outbox) byIndex(ctx context.Context, sql string, args []any, scan func(pgx.Rows) error) error {
	b := &pgx.Batch{}
	b.Queue(byIndex)
	b.Queue(sql, args...)
	res := o.db.SendBatch(ctx, b)
	_, err := res.Exec()
	if err == nil {
		rows, _ := res.Query()
		err = scan(rows)
	}
	if cerr := res.Close(); err == nil {
		err = cerr
	}
	return err
}
