package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/failpoint"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/proc"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/shard"
)

// TestShardMoveKilledMidwayIsFinishedByARerun kills the move command for real (SIGKILL, as a
// crash: nothing deferred runs) once after its fence and once after its copy, and requires the
// tenant refused meanwhile, a third run to finish the move, and the retry of an activity that
// ran before the move to replay there: its effect happened once.
func TestShardMoveKilledMidwayIsFinishedByARerun(t *testing.T) {
	ctx := context.Background()
	urls := map[string]string{"a": pgtest.Cluster(t), "b": pgtest.Cluster(t)}
	stores := map[string]*activity.Store{}
	pools := map[string]*pgxpool.Pool{}
	for name, url := range urls {
		pool, err := pgxpool.New(ctx, url)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		s, err := activity.NewStore(pool, &activity.Config{TenantFences: true})
		require.NoError(t, err)
		require.NoError(t, s.Migrate(ctx))
		stores[name], pools[name] = s, pool
	}
	router, err := shard.NewRouter(shard.Config{Directory: pools["a"], Shards: stores, Default: "a", MaxStale: time.Nanosecond})
	require.NoError(t, err)
	require.NoError(t, router.Migrate(ctx))

	effects := 0
	k, err := keys.Explicit("default", "acme", "Charge", "order-1")
	require.NoError(t, err)
	charge := func() (string, error) {
		s, err := router.Store(ctx, "acme")
		if err != nil {
			return "", err
		}
		return activity.Do(ctx, s, activity.Call{Key: k, Request: "order-1"}, func(context.Context) (string, error) {
			effects++
			return "charged at " + time.Now().Format(time.RFC3339Nano), nil
		})
	}
	first, err := charge()
	require.NoError(t, err)

	bin := filepath.Join(t.TempDir(), "tempotent")
	require.NoError(t, proc.Build(ctx, bin, "github.com/tempotent/tempotent/cmd/tempotent", failpoint.Tag))
	args := []string{"shard", "move", "--database-url", urls["a"], "--shard", "a=" + urls["a"], "--shard", "b=" + urls["b"],
		"--tenant", "acme", "--to", "b", "--max-stale", "1ms", "--poll", "1ms", "--reason", "TICKET-1 rebalance"}

	for _, point := range []string{failpoint.AfterFence, failpoint.AfterCopy} {
		cmd := exec.Command(bin, args...)
		cmd.Env = []string{failpoint.EnvVar + "=" + point + "=pause", "PATH=" + os.Getenv("PATH")}
		stderr, err := cmd.StderrPipe()
		require.NoError(t, err)
		var stdout bytes.Buffer
		cmd.Stdout = &stdout
		p, err := proc.Start(cmd)
		require.NoError(t, err)
		awaitLine(t, stderr, "failpoint "+point+" reached")
		p.Kill()

		_, err = charge()
		var moving *shard.MovingError
		require.ErrorAs(t, err, &moving, "killed after %s, the tenant is still fenced", point)
	}
	var copied int
	require.NoError(t, pools["b"].QueryRow(ctx, "SELECT count(*) FROM tempotent.receipts WHERE tenant = 'acme'").Scan(&copied))
	require.Equal(t, 1, copied, "killed after the copy, the new shard holds the receipt")

	out, err := exec.Command(bin, args...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), `resuming the move of tenant "acme" from shard "a" to "b"`)
	require.Contains(t, string(out), `copied 1 receipts of tenant "acme" from shard "a" to "b"`)
	require.Contains(t, string(out), `switched tenant "acme" to shard "b"`)

	again, err := charge()
	require.NoError(t, err)
	require.Equal(t, first, again, "the retry after the move replays")
	require.Equal(t, 1, effects, "the effect happened once")

	c := cli{t: t, schema: "tempotent"}
	code, listed, _ := c.run("shard", "list", "--database-url", urls["a"])
	require.Equal(t, exitOK, code)
	require.Contains(t, listed, "default shard: a\n")
	require.Regexp(t, `acme\s+b\s*\n`, listed)
}

// TestShardMoveRefusesAnIncompleteCommandLine: the move changes where a tenant's receipts are;
// it needs a reason, and the new shard's database.
func TestShardMoveRefusesAnIncompleteCommandLine(t *testing.T) {
	c := cli{t: t, schema: "tempotent"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--tenant", "acme", "--to", "b", "--shard", "b=postgres://x"}, "give --reason"},
		{[]string{"--tenant", "acme", "--to", "b", "--reason", "r"}, `give the database of shard "b"`},
		{[]string{"--to", "b", "--reason", "r", "--shard", "b=postgres://x"}, "give --tenant and --to"},
		{[]string{"--tenant", "acme", "--to", "b", "--reason", "r", "--shard", "b"}, "give NAME=URL"},
	} {
		code, _, errOut := c.run(append([]string{"shard", "move"}, tc.args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, errOut)
		require.Contains(t, errOut, tc.want)
	}
}

// awaitLine reads r until a line contains want.
func awaitLine(t *testing.T, r interface{ Read([]byte) (int, error) }, want string) {
	t.Helper()
	sc := bufio.NewScanner(r)
	var read []string
	for sc.Scan() {
		if strings.Contains(sc.Text(), want) {
			return
		}
		read = append(read, sc.Text())
	}
	t.Fatalf("the command ended without %q: %v (%v)", want, read, errors.Join(sc.Err()))
}

// TestShardInitKeepsTheDefault: the directory's default shard, once recorded, is not changed by
// another init (that would move every tenant on it at once, undrained).
func TestShardInitKeepsTheDefault(t *testing.T) {
	schema := pgtest.Schema(t)
	c := cli{t: t, schema: "tempotent"}
	out := c.ok("shard", "init", "--directory-schema", schema, "--default", "eu-1")
	require.Equal(t, "directory in schema "+schema+": default shard eu-1\n", out)
	c.ok("shard", "init", "--directory-schema", schema, "--default", "eu-1")
	code, _, errOut := c.run("shard", "init", "--directory-schema", schema, "--default", "eu-2")
	require.Equal(t, exitRefused, code)
	require.Contains(t, errOut, `the directory's default shard is "eu-1", not "eu-2"`)
	code, _, errOut = c.run("shard", "init", "--directory-schema", schema)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "give --default")
}
