package keys_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that no test leaves goroutines behind: the workflow tests run Temporal's test
// environment, which starts its own.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
