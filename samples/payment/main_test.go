package payment_test

import (
	"testing"

	"github.com/tempotent/tempotent/internal/leaktest"
)

// TestMain fails the test binary if a goroutine outlives the tests: the sample's migrations run on concurrent pools.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}
