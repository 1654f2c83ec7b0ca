package engine

import (
	"runtime"
	"sync"
)

// group is the group commit that completions and reservations share: requests that arrive
// while a batch is being written wait for it and then go out together, in one statement and one
// commit, so that under load one WAL flush serves many receipts. There is no timer: a request
// that finds nothing in flight is written at once, by its caller's goroutine, so a lone attempt
// waits for nobody and pays no hand-off. One batch is in flight at a time.
//
// Under load, attempts arrive in cohorts: the batch that answers a dozen reservations sends a
// dozen callers on to their completions at once. The first of them to arrive would write its
// batch alone and the rest would wait a round trip for it, so every cohort cost two batches
// where one would do. So when the last batch held more than one request, the request that finds
// nothing in flight first yields the processor (gather) to the goroutines that are ready to
// run, as long as each yield brings more requests. A lone attempt's last batch held one: it
// does not yield.
type group[R any] struct {
	mu      sync.Mutex
	queue   []R
	writing bool // a batch is in flight; the queue is empty whenever it is false
	crowded bool // the last batch taken held more than one request
	// yield gives the processor to other goroutines (runtime.Gosched when nil); a test's
	// stands in for the goroutines that run meanwhile.
	yield func()
}

// add queues r, and writes batches until the queue is empty when nothing was in flight. take
// removes the next batch from the queue (called with mu held); send writes it and answers each
// of its requests.
func (g *group[R]) add(r R, take func() []R, send func([]R)) {
	g.mu.Lock()
	g.queue = append(g.queue, r)
	lead := !g.writing
	g.writing = true
	crowded := g.crowded
	g.mu.Unlock()
	if lead {
		if crowded {
			g.gather()
		}
		g.writeNext(take, send) // its batch is r, with whatever queued before it takes it
	}
}

// maxGather bounds the yields of a leader before it takes its batch. It is a bound, not a
// wait: gathering stops at the first yield that brings no request.
const maxGather = 64

// gather yields for as long as each yield brought more requests, up to a full batch or
// maxGather yields.
func (g *group[R]) gather() {
	yield := g.yield
	if yield == nil {
		yield = runtime.Gosched
	}
	g.mu.Lock()
	n := len(g.queue)
	g.mu.Unlock()
	for range maxGather {
		yield()
		g.mu.Lock()
		m := len(g.queue)
		g.mu.Unlock()
		if m == n || m >= maxBatch {
			return
		}
		n = m
	}
}

// writeNext writes the next batch, then hands what queued meanwhile to a new writer.
func (g *group[R]) writeNext(take func() []R, send func([]R)) {
	g.mu.Lock()
	batch := take()
	g.crowded = len(batch) > 1
	g.mu.Unlock()
	send(batch)
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) == 0 {
		g.writing = false
		return
	}
	go g.writeNext(take, send)
}
