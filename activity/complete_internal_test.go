package activity

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/keys"
)

// A batch of completions is bounded by bytes as well as by count, takes at least one, and never
// holds two completions of one key.
func TestCompletionBatchesAreBoundedByBytes(t *testing.T) {
	t.Parallel()
	newCompletion := func(id string, resultBytes int) *completion {
		return &completion{key: keys.Key{Namespace: "ns", Operation: "op", ID: id}, outcome: outcome{state: StateCompleted, result: make([]byte, resultBytes)}}
	}
	q := &completions{}
	for i := range 10 {
		q.queue = append(q.queue, newCompletion(fmt.Sprint(i), 1<<20))
	}
	var sizes []int
	for len(q.queue) > 0 {
		batch := q.take()
		bytes := 0
		for _, c := range batch {
			bytes += c.outcome.size()
		}
		require.LessOrEqual(t, bytes, maxBatchBytes)
		sizes = append(sizes, len(batch))
	}
	require.Equal(t, []int{3, 3, 3, 1}, sizes)

	q.queue = []*completion{newCompletion("huge", 2*maxBatchBytes)}
	require.Len(t, q.take(), 1, "a completion larger than the bound must still be written")

	q.queue = []*completion{newCompletion("same", 1), newCompletion("same", 1), newCompletion("other", 1)}
	require.Len(t, q.take(), 2)
	require.Len(t, q.take(), 1)
}
