package fakepay_test

import (
	"testing"

	"github.com/tempotent/tempotent/internal/leaktest"
)

// TestMain fails the test binary if a goroutine outlives the tests: they start fakepay servers and processes and send them requests from other goroutines.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}
