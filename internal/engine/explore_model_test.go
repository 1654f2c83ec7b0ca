// The explorer's model of the world: its keys, the results and the attempts as it tracks them,
// and the downstream, which deduplicates on the token or applies every request.

package engine

import (
	"errors"

	"go.temporal.io/sdk/temporal"

	"github.com/tempotent/tempotent/keys"
)

type explKey struct {
	key       keys.Key
	dedup     bool
	reconcile bool
	// batch: the key's calls run again safely (a Batch activity's own receipt: Call.runsAgain),
	// so that a retry reads and takes over in one statement (readTakeOver).
	batch     bool
	retired   bool // its finished receipt was purged: later attempts are beyond the horizon
	forgotten bool // the downstream forgot its token (past its key memory)
	// crashed: a crash lost its asynchronous reservation, and with it the time its token was
	// first sent. Its retries are safe only within the downstream's key memory (the README
	// states this limit), so the explorer does not let that memory pass for it.
	crashed  bool
	payloads [2]keys.Fingerprint
}

type explResult struct {
	Token   string `json:"token"`
	Payload int    `json:"payload"`
	Effect  int    `json:"effect"`
}

type explAttempt struct {
	id      int
	k       *explKey
	payload int
	store   *Store
	events  chan event

	candidate          reservation // the reservation of its last reserve or takeover
	holds              bool        // that reservation took the receipt
	reservation        reservation // the reservation it holds, when holds
	leaseEndedByFault  bool
	lost               bool // its reservation was lost in a crash
	inFn               bool
	heartbeatAfterLoss bool
	called             bool
	zombie             bool // it called although a fault had ended its lease
	// faultOutsideFn: the fault that ended its lease came while it was in the state machine,
	// not in the function: the state machine had the chance to check its lease again.
	faultOutsideFn bool
	storeFault     bool // a statement of its failed or lost its reply

	finished bool
	result   explResult
	err      error
}

// explDownstream is the external system: it deduplicates on the token (per key's choice) or
// applies every request; it can hold a request and apply it later, forget a token, decline.
type explDownstream struct {
	effects  map[keys.Token]int
	by       map[keys.Token]map[*explAttempt]int // effects by the attempt that sent them
	first    map[keys.Token]explResult           // the first effect's answer, which a lookup returns
	memory   map[keys.Token]explResult           // a deduplicating downstream's stored answers
	declined map[keys.Token]bool
	held     map[keys.Token][]heldRequest
	seq      int
}

func newExplDownstream() *explDownstream {
	return &explDownstream{effects: map[keys.Token]int{}, by: map[keys.Token]map[*explAttempt]int{}, first: map[keys.Token]explResult{},
		memory: map[keys.Token]explResult{}, declined: map[keys.Token]bool{}, held: map[keys.Token][]heldRequest{}}
}

// heldRequest is a request the downstream received and applies later.
type heldRequest struct {
	payload int
	from    *explAttempt
}

var errAnswerLost = errors.New("downstream: read: connection reset by peer")

func (d *explDownstream) call(k *explKey, tok keys.Token, payload int, mode action, from *explAttempt) (explResult, error) {
	if mode == callNotSent {
		return explResult{}, NotApplied(errors.New("downstream: dial tcp: connection refused"))
	}
	if k.dedup {
		switch {
		case len(d.held[tok]) > 0:
			return explResult{}, errors.New("downstream: 409 a request with this key is in flight")
		case d.declined[tok]:
			return explResult{}, temporal.NewNonRetryableApplicationError("card declined", "Declined", nil)
		}
		if r, ok := d.memory[tok]; ok {
			if r.Payload != payload {
				return explResult{}, temporal.NewNonRetryableApplicationError("keys can only be reused with the same parameters", "DownstreamMismatch", nil)
			}
			if mode == callLost {
				return explResult{}, errAnswerLost
			}
			return r, nil
		}
	}
	switch mode {
	case callDecline:
		if k.dedup {
			d.declined[tok] = true
		}
		return explResult{}, temporal.NewNonRetryableApplicationError("card declined", "Declined", nil)
	case callInFlight:
		d.held[tok] = append(d.held[tok], heldRequest{payload, from})
		return explResult{}, errors.New("downstream: context deadline exceeded (the request is held)")
	}
	r := d.apply(tok, payload, k.dedup, from)
	if mode == callLost {
		return explResult{}, errAnswerLost
	}
	return r, nil
}

func (d *explDownstream) apply(tok keys.Token, payload int, dedup bool, from *explAttempt) explResult {
	d.seq++
	d.effects[tok]++
	if d.by[tok] == nil {
		d.by[tok] = map[*explAttempt]int{}
	}
	d.by[tok][from]++
	r := explResult{Token: string(tok), Payload: payload, Effect: d.seq}
	if _, ok := d.first[tok]; !ok {
		d.first[tok] = r
	}
	if dedup {
		d.memory[tok] = r
	}
	return r
}

// land applies the requests held for tok and returns how many.
func (d *explDownstream) land(tok keys.Token, dedup bool) int {
	held := d.held[tok]
	delete(d.held, tok)
	for _, h := range held {
		if _, known := d.memory[tok]; dedup && known {
			continue // a deduplicating downstream applies one request per key
		}
		d.apply(tok, h.payload, dedup, h.from)
	}
	return len(held)
}

func (d *explDownstream) lookup(tok keys.Token) (explResult, bool) {
	r, ok := d.first[tok]
	return r, ok
}

func (d *explDownstream) forget(tok keys.Token) { delete(d.memory, tok); delete(d.declined, tok) }
