package fakepay

import (
	"context"
	"time"
)

// asyncSources are the sources whose charges are confirmed later, as with 3-D Secure or a bank
// debit: the charge is "processing" for WebhookConfig.AsyncDelay, then succeeds (true) or
// fails (false).
var asyncSources = map[string]bool{"tok_async": true, "tok_asyncDeclined": false}

// settlement is when a processing charge settles. It is state, so a restarted fakepay settles
// what the last one left processing.
type settlement struct {
	Charge string    `json:"charge"`
	At     time.Time `json:"at"`
}

// startProcessing marks the new charge c as processing until AsyncDelay from now. It is called
// under s.mu.
func (s *Server) startProcessing(c *charge) {
	c.Status = "processing"
	s.st.Settling = append(s.st.Settling, settlement{Charge: c.ID, At: time.Now().Add(s.cfg.Webhooks.AsyncDelay)})
	s.background()
	notify(s.wakeSettler)
}

// settler settles processing charges when their time comes, until ctx is done.
func (s *Server) settler(ctx context.Context) {
	defer s.wg.Done()
	for {
		if !sleep(ctx, s.settleDue(), s.wakeSettler) {
			return
		}
	}
}

// settleDue settles the charges whose time has come, in the order they were made, and returns
// how long until the next one.
func (s *Server) settleDue() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	wait := idle
	var rest []settlement
	for _, st := range s.st.Settling {
		if st.At.After(now) {
			rest = append(rest, st)
			wait = min(wait, st.At.Sub(now))
			continue
		}
		s.settle(s.st.findCharge(st.Charge))
	}
	if len(rest) < len(s.st.Settling) {
		s.st.Settling = rest
		s.save()
	}
	return wait
}

// settle ends c's processing as its source says, with the event of that change.
func (s *Server) settle(c *charge) {
	if asyncSources[c.Source] {
		c.Status = "succeeded"
		s.emit(EventChargeSucceeded, c)
		return
	}
	c.Status = "failed"
	s.emit(EventChargeFailed, c)
}
