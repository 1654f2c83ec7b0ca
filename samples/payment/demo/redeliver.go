package demo

import (
	"bytes"
	"sync"

	"github.com/tempotent/tempotent/internal/failpoint"
)

// The demo makes the outbox deliver a message twice, as a crash does: its worker is built with
// failpoints (failpoint.Tag), and the first one is armed to pause the shipment notifier right
// after it commits a reservation message and before it answers, so that the dispatcher has
// published the message and not marked it. The demo then SIGKILLs that worker. The next worker
// claims the message again once the dead one's lease ends (outboxLease) and delivers it again;
// the notifier's inbox acknowledges it without running: "consumer duplicates absorbed".
const (
	redeliverPoint = failpoint.AfterConsume
	// outboxLease is the dispatchers' lease in the demo (TEMPOTENT_OUTBOX_LEASE): how long a
	// killed worker's claims keep the next worker off its messages.
	outboxLease = "5s"
)

// reachedWatch is the armed worker's stderr, after its log: it closes reached at the first
// line saying that the failpoint was reached.
type reachedWatch struct {
	mu      sync.Mutex
	tail    []byte
	seen    bool
	reached chan struct{}
}

var reachedLine = []byte("failpoint " + redeliverPoint + " reached")

func newReachedWatch() *reachedWatch { return &reachedWatch{reached: make(chan struct{})} }

func (r *reachedWatch) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.seen {
		return len(p), nil
	}
	r.tail = append(r.tail, p...)
	if bytes.Contains(r.tail, reachedLine) {
		r.seen, r.tail = true, nil
		close(r.reached)
		return len(p), nil
	}
	// Keep what could be the start of the line, split across writes.
	if keep := len(reachedLine) - 1; len(r.tail) > keep {
		r.tail = append(r.tail[:0], r.tail[len(r.tail)-keep:]...)
	}
	return len(p), nil
}
