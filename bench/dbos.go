package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/internal/pgtest"
)

// peer is DBOS Transact for Go running the same downstream call as a step of a durable
// workflow, its system database in a schema of the same Postgres.
type peer struct {
	ctx     dbos.Context
	pool    *pgxpool.Pool
	counter *pgtest.Counter
	steps   func(ctx dbos.Context, n int) (int, error)
}

const peerSchema = "tempotent_bench_dbos"

func startPeer(ctx context.Context, url string, synchronousCommit bool, d *downstream) *peer {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		fatalf("database URL: %v", err)
	}
	cfg.MaxConns = 20
	cfg.ConnConfig.RuntimeParams["synchronous_commit"] = map[bool]string{true: "on", false: "off"}[synchronousCommit]
	p := &peer{counter: &pgtest.Counter{}}
	cfg.ConnConfig.Tracer = p.counter
	if p.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		fatalf("DBOS pool: %v", err)
	}
	if _, err := p.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+peerSchema+" CASCADE"); err != nil {
		fatalf("drop DBOS schema: %v", err)
	}
	p.ctx, err = dbos.NewContext(ctx, dbos.Config{
		AppName:        "tempotent-bench",
		SystemDBPool:   p.pool,
		DatabaseSchema: peerSchema,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fatalf("DBOS: %v", err)
	}
	// n steps, each the downstream call under a key of the workflow and step: what DBOS
	// checkpoints is the step's output, after the call.
	p.steps = func(ctx dbos.Context, n int) (int, error) {
		id, err := dbos.GetWorkflowID(ctx)
		if err != nil {
			return 0, err
		}
		for i := range n {
			_, err := dbos.RunAsStep(ctx, func(ctx context.Context) (charge, error) {
				return d.charge(ctx, fmt.Sprint(id, "/", i), 0)
			}, dbos.WithStepName("charge"))
			if err != nil {
				return 0, err
			}
		}
		return n, nil
	}
	dbos.RegisterWorkflow(p.ctx, p.steps, dbos.WithWorkflowName("Steps"))
	if err := dbos.Launch(p.ctx); err != nil {
		fatalf("launch DBOS: %v", err)
	}
	return p
}

// workflow runs a DBOS workflow of n downstream steps to its end.
func (p *peer) workflow(n int) op {
	return func(context.Context) error {
		h, err := dbos.RunWorkflow(p.ctx, p.steps, n)
		if err != nil {
			return err
		}
		_, err = h.GetResult()
		return err
	}
}

func (p *peer) close() {
	dbos.Shutdown(p.ctx, 5*time.Second) //nolint:errcheck // best effort at the end of a run
	_, _ = p.pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+peerSchema+" CASCADE")
	p.pool.Close()
}
