// Package devserver starts the Temporal dev server (the temporal CLI's `server start-dev`) for
// this module's tests, the demo and the worker's dev mode. Unlike the SDK's
// testsuite.StartDevServer, the server is leashed to the process that starts it (internal/proc):
// a test binary killed by its -timeout, which runs no cleanup, takes its dev servers with it
// instead of leaving them running.
package devserver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"strconv"
	"sync"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/tempotent/tempotent/internal/freeport"
	"github.com/tempotent/tempotent/internal/proc"
)

// ReadyTimeoutDefault bounds how long Start waits for the server to answer.
const ReadyTimeoutDefault = time.Minute

// Options configures Start. CLI is required.
type Options struct {
	// CLI is the path of the temporal CLI binary (make bin/temporal builds it).
	CLI string
	// Client configures the client Start dials; its HostPort is set to the server's address.
	// A nil Logger discards the client's logs.
	Client client.Options
	// DBFile, when set, keeps the server's state in that file, so that a restarted server on
	// the same port resumes; empty keeps it in memory.
	DBFile string
	// Port is the frontend's port; 0 picks a free one.
	Port int
	// UIPort, when not 0, serves the Web UI there; 0 runs the server headless.
	UIPort int
	// LogLevel is the server's log level; default "error".
	LogLevel string
	// Output receives the server's standard output and error; nil discards them.
	Output io.Writer
	// ReadyTimeout bounds the wait for the server to answer; default ReadyTimeoutDefault.
	ReadyTimeout time.Duration
}

// Server is a running dev server.
type Server struct {
	p      *proc.Process
	addr   string
	client client.Client
	close  sync.Once
}

// startTries is how many free ports Start tries when it picks the port: another process may
// bind a port between freeport.Get and the server's own bind (CI starts many servers at once).
const startTries = 3

// ExitedError is Start's error when the server ended before it answered; Output is the end of
// what it printed.
type ExitedError struct {
	Addr   string
	Err    error // exec.Cmd.Wait's result
	Output string
}

func (e *ExitedError) Error() string {
	return fmt.Sprintf("devserver: the server on %s exited before it answered (%v); it printed:\n%s", e.Addr, e.Err, e.Output)
}

// Start starts the dev server and waits until it answers a health check. When Options.Port
// is 0 and the server exits before it answers (its port taken under it), Start tries again on
// another free port, up to three times in all.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.CLI == "" {
		return nil, errors.New("devserver: Options.CLI is empty; give the path of the temporal CLI (make bin/temporal)")
	}
	for try := 1; ; try++ {
		srv, err := start(ctx, o)
		var exited *ExitedError
		if err == nil || o.Port != 0 || try == startTries || !errors.As(err, &exited) || ctx.Err() != nil {
			return srv, err
		}
	}
}

func start(ctx context.Context, o Options) (*Server, error) {
	port := o.Port
	if port == 0 {
		var err error
		if port, err = freeport.Get(); err != nil {
			return nil, err
		}
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"server", "start-dev", "--ip", "127.0.0.1", "--port", strconv.Itoa(port),
		"--log-level", cmp.Or(o.LogLevel, "error"),
		// The dev server would otherwise ask the internet whether it is up to date.
		"--dynamic-config-value", "frontend.enableServerVersionCheck=false"}
	if o.UIPort == 0 {
		args = append(args, "--headless")
	} else {
		args = append(args, "--ui-port", strconv.Itoa(o.UIPort))
	}
	if o.DBFile != "" {
		args = append(args, "--db-filename", o.DBFile)
	}
	if o.Client.Namespace != "" {
		args = append(args, "--namespace", o.Client.Namespace)
	}
	cmd := exec.Command(o.CLI, args...)
	tail := &tailWriter{max: 4096}
	var out io.Writer = tail
	if o.Output != nil {
		out = io.MultiWriter(o.Output, tail)
	}
	cmd.Stdout, cmd.Stderr = out, out
	p, err := proc.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("devserver: %w", err)
	}
	copts := o.Client
	copts.HostPort = addr
	if copts.Logger == nil {
		copts.Logger = tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))
	}
	ready, cancel := context.WithTimeout(ctx, cmp.Or(o.ReadyTimeout, ReadyTimeoutDefault))
	defer cancel()
	// A server that exits stops the wait at once, rather than at ReadyTimeout.
	go func() {
		select {
		case <-p.Exited():
			cancel()
		case <-ready.Done():
		}
	}()
	c, err := dialHealthy(ready, copts)
	if err != nil {
		select {
		case <-p.Exited():
			return nil, &ExitedError{Addr: addr, Err: p.Wait(), Output: tail.String()}
		default:
		}
		p.Kill()
		return nil, fmt.Errorf("devserver: the server on %s did not answer: %w; it printed:\n%s", addr, err, tail.String())
	}
	return &Server{p: p, addr: addr, client: c}, nil
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.b = append(w.b, p...)
	if over := len(w.b) - w.max; over > 0 {
		w.b = append(w.b[:0], w.b[over:]...)
	}
	return len(p), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return string(w.b)
}

// dialHealthy dials until the server answers a health check, or ctx ends.
func dialHealthy(ctx context.Context, o client.Options) (client.Client, error) {
	for {
		c, err := client.DialContext(ctx, o)
		if err == nil {
			if _, err = c.CheckHealth(ctx, nil); err == nil {
				return c, nil
			}
			c.Close()
		}
		select {
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Client is the client Start dialled; Stop closes it.
func (s *Server) Client() client.Client { return s.client }

// Addr is the frontend's host:port.
func (s *Server) Addr() string { return s.addr }

// Stop closes the client, then stops the server (SIGTERM) and waits for it to exit. Calls
// after the first do nothing.
func (s *Server) Stop() {
	s.close.Do(s.client.Close)
	s.p.Stop()
}

// Kill closes the client and SIGKILLs the server, as a crash does.
func (s *Server) Kill() {
	s.close.Do(s.client.Close)
	s.p.Kill()
}

// TB is the part of testing.TB that ForTest uses (this package is linked into the worker's dev
// mode, which must not import testing).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// ForTest starts a dev server from the CLI at cli for tb, stopped when tb ends, and returns its
// client. It fails tb at once if the server does not start.
func ForTest(tb TB, cli string, copts client.Options) client.Client {
	tb.Helper()
	srv, err := Start(context.Background(), Options{CLI: cli, Client: copts})
	if err != nil {
		tb.Fatalf("%v (the Temporal CLI is built by `make bin/temporal`, which make test runs)", err)
	}
	tb.Cleanup(srv.Stop)
	return srv.Client()
}

// ResetToStart resets the workflow run (id, runID) in the default namespace to the completion of
// its first workflow task, as an operator's `temporal workflow reset --type FirstWorkflowTask`
// does: everything the run scheduled is scheduled again, under the same workflow ID and a new run
// ID, which it returns. The request ID is the workflow ID, so that a retried call resets once.
func ResetToStart(ctx context.Context, c client.Client, id, runID, reason string) (string, error) {
	reset, err := c.ResetWorkflowExecution(ctx, &workflowservice.ResetWorkflowExecutionRequest{
		Namespace:                 "default",
		WorkflowExecution:         &commonpb.WorkflowExecution{WorkflowId: id, RunId: runID},
		Reason:                    reason,
		WorkflowTaskFinishEventId: 4, // 1 started, 2 task scheduled, 3 task started, 4 task completed
		RequestId:                 id,
	})
	if err != nil {
		return "", fmt.Errorf("reset workflow %s to its start: %w", id, err)
	}
	return reset.GetRunId(), nil
}
