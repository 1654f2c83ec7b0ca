package worker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"time"
)

// LocalDatabaseURL is the Postgres that local mode tries first.
const LocalDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres"

// PostgresInstallHint is the command that installs PostgreSQL on Debian and Ubuntu.
const PostgresInstallHint = "sudo apt-get install -y postgresql"

// database returns the URL of the Postgres to use and a function that stops what was started
// for it: the configured one; else the local server if it answers on 127.0.0.1:5432; else a
// throwaway cluster in dataDir, made with the installed initdb and pg_ctl.
func database(ctx context.Context, cfg Config, log *slog.Logger) (string, func(), error) {
	if cfg.DatabaseURL != "" {
		return cfg.DatabaseURL, func() {}, nil
	}
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:5432", time.Second); err == nil {
		conn.Close()
		log.Info("DATABASE_URL not set: using the local Postgres", "url", LocalDatabaseURL)
		return LocalDatabaseURL, func() {}, nil
	}
	bin, err := postgresBin()
	if err != nil {
		return "", nil, err
	}
	return throwawayCluster(ctx, bin, filepath.Join(cfg.DataDir, "postgres"), log)
}

// postgresBin finds the newest installed PostgreSQL's bin directory.
func postgresBin() (string, error) {
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		return filepath.Dir(p), nil
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "pg_ctl")); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("no Postgres: DATABASE_URL is not set, nothing answers on 127.0.0.1:5432, and PostgreSQL is not installed. Install it (%s) or set DATABASE_URL", PostgresInstallHint)
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// throwawayCluster creates (once) and starts a cluster in dir on a free port, trusting local
// connections, and returns its URL and a function that stops it. As root it runs the server
// as the postgres user, since initdb refuses to run as root.
func throwawayCluster(ctx context.Context, bin, dir string, log *slog.Logger) (string, func(), error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", nil, fmt.Errorf("throwaway Postgres: %w", err)
	}
	run := func(args ...string) *exec.Cmd { return exec.CommandContext(ctx, args[0], args[1:]...) }
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return "", nil, fmt.Errorf("throwaway Postgres: running as root needs the postgres user that the PostgreSQL package creates: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(abs, uid, gid); err != nil {
			return "", nil, err
		}
		run = func(args ...string) *exec.Cmd {
			return exec.CommandContext(ctx, "runuser", append([]string{"-u", "postgres", "--"}, args...)...)
		}
	}
	data := filepath.Join(abs, "data")
	if _, err := os.Stat(filepath.Join(data, "PG_VERSION")); err != nil {
		log.Info("creating a throwaway Postgres cluster", "dir", data)
		if out, err := run(filepath.Join(bin, "initdb"), "-D", data, "-U", "postgres", "--auth=trust", "--no-sync").CombinedOutput(); err != nil {
			return "", nil, fmt.Errorf("throwaway Postgres: initdb: %v: %s", err, out)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1", port, abs)
	if out, err := run(filepath.Join(bin, "pg_ctl"), "-D", data, "-o", opts, "-l", filepath.Join(abs, "server.log"), "-w", "start").CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("throwaway Postgres: pg_ctl start: %v: %s (see %s)", err, out, filepath.Join(abs, "server.log"))
	}
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port)
	log.Info("started a throwaway Postgres", "url", url, "dir", data)
	stop := func() {
		cmd := run(filepath.Join(bin, "pg_ctl"), "-D", data, "-m", "fast", "-w", "stop")
		cmd = exec.Command(cmd.Args[0], cmd.Args[1:]...) // not tied to ctx: ctx is usually done by now
		_ = cmd.Run()
	}
	return url, stop, nil
}
