package outbox

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSignalDedupExplore drives SignalDedup with seeded random streams of message IDs (repeats
// close together and far apart, empty IDs) and continue-as-new (a JSON round trip of its state)
// at random points, against a reference model: an ID is first unless it is among the last Max
// distinct non-empty IDs seen.
func TestSignalDedupExplore(t *testing.T) {
	t.Parallel()
	for seed := range uint64(300) {
		rng := rand.New(rand.NewPCG(seed, 40))
		maxIDs := []int{0, -3, 1, 2, 5, 17}[rng.IntN(6)]
		limit := maxIDs
		if limit <= 0 {
			limit = SignalDedupMaxDefault
		}
		d := SignalDedup{Max: maxIDs}
		var model []string // remembered IDs, oldest first
		ids := 1 + rng.IntN(3*limit%40+3)
		for step := range 200 {
			id := fmt.Sprintf("m%d", rng.IntN(ids))
			if rng.IntN(20) == 0 {
				id = ""
			}
			want := id == "" || !slices.Contains(model, id)
			if want && id != "" {
				model = append(model, id)
				if len(model) > limit {
					model = model[1:]
				}
			}
			require.Equal(t, want, d.First(id), "seed %d step %d: First(%q) with Max %d, remembering %v", seed, step, id, maxIDs, model)
			if rng.IntN(10) == 0 { // continue as new: the state crosses as JSON
				raw, err := json.Marshal(d)
				require.NoError(t, err)
				d = SignalDedup{}
				require.NoError(t, json.Unmarshal(raw, &d))
			}
			require.Equal(t, model, slices.Clip(d.IDs), "seed %d step %d", seed, step)
		}
	}
}
