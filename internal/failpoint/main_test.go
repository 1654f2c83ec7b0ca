package failpoint

import (
	"testing"

	"github.com/tempotent/tempotent/internal/leaktest"
)

// TestMain fails the test binary if a goroutine outlives the tests: with the failpoints tag they
// start child processes and read their output on goroutines of their own.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}
