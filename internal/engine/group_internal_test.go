package engine

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// A lone request is written at once, by its caller, in a batch of its own, and the group does
// not yield for it: its last batch held one request.
func TestGroupWritesALoneRequestAtOnce(t *testing.T) {
	t.Parallel()
	g := &group[int]{yield: func() { t.Fatal("a lone request yielded") }}
	var batches [][]int
	for i := range 3 {
		g.add(i, g.takeAll, func(b []int) { batches = append(batches, b) })
		require.Len(t, batches, i+1, "add returns after its batch is written")
	}
	require.Equal(t, [][]int{{0}, {1}, {2}}, batches)
}

// After a batch of several, the next request that finds nothing in flight yields while each yield
// brings more requests (a cohort of attempts released by one batch), then writes them in one
// batch; it stops at the first yield that brings none.
func TestGroupGathersACohortAfterACrowdedBatch(t *testing.T) {
	t.Parallel()
	g := &group[int]{crowded: true}
	arrivals := [][]int{{1, 2}, {3}, {4, 5, 6}, nil, {7}}
	yields := 0
	g.yield = func() {
		// The goroutines that run while the leader yields queue their requests.
		if yields < len(arrivals) {
			g.mu.Lock()
			g.queue = append(g.queue, arrivals[yields]...)
			g.mu.Unlock()
		}
		yields++
	}
	var batches [][]int
	g.add(0, g.takeAll, func(b []int) { batches = append(batches, slices.Clone(b)) })
	require.Equal(t, 4, yields, "gathering stops at the first yield that brings nothing")
	require.Equal(t, [][]int{{0, 1, 2, 3, 4, 5, 6}}, batches)
	require.True(t, g.crowded)

	// A batch of one since: the next request goes at once.
	g = &group[int]{yield: func() { t.Fatal("yielded after a batch of one") }}
	g.add(0, g.takeAll, func([]int) {})
	require.False(t, g.crowded)
	g.add(1, g.takeAll, func([]int) {})
}

// Gathering is bounded: requests that keep arriving at every yield do not keep the leader
// from writing.
func TestGroupGatherIsBounded(t *testing.T) {
	t.Parallel()
	g := &group[int]{crowded: true}
	yields := 0
	g.yield = func() {
		yields++
		g.mu.Lock()
		g.queue = append(g.queue, yields)
		g.mu.Unlock()
	}
	var sizes []int
	g.add(0, g.takeAll, func(b []int) { sizes = append(sizes, len(b)) })
	require.Equal(t, maxGather, yields)
	require.Equal(t, []int{maxGather + 1}, sizes)
}

// takeAll takes the whole queue, as a take with no bounds would.
func (g *group[R]) takeAll() []R {
	b := g.queue
	g.queue = nil
	return b
}
