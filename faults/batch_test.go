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

	"github.com/tempotent/tempotent/downstream/fakepay"
	"github.com/tempotent/tempotent/samples/payment"
)

// A payout of 1,000 sellers in one activity, its worker SIGKILLed at random sellers: each retry
// replays the sellers already paid (their receipts read in one statement) and takes over the
// ones in flight with their own tokens. Every seller is paid exactly once — at a provider that
// deduplicates on the token, and at a gateway that ignores it, where the sellers in flight at a
// kill are reconciled (asked of the gateway's lookup) instead of paid again.
func TestBatchKilledAtRandomItems(t *testing.T) {
	for _, tc := range []struct {
		name, gateway string
		kills         int
	}{
		{"deduplicating provider", "", 3},
		// Fewer kills: a seller reserved but not yet sent when its worker died is paid only once
		// the gateway's settle time (15 s) has passed without its transfer showing up.
		{"gateway that ignores keys", payment.GatewayLegacy, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOptions{})
			p := payment.Payout{ID: w.queue + "-payout", Faults: "slow=20ms", Gateway: tc.gateway, Sellers: make([]payment.Seller, 1000)}
			for i := range p.Sellers {
				p.Sellers[i] = payment.Seller{ID: fmt.Sprintf("seller-%04d", i), Account: "tok_visa", Amount: int64(100 + i), Currency: "eur"}
			}
			r, restarted := w.payoutUnderKills(p, tc.kills)
			require.Len(t, r.Transfers, len(p.Sellers))
			require.Empty(t, r.Refused)
			require.Greater(t, r.Attempt, int32(tc.kills), "the payout finished before the kills")

			ledger := w.ledger()
			perSeller := map[string]int{}
			for _, c := range payoutCharges(ledger, p.ID) {
				perSeller[c.Description]++
			}
			for _, s := range p.Sellers {
				require.Equal(t, 1, perSeller[payment.PayoutDescription(p.ID, s.ID)], "seller %s", s.ID)
			}
			resumed := 0
			for _, wp := range restarted {
				resumed += wp.logged("tempotent: batch resumed")
			}
			require.GreaterOrEqual(t, resumed, tc.kills, "a worker after a kill did not resume the batch from its receipts")
			// A provider that deduplicates would hide a batch that sends every seller again; what
			// the receipts add is that a seller settled before a kill is replayed, not sent. Only
			// the sellers in flight at a kill (eight at once) may reach the provider twice.
			sentAgain := 0
			for _, c := range payoutCharges(ledger, p.ID) {
				if ledger.RequestsByKey[c.Key] > 1 {
					sentAgain++
				}
			}
			t.Logf("sellers sent again after a kill: %d", sentAgain)
			require.LessOrEqual(t, sentAgain, tc.kills*8, "settled sellers were sent to the provider again")
			require.Zero(t, w.pending())
		})
	}
}

// payoutUnderKills runs the payout on a worker that it SIGKILLs `kills` times, each at a random
// seller some way past the one before, starting a new worker each time, and returns the
// payout's result and the workers started after a kill.
func (w *world) payoutUnderKills(p payment.Payout, kills int) (payment.PayoutResult, []*workerProc) {
	w.t.Helper()
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 0))
	w.t.Logf("seed %d", seed)
	worker := w.startWorker()
	run, err := w.temporal.client.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: p.ID, TaskQueue: w.queue}, "PayoutWorkflow", p)
	require.NoError(w.t, err)
	paid := func() int { return len(payoutCharges(w.ledger(), p.ID)) }
	var restarted []*workerProc
	for kill := range kills {
		at := paid() + 50 + rng.IntN(200) // somewhere in the next stretch, never after the end
		require.Eventually(w.t, func() bool { return paid() >= at }, 3*time.Minute, 10*time.Millisecond,
			"kill %d: the batch did not reach seller %d", kill+1, at)
		worker.Kill()
		w.t.Logf("kill %d at %d sellers paid", kill+1, paid())
		worker = w.startWorker()
		restarted = append(restarted, worker)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var r payment.PayoutResult
	require.NoError(w.t, run.Get(ctx, &r))
	return r, restarted
}

func payoutCharges(l fakepay.Ledger, payoutID string) []fakepay.LedgerCharge {
	var out []fakepay.LedgerCharge
	for _, c := range l.Charges {
		if strings.HasPrefix(c.Description, "payout "+payoutID+"/") {
			out = append(out, c)
		}
	}
	return out
}
