package webhook_test

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/webhook"
)

// messages is a slog.Handler that keeps the messages logged through it.
type messages struct {
	mu   sync.Mutex
	said []string
}

func (m *messages) Enabled(context.Context, slog.Level) bool { return true }
func (m *messages) Handle(_ context.Context, r slog.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.said = append(m.said, r.Message)
	return nil
}
func (m *messages) WithAttrs([]slog.Attr) slog.Handler { return m }
func (m *messages) WithGroup(string) slog.Handler      { return m }

// count is how many messages logged so far contain s.
func (m *messages) count(s string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, said := range m.said {
		if strings.Contains(said, s) {
			n++
		}
	}
	return n
}

// A scheduled flush that fails says so in the handler's log, which is where an operator learns
// that the tallies stopped; one that succeeds says nothing of them.
func TestTallyFlushFailureIsLogged(t *testing.T) {
	t.Parallel()
	log := &messages{}
	k := newTallyHook(t, webhook.HandlerConfig{Logger: slog.New(log)})
	header, body := forged("evt_1")
	const failed = "webhook tallies not recorded"

	require.Equal(t, http.StatusUnauthorized, k.send(t, http.MethodPost, header, body))
	k.timer.fire(t)
	require.Equal(t, 1, k.statements(t))
	require.Zero(t, log.count(failed), "a flush that was written was logged as failed")

	require.Equal(t, http.StatusUnauthorized, k.send(t, http.MethodPost, header, body))
	k.exec(t, "DROP TABLE {{schema}}.webhook_tallies")
	k.timer.fire(t)
	require.Equal(t, 1, log.count(failed), "a flush the database refused was not logged")
}
