package main

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/migrate"
)

// migrate --print-grants prints migrate.Grants without a database, and refuses a role it must not
// grant to as a wrong command line.
func TestMigratePrintGrants(t *testing.T) {
	t.Parallel()
	tempotent := cli{t: t, schema: "payments"}
	nowhere := "postgres://nobody@127.0.0.1:1/none"
	want, err := migrate.Grants("payments", "tempotent_app")
	require.NoError(t, err)
	require.Equal(t, want, tempotent.ok("migrate", "--print-grants", "tempotent_app", "--database-url", nowhere))

	for _, tc := range []struct {
		args []string
		says string
	}{
		{[]string{"--print-grants", "public"}, `role name "public" is PUBLIC, every role`},
		{[]string{"--print-grants", ""}, "is empty"},
		{[]string{"--print-grants", "app", "--print"}, "give one"},
	} {
		code, out, errOut := tempotent.run(append([]string{"migrate", "--database-url", nowhere}, tc.args...)...)
		require.Equal(t, exitUsage, code, "%v: %s", tc.args, errOut)
		require.Empty(t, out, "%v printed", tc.args)
		require.Contains(t, errOut, tc.says)
	}
}

// Under the runtime role the command migrates nothing, and says who can; with the printed grants
// applied by the owner, the role reads and purges receipts but may not partition them.
func TestCommandsUnderTheRuntimeRole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	schema := pgtest.Schema(t)
	role := pgtest.Role(t)
	owner := cli{t: t, schema: schema}
	asRole := func(args ...string) (int, string, string) {
		return owner.run(append(args, "--database-url", pgtest.URLAs(t, role))...)
	}

	code, _, errOut := asRole("migrate")
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, "permission denied")
	require.Contains(t, errOut, "run as its owner")

	require.Contains(t, owner.ok("migrate"), "applied 001_receipts")
	_, err := pgtest.Pool(t).Exec(ctx, owner.ok("migrate", "--print-grants", role))
	require.NoError(t, err)
	for _, args := range [][]string{{"migrate"}, {"stats"}, {"purge"}, {"receipts", "list"}, {"outbox", "list"}, {"doctor"}} {
		code, out, errOut := asRole(args...)
		require.Equal(t, exitOK, code, "tempotent %v under the runtime role: %s%s", args, out, errOut)
	}
	code, _, errOut = asRole("receipts", "partition")
	require.Equal(t, exitFailed, code)
	require.Contains(t, errOut, "must be owner")
}
