package console_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/console"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/outbox"
)

// The console mounted in an admin server of your own: a reader reads the overview, an anonymous
// request is asked to sign in, and the reader's action is refused.
func ExampleNew() {
	ctx := context.Background()
	dbURL := os.Getenv("TEST_DATABASE_URL")
	if dbURL == "" {
		dbURL = "postgres://postgres@127.0.0.1:5432/postgres"
	}
	pool, _ := pgxpool.New(ctx, dbURL)
	defer pool.Close()
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS example_console CASCADE")
	defer func() { _, _ = pool.Exec(ctx, "DROP SCHEMA example_console CASCADE") }()
	if err := migrate.Up(ctx, pool, "example_console"); err != nil {
		panic(err)
	}

	op, _ := operator.NewClient(pool, operator.Config{Schema: "example_console"})
	out, _ := outbox.New(pool, &outbox.Config{Schema: "example_console"})
	h, err := console.New(console.Config{
		Operator: op, Outbox: out, Inbox: pool, Path: "/tempotent/",
		Users: []console.User{
			{Name: "alice@example.com", Password: "alice-operator-pw", Role: console.RoleOperator},
			{Name: "viewer", Password: "viewer-password", Role: console.RoleReader},
		},
	})
	if err != nil {
		panic(err)
	}
	admin := http.NewServeMux()
	admin.Handle("/tempotent/", h)
	srv := httptest.NewServer(admin)
	defer srv.Close()

	send := func(method, path, user, password string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(url.Values{"id": {"m1"}, "reason": {"x"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if user != "" {
			req.SetBasicAuth(user, password)
		}
		res, err := srv.Client().Do(req)
		if err != nil {
			panic(err)
		}
		res.Body.Close()
		fmt.Println(method, path, user, res.Status)
	}
	send("GET", "/tempotent/", "viewer", "viewer-password")
	send("GET", "/tempotent/", "", "")
	send("POST", "/tempotent/outbox/requeue", "viewer", "viewer-password")
	// Output:
	// GET /tempotent/ viewer 200 OK
	// GET /tempotent/  401 Unauthorized
	// POST /tempotent/outbox/requeue viewer 403 Forbidden
}
