package webhook_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/internal/proc"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/outbox"
	"github.com/tempotent/tempotent/webhook"
)

// The environment of an endpoint process that startEndpoint starts: it serves a handler of source
// "stripe" with this topic, on this schema, until its stdin closes.
const (
	envEndpointTopic  = "TEMPOTENT_WEBHOOK_ENDPOINT_TOPIC"
	envEndpointSchema = "TEMPOTENT_WEBHOOK_ENDPOINT_SCHEMA"
)

// endpoint is a handler serving in a process of its own, as another deployment's would.
type endpoint struct {
	url    string
	stderr *syncBuffer // its logs
}

// syncBuffer is a bytes.Buffer that a process's output and a test may use at once.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startEndpoint starts this test binary as a process serving a handler of source "stripe" and
// topic on schema, with a pool of its own, and returns its URL. It ends with the test.
func startEndpoint(t *testing.T, schema, topic string) endpoint {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHandlersOfOneSourceInTwoProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), envEndpointTopic+"="+topic, envEndpointSchema+"="+schema)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	e := endpoint{stderr: &syncBuffer{}}
	cmd.Stderr = e.stderr
	child, err := proc.Start(cmd)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = stdin.Close() // the child returns from its test, checking for leaks
		child.Stop()
	})
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
			e.url = "http://" + addr + "/"
			go func() { _, _ = io.Copy(io.Discard, stdout) }()
			return e
		}
	}
	t.Fatalf("the endpoint process of topic %q ended before listening:\n%s", topic, e.stderr.String())
	return e
}

// serveEndpoint is the endpoint process: a handler on a pool of its own, served until stdin closes.
func serveEndpoint(t *testing.T, topic, schema string) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, pgtest.URL())
	require.NoError(t, err)
	defer pool.Close()
	out, err := outbox.New(pool, &outbox.Config{Schema: schema})
	require.NoError(t, err)
	h, err := webhook.NewHandler(pool, out, webhook.HandlerConfig{
		Source: "stripe", Topic: topic, Verifier: webhook.Stripe{Secrets: []string{stripeSecret}},
		Now: func() time.Time { return now }, Logger: slog.New(slog.NewTextHandler(os.Stderr, nil)),
	})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println("listening", ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	require.NoError(t, srv.Close())
}

// postTo POSTs a Stripe delivery of body to url, and returns the status.
func postTo(t *testing.T, url string, body []byte) int {
	t.Helper()
	r, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	require.NoError(t, err)
	maps.Copy(r.Header, stripeHeader(webhook.SignStripe(stripeSecret, now, body)))
	resp, err := http.DefaultClient.Do(r)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	require.NoError(t, resp.Body.Close())
	return resp.StatusCode
}

// topics returns the topic of each outbox message of schema, in the order they were put.
func topics(t *testing.T, schema string) []string {
	t.Helper()
	var out []string
	for _, m := range (hook{schema: schema}).messages(t) {
		out = append(out, m.Topic)
	}
	return out
}

// Two deployments of one source with different topics, each in its own process with its own pool:
// the in-process check cannot see the other, so the database does. The first to take a delivery
// records its topic; the other answers 500, storing nothing, and logs how to resolve it, so that
// the provider retries instead of the other topic silently never getting the event. A second
// process of the same topic is just a replica.
func TestHandlersOfOneSourceInTwoProcesses(t *testing.T) {
	if topic := os.Getenv(envEndpointTopic); topic != "" {
		serveEndpoint(t, topic, os.Getenv(envEndpointSchema))
		return
	}
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	require.NoError(t, migrate.Up(context.Background(), pool, schema))
	k := hook{schema: schema}

	billing := startEndpoint(t, schema, "billing.stripe")
	shipping := startEndpoint(t, schema, "shipping.stripe")
	replica := startEndpoint(t, schema, "billing.stripe")

	require.Equal(t, http.StatusOK, postTo(t, billing.url, event("evt_1", 1000)))
	require.Equal(t, http.StatusInternalServerError, postTo(t, shipping.url, event("evt_1", 1000)))
	require.Equal(t, http.StatusInternalServerError, postTo(t, shipping.url, event("evt_2", 2000)), "a new event too: the endpoint is refused, not the event")
	require.Equal(t, rows{Inbox: 1, Outbox: 1}, k.rows(t), "the refused endpoint stored something")
	require.Contains(t, shipping.stderr.String(), `topic \"billing.stripe\"`)
	require.Contains(t, shipping.stderr.String(), "SET topic = 'shipping.stripe' WHERE source = 'stripe'")

	require.Equal(t, http.StatusOK, postTo(t, replica.url, event("evt_1", 1000)), "a replica of the same topic was refused")
	require.Equal(t, http.StatusOK, postTo(t, replica.url, event("evt_3", 3000)))
	require.Equal(t, []string{"billing.stripe", "billing.stripe"}, topics(t, schema))

	// The operator moves the source to shipping as the log says: the refused endpoint takes the
	// provider's retries from then on.
	k.exec(t, `UPDATE {{schema}}.webhook_endpoints SET topic = 'shipping.stripe' WHERE source = 'stripe'`)
	require.Equal(t, http.StatusOK, postTo(t, shipping.url, event("evt_2", 2000)))
	require.Equal(t, []string{"billing.stripe", "billing.stripe", "shipping.stripe"}, topics(t, schema))
}

// Two processes of one source and different topics take their first deliveries at once, on a
// schema where the source has no topic yet: one topic wins, every delivery is on it, and each
// delivery the other endpoint got is answered 500.
func TestHandlersOfOneSourceInTwoProcessesRace(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t)
	require.NoError(t, migrate.Up(context.Background(), pool, schema))
	ends := map[string]endpoint{
		"billing.stripe":  startEndpoint(t, schema, "billing.stripe"),
		"shipping.stripe": startEndpoint(t, schema, "shipping.stripe"),
	}
	const perEndpoint = 8
	var mu sync.Mutex
	statuses := map[string][]int{}
	var wg sync.WaitGroup
	for topic, e := range ends {
		for i := range perEndpoint {
			wg.Go(func() {
				status := postTo(t, e.url, event(fmt.Sprintf("evt_%s_%d", topic, i), i))
				mu.Lock()
				defer mu.Unlock()
				statuses[topic] = append(statuses[topic], status)
			})
		}
	}
	wg.Wait()

	var winner string
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT topic FROM "+schema+".webhook_endpoints WHERE source = 'stripe'").Scan(&winner))
	for topic, got := range statuses {
		want := http.StatusInternalServerError
		if topic == winner {
			want = http.StatusOK
		}
		require.Equal(t, slices.Repeat([]int{want}, perEndpoint), got, "answers of the %s endpoint (the winner is %s)", topic, winner)
	}
	require.Equal(t, slices.Repeat([]string{winner}, perEndpoint), topics(t, schema))
}
