package demo_test

import (
	"testing"

	"github.com/tempotent/tempotent/internal/leaktest"
)

// TestMain fails the test binary if a goroutine outlives the tests: the demo starts worker processes, fakepay servers and a Temporal dev server, and waits for them on goroutines.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}
