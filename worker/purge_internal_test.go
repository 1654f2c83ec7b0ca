package worker

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
)

// inBatches asks for more until a short batch, and for no more than purgeMaxBatches batches a
// round; an error ends the round with what was purged before it.
func TestInBatches(t *testing.T) {
	t.Parallel()
	failed := errors.New("failed")
	for _, tc := range []struct {
		name        string
		backlog     int64
		failAt      int // call that fails, from 1; 0 for none
		wantPurged  int64
		wantCalls   int
		wantFailure bool
	}{
		{name: "Empty", backlog: 0, wantPurged: 0, wantCalls: 1},
		{name: "ShortBatch", backlog: 999, wantPurged: 999, wantCalls: 1},
		{name: "ExactlyABatch", backlog: purgeBatch, wantPurged: purgeBatch, wantCalls: 2},
		{name: "ABatchAndOne", backlog: purgeBatch + 1, wantPurged: purgeBatch + 1, wantCalls: 2},
		{name: "Bounded", backlog: 5 * purgeBatch * purgeMaxBatches, wantPurged: purgeBatch * purgeMaxBatches, wantCalls: purgeMaxBatches},
		{name: "Failure", backlog: 3 * purgeBatch, failAt: 2, wantPurged: purgeBatch, wantCalls: 2, wantFailure: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			left, calls := tc.backlog, 0
			purged, err := inBatches(client.MetricsNopHandler.Counter(""), func(limit int) (int64, error) {
				calls++
				if calls == tc.failAt {
					return 0, failed
				}
				n := min(left, int64(limit))
				left -= n
				return n, nil
			})
			require.Equal(t, tc.wantFailure, errors.Is(err, failed), "error %v", err)
			require.Equal(t, tc.wantPurged, purged)
			require.Equal(t, tc.wantCalls, calls)
		})
	}
}
