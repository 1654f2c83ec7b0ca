package worker_test

import (
	"testing"

	"github.com/tempotent/tempotent/internal/leaktest"
)

// TestMain fails the test binary if a goroutine outlives the tests: Start opens a pool and a Temporal client, and their goroutines must end with Close.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}
