package demo

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The watch finds the failpoint's line however the worker's stderr is cut into writes, and
// nothing before it.
func TestReachedWatchFindsTheLineAcrossWrites(t *testing.T) {
	line := "worker log\nfailpoint " + redeliverPoint + " reached\nmore\n"
	for cut := 1; cut < len(line); cut++ {
		r := newReachedWatch()
		_, _ = r.Write([]byte(line[:cut]))
		if strings.Contains(line[:cut], string(reachedLine)) {
			require.True(t, isClosed(r.reached), "cut %d", cut)
			continue
		}
		require.False(t, isClosed(r.reached), "reached before the line, cut %d", cut)
		_, _ = r.Write([]byte(line[cut:]))
		require.True(t, isClosed(r.reached), "cut %d", cut)
		_, _ = r.Write([]byte(line)) // again: no second close
	}
	r := newReachedWatch()
	_, _ = r.Write([]byte("failpoint " + "outbox.after-publish reached\n"))
	require.False(t, isClosed(r.reached), "another point's line")
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
