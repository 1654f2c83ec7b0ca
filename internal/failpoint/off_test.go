//go:build !tempotent_failpoints

package failpoint_test

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/failpoint"
)

// TestHitWithoutTagIgnoresEnv runs this test binary again with every point armed to kill, and
// requires every Hit to return: a build without the tag never reads the environment. The
// environment is read at start-up in a tagged build, hence the second process.
func TestHitWithoutTagIgnoresEnv(t *testing.T) {
	points := []string{failpoint.AfterReserve, failpoint.AfterDownstream, failpoint.AfterComplete, failpoint.InCompensation}
	if os.Getenv("TEMPOTENT_FAILPOINT_CHILD") == "1" {
		for _, p := range points {
			failpoint.Hit(p)
		}
		os.Stdout.WriteString("every Hit returned\n")
		return
	}
	t.Parallel()
	spec := ""
	for _, p := range points {
		spec += p + "=kill,"
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHitWithoutTagIgnoresEnv$", "-test.count=1")
	cmd.Env = append(os.Environ(), failpoint.EnvVar+"="+spec, "TEMPOTENT_FAILPOINT_CHILD=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "output:\n%s", out)
	require.Contains(t, string(out), "every Hit returned")
	require.NotContains(t, string(out), "reached")
}
