package keys_test

import (
	"testing"

	"go.temporal.io/sdk/worker"

	"github.com/tempotent/tempotent/internal/leaktest"
)

// TestMain checks that no test leaves goroutines behind: the workflow tests run Temporal's test
// environment, which starts its own.
//
// It also turns the workers' workflow cache off, before any worker is made: every workflow task
// of the dev-server tests then replays the workflow's history from the start, as a worker that
// restarted or evicted the workflow would, and the keys of the activities it schedules next must
// come out as they would have from a cached workflow (pins, occurrence counters, epochs).
func TestMain(m *testing.M) {
	worker.SetStickyWorkflowCacheSize(0)
	leaktest.VerifyTestMain(m)
}
