package downstream_test

import (
	"testing"

	"github.com/tempotent/tempotent/internal/leaktest"
)

// TestMain fails the test binary if a goroutine outlives the tests: they serve and send HTTP requests, whose connections have goroutines of their own.
func TestMain(m *testing.M) {
	leaktest.VerifyTestMain(m)
}
