package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tempotent/tempotent/internal/freeport"
	"github.com/tempotent/tempotent/internal/proc"
)

// Server is a Postgres cluster of its own, started by NewCluster: a second (or third) database
// server beside TEST_DATABASE_URL's, for what needs more than one (shards).
type Server struct {
	// URL connects to its postgres database as the postgres superuser, trusted.
	URL string
	// Dir holds its data directory, its log (server.log) and its socket.
	Dir string
	// Process is the postmaster, leashed to this process: on Linux the kernel kills it when this
	// process dies, however it dies, and its backends then exit by themselves (they watch the
	// postmaster).
	Process *proc.Process
}

// Cluster starts a Postgres cluster of its own in a temporary directory and returns its URL.
// The server stops and its directory is removed when tb ends; if the test binary is killed
// instead, the server dies with it (see Server.Process).
func Cluster(tb testing.TB, settings ...string) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "tempotent-pg-")
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s, err := NewCluster(ctx, dir, settings...)
	if err != nil {
		tb.Fatalf("pgtest: %v", err)
	}
	tb.Cleanup(s.Stop)
	return s.URL
}

// NewCluster makes a cluster in dir (initdb, trusting local connections) and starts its
// postmaster directly, not through pg_ctl (which would detach it from this process), on a free
// port of 127.0.0.1, with settings given as "name=value". As root, initdb and the server run as
// the postgres user that the PostgreSQL package creates: initdb refuses root. Stop it with
// Server.Stop. As root, the postgres user must be able to reach dir (os.MkdirTemp's are; the
// directories of testing.T.TempDir are not).
func NewCluster(ctx context.Context, dir string, settings ...string) (*Server, error) {
	bin, err := serverBin()
	if err != nil {
		return nil, err
	}
	as, err := asServerUser(dir)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initdb := as(exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "--no-sync"))
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("postgres cluster: initdb: %v: %s", err, out)
	}
	port, err := freeport.Get()
	if err != nil {
		return nil, err
	}
	args := []string{"-D", data, "-p", strconv.Itoa(port), "-k", dir, "-c", "listen_addresses=127.0.0.1"}
	for _, s := range settings {
		args = append(args, "-c", s)
	}
	log, err := os.Create(filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := as(exec.Command(filepath.Join(bin, "postgres"), args...))
	cmd.Stdout, cmd.Stderr = log, log
	p, err := proc.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("postgres cluster: %w", err)
	}
	s := &Server{URL: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port), Dir: dir, Process: p}
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		out, _ := os.ReadFile(filepath.Join(dir, "server.log"))
		return nil, fmt.Errorf("postgres cluster on port %d: %w; its log:\n%s", port, err, out)
	}
	return s, nil
}

// waitReady waits until the server accepts a connection, or it exits, or ctx ends.
func (s *Server) waitReady(ctx context.Context) error {
	for {
		conn, err := pgx.Connect(ctx, s.URL)
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-s.Process.Exited():
			return errors.New("the server exited")
		case <-ctx.Done():
			return errors.Join(ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Stop shuts the server down at once (SIGQUIT, Postgres' immediate shutdown: no checkpoint,
// a throwaway cluster needs none) and waits for it to exit; SIGKILL if it has not in 30 s.
func (s *Server) Stop() {
	_ = s.Process.Signal(syscall.SIGQUIT)
	select {
	case <-s.Process.Exited():
	case <-time.After(30 * time.Second):
		s.Process.Kill()
	}
}

// serverBin finds the newest installed PostgreSQL's server binaries.
func serverBin() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return binVersion(dirs[i]) > binVersion(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("postgres cluster: PostgreSQL's server binaries (initdb, postgres) are not installed (apt-get install postgresql)")
}

func binVersion(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}
