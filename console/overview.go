// The overview: what waits for a person, doctor's findings, the intake, the purger's last run
// and the purge backlog.

package console

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/outbox"
)

// webhookPrefix begins the inbox consumer of each webhook source.
const webhookPrefix = "webhook/"

// overviewData is the overview page's.
type overviewData struct {
	Stats operator.Stats
	// Findings are doctor's database checks (operator.Client.Diagnose) against its default limits,
	// failures first.
	Findings []operator.Finding
	Outbox   *outbox.Stats
	// Consumers are the inbox's consumers, the webhook sources' aside (Webhooks); nil without
	// Config.Inbox.
	Consumers []inbox.ConsumerStats
	Webhooks  []webhookSource
	Backlog   operator.PurgeBacklog
	// LastPurge is the purger's last recorded run; nil when it never ran.
	LastPurge *lastPurge
	// Overdue are the consumers (webhook sources among them) holding records older than the
	// inbox's default retention: a worker with that retention would have purged them.
	Overdue   []inbox.ConsumerStats
	Retention time.Duration
	HasInbox  bool
	Window    time.Duration
}

// lastPurge is the purger's last run as the overview shows it: how long ago it finished, by this
// console's clock, and how long it took.
type lastPurge struct {
	operator.MaintenanceRun
	Ago, Took time.Duration
}

// webhookSource is a webhook source's intake within the window: the deliveries it accepted (the
// inbox's count when there is one, the tallies' otherwise) and kept, and its tallies of
// duplicates, refusals and failures.
type webhookSource struct {
	Source   string
	Accepted int64
	// Kept is what the inbox keeps of the source; nil without Config.Inbox.
	Kept  *inbox.ConsumerStats
	Tally operator.WebhookTally
	// Reasons are Tally.Reasons, most first.
	Reasons []reasonCount
}

// reasonCount is how many deliveries were refused or failed for one reason.
type reasonCount struct {
	Reason string
	Count  int64
}

// webhookSources merges the webhook sources' inbox counts (their consumers, "webhook/" and the
// source; none when the console has no inbox) with
// their tallies, in source order: a source whose every delivery was refused has tallies only.
func webhookSources(kept []inbox.ConsumerStats, tallies []operator.WebhookTally) []webhookSource {
	at := map[string]int{}
	var out []webhookSource
	for _, c := range kept {
		source := strings.TrimPrefix(c.Consumer, webhookPrefix)
		at[source] = len(out)
		out = append(out, webhookSource{Source: source, Accepted: c.Recent, Kept: &c})
	}
	for _, t := range tallies {
		i, ok := at[t.Source]
		if !ok {
			i = len(out)
			out = append(out, webhookSource{Source: t.Source, Accepted: t.Accepted})
		}
		out[i].Tally = t
		for reason, n := range t.Reasons {
			out[i].Reasons = append(out[i].Reasons, reasonCount{reason, n})
		}
		slices.SortFunc(out[i].Reasons, func(a, b reasonCount) int {
			return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Reason, b.Reason))
		})
	}
	slices.SortFunc(out, func(a, b webhookSource) int { return strings.Compare(a.Source, b.Source) })
	return out
}

// levelRank orders findings: failures, then warnings, then the rest.
var levelRank = map[operator.Level]int{operator.LevelFail: 0, operator.LevelWarn: 1, operator.LevelOK: 2}

func (h *Handler) overview(r *http.Request) (any, error) {
	ctx := r.Context()
	d := overviewData{Window: h.cfg.InboxWindow, Retention: h.cfg.InboxRetention, HasInbox: h.cfg.Inbox != nil}
	var err error
	if d.Stats, err = h.cfg.Operator.Stats(ctx); err != nil {
		return nil, err
	}
	if d.Findings, err = h.cfg.Operator.Diagnose(ctx, operator.Limits{}); err != nil {
		return nil, err
	}
	slices.SortStableFunc(d.Findings, func(a, b operator.Finding) int { return cmp.Compare(levelRank[a.Level], levelRank[b.Level]) })
	if d.Backlog, err = h.cfg.Operator.PurgeBacklog(ctx); err != nil {
		return nil, err
	}
	run, ran, err := h.cfg.Operator.LastRun(ctx, operator.TaskPurge)
	if err != nil {
		return nil, err
	}
	if ran {
		d.LastPurge = &lastPurge{MaintenanceRun: run, Ago: time.Since(run.Finished), Took: run.Finished.Sub(run.Started)}
	}
	if h.cfg.Outbox != nil {
		s, err := h.cfg.Outbox.Stats(ctx)
		if err != nil {
			return nil, err
		}
		d.Outbox = &s
	}
	var kept []inbox.ConsumerStats
	if h.cfg.Inbox != nil {
		consumers, err := inbox.Consumers(ctx, h.cfg.Inbox, h.cfg.Operator.Config().Schema, h.cfg.InboxWindow)
		if err != nil {
			return nil, err
		}
		for _, c := range consumers {
			if strings.HasPrefix(c.Consumer, webhookPrefix) {
				kept = append(kept, c)
			} else {
				d.Consumers = append(d.Consumers, c)
			}
			if c.Records > 0 && time.Since(c.Oldest) > d.Retention {
				d.Overdue = append(d.Overdue, c)
			}
		}
	}
	// Tallies are kept per minute: a shorter window counts the minute it began in.
	tallies, err := h.cfg.Operator.WebhookTallies(ctx, max(h.cfg.InboxWindow, time.Minute))
	if err != nil {
		return nil, err
	}
	d.Webhooks = webhookSources(kept, tallies)
	return d, nil
}
