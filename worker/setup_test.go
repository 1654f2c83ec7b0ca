package worker_test

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/worker"
)

func TestStartSaysWhatIsWrong(t *testing.T) {
	ctx := context.Background()
	for name, tc := range map[string]struct {
		cfg  worker.Config
		want []string
	}{
		"BadDatabaseURL": {worker.Config{DatabaseURL: "not a url"}, []string{"DATABASE_URL", "is not a Postgres connection string", "postgres://"}},
		"BadValues": {worker.Config{LogLevel: "loud", Receipts: activity.Config{Retention: time.Second}, TaskQueue: "a queue"},
			[]string{`log level "loud"`, "Retention is 1s; it must be at least a minute", `task queue "a queue" contains white space`}},
		"UnreachablePostgres": {worker.Config{DatabaseURL: "postgres://postgres@127.0.0.1:1/postgres"}, []string{"does not answer", "Check DATABASE_URL"}},
		"Unmigrated":          {worker.Config{DatabaseURL: pgtest.URL(), Receipts: activity.Config{Schema: "tempotent_never_migrated"}}, []string{"lacks migrations 001_receipts, 002_reservation_identity", "-migrate"}},
		"UnreachableTemporal": {worker.Config{DatabaseURL: pgtest.URL(), Receipts: activity.Config{Schema: pgtest.Schema(t)}, Migrate: true, TemporalAddress: "127.0.0.1:1"},
			[]string{"temporal at 127.0.0.1:1", "does not answer", "TEMPORAL_ADDRESS"}},
		"NoTemporalCLI": {worker.Config{DatabaseURL: pgtest.URL(), Receipts: activity.Config{Schema: pgtest.Schema(t)}, Migrate: true, TemporalCLI: "/nonexistent/temporal"},
			[]string{"Temporal CLI is not at /nonexistent/temporal", "make bin/temporal"}},
	} {
		t.Run(name, func(t *testing.T) {
			env, err := worker.Start(ctx, tc.cfg)
			require.Nil(t, env)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

func TestBindReadsTheEnvironmentAndFlagsWin(t *testing.T) {
	t.Setenv("TEMPORAL_ADDRESS", "temporal.internal:7233")
	t.Setenv("TEMPOTENT_RETENTION", "240h")
	t.Setenv("TEMPOTENT_SHUTDOWN_GRACE", "soon")
	var cfg worker.Config
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	cfg.Bind(fs)
	require.NoError(t, fs.Parse([]string{"-namespace", "payments"}))
	require.Equal(t, "temporal.internal:7233", cfg.TemporalAddress)
	require.Equal(t, "payments", cfg.Namespace)
	require.Equal(t, 240*time.Hour, cfg.Receipts.Retention)
	require.ErrorContains(t, cfg.WithDefaults().Validate(), `TEMPOTENT_SHUTDOWN_GRACE="soon"`)
}

// Close ends all that Start started, the dev server's client included: left open, its
// connection would keep redialling the stopped server for the life of the process.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	cli, err := filepath.Abs("../bin/temporal")
	require.NoError(t, err)
	if _, err := os.Stat(cli); err != nil {
		t.Fatalf("the Temporal CLI is not at %s: run `make bin/temporal` (make test does)", cli)
	}
	schema := pgtest.Schema(t) // the shared pool's goroutines are there before, and stay
	before := goleak.IgnoreCurrent()
	env, err := worker.Start(context.Background(), worker.Config{DatabaseURL: pgtest.URL(), Receipts: activity.Config{Schema: schema}, Migrate: true, TemporalCLI: cli, LogLevel: "error"})
	require.NoError(t, err)
	env.Close()
	goleak.VerifyNone(t, before)
}
