package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/webhook"
)

// exampleOutbox connects to TEST_DATABASE_URL (or the local default), creates tempotent's tables
// in a schema of its own (migrate.Up creates the outbox and the inbox beside the
// receipts), and returns the schema's outbox, the pool, and a cleanup that drops the schema.
func exampleOutbox(ctx context.Context, schema string) (*outbox.Outbox, *pgxpool.Pool, func()) {
	url := os.Getenv("TEST_DATABASE_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres"
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		panic(err)
	}
	_, _ = pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
	if err := migrate.Up(ctx, pool, schema); err != nil {
		panic(err)
	}
	out, err := outbox.New(pool, &outbox.Config{Schema: schema})
	if err != nil {
		panic(err)
	}
	return out, pool, func() {
		_, _ = pool.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE")
		pool.Close()
	}
}

// A Stripe delivery POSTed twice is stored once: the retry is answered 200, so that Stripe stops
// retrying, and puts nothing more in the outbox. A forged one is refused.
func ExampleNewHandler() {
	ctx := context.Background()
	out, pool, cleanup := exampleOutbox(ctx, "example_webhook_handler")
	defer cleanup()

	const secret = "whsec_example_0123456789" // the endpoint's signing secret, from Stripe
	h, err := webhook.NewHandler(pool, out, webhook.HandlerConfig{
		Source:   "stripe",
		Verifier: webhook.Stripe{Secrets: []string{secret}},
	})
	if err != nil {
		panic(err)
	}

	body := []byte(`{"id":"evt_1","object":"event","type":"payment_intent.succeeded"}`)
	deliver := func(signature string) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", bytes.NewReader(body))
		r.Header.Set("Stripe-Signature", signature)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	signature := webhook.SignStripe(secret, time.Now(), body)
	first := deliver(signature)
	fmt.Print(first.Code, " ", first.Body)
	retry := deliver(signature) // Stripe's retry
	fmt.Print(retry.Code, " ", retry.Body)
	forged := deliver(webhook.SignStripe("whsec_someone_else", time.Now(), body))
	fmt.Println(forged.Code)

	st, _ := out.Stats(ctx)
	fmt.Println("outbox messages:", st.Pending)
	// Output:
	// 200 {"duplicate":false,"received":true}
	// 200 {"duplicate":true,"received":true}
	// 401
	// outbox messages: 1
}
