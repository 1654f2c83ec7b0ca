package worker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tempotent/tempotent/activity"
	"github.com/tempotent/tempotent/internal/devserver"
	"github.com/tempotent/tempotent/internal/freeport"
	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/migrate"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/outbox"
)

// Env is a running worker's surroundings: a Temporal client, a Postgres pool, the receipt
// store and an operator client on its receipts, and whatever local mode started for them. Close
// stops it all.
type Env struct {
	Config Config
	Log    *slog.Logger
	Client client.Client
	Pool   *pgxpool.Pool
	Store  *activity.Store
	// Operator acts on the store's receipts as an operator does (list, resolve, purge…),
	// configured as the store is (Config.Receipts): the worker's purger uses it.
	Operator *operator.Client
	// Outbox is the outbox in the receipts' schema (its table comes with the same migrations).
	// Put messages in it from activities; Dispatch delivers them from this worker.
	Outbox *outbox.Outbox
	// TemporalUI is the Web UI's address when the dev server was started, else "".
	TemporalUI string

	closers     []func()
	dispatchers []*outbox.Dispatcher
}

// Start validates cfg and brings up what a worker needs, starting the Temporal dev server and a
// Postgres when none is configured. Every failure says what was wrong and what to do.
func Start(ctx context.Context, cfg Config) (*Env, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid configuration:\n%w", err)
	}
	level, _ := cfg.level()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	e := &Env{Config: cfg, Log: log}
	if err := e.start(ctx); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Env) start(ctx context.Context) error {
	cfg := e.Config
	url, stopDB, err := database(ctx, cfg, e.Log)
	if err != nil {
		return err
	}
	e.closers = append(e.closers, stopDB)
	if err := e.connectPostgres(ctx, url); err != nil {
		return err
	}
	return e.connectTemporal(ctx)
}

func (e *Env) connectPostgres(ctx context.Context, url string) error {
	cfg := e.Config
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("DATABASE_URL %q: %w", redact(url), err)
	}
	e.Pool = pool
	e.closers = append(e.closers, pool.Close)
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		return fmt.Errorf("postgres at %s does not answer: %w. Check DATABASE_URL and that the server runs (or leave DATABASE_URL empty to use or start a local one)", redact(url), err)
	}
	e.Store, err = activity.NewStore(pool, &cfg.Receipts)
	if err != nil {
		return err
	}
	schema := e.Store.Config().Schema
	if cfg.Migrate {
		if err := migrate.Up(ctx, pool, schema); err != nil {
			return err
		}
		e.Log.Info("migrations applied", "schema", schema)
	}
	if err := migrate.Check(ctx, pool, schema); err != nil {
		return fmt.Errorf("postgres at %s: %w", redact(url), err)
	}
	if e.Operator, err = operator.NewClient(pool, operatorConfig(e.Store.Config())); err != nil {
		return err
	}
	e.Outbox, err = outbox.New(pool, &outbox.Config{Schema: schema})
	return err
}

// operatorConfig is the operator.Config that reads and writes receipts as a store of cfg does.
func operatorConfig(cfg activity.Config) operator.Config {
	return operator.Config{
		Schema:           cfg.Schema,
		Retention:        cfg.Retention,
		DataConverter:    cfg.DataConverter,
		Codecs:           cfg.Codecs,
		MaxPayloadBytes:  cfg.MaxPayloadBytes,
		LockTimeout:      cfg.LockTimeout,
		StatementTimeout: cfg.StatementTimeout,
		MetricsHandler:   cfg.MetricsHandler,
	}
}

func (e *Env) connectTemporal(ctx context.Context) error {
	cfg := e.Config
	opts := client.Options{
		HostPort:           cfg.TemporalAddress,
		Namespace:          cfg.Namespace,
		Logger:             tlog.NewStructuredLogger(e.Log.With("component", "temporal")),
		ContextPropagators: []workflow.ContextPropagator{keys.TenantPropagator()},
	}
	if cfg.TemporalAddress == "" {
		return e.startDevServer(ctx, opts)
	}
	dialCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.DialContext(dialCtx, opts)
	if err != nil {
		return fmt.Errorf("temporal at %s (namespace %q) does not answer: %w. Check TEMPORAL_ADDRESS, or leave it empty to start the dev server", cfg.TemporalAddress, cfg.Namespace, err)
	}
	e.Client = c
	e.closers = append(e.closers, c.Close)
	return nil
}

func (e *Env) startDevServer(ctx context.Context, opts client.Options) error {
	cli := e.Config.TemporalCLI
	if _, err := os.Stat(cli); err != nil {
		return fmt.Errorf("TEMPORAL_ADDRESS is not set and the Temporal CLI is not at %s to start the dev server: run `make bin/temporal` (go install github.com/temporalio/cli/cmd/temporal@v1.5.1), or set TEMPORAL_ADDRESS", cli)
	}
	uiPort, err := freeport.Get()
	if err != nil {
		return err
	}
	opts.Logger = tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)) // the dev server's start-up chatter
	// The server is leashed to this process: a worker killed outright takes its dev server with
	// it (on Linux), rather than leaving it holding the port.
	srv, err := devserver.Start(ctx, devserver.Options{CLI: cli, Client: opts, UIPort: uiPort})
	if err != nil {
		return fmt.Errorf("start the Temporal dev server (%s): %w", cli, err)
	}
	e.closers = append(e.closers, srv.Stop)
	e.Client = srv.Client()
	e.Config.TemporalAddress = srv.Addr()
	e.TemporalUI = fmt.Sprintf("http://127.0.0.1:%d", uiPort)
	e.Log.Info("TEMPORAL_ADDRESS not set: started the Temporal dev server", "address", srv.Addr(), "ui", e.TemporalUI)
	return nil
}

// NewWorker returns a worker on the configured task queue with tempotent's interceptor
// (activity.NewInterceptor) installed. Register activities on it with activity.Register.
func (e *Env) NewWorker() sdkworker.Worker {
	return sdkworker.New(e.Client, e.Config.TaskQueue, sdkworker.Options{
		Interceptors:      []interceptor.WorkerInterceptor{activity.NewInterceptor()},
		WorkerStopTimeout: e.Config.ShutdownGrace,
	})
}

// Dispatch adds a dispatcher of the worker's outbox through pub, which Run runs beside the
// worker until it stops. cfg's Logger defaults to the worker's; give cfg.Metrics the handler of
// your client.Options to have its gauges beside the worker's. Call it before Run; several
// dispatchers (for different Topics) may run, in as many workers as you like. They share one
// LISTEN connection outside the pool, and each takes a connection of the pool only for a claim or
// a mark at a time; Dispatch refuses a dispatcher more than the pool has connections (MaxConns,
// pool_max_conns in DATABASE_URL), which would leave the activities' receipts waiting behind them.
func (e *Env) Dispatch(pub outbox.Publisher, cfg *outbox.DispatcherConfig) error {
	if n, maxConns := len(e.dispatchers)+1, e.Pool.Config().MaxConns; int64(n) > int64(maxConns) {
		return fmt.Errorf("%d dispatchers on a pool of MaxConns %d would leave the receipts no connection: raise pool_max_conns in DATABASE_URL, or serve several topics from one dispatcher (DispatcherConfig.Topics)",
			n, maxConns)
	}
	var c outbox.DispatcherConfig
	if cfg != nil {
		c = *cfg
	}
	if c.Logger == nil {
		c.Logger = e.Log
	}
	d, err := outbox.NewDispatcher(e.Outbox, pub, &c)
	if err != nil {
		return err
	}
	e.dispatchers = append(e.dispatchers, d)
	return nil
}

// Run runs w, the dispatchers that Dispatch added, and the purger of expired receipts and inbox
// records (see Config.PurgeEvery and Config.InboxRetention), until ctx ends or the process gets SIGINT or SIGTERM. Then it stops
// polling and gives running activities ShutdownGrace to finish before it returns; dispatchers
// claim nothing more, let their publishes in flight finish within their own ShutdownGrace
// (outbox.DispatcherConfig), and hand the rest of their batch back without counting an attempt.
func (e *Env) Run(ctx context.Context, w sdkworker.Worker) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker on task queue %q: %w", e.Config.TaskQueue, err)
	}
	e.Log.Info("worker running", "task_queue", e.Config.TaskQueue, "namespace", e.Config.Namespace, "temporal", e.Config.TemporalAddress,
		"dispatchers", len(e.dispatchers))
	var wg sync.WaitGroup
	for _, d := range e.dispatchers {
		wg.Go(func() {
			if err := d.Run(ctx); err != nil {
				e.Log.Error("outbox dispatcher did not start", "err", err)
			}
		})
	}
	if e.Config.PurgeEvery > 0 {
		wg.Go(func() { e.purgeLoop(ctx) })
	}
	<-ctx.Done()
	e.Log.Info("stopping: no new tasks; running activities may finish", "grace", e.Config.ShutdownGrace)
	w.Stop()
	wg.Wait()
	e.Log.Info("worker stopped")
	return nil
}

// Close stops what Start started, in reverse order. It is safe to call more than once.
func (e *Env) Close() {
	for i := len(e.closers) - 1; i >= 0; i-- {
		e.closers[i]()
	}
	e.closers = nil
}
