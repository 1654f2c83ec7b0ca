package migrate_test

import (
	"testing"

	"github.com/tempotent/tempotent/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
