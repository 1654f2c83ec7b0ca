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

// webhookSource is a webhook source's intake: the deliveries it accepted and kept.
type webhookSource struct {
	Source string
	inbox.ConsumerStats
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
	if h.cfg.Inbox != nil {
		consumers, err := inbox.Consumers(ctx, h.cfg.Inbox, h.cfg.Operator.Config().Schema, h.cfg.InboxWindow)
		if err != nil {
			return nil, err
		}
		for _, c := range consumers {
			if source, ok := strings.CutPrefix(c.Consumer, webhookPrefix); ok {
				d.Webhooks = append(d.Webhooks, webhookSource{Source: source, ConsumerStats: c})
			} else {
				d.Consumers = append(d.Consumers, c)
			}
			if c.Records > 0 && time.Since(c.Oldest) > d.Retention {
				d.Overdue = append(d.Overdue, c)
			}
		}
	}
	return d, nil
}
