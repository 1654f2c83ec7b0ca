// Package sagamodel is a payment saga (charge, reserve, ship) against a model provider, for this
// module's tests of compensations: saga's explorer under Temporal's test environment, and rows
// 29 and 30 of FAULTS.md on the dev server. The provider's search lags its writes, as Stripe's
// does: a charge becomes visible to a refund only some time after it landed. A Plan says which
// faults a saga meets.
package sagamodel

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/saga"
)

// CompensateAgain is the signal on which the saga runs its compensations again, once an operator
// has re-armed the ones that failed for good.
const CompensateAgain = "compensate-again"

// Plan is one saga's order and the faults it meets.
type Plan struct {
	Seed uint64
	ID   string
	// FailAt is the forward step that is declined ("reserve", "ship", or "" for none).
	FailAt string
	// HoldCharge: every charge attempt's request lands only after the attempt timed out, Hold
	// later (Stripe holds a request past the client's timeout, then applies it).
	HoldCharge bool
	Hold       time.Duration
	// ChargeTimeout is a charge attempt's start-to-close timeout when HoldCharge is set.
	ChargeTimeout time.Duration
	// Lag is how long after it landed a charge becomes visible to a refund.
	Lag time.Duration
	// Broken lists the compensations ("Refund", "Release", "CancelShipment") that fail for good
	// until Provider.Fix is called for the saga.
	Broken []string
	// ReExecute runs the finished saga again, as after a Reset to its start (for the explorer).
	ReExecute bool
	// Options are the saga's.
	Options saga.Options
}

// Saga is the workflow: the three steps, and on a failed one the compensations; while a
// compensation has failed for good it waits for CompensateAgain and compensates again, three
// times at most.
func Saga(ctx workflow.Context, pl Plan) (saga.State, error) {
	timeout := 10 * time.Second
	if pl.HoldCharge {
		timeout = pl.ChargeTimeout
	}
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: timeout,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Millisecond, MaximumAttempts: 2},
	})
	s, err := saga.New(ctx, &pl.Options)
	if err != nil {
		return saga.State{}, err
	}
	for _, st := range []struct{ name, forward, undo string }{
		{"charge", "Charge", "Refund"}, {"reserve", "Reserve", "Release"}, {"ship", "Ship", "CancelShipment"},
	} {
		if err := s.Step(ctx, st.name, saga.Compensation{Activity: st.undo, Args: []any{pl}}, st.forward, pl).Get(ctx, nil); err != nil {
			again := workflow.GetSignalChannel(ctx, CompensateAgain)
			err := s.Compensate(ctx)
			for round := 0; err != nil && round < 3; round++ {
				again.Receive(ctx, nil)
				err = s.Compensate(ctx)
			}
			return s.State(), err
		}
	}
	s.Complete()
	return s.State(), nil
}

// Register registers the saga's activities on r, each under a receipt of store, against p, with
// the downstream's settle time.
func Register(r worker.ActivityRegistry, store *activity.Store, p *Provider, settle time.Duration) error {
	opts := activity.Options{DownstreamDeduplicates: true, DownstreamSettleTime: settle}
	fns := map[string]func(context.Context, Plan) (string, error){
		"Charge": p.charge,
		"Reserve": func(ctx context.Context, pl Plan) (string, error) {
			if pl.FailAt == "reserve" {
				return "", temporal.NewNonRetryableApplicationError("out of stock", "Declined", nil)
			}
			return p.do(ctx, pl, "Reserve")
		},
		"Ship": func(ctx context.Context, pl Plan) (string, error) {
			if pl.FailAt == "ship" {
				return "", temporal.NewNonRetryableApplicationError("no carrier", "Declined", nil)
			}
			return p.do(ctx, pl, "Ship")
		},
		"Refund":         p.refund,
		"Release":        func(ctx context.Context, pl Plan) (string, error) { return p.undo(ctx, pl, "Release") },
		"CancelShipment": func(ctx context.Context, pl Plan) (string, error) { return p.undo(ctx, pl, "CancelShipment") },
	}
	for name, fn := range fns {
		if err := activity.Register(r, store, name, fn, opts); err != nil {
			return err
		}
	}
	return nil
}

// Provider is the payment provider, warehouse and carrier of the sagas. Charges deduplicate on
// the forward token; a refund finds its charge by the forward token, through a search that shows
// a charge only Plan.Lag after it landed. Its zero value is not usable: call NewProvider.
type Provider struct {
	mu       sync.Mutex
	charges  map[string]time.Time // forward token → when the charge landed
	lag      map[string]time.Duration
	held     map[string]bool // forward token → a held charge is on its way
	refunds  map[string]int  // forward token → refunds applied
	nothing  map[string]bool // forward token → a refund concluded there was nothing to undo
	applied  map[string]bool // reserve or ship token → applied
	undone   map[string]int  // reserve or ship forward token → undos applied
	fixed    map[string]bool // saga ID → the cause of its broken compensations is fixed
	calls    map[string]int  // saga ID + "/" + activity → calls that reached the provider
	inflight sync.WaitGroup  // charges held in flight
}

// NewProvider returns a provider with nothing charged.
func NewProvider() *Provider {
	return &Provider{charges: map[string]time.Time{}, lag: map[string]time.Duration{}, held: map[string]bool{},
		refunds: map[string]int{}, nothing: map[string]bool{}, applied: map[string]bool{}, undone: map[string]int{},
		fixed: map[string]bool{}, calls: map[string]int{}}
}

// charge charges under the activity's token. A held charge's request lands only after the
// attempt that sent it ended, Hold later; the attempt hears nothing and times out.
func (p *Provider) charge(ctx context.Context, pl Plan) (string, error) {
	tok := token(ctx)
	p.mu.Lock()
	p.calls[pl.ID+"/Charge"]++
	p.lag[tok] = pl.Lag
	_, landed := p.charges[tok]
	switch {
	case landed:
		p.mu.Unlock()
		return "ch_" + tok[:8], nil
	case p.held[tok]:
		p.mu.Unlock()
		// The same key while the first request is being processed: Stripe answers 409.
		return "", temporal.NewApplicationError("a request with this key is in progress", "DownstreamInFlight")
	case pl.HoldCharge:
		p.held[tok] = true
		p.inflight.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.inflight.Done()
			<-ctx.Done()
			time.Sleep(pl.Hold)
			p.mu.Lock()
			defer p.mu.Unlock()
			p.charges[tok] = time.Now()
			delete(p.held, tok)
		}()
		<-ctx.Done()
		return "", ctx.Err()
	}
	p.charges[tok] = time.Now()
	p.mu.Unlock()
	return "ch_" + tok[:8], nil
}

// refund refunds the charge under the forward token, if the search shows it; otherwise it asks
// activity.ForwardSettled whether "no charge" is final.
func (p *Provider) refund(ctx context.Context, pl Plan) (string, error) {
	fwd := forward(ctx)
	if err := p.broken(pl, "Refund"); err != nil {
		return "", err
	}
	p.mu.Lock()
	p.calls[pl.ID+"/Refund"]++
	at, ok := p.charges[fwd]
	if ok && time.Since(at) >= p.lag[fwd] {
		if p.refunds[fwd] == 0 {
			p.refunds[fwd]++
		}
		p.mu.Unlock()
		return "refunded", nil
	}
	p.mu.Unlock()
	if err := activity.ForwardSettled(ctx); err != nil {
		return "", err
	}
	p.mu.Lock()
	p.nothing[fwd] = true
	p.mu.Unlock()
	return "no charge", nil
}

// do applies a reservation or a shipment under the activity's token.
func (p *Provider) do(ctx context.Context, pl Plan, name string) (string, error) {
	tok := token(ctx)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[pl.ID+"/"+name]++
	p.applied[tok] = true
	return name + "_" + tok[:8], nil
}

// undo releases a reservation or cancels a shipment found by the forward token.
func (p *Provider) undo(ctx context.Context, pl Plan, name string) (string, error) {
	fwd := forward(ctx)
	if err := p.broken(pl, name); err != nil {
		return "", err
	}
	p.mu.Lock()
	p.calls[pl.ID+"/"+name]++
	if p.applied[fwd] {
		if p.undone[fwd] == 0 {
			p.undone[fwd]++
		}
		p.mu.Unlock()
		return "undone", nil
	}
	p.mu.Unlock()
	if err := activity.ForwardSettled(ctx); err != nil {
		return "", err
	}
	return "nothing to undo", nil
}

// broken fails the compensation name for good while the saga's cause is not fixed.
func (p *Provider) broken(pl Plan, name string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.Contains(pl.Broken, name) && !p.fixed[pl.ID] {
		return temporal.NewNonRetryableApplicationError(name+" refused: the account is blocked", "Rejected", nil)
	}
	return nil
}

// Fix fixes the cause of saga id's broken compensations: from now on they succeed.
func (p *Provider) Fix(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fixed[id] = true
}

// Drain waits until every charge held in flight has landed.
func (p *Provider) Drain() { p.inflight.Wait() }

// ChargeOf says whether a charge landed under the forward token tok, how many refunds were
// applied to it, and whether a refund concluded that there was nothing to undo.
func (p *Provider) ChargeOf(tok string) (charged bool, refunds int, nothing bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, charged = p.charges[tok]
	return charged, p.refunds[tok], p.nothing[tok]
}

// Totals counts every charge and refund.
func (p *Provider) Totals() (charges, refunds int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, n := range p.refunds {
		refunds += n
	}
	return len(p.charges), refunds
}

// Calls counts the calls of saga id's activities that reached the provider, by "id/Activity"
// (a compensation refused as broken does not count).
func (p *Provider) Calls(id string) map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Collect(func(yield func(string, int) bool) {
		for k, v := range p.calls {
			if strings.HasPrefix(k, id+"/") && !yield(k, v) {
				return
			}
		}
	})
}

// RefundRan reports an error when the charge under tok landed and was not refunded although the
// refund is not broken in pl: what must hold while the saga waits for an operator after
// another compensation failed for good.
func (p *Provider) RefundRan(pl Plan, tok string) error {
	charged, refunds, _ := p.ChargeOf(tok)
	if charged && !slices.Contains(pl.Broken, "Refund") && refunds != 1 {
		return errors.New("the refund did not run while another compensation had failed for good")
	}
	return nil
}

func token(ctx context.Context) string {
	tok, _ := keys.TokenFrom(ctx)
	return tok.String()
}

func forward(ctx context.Context) string {
	tok, _ := keys.CompensatesFrom(ctx)
	return tok.String()
}
