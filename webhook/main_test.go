package webhook_test

import (
	"testing"

	"github.com/tempotent/tempotent/internal/leaktest"
)

// TestMain fails the binary if a goroutine outlives the tests: the handler tests run concurrent
// requests and pools of their own.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
