//go:build unix

package faults_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tempotent/tempotent/internal/freeport"
	"github.com/tempotent/tempotent/internal/pgtest"
	"github.com/tempotent/tempotent/samples/payment"
)

// runOrders runs n sagas concurrently while disturb runs, then checks every saga completed,
// charged once and reserved stock once, and no receipt is left pending.
func runOrders(t *testing.T, w *world, n int, disturb func(done <-chan struct{})) {
	t.Helper()
	var orders []payment.Order
	for i := range n {
		o := w.order(fmt.Sprint("o", i))
		o.ChargeFaults = "slow=300ms"
		orders = append(orders, o)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { disturb(done) })
	results := make([]payment.Result, n)
	for i, o := range orders {
		results[i] = w.result(w.saga(o))
	}
	close(done)
	wg.Wait()
	for i, o := range orders {
		require.Equal(t, payment.StatusCompleted, results[i].Status, o.ID)
		require.Len(t, w.charges(o.ID), 1, "%s: charges", o.ID)
		var reserved int
		require.NoError(t, w.db().QueryRow(context.Background(),
			"SELECT count(*) FROM payment_sample.reservations WHERE order_id = $1", o.ID).Scan(&reserved))
		require.Equal(t, 1, reserved, "%s: stock reservations", o.ID)
	}
	require.Zero(t, w.pending())
}

// Row 4: the worker's Postgres backends are killed mid-transaction, again and again. Every
// error is retried, no receipt is half-written, every effect happens once.
func TestRow04BackendsKilled(t *testing.T) {
	w := newWorld(t, worldOptions{})
	w.startWorker()
	var kills atomic.Int64
	db := pgtest.Pool(t) // here: disturb runs on its own goroutine, where t must not fail
	runOrders(t, w, 6, func(done <-chan struct{}) {
		for range 40 { // for four seconds, then let the run drain
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
			tag, err := db.Exec(context.Background(),
				"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1", "tempotent-worker-"+w.schema)
			if err == nil {
				kills.Add(tag.RowsAffected())
			}
		}
	})
	require.Positive(t, kills.Load(), "no backend was killed")
	t.Logf("terminated %d backends", kills.Load())
}

// Row 5: the reply to COMMIT is lost: a proxy between the worker and Postgres forwards the
// COMMIT, lets Postgres commit, and drops the connection instead of forwarding the reply. The
// attempt treats the outcome as unknown; the next one finds the receipt and replays it.
func TestRow05CommitReplyLost(t *testing.T) {
	target, err := url.Parse(pgtest.URL())
	require.NoError(t, err)
	proxy := startProxy(t, target.Host)
	viaProxy := *target
	viaProxy.Host = proxy.addr
	q := viaProxy.Query()
	q.Set("sslmode", "disable") // the proxy reads the protocol: no TLS
	viaProxy.RawQuery = q.Encode()
	w := newWorld(t, worldOptions{})
	w.workerDB = viaProxy.String()
	w.startWorker()
	proxy.armed.Store(true)

	o := w.order("o")
	r := w.result(w.saga(o))
	require.Equal(t, payment.StatusCompleted, r.Status)
	require.Equal(t, int64(1), proxy.dropped.Load(), "no COMMIT reply was dropped: the test proved nothing")
	var reserved int
	require.NoError(t, w.db().QueryRow(context.Background(),
		"SELECT count(*) FROM payment_sample.reservations WHERE order_id = $1", o.ID).Scan(&reserved))
	require.Equal(t, 1, reserved, "the reservation whose COMMIT reply was lost happened twice, or not at all")
	require.Len(t, w.charges(o.ID), 1)
	require.Zero(t, w.pending())
}

type proxy struct {
	addr    string
	armed   atomic.Bool
	dropped atomic.Int64
}

// commitComplete is Postgres' CommandComplete message for COMMIT.
var commitComplete = []byte("C\x00\x00\x00\x0bCOMMIT\x00")

// startProxy forwards TCP to target; once armed, it drops the first server reply that carries
// a COMMIT's CommandComplete, closing both sides.
func startProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	p := &proxy{addr: ln.Addr().String()}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", target)
			if err != nil {
				client.Close()
				continue
			}
			go func() { _, _ = io.Copy(server, client); server.Close() }()
			go func() {
				defer client.Close()
				defer server.Close()
				buf := make([]byte, 64<<10)
				for {
					n, err := server.Read(buf)
					if n > 0 {
						if bytes.Contains(buf[:n], commitComplete) && p.armed.CompareAndSwap(true, false) {
							p.dropped.Add(1)
							return // committed, and the reply is gone
						}
						if _, werr := client.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return p
}

// Row 6: Postgres is stopped (immediate mode, as a crash) and started again, repeatedly, during
// a run. It is a throwaway cluster owned by the test: the machine's shared server is never
// stopped. Every saga completes; effects equal intents.
func TestRow06PostgresRestarted(t *testing.T) {
	cluster := newCluster(t)
	w := newWorld(t, worldOptions{dbURL: cluster.url})
	w.startWorker()
	restarts := 0
	runOrders(t, w, 6, func(done <-chan struct{}) {
		for restarts < 3 {
			select {
			case <-done:
				return
			case <-time.After(700 * time.Millisecond):
			}
			cluster.ctl("stop", "-m", "immediate")
			time.Sleep(500 * time.Millisecond)
			cluster.ctl("start")
			restarts++
		}
	})
	require.Positive(t, restarts)
	t.Logf("restarted Postgres %d times", restarts)
}

type cluster struct {
	t        *testing.T
	bin, dir string
	port     int
	url      string
}

// newCluster makes and starts a Postgres cluster in a temporary folder, run as the postgres
// user when the test runs as root (initdb refuses root).
func newCluster(t *testing.T) *cluster {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	require.NotEmpty(t, bins, "PostgreSQL's server binaries are not installed (apt-get install postgresql)")
	dir, err := os.MkdirTemp("", "tempotent-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err)
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		require.NoError(t, os.Chown(dir, uid, gid))
	}
	port, err := freeport.Get()
	require.NoError(t, err)
	c := &cluster{t: t, bin: filepath.Dir(bins[len(bins)-1]), dir: dir, port: port,
		url: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port)}
	c.run("initdb", "-D", filepath.Join(dir, "data"), "-U", "postgres", "--auth=trust", "--no-sync")
	c.ctl("start")
	t.Cleanup(func() { c.ctl("stop", "-m", "immediate") })
	return c
}

// checkpoint stops the cluster cleanly, copies its data directory and starts it again. The
// function it returns crash-stops the cluster, sets its data back to the copy and starts it:
// every write since the checkpoint is lost, as a crash loses an asynchronous commit that was not
// flushed yet (or a failover, one the standby had not received). Once only.
func (c *cluster) checkpoint() (lose func()) {
	c.t.Helper()
	data := filepath.Join(c.dir, "data")
	c.ctl("stop", "-m", "fast")
	out, err := exec.Command("cp", "-a", data, data+".checkpoint").CombinedOutput()
	require.NoError(c.t, err, "copy the data directory: %s", out)
	c.ctl("start")
	return func() {
		c.t.Helper()
		c.ctl("stop", "-m", "immediate")
		require.NoError(c.t, os.RemoveAll(data))
		require.NoError(c.t, os.Rename(data+".checkpoint", data))
		c.ctl("start")
	}
}

func (c *cluster) run(tool string, args ...string) {
	c.t.Helper()
	cmd := exec.Command(filepath.Join(c.bin, tool), args...)
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(c.bin, tool)}, args...)...)
	}
	out, err := cmd.CombinedOutput()
	require.NoError(c.t, err, "%s: %s", tool, out)
}

func (c *cluster) ctl(action string, args ...string) {
	c.t.Helper()
	all := []string{"-D", filepath.Join(c.dir, "data"), "-w", "-l", filepath.Join(c.dir, "server.log"),
		"-o", fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", c.port, c.dir), action}
	c.run("pg_ctl", append(all, args...)...)
}
