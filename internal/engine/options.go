package engine

import (
	"cmp"
	"context"
	"errors"
	"math"
	"time"

	sdkactivity "go.temporal.io/sdk/activity"

	"github.com/tempotent/tempotent/keys"
)

// Options says what a registered activity's downstream guarantees. Its key is not among them:
// workflow code decides every activity's key (see the keys package). The zero Options treats the
// downstream as one that does not deduplicate.
type Options struct {
	// DownstreamDeduplicates: see Call.DownstreamDeduplicates.
	DownstreamDeduplicates bool
	// DownstreamKeyMemory: see Call.DownstreamKeyMemory. Default 24 hours.
	DownstreamKeyMemory time.Duration
	// DownstreamSettleTime: see Call.DownstreamSettleTime. Default a minute. For a compensation,
	// give the forward step's downstream's: ForwardSettled waits it out.
	DownstreamSettleTime time.Duration
	// Reconcile: see Call.Reconcile.
	Reconcile ReconcileFunc
	// Batch declares an activity that makes its effects only through ForEach, each item under
	// its own receipt: calling it again is safe whenever, so a takeover of its own receipt after
	// a crash runs it again (its settled items replay) instead of failing with an unknown
	// outcome. The downstream fields above do not apply to it: give the items' downstream in
	// ForEach's Items.Options.
	Batch bool
	// Authorize, when set, is this activity's authorization hook (see AuthorizeFunc), asked
	// instead of the store's Config.Authorize before each attempt runs or replays. For ForEach's
	// items (Items.Options), nil means the batch activity's own hook, else the store's.
	Authorize AuthorizeFunc
}

// WithDefaults returns a copy of o with every unset downstream property set to its default, as a
// call under o runs with it: DownstreamKeyMemory 24 hours (unbounded for a Batch activity, whose
// items' receipts are its downstream), DownstreamSettleTime a minute.
func (o Options) WithDefaults() Options {
	o.DownstreamKeyMemory = cmp.Or(batchKeyMemory(o.Batch), max(o.DownstreamKeyMemory, 0), downstreamKeyMemoryDefault)
	o.DownstreamSettleTime = cmp.Or(max(o.DownstreamSettleTime, 0), downstreamSettleTimeDefault)
	return o
}

// Validate reports the first invalid field of o, naming it.
func (o Options) Validate() error {
	switch {
	case o.DownstreamKeyMemory < 0:
		return errors.New("Options.DownstreamKeyMemory is negative; give a duration, or zero for the default")
	case o.DownstreamSettleTime < 0:
		return errors.New("Options.DownstreamSettleTime is negative; give a duration, or zero for the default")
	}
	return nil
}

// CallFor builds the Call for the registered activity running in ctx, whose input is in.
func CallFor(ctx context.Context, opts Options, in any) (Call, error) {
	if !sdkactivity.IsActivity(ctx) {
		return Call{}, errors.New("tempotent: a registered activity was called outside an activity context; call Do, DoInNewTx or DoInTx with a Call instead")
	}
	if !intercepted(ctx) {
		return Call{}, errNoInterceptor("a registered activity")
	}
	k, err := keys.FromActivity(ctx)
	if err != nil {
		return Call{}, err
	}
	// The input is fingerprinted as the activity's argument list, as it was before Request
	// existed, so receipts recorded then keep matching.
	req := []any{in}
	fp, err := keys.FingerprintOf(req)
	if err != nil {
		return Call{}, err
	}
	return Call{
		Key:                    k,
		Request:                req,
		Fingerprint:            fp,
		ScheduledAt:            sdkactivity.GetInfo(ctx).ScheduledTime,
		DownstreamDeduplicates: opts.DownstreamDeduplicates || opts.Batch,
		DownstreamKeyMemory:    cmp.Or(batchKeyMemory(opts.Batch), opts.DownstreamKeyMemory),
		DownstreamSettleTime:   opts.DownstreamSettleTime,
		Reconcile:              opts.Reconcile,
		Authorize:              opts.Authorize,
	}, nil
}

// batchKeyMemory is how long a Batch activity's "downstream" — its items' receipts — remembers
// its calls: forever, as far as a takeover is concerned (the horizon guard ends it).
func batchKeyMemory(batch bool) time.Duration {
	if batch {
		return math.MaxInt64
	}
	return 0
}
