// Package leaktest is the TestMain of this module's test binaries: it runs the tests and then
// fails the binary if a goroutine outlived them (go.uber.org/goleak), as river's
// riversharedtest.WrapTestMain does.
package leaktest

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/tempotent/tempotent/internal/pgtest"
)

// VerifyTestMain runs m's tests, closes pgtest's shared pool (it lives as long as the binary, so
// its health checker is no leak), and then fails the binary if any goroutine is left. opts are
// the package's own ignores; each must say why its goroutine may outlive the tests.
//
// A package calls it from its TestMain:
//
//	func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }
func VerifyTestMain(m *testing.M, opts ...goleak.Option) {
	goleak.VerifyTestMain(closingPool{m}, opts...)
}

// closingPool closes the shared pool once the tests have run, before goleak looks.
type closingPool struct{ m *testing.M }

func (c closingPool) Run() int {
	code := c.m.Run()
	pgtest.Close()
	return code
}
