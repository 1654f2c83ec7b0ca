package keys_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/keys"
)

// TestFingerprintNotComparable builds, as a user's code would, a package that compares two
// Fingerprints with == and != and keys a map by one, and requires the compiler to refuse each of
// them: Matches is the comparison, and == would call a version-1 and a version-2 fingerprint of
// one request different. The package is laid into this module through a build overlay, so nothing
// is written into the source tree.
func TestFingerprintNotComparable(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs the go command")
	}
	const probe = `package probe

import "github.com/tempotent/tempotent/keys"

func equal(a, b keys.Fingerprint) bool    { return a == b }
func notEqual(a, b keys.Fingerprint) bool { return a != b }

var byFingerprint map[keys.Fingerprint]int
`
	dir := t.TempDir()
	src := filepath.Join(dir, "probe.go")
	require.NoError(t, os.WriteFile(src, []byte(probe), 0o600))
	here, err := os.Getwd()
	require.NoError(t, err)
	// A directory that does not exist below this package, inside the module, so that the probe
	// imports keys from this checkout.
	virtual := filepath.Join(here, "fingerprintprobe", "probe.go")
	overlay, err := json.Marshal(map[string]any{"Replace": map[string]string{virtual: src}})
	require.NoError(t, err)
	overlayFile := filepath.Join(dir, "overlay.json")
	require.NoError(t, os.WriteFile(overlayFile, overlay, 0o600))

	out, err := exec.Command("go", "build", "-overlay", overlayFile, "./fingerprintprobe").CombinedOutput()
	require.Error(t, err, "comparing Fingerprints with == compiled:\n%s", out)
	msg := string(out)
	for _, line := range []string{
		"probe.go:5:", // a == b
		"probe.go:6:", // a != b
		"probe.go:8:", // the map key
	} {
		require.Contains(t, msg, line, "the compiler should refuse this line of the probe")
	}
	require.Equal(t, 2, strings.Count(msg, "cannot be compared"), "== and != each refused as a comparison:\n%s", msg)
	require.Contains(t, msg, "invalid map key type", "a Fingerprint map key refused:\n%s", msg)
	require.NotContains(t, msg, "no Go files", "the overlay did not place the probe in the module:\n%s", msg)
}

// TestFingerprintMatchesIsEquality checks that Matches is what "the same request" means where
// the fields differ: a request built with an empty slice and the same request built with a nil
// slice get fingerprints whose Version differs and whose Sum is equal, and Matches (both ways)
// says they are the same request, while a request with other content does not match either.
func TestFingerprintMatchesIsEquality(t *testing.T) {
	t.Parallel()
	type order struct{ Items []string }
	empty, err := keys.FingerprintOf(order{Items: []string{}})
	require.NoError(t, err)
	nilItems, err := keys.FingerprintOf(order{})
	require.NoError(t, err)
	other, err := keys.FingerprintOf(order{Items: []string{"x"}})
	require.NoError(t, err)

	require.NotEqual(t, empty.Version, nilItems.Version, "the fields differ")
	require.Equal(t, empty.Sum, nilItems.Sum)
	require.True(t, empty.Matches(nilItems))
	require.True(t, nilItems.Matches(empty))
	require.True(t, empty.Matches(empty))
	require.False(t, other.Matches(empty))
	require.False(t, nilItems.Matches(other))

	// A keyed literal still builds a Fingerprint outside the package.
	rebuilt := keys.Fingerprint{Version: nilItems.Version, Sum: nilItems.Sum}
	require.True(t, rebuilt.Matches(empty))
	require.Equal(t, nilItems.String(), rebuilt.String())
}
