package inbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestLockTimeoutRoundsUpToWholeMilliseconds: Postgres takes lock_timeout in whole
// milliseconds. A configured timeout is rounded up, never down (a duplicate would give up
// earlier than configured) and never past the next millisecond (it would wait longer), and a
// timeout under a millisecond is 1ms, because "0ms" means no timeout at all.
func TestLockTimeoutRoundsUpToWholeMilliseconds(t *testing.T) {
	t.Parallel()

	tests := []struct {
		d    time.Duration
		want string
	}{
		{d: time.Nanosecond, want: "1ms"},
		{d: time.Microsecond, want: "1ms"},
		{d: time.Millisecond - 1, want: "1ms"},
		{d: time.Millisecond, want: "1ms"},
		{d: time.Millisecond + 1, want: "2ms"},
		{d: 2 * time.Millisecond, want: "2ms"},
		{d: 1500 * time.Microsecond, want: "2ms"},
		{d: 50 * time.Millisecond, want: "50ms"},
		{d: LockTimeoutDefault, want: "2000ms"},
	}
	for _, tc := range tests {
		require.Equal(t, tc.want, lockTimeout(tc.d), "lockTimeout(%v)", tc.d)
	}
}
