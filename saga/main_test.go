package saga_test

import (
	"testing"

	"github.com/tempotent/tempotent/internal/leaktest"
)

// TestMain fails the test binary if a goroutine outlives the tests: they run sagas in Temporal's test environment, whose activities run on goroutines of their own.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}
