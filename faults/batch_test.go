//go:build unix

package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/tempotent/tempotent/samples/payment"
)

// A payout of 1,000 sellers in one activity, its worker SIGKILLed at random sellers three
// times: each retry replays the sellers already paid (their receipts read in one statement) and
// takes over the ones in flight with their own tokens. Every seller is paid exactly once.
func TestBatchKilledAtRandomItems(t *testing.T) {
	w := newWorld(t, worldOptions{})
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)

	p := payment.Payout{ID: w.queue + "-payout", Faults: "slow=20ms", Sellers: make([]payment.Seller, 1000)}
	for i := range p.Sellers {
		p.Sellers[i] = payment.Seller{ID: fmt.Sprintf("seller-%04d", i), Account: "tok_visa", Amount: int64(100 + i), Currency: "eur"}
	}
	worker := w.startWorker()
	run, err := w.temporal.client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: p.ID, TaskQueue: w.queue}, "PayoutWorkflow", p)
	require.NoError(t, err)

	paid := func() map[string]int {
		perSeller := map[string]int{}
		for _, c := range w.ledger().Charges {
			if strings.HasPrefix(c.Description, "payout "+p.ID+"/") {
				perSeller[c.Description]++
			}
		}
		return perSeller
	}
	workers := []*workerProc{worker}
	for kill := range 3 {
		// Somewhere in the next stretch of the batch, never after its end.
		at := len(paid()) + 50 + rng.IntN(200)
		require.Eventually(t, func() bool { return len(paid()) >= at }, 2*time.Minute, 10*time.Millisecond,
			"kill %d: the batch did not reach seller %d", kill+1, at)
		worker.Kill()
		t.Logf("kill %d at %d sellers paid", kill+1, len(paid()))
		worker = w.startWorker()
		workers = append(workers, worker)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var r payment.PayoutResult
	require.NoError(t, run.Get(ctx, &r))
	require.Len(t, r.Transfers, len(p.Sellers))
	require.Empty(t, r.Refused)

	perSeller := paid()
	for _, s := range p.Sellers {
		require.Equal(t, 1, perSeller[payment.PayoutDescription(p.ID, s.ID)], "seller %s", s.ID)
	}
	// The provider deduplicates on the token, so the count above would hold even if every retry
	// sent every seller again. What the receipts add: a seller settled before a kill is replayed,
	// not sent again. Only the sellers in flight at a kill (eight at once) may have been sent twice.
	ledger := w.ledger()
	sentAgain := 0
	for _, c := range ledger.Charges {
		if strings.HasPrefix(c.Description, "payout "+p.ID+"/") && ledger.RequestsByKey[c.Key] > 1 {
			sentAgain++
		}
	}
	t.Logf("sellers sent again after a kill: %d", sentAgain)
	require.LessOrEqual(t, sentAgain, 3*8, "settled sellers were sent to the provider again")
	resumed := 0
	for _, wp := range workers[1:] {
		resumed += wp.logged("tempotent: batch resumed")
	}
	require.GreaterOrEqual(t, resumed, 3, "a worker after a kill did not resume the batch from its receipts")
	require.Zero(t, w.pending())
}
