package activity_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A first run of a batch pays one round trip per item, its completion: its items are reserved
// ahead, a chunk per statement (chunks of 2, 4, 8 … at Concurrency 1), after the one statement
// that reads the receipts of them all.
func TestForEachFirstRunRoundTrips(t *testing.T) {
	t.Parallel()
	s, _, trips := countedStore(t)
	p := newPayouts()
	payees := payeesN(100)
	before := trips.RoundTrips()
	_, err := runPayOut(t, s, p, payees, 1)
	require.NoError(t, err)
	const read, chunks = 1, 6 // 2 + 4 + 8 + 16 + 32 + 38
	require.Equal(t, int64(read+chunks+len(payees)), trips.RoundTrips()-before, "round trips of a first run of 100 items")
	p.requireEachPaidOnce(t, payees)
}
