// tempotent inbox and tempotent webhooks: what the consumers and the webhook intakes recorded.

package main

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/operator"
)

// webhookPrefix begins the inbox consumer of a webhook intake (webhook.Handler): "webhook/" and
// its source.
const webhookPrefix = "webhook/"

func (a *app) inbox(ctx context.Context, args []string) error {
	f := a.flags("inbox", "", `Counts the inbox's records per consumer (the messages each processed within its retention),
their oldest and newest, and how many were processed within --window. With --consumer, lists
that consumer's most recent records instead. Read only; records past their retention are
purged by the workers. Counting reads the whole inbox table.`)
	return a.inboxView(ctx, f, args, "consumer", "", "", false)
}

func (a *app) webhooks(ctx context.Context, args []string) error {
	f := a.flags("webhooks", "", `Counts, per webhook source, the deliveries its intake accepted within --window (its inbox
records, consumer "webhook/SOURCE"), answered as duplicates, refused and failed to store (the
handlers' tallies, counted per minute and written every few seconds; a week of them is kept),
with the reasons of the refusals and failures (signature, stale, oversized, malformed, ...;
store), and the accepted deliveries kept (KEPT), the oldest and newest. With --source, lists that source's most recent deliveries
(webhook/SOURCE/"TENANT"/ID). Read only. Counting reads the whole inbox table.`)
	return a.inboxView(ctx, f, args, "source", webhookPrefix, "ACCEPTED", true)
}

// inboxView is inbox and webhooks: the consumers whose name begins with prefix (shown without
// it) and their counts, or one's records; recentHeader names the window's count. With tallies,
// the webhook tallies of the window are shown beside the counts, for sources with records or
// tallies (a source whose every delivery was refused has no record).
func (a *app) inboxView(ctx context.Context, f *flags, args []string, what, prefix, recentHeader string, tallies bool) error {
	var name string
	var limit int
	var asJSON bool
	window := 24 * time.Hour
	f.StringVar(&name, what, "", "list this "+what+"'s most recent records instead of the counts")
	f.Func("window", "count the records processed within this long (default 24h)", durationFlag(&window))
	f.IntVar(&limit, "limit", inbox.RecordsLimitDefault, fmt.Sprintf("with --%s: at most this many records, at most %d", what, inbox.RecordsLimitMax))
	f.BoolVar(&asJSON, "json", false, "print JSON")
	check := func() error {
		switch {
		case len(f.args) > 0:
			return usagef("unexpected argument %q", f.arg(0))
		case limit <= 0 || limit > inbox.RecordsLimitMax:
			return usagef("--limit must be 1 to %d", inbox.RecordsLimitMax)
		case window < 0:
			return usagef("--window must be positive")
		}
		return nil
	}
	return f.execute(ctx, args, check, func(s *session) error {
		if name != "" {
			return a.records(ctx, s, f.schema, prefix+name, limit, asJSON)
		}
		all, err := inbox.Consumers(ctx, s.pool, f.schema, window)
		if err != nil {
			return err
		}
		out := struct {
			WindowSeconds float64        `json:"window_seconds"`
			Consumers     []consumerJSON `json:"consumers"`
		}{WindowSeconds: window.Seconds(), Consumers: []consumerJSON{}}
		for _, c := range all {
			if n, ok := strings.CutPrefix(c.Consumer, prefix); ok {
				out.Consumers = append(out.Consumers, consumerJSON{Name: n, Records: c.Records, Recent: c.Recent, Oldest: c.Oldest, Newest: c.Newest})
			}
		}
		if tallies {
			// Tallies are kept per minute: a shorter window counts the minute it began in.
			t, err := s.op.WebhookTallies(ctx, max(window, time.Minute))
			if err != nil {
				return err
			}
			out.Consumers = withTallies(out.Consumers, t)
		}
		if asJSON {
			return writeSafeJSON(a.stdout, out)
		}
		if len(out.Consumers) == 0 {
			fmt.Fprintf(a.stdout, "no %s has records in schema %q\n", what, f.schema)
			return nil
		}
		w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
		if tallies {
			fmt.Fprintf(w, "%s\tACCEPTED LAST %s\tDUPLICATE\tREFUSED\tFAILED\tREASONS\tKEPT\tOLDEST\tNEWEST\n", strings.ToUpper(what), roughly(window))
			for _, c := range out.Consumers {
				fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%d\t%s\t%d\t%s\t%s\n", safe(c.Name), c.Recent, c.Duplicate, c.Refused, c.Failed,
					reasons(c.Reasons), c.Records, ago(c.Records, c.Oldest), ago(c.Records, c.Newest))
			}
			return w.Flush()
		}
		fmt.Fprintf(w, "%s\tRECORDS\t%s LAST %s\tOLDEST\tNEWEST\n", strings.ToUpper(what), cmp.Or(recentHeader, "PROCESSED"), roughly(window))
		for _, c := range out.Consumers {
			fmt.Fprintf(w, "%s\t%d\t%d\t%s ago\t%s ago\n", safe(c.Name), c.Records, c.Recent, age(c.Oldest), age(c.Newest))
		}
		return w.Flush()
	})
}

// records prints the consumer's most recent records.
func (a *app) records(ctx context.Context, s *session, schema, consumer string, limit int, asJSON bool) error {
	ib, err := inbox.New(s.pool, inbox.Config{Consumer: consumer, Schema: schema})
	if err != nil {
		return usagef("%v", err)
	}
	recs, err := ib.Records(ctx, limit)
	if err != nil {
		return err
	}
	if asJSON {
		type recordJSON struct {
			MessageID   string    `json:"message_id"`
			ProcessedAt time.Time `json:"processed_at"`
			Checked     bool      `json:"checked"`
		}
		out := struct {
			Consumer string       `json:"consumer"`
			Records  []recordJSON `json:"records"`
		}{Consumer: consumer, Records: []recordJSON{}}
		for _, r := range recs {
			out.Records = append(out.Records, recordJSON(r))
		}
		return writeSafeJSON(a.stdout, out)
	}
	if len(recs) == 0 {
		fmt.Fprintf(a.stdout, "no records of consumer %s\n", safe(consumer))
		return nil
	}
	w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "MESSAGE ID\tPROCESSED\tPAYLOAD CHECKED")
	for _, r := range recs {
		fmt.Fprintf(w, "%s\t%s\t%t\n", safe(r.MessageID), stamp(r.ProcessedAt), r.Checked)
	}
	return w.Flush()
}

// consumerJSON is a consumer's counts, as inbox and webhooks --json print them; webhooks adds a
// source's tallies.
type consumerJSON struct {
	Name    string `json:"name"`
	Records int64  `json:"records"`
	Recent  int64  `json:"recent"`
	// Oldest and Newest are left out for a source with tallies and no records.
	Oldest time.Time `json:"oldest,omitzero"`
	Newest time.Time `json:"newest,omitzero"`
	// The webhook tallies of the window (operator.WebhookTally): Accepted as the handlers
	// counted it (Recent is the inbox's exact count), the refused and failed by reason.
	Tallied   int64            `json:"tallied_accepted,omitempty"`
	Duplicate int64            `json:"duplicate,omitempty"`
	Refused   int64            `json:"refused,omitempty"`
	Failed    int64            `json:"failed,omitempty"`
	Reasons   map[string]int64 `json:"reasons,omitempty"`
}

// withTallies adds each source's tallies to its counts, and the sources that have tallies and
// no records, in name order.
func withTallies(sources []consumerJSON, tallies []operator.WebhookTally) []consumerJSON {
	at := map[string]int{}
	for i, c := range sources {
		at[c.Name] = i
	}
	for _, t := range tallies {
		i, ok := at[t.Source]
		if !ok {
			i = len(sources)
			sources = append(sources, consumerJSON{Name: t.Source})
		}
		c := &sources[i]
		c.Tallied, c.Duplicate, c.Refused, c.Failed, c.Reasons = t.Accepted, t.Duplicate, t.Refused, t.Failed, t.Reasons
	}
	slices.SortFunc(sources, func(a, b consumerJSON) int { return strings.Compare(a.Name, b.Name) })
	return sources
}

// reasons writes refusal and failure counts by reason, most first: "signature=40 stale=2"; "-"
// for none. The reasons are the handlers' own words, not a sender's.
func reasons(by map[string]int64) string {
	if len(by) == 0 {
		return "-"
	}
	names := slices.Sorted(maps.Keys(by))
	slices.SortStableFunc(names, func(a, b string) int { return cmp.Compare(by[b], by[a]) })
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%d", safe(n), by[n])
	}
	return strings.Join(parts, " ")
}

// ago is how long ago t was, or "-" when there are no records to be old.
func ago(records int64, t time.Time) string {
	if records == 0 {
		return "-"
	}
	return age(t) + " ago"
}
