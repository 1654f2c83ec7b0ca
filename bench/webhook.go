package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/webhook"
)

const webhookSecret = "whsec_bench"

// intake is row 9's endpoints, each a server of its own in this process: the webhook handler;
// the same on an outbox with NoNotify (Put's NOTIFY serialises the commits of the transactions
// that send it); a bare handler that reads the body and answers 200; and a bare durable handler
// that also INSERTs the body and commits before answering.
type intake struct {
	handler, quiet, bare, durable *httptest.Server
	client                        *http.Client
}

func startIntake(d *db) *intake {
	newHandler := func(noNotify bool) http.Handler {
		o, err := outbox.New(d.pool, &outbox.Config{Schema: messagesSchema, NoNotify: noNotify})
		if err != nil {
			fatalf("outbox: %v", err)
		}
		h, err := webhook.NewHandler(d.pool, o, webhook.HandlerConfig{
			Source:   "stripe",
			Verifier: webhook.Stripe{Secrets: []string{webhookSecret}},
			Logger:   discard,
		})
		if err != nil {
			fatalf("webhook handler: %v", err)
		}
		return h
	}
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	durable := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if _, err := d.pool.Exec(r.Context(), "INSERT INTO "+intakeTable+" (body) VALUES ($1)", body); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	return &intake{
		handler: httptest.NewServer(newHandler(false)),
		quiet:   httptest.NewServer(newHandler(true)),
		bare:    httptest.NewServer(bare),
		durable: httptest.NewServer(durable),
		client:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 128}},
	}
}

func (in *intake) close() {
	in.handler.Close()
	in.quiet.Close()
	in.bare.Close()
	in.durable.Close()
	in.client.CloseIdleConnections()
}

// deliver POSTs a new Stripe event, signed as Stripe signs it, to s, and expects 200. Every
// endpoint gets the same requests: the bare ones ignore the signature.
func (in *intake) deliver(s *httptest.Server) op {
	return func(ctx context.Context) error {
		id := next("evt_bench")
		body := fmt.Appendf(nil, `{"id":%q,"object":"event","type":"charge.succeeded","created":%d,`+
			`"data":{"object":{"id":"ch_%s","object":"charge","amount":4200,"currency":"eur","status":"succeeded"}}}`,
			id, time.Now().Unix(), id)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", webhook.SignStripe(webhookSecret, time.Now(), body))
		res, err := in.client.Do(req)
		if err != nil {
			return err
		}
		defer res.Body.Close()
		answer, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("delivery %s answered %d: %s", id, res.StatusCode, answer)
		}
		return nil
	}
}
