// tempotent outbox list|show|requeue|discard: what is stuck in the outbox, and settling it.

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/outbox"
)

// filterFlags defines the flags that select messages, shared by list and the bulk actions, on f.
func filterFlags(f *flags, filter *outbox.ListFilter) {
	f.StringVar(&filter.Topic, "topic", "", "only messages of this topic")
	f.StringVar(&filter.Key, "key", "", "only messages of this ordering key")
	f.StringVar(&filter.ErrorContains, "error", "", "only messages whose last error contains this text (any case)")
	f.Func("older-than", "only messages put longer ago than this (e.g. 1h, 7d)", durationFlag(&filter.OlderThan))
	f.Func("newer-than", "only messages put more recently than this", durationFlag(&filter.NewerThan))
	f.BoolVar(&filter.Newest, "newest", false, "newest first (default oldest first)")
	f.IntVar(&filter.Limit, "limit", outbox.ListLimitDefault, fmt.Sprintf("at most this many messages, at most %d", outbox.ListLimitMax))
}

// openOutbox is the outbox of the session's schema.
func openOutbox(s *session, schema string) (*outbox.Outbox, error) {
	o, err := outbox.New(s.pool, &outbox.Config{Schema: schema})
	if err != nil {
		return nil, usagef("%v", err)
	}
	return o, nil
}

// outboxRefusal turns the outbox's refusals into exit codes: a bad filter is a wrong command line,
// an unknown or not dead message a refusal.
func outboxRefusal(err error) error {
	switch {
	case errors.Is(err, outbox.ErrInvalidFilter), errors.Is(err, outbox.ErrInvalidAction):
		return usagef("%v", err)
	case errors.Is(err, outbox.ErrNoMessage), errors.Is(err, outbox.ErrNotDead):
		return &refusedError{err}
	}
	return err
}

func (a *app) outboxList(ctx context.Context, args []string) error {
	f := a.flags("outbox list", "", `Lists the outbox's messages, a page at a time: by default the undelivered ones (pending and
dead), oldest first. Text the producers or the downstreams wrote (IDs, topics, keys, errors) is
printed quoted, with escapes, when it holds anything a terminal would act on.`)
	var filter outbox.ListFilter
	var asJSON bool
	f.StringVar(&filter.State, "state", "", "pending, dead, delivered or all (default pending and dead)")
	filterFlags(f, &filter)
	f.Int64Var(&filter.After, "after", 0, "the cursor printed at the end of the page before")
	f.BoolVar(&asJSON, "json", false, `print JSON: {"messages": [...], "next": cursor}`)
	check := func() error {
		if len(f.args) > 0 {
			return usagef("unexpected argument %q", f.arg(0))
		}
		return nil
	}
	return f.execute(ctx, args, check, func(s *session) error {
		o, err := openOutbox(s, f.schema)
		if err != nil {
			return err
		}
		page, err := o.List(ctx, filter)
		if err != nil {
			return outboxRefusal(err)
		}
		if asJSON {
			out := struct {
				Messages []messageJSON `json:"messages"`
				Next     int64         `json:"next,omitempty"`
			}{Messages: []messageJSON{}, Next: page.Next}
			for _, m := range page.Messages {
				out.Messages = append(out.Messages, messageToJSON(m, false, false))
			}
			return writeSafeJSON(a.stdout, out)
		}
		if len(page.Messages) == 0 {
			fmt.Fprintln(a.stdout, "no messages match")
			return nil
		}
		w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "SEQ\tID\tTOPIC\tKEY\tSTATE\tATTEMPTS\tAGE\tLAST ERROR")
		for _, m := range page.Messages {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", m.Seq, safe(m.ID), safe(m.Topic), orDash(safe(m.OrderingKey)),
				messageState(m), m.Attempts, age(m.CreatedAt), orDash(safe(shorten(m.LastError, 60))))
		}
		if err := w.Flush(); err != nil {
			return err
		}
		if page.Next != 0 {
			fmt.Fprintf(a.stdout, "\nmore: add --after %d\n", page.Next)
		}
		return nil
	})
}

// messageState is a message's state, with the dead message that holds it back, or when a
// pending one may be tried next.
func messageState(m outbox.StoredMessage) string {
	switch {
	case m.BlockedBy != "":
		return m.State + " (behind dead " + safe(m.BlockedBy) + ")"
	case m.State == outbox.StatePending && time.Until(m.AvailableAt) > 0:
		return "pending (retry " + relative(m.AvailableAt) + ")"
	}
	return m.State
}

func (a *app) outboxShow(ctx context.Context, args []string) error {
	f := a.flags("outbox show", "ID", `Prints every field of the outbox message ID, its headers, and the audit log's records of it
(who requeued or discarded it, when, why). Its payload is printed only with --payload, quoted
with escapes: it is the producer's, and may hold anything.`)
	var withPayload, asJSON bool
	f.BoolVar(&withPayload, "payload", false, "print the payload too (Go-quoted; base64 in JSON)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	check := func() error {
		if len(f.args) != 1 {
			return usagef("give the message's ID")
		}
		return nil
	}
	return f.execute(ctx, args, check, func(s *session) error {
		o, err := openOutbox(s, f.schema)
		if err != nil {
			return err
		}
		m, err := o.Get(ctx, f.arg(0))
		if err != nil {
			return outboxRefusal(err)
		}
		// The audit log is one table for every operator action; its target is a receipt's token or,
		// for the outbox's actions (named "outbox.…"), the message's ID.
		audit, err := s.op.Audit(ctx, keys.Token(m.ID))
		if err != nil {
			return err
		}
		var entries []auditJSON
		for _, e := range audit {
			if strings.HasPrefix(e.Action, "outbox.") {
				entries = append(entries, auditJSON{At: e.At, Actor: e.Actor, Action: e.Action, Reason: e.Reason, Detail: e.Detail})
			}
		}
		if asJSON {
			j := messageToJSON(m, true, withPayload)
			j.Audit = entries
			return writeSafeJSON(a.stdout, j)
		}
		tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
		line := func(name, format string, args ...any) {
			fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{name}, args...)...)
		}
		line("id", "%s", safe(m.ID))
		line("seq", "%d", m.Seq)
		line("topic", "%s", safe(m.Topic))
		line("ordering key", "%s", orDash(safe(m.OrderingKey)))
		line("state", "%s", messageState(m))
		switch {
		case m.BlockedBy != "":
			line("to do", "settle the dead message ahead of it on its key first: tempotent outbox show %s", safe(m.BlockedBy))
		case m.State == outbox.StateDead:
			line("to do", "fix the cause, then: tempotent outbox requeue %s --reason WHY (or discard it)", safe(m.ID))
		}
		line("attempts", "%d", m.Attempts)
		if m.LastError != "" {
			line("last error", "%s", safe(m.LastError))
		}
		line("created", "%s", stamp(m.CreatedAt))
		line("available", "%s", stamp(m.AvailableAt))
		if m.DeliveredAt != nil {
			line("delivered", "%s", stamp(*m.DeliveredAt))
		}
		for _, name := range slices.Sorted(maps.Keys(m.Headers)) {
			line("header", "%s: %s", safe(name), safe(m.Headers[name]))
		}
		if withPayload {
			line("payload", "%d bytes: %q", len(m.Payload), m.Payload)
		} else {
			line("payload", "%d bytes (--payload prints them)", len(m.Payload))
		}
		for _, e := range entries {
			line("audit", "%s %s by %s: %s %s", stamp(e.At), e.Action, safe(e.Actor), safe(e.Reason), safe(string(e.Detail)))
		}
		return tw.Flush()
	})
}

func (a *app) outboxRequeue(ctx context.Context, args []string) error {
	return a.outboxAct(ctx, args, "requeue", `Gives the dead message ID a fresh set of attempts, delivered at once: run it once the cause of
its failures is fixed. With --all-dead instead of an ID, requeues the dead messages the filters
select, oldest first, up to --limit; run it again while it says more may match.`)
}

func (a *app) outboxDiscard(ctx context.Context, args []string) error {
	return a.outboxAct(ctx, args, "discard", `Deletes the dead message ID without delivering it, releasing the messages of its ordering key
that wait behind it. With --all-dead instead of an ID, discards the dead messages the filters
select, oldest first, up to --limit; run it again while it says more may match.`)
}

// outboxAct is requeue and discard: one message by ID, or the dead messages a filter selects;
// who and why go to the audit log with each change.
func (a *app) outboxAct(ctx context.Context, args []string, verb, about string) error {
	f := a.flags("outbox "+verb, "ID | --all-dead [filters]", about+`

Each message changed gets a row in the audit log (who, when, why, what it cleared), written in
the statement that changes it; "outbox show" prints them. Only dead messages are changed: a
message that is not dead, or not there, is refused (exit 3) and nothing is recorded.`)
	var filter outbox.ListFilter
	var allDead bool
	var act outbox.Action
	f.BoolVar(&allDead, "all-dead", false, "act on the dead messages the filters select instead of one ID")
	filterFlags(f, &filter)
	f.StringVar(&act.Reason, "reason", "", "why: what was fixed, a ticket (required)")
	f.StringVar(&act.By, "by", defaultBy(), "who acts")
	check := func() error {
		switch {
		case allDead && len(f.args) > 0, !allDead && len(f.args) != 1:
			return usagef("give the message's ID, or --all-dead")
		case !allDead && filterGiven(f):
			return usagef("the filters select messages for --all-dead; with an ID, give none")
		case strings.TrimSpace(act.Reason) == "":
			return usagef("give --reason: what was fixed, or a ticket; it goes to the audit log")
		}
		return nil
	}
	return f.execute(ctx, args, check, func(s *session) error {
		o, err := openOutbox(s, f.schema)
		if err != nil {
			return err
		}
		done := "requeued"
		single, bulk := o.RequeueMessage, o.RequeueDead
		if verb == "discard" {
			done = "discarded"
			single, bulk = o.DiscardMessage, o.DiscardDead
		}
		if !allDead {
			if err := single(ctx, f.arg(0), act); err != nil {
				return outboxRefusal(err)
			}
			fmt.Fprintf(a.stdout, "%s %s (audit: %s by %s)\n", done, safe(f.arg(0)), "outbox."+verb, safe(act.By))
			return nil
		}
		n, err := bulk(ctx, filter, act)
		if err != nil {
			return outboxRefusal(err)
		}
		fmt.Fprintf(a.stdout, "%s %s (audit: %s of outbox.%s by %s)\n", done, counted(n, "dead message"), counted(n, "row"), verb, safe(act.By))
		if n == int64(filter.Limit) {
			fmt.Fprintf(a.stdout, "--limit %d reached: more may match; run the same command again\n", filter.Limit)
		}
		return nil
	})
}

// counted is "1 thing" or "n things".
func counted(n int64, thing string) string {
	if n == 1 {
		return "1 " + thing
	}
	return fmt.Sprintf("%d %ss", n, thing)
}

// filterGiven reports whether a flag that selects messages was given.
func filterGiven(f *flags) bool {
	given := false
	f.Visit(func(fl *flag.Flag) {
		switch fl.Name {
		case "topic", "key", "error", "older-than", "newer-than", "newest", "limit":
			given = true
		}
	})
	return given
}

// messageJSON is an outbox message as --json prints it.
type messageJSON struct {
	Seq         int64             `json:"seq"`
	ID          string            `json:"id"`
	Topic       string            `json:"topic"`
	OrderingKey string            `json:"ordering_key,omitempty"`
	State       string            `json:"state"`
	Attempts    int               `json:"attempts"`
	CreatedAt   time.Time         `json:"created_at"`
	AvailableAt time.Time         `json:"available_at"`
	LastError   string            `json:"last_error,omitempty"`
	DeliveredAt *time.Time        `json:"delivered_at,omitempty"`
	BlockedBy   string            `json:"blocked_by,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	// PayloadBytes is the payload's size (show only); Payload is the payload itself, base64
	// (show --payload only).
	PayloadBytes *int        `json:"payload_bytes,omitempty"`
	Payload      []byte      `json:"payload,omitempty"`
	Audit        []auditJSON `json:"audit,omitempty"`
}

func messageToJSON(m outbox.StoredMessage, shown, withPayload bool) messageJSON {
	j := messageJSON{Seq: m.Seq, ID: m.ID, Topic: m.Topic, OrderingKey: m.OrderingKey, State: m.State, Attempts: m.Attempts,
		CreatedAt: m.CreatedAt, AvailableAt: m.AvailableAt, LastError: m.LastError, DeliveredAt: m.DeliveredAt, BlockedBy: m.BlockedBy,
		Headers: m.Headers}
	if shown {
		n := len(m.Payload)
		j.PayloadBytes = &n
	}
	if withPayload {
		j.Payload = m.Payload
	}
	return j
}
