package keys_test

import (
	"testing"

	"github.com/tempotent/tempotent/internal/leaktest"
)

// TestMain checks that no test leaves goroutines behind: the workflow tests run Temporal's test
// environment, which starts its own.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}
