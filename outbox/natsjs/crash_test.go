//go:build unix

package natsjs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/proc"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/outbox/natsjs"
)

// A dispatcher process publishes a batch to the stream and is SIGKILLed (by the failpoint
// outbox.after-publish) before it records any of it. After the lease, a second dispatcher
// publishes every message again; the stream acks each as a duplicate, and still holds each
// message once.
func TestDispatcherKilledBetweenPublishAndMark(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	js := connect(t, s)
	createStream(t, js, "ORDERS", window, "order.>")
	o, schema := setupOutbox(t)
	ids := []string{"a0", "a1", "b0", "free"}
	put(t, o,
		outbox.Message{ID: "a0", Topic: "order.placed", OrderingKey: "a"},
		outbox.Message{ID: "b0", Topic: "order.placed", OrderingKey: "b"},
		outbox.Message{ID: "free", Topic: "order.shipped"})
	put(t, o, outbox.Message{ID: "a1", Topic: "order.paid", OrderingKey: "a"})

	bin := filepath.Join(t.TempDir(), "crashdispatch")
	// The tag compiles the failpoints in; without it the child would record its batch.
	require.NoError(t, proc.Build(context.Background(), bin, "./testdata/crashdispatch", failpoint.Tag))
	const lease = 2 * time.Second
	cmd := exec.Command(bin, "-nats", s.ClientURL(), "-db", pgtest.URL(), "-schema", schema, "-stream", "ORDERS", "-lease", lease.String())
	cmd.Env = append(os.Environ(), failpoint.EnvVar+"="+failpoint.AfterPublish+"=kill")
	var output bytes.Buffer
	cmd.Stdout, cmd.Stderr = &output, &output
	p, err := proc.Start(cmd)
	require.NoError(t, err)
	t.Cleanup(p.Kill)
	select {
	case <-p.Exited():
		err = p.Wait()
	case <-time.After(time.Minute):
		p.Kill()
		t.Fatalf("the child neither reached the failpoint nor ended within a minute:\n%s", output.String())
	}
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "the child was to be killed at the failpoint; it ended with %v:\n%s", err, output.String())
	require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal(), "output:\n%s", output.String())
	require.Contains(t, output.String(), "failpoint "+failpoint.AfterPublish+" reached")

	// Published, not recorded: one batch took a0, b0 and free (a1 waits behind a0).
	require.ElementsMatch(t, []string{"a0", "b0", "free"}, streamIDs(t, js))
	st, err := o.Stats(context.Background())
	require.NoError(t, err)
	require.EqualValues(t, 4, st.Pending, "the killed dispatcher recorded something")

	var published atomic.Int32
	pub, err := natsjs.New(context.Background(), js, "ORDERS", nil)
	require.NoError(t, err)
	counting := outbox.PublisherFunc(func(ctx context.Context, d outbox.Delivery) error {
		published.Add(1)
		return pub.Publish(ctx, d)
	})
	second := newDispatcher(t, o, counting, outbox.DispatcherConfig{Lease: lease})
	drain(t, second, o)
	require.EqualValues(t, 4, published.Load(), "the second dispatcher publishes the three unrecorded messages again, and a1")
	got := streamIDs(t, js)
	require.ElementsMatch(t, ids, got, "the stream must hold each message once")
	require.Equal(t, "a1", got[3], "a1 was published before a0 was recorded")
	for _, m := range contents(t, js, "ORDERS") {
		require.Equal(t, "1", m.Attempt, "%s: the stream keeps the first publish", m.ID)
	}
	for _, id := range []string{"a0", "b0", "free"} {
		var attempts int
		require.NoError(t, pgtest.Pool(t).QueryRow(context.Background(),
			fmt.Sprintf("SELECT attempts FROM %s.outbox WHERE id = $1 AND state = 'delivered'", schema), id).Scan(&attempts))
		require.Equal(t, 2, attempts, "%s was delivered at its second claim", id)
	}
}

// streamIDs returns the message IDs that stream ORDERS holds, in stream order.
func streamIDs(t *testing.T, js jetstream.JetStream) []string {
	t.Helper()
	var ids []string
	for _, m := range contents(t, js, "ORDERS") {
		ids = append(ids, m.ID)
	}
	return ids
}
