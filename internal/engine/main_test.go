package engine_test

import (
	"testing"

	"github.com/tempotent/tempotent/internal/leaktest"
)

// TestMain fails the test binary if a goroutine outlives the tests: attempts run on goroutines
// of their own, and completions are written by a goroutine that hands on to the next.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
