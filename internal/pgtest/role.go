package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Role creates a uniquely named role that may log in and holds no privilege, as a deployment's
// runtime role starts; its name holds quotes and a space, as a name may, and drops it when tb ends, with whatever it owns or was granted in this
// database. Roles belong to the whole cluster: the name is unique across test binaries. It needs
// TEST_DATABASE_URL's user to be allowed to create roles (the default, postgres, is).
func Role(tb testing.TB) string {
	tb.Helper()
	p := Pool(tb)
	var b [6]byte
	_, _ = rand.Read(b[:])
	// Quotes and a space, so that a statement that does not quote the name fails.
	name := "test_role_" + hex.EncodeToString(b[:]) + ` "o'k"`
	quoted := pgx.Identifier{name}.Sanitize()
	if _, err := p.Exec(context.Background(), "CREATE ROLE "+quoted+" LOGIN"); err != nil {
		tb.Fatalf("pgtest: create role: %v", err)
	}
	tb.Cleanup(func() {
		ctx := context.Background()
		// Whatever it came to own goes to the owner of the test's schemas, and is dropped
		// with them; its grants go with DROP OWNED.
		for _, stmt := range []string{"REASSIGN OWNED BY " + quoted + " TO CURRENT_USER", "DROP OWNED BY " + quoted, "DROP ROLE " + quoted} {
			if _, err := p.Exec(ctx, stmt); err != nil {
				tb.Errorf("pgtest: drop role %s: %s: %v", name, stmt, err)
				return
			}
		}
	})
	return name
}

// URLAs is URL with its user replaced by role, for a role that needs no password (the test
// server trusts local connections).
func URLAs(tb testing.TB, role string) string {
	tb.Helper()
	u, err := url.Parse(URL())
	if err != nil {
		tb.Fatalf("pgtest: TEST_DATABASE_URL: %v", err)
	}
	u.User = url.User(role)
	return u.String()
}

// PoolAs returns a new pool connected as role (URLAs), closed when tb ends.
func PoolAs(tb testing.TB, role string) *pgxpool.Pool {
	tb.Helper()
	p, err := pgxpool.New(context.Background(), URLAs(tb, role))
	if err == nil {
		err = p.Ping(context.Background())
	}
	if err != nil {
		tb.Fatalf("pgtest: connect as %s: %v", role, err)
	}
	tb.Cleanup(p.Close)
	return p
}
