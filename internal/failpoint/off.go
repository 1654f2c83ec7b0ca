//go:build !tempotent_failpoints

package failpoint

// Hit does nothing: this build has no failpoints (see the package comment). It is empty so that
// the compiler inlines it away at every call site.
func Hit(string) {}
