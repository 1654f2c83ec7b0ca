package natsjs_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/leaktest"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/outbox"
)

// TestMain fails the binary if a goroutine outlives the tests: the embedded servers, their
// clients and the dispatchers all run goroutines, which each test's cleanup must end.
func TestMain(m *testing.M) { leaktest.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// startServer runs a NATS server with JetStream in this process, storing in a temporary
// directory, listening on a free port of 127.0.0.1; it is shut down when t ends.
func startServer(t *testing.T) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      server.RANDOM_PORT,
		JetStream: true,
		StoreDir:  t.TempDir(),
		NoLog:     true,
		NoSigs:    true,
	})
	require.NoError(t, err)
	s.Start()
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	require.True(t, s.ReadyForConnections(10*time.Second), "the embedded NATS server did not start")
	return s
}

// connect returns a JetStream context on a connection to s, closed when t ends.
func connect(t *testing.T, s *server.Server) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// createStream creates stream name on subjects with the Duplicates window given.
func createStream(t *testing.T, js jetstream.JetStream, name string, window time.Duration, subjects ...string) jetstream.Stream {
	t.Helper()
	st, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: name, Subjects: subjects, Duplicates: window, Storage: jetstream.FileStorage,
	})
	require.NoError(t, err)
	return st
}

// setupOutbox returns an outbox in a fresh, migrated schema of the test database, and the schema.
func setupOutbox(t *testing.T) (*outbox.Outbox, string) {
	t.Helper()
	name := pgtest.Schema(t)
	require.NoError(t, migrate.Up(context.Background(), pgtest.Pool(t), name))
	o, err := outbox.New(pgtest.Pool(t), &outbox.Config{Schema: name})
	require.NoError(t, err)
	return o, name
}

// put puts msgs in one committed transaction.
func put(t *testing.T, o *outbox.Outbox, msgs ...outbox.Message) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, pgx.BeginFunc(ctx, pgtest.Pool(t), func(tx pgx.Tx) error {
		for _, m := range msgs {
			if err := o.Put(ctx, tx, m); err != nil {
				return err
			}
		}
		return nil
	}))
}

// streamMsg is a message as the stream holds it.
type streamMsg struct {
	Seq         uint64
	Subject     string
	ID          string
	OrderingKey string
	Attempt     string
	Payload     string
}

// contents reads every message of stream, in stream order.
func contents(t *testing.T, js jetstream.JetStream, stream string) []streamMsg {
	t.Helper()
	ctx := context.Background()
	st, err := js.Stream(ctx, stream)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	var out []streamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		out = append(out, streamMsg{
			Seq: m.Sequence, Subject: m.Subject, ID: m.Header.Get(jetstream.MsgIDHeader),
			OrderingKey: m.Header.Get("Tempotent-Ordering-Key"), Attempt: m.Header.Get(outbox.HeaderAttempt),
			Payload: string(m.Data),
		})
	}
	return out
}

// newDispatcher returns a dispatcher of o through pub, quiet, with short backoffs.
func newDispatcher(t *testing.T, o *outbox.Outbox, pub outbox.Publisher, cfg outbox.DispatcherConfig) *outbox.Dispatcher {
	t.Helper()
	cfg.Logger = quiet
	cfg.BackoffMin = cmpOr(cfg.BackoffMin, time.Millisecond)
	cfg.BackoffMax = cmpOr(cfg.BackoffMax, 10*time.Millisecond)
	d, err := outbox.NewDispatcher(o, pub, &cfg)
	require.NoError(t, err)
	return d
}

func cmpOr(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// drain dispatches until o has nothing pending, or fails after 30 s.
func drain(t *testing.T, d *outbox.Dispatcher, o *outbox.Outbox) {
	t.Helper()
	ctx := context.Background()
	require.Eventually(t, func() bool {
		_, err := d.DispatchOnce(ctx)
		require.NoError(t, err)
		st, err := o.Stats(ctx)
		require.NoError(t, err)
		return st.Pending == 0
	}, 30*time.Second, 5*time.Millisecond)
}
