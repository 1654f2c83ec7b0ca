// tempotent inbox and tempotent webhooks: what the consumers and the webhook intakes recorded.

package main

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tempotent/tempotent/inbox"
)

// webhookPrefix begins the inbox consumer of a webhook intake (webhook.Handler): "webhook/" and
// its source.
const webhookPrefix = "webhook/"

func (a *app) inbox(ctx context.Context, args []string) error {
	f := a.flags("inbox", "", `Counts the inbox's records per consumer (the messages each processed within its retention),
their oldest and newest, and how many were processed within --window. With --consumer, lists
that consumer's most recent records instead. Read only; records past their retention are
purged by the workers. Counting reads the whole inbox table.`)
	return a.inboxView(ctx, f, args, "consumer", "", "")
}

func (a *app) webhooks(ctx context.Context, args []string) error {
	f := a.flags("webhooks", "", `Counts the deliveries each webhook intake accepted (its inbox records, consumer
"webhook/SOURCE"): all those kept, the oldest and newest, and those accepted within --window.
With --source, lists that source's most recent deliveries (webhook/SOURCE/"TENANT"/ID).
Read only. Counting reads the whole inbox table.`)
	return a.inboxView(ctx, f, args, "source", webhookPrefix, "ACCEPTED")
}

// inboxView is inbox and webhooks: the consumers whose name begins with prefix (shown without
// it) and their counts, or one's records; recentHeader names the window's count.
func (a *app) inboxView(ctx context.Context, f *flags, args []string, what, prefix, recentHeader string) error {
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
		type consumerJSON struct {
			Name    string    `json:"name"`
			Records int64     `json:"records"`
			Recent  int64     `json:"recent"`
			Oldest  time.Time `json:"oldest"`
			Newest  time.Time `json:"newest"`
		}
		out := struct {
			WindowSeconds float64        `json:"window_seconds"`
			Consumers     []consumerJSON `json:"consumers"`
		}{WindowSeconds: window.Seconds(), Consumers: []consumerJSON{}}
		for _, c := range all {
			if n, ok := strings.CutPrefix(c.Consumer, prefix); ok {
				out.Consumers = append(out.Consumers, consumerJSON{n, c.Records, c.Recent, c.Oldest, c.Newest})
			}
		}
		if asJSON {
			return writeSafeJSON(a.stdout, out)
		}
		if len(out.Consumers) == 0 {
			fmt.Fprintf(a.stdout, "no %s has records in schema %q\n", what, f.schema)
			return nil
		}
		w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
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
