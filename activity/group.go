package activity

import "sync"

// group is the group commit that completions and reservations share: requests that arrive
// while a batch is being written wait for it and then go out together, in one statement and one
// commit, so that under load one WAL flush serves many receipts. There is no timer: a request
// that finds nothing in flight is written at once, by its caller's goroutine, in a batch of its
// own, so a lone attempt waits for nobody and pays no hand-off. One batch is in flight at a
// time.
type group[R any] struct {
	mu      sync.Mutex
	queue   []R
	writing bool // a batch is in flight; the queue is empty whenever it is false
}

// add queues r, and writes batches until the queue is empty when nothing was in flight. take
// removes the next batch from the queue (called with mu held); send writes it and answers each
// of its requests.
func (g *group[R]) add(r R, take func() []R, send func([]R)) {
	g.mu.Lock()
	g.queue = append(g.queue, r)
	lead := !g.writing
	g.writing = true
	g.mu.Unlock()
	if lead {
		g.writeNext(take, send) // its batch is r, with whatever queued in the moment before it takes it
	}
}

// writeNext writes the next batch, then hands what queued meanwhile to a new writer.
func (g *group[R]) writeNext(take func() []R, send func([]R)) {
	g.mu.Lock()
	batch := take()
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
