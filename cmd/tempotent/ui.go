// tempotent ui: the web console (package console), served on a loopback address by default.

package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/tempotent/tempotent/console"
)

// uiListenDefault is where tempotent ui listens: loopback only, so that the console is reached
// through an SSH tunnel or a proxy of your own unless you say otherwise.
const uiListenDefault = "127.0.0.1:8080"

func (a *app) ui(ctx context.Context, args []string) error {
	f := a.flags("ui", "", `Serves the web console: what waits for a person, receipts, the outbox and the audit log;
resolve, re-arm, requeue and discard with a reason, recorded under the signed-in user's name.

Users sign in with HTTP basic authentication. --users names a file (mode 0600 or stricter) with
one user a line, "NAME ROLE PASSWORD", ROLE reader or operator, PASSWORD at least 12 characters;
blank lines and lines beginning with # are skipped. A reader sees everything but results and
payloads, and acts on nothing. Without --users, --insecure-local-reader lets anyone on this host
read (never act), and only on a loopback address. On any other address --tls-cert and --tls-key
are required: passwords never cross a network in clear. Results are shown by their encoding
and size when the workers seal them (activity.Config.Codecs): mount console.Handler in a
program of your own, with the codecs, to read them.`)
	var listen, usersFile, certFile, keyFile string
	var insecure bool
	f.StringVar(&listen, "listen", uiListenDefault, "address to listen on")
	f.StringVar(&usersFile, "users", a.getenv("TEMPOTENT_UI_USERS"), "file of the users who may sign in (env TEMPOTENT_UI_USERS)")
	f.BoolVar(&insecure, "insecure-local-reader", false, "let requests without credentials from this host read the console (loopback --listen only)")
	f.StringVar(&certFile, "tls-cert", "", "TLS certificate file (required unless --listen is a loopback address)")
	f.StringVar(&keyFile, "tls-key", "", "TLS key file")
	inboxRetention := console.InboxRetentionDefault
	if env := a.getenv("TEMPOTENT_INBOX_RETENTION"); env != "" {
		if err := durationFlag(&inboxRetention)(env); err != nil {
			return usagef("TEMPOTENT_INBOX_RETENTION: %v", err)
		}
	}
	f.Func("inbox-retention", "the workers' inbox retention: older records show as waiting for a purge (env TEMPOTENT_INBOX_RETENTION; default 720h)", durationFlag(&inboxRetention))
	var users []console.User
	check := func() error {
		if len(f.args) > 0 {
			return usagef("unexpected argument %q", f.arg(0))
		}
		loopback, err := isLoopback(listen)
		if err != nil {
			return usagef("--listen %q: %v", listen, err)
		}
		switch {
		case (certFile == "") != (keyFile == ""):
			return usagef("give both --tls-cert and --tls-key, or neither")
		case !loopback && certFile == "":
			return usagef("--listen %s is not a loopback address: give --tls-cert and --tls-key, so that passwords never cross the network in clear, or listen on 127.0.0.1 and tunnel to it", listen)
		case insecure && !loopback:
			return usagef("--insecure-local-reader needs a loopback --listen (127.0.0.1 or [::1]); %s is not one", listen)
		case usersFile == "" && !insecure:
			return usagef("give --users FILE (or TEMPOTENT_UI_USERS), or --insecure-local-reader to read without signing in from this host")
		}
		if usersFile != "" {
			if users, err = readUsers(usersFile); err != nil {
				return usagef("--users: %v", err)
			}
		}
		return nil
	}
	return f.execute(ctx, args, check, func(s *session) error {
		out, err := openOutbox(s, f.schema)
		if err != nil {
			return err
		}
		h, err := console.New(console.Config{Operator: s.op, Outbox: out, Inbox: s.pool, Users: users, InsecureLocalReader: insecure,
			Secret: []byte(a.getenv("TEMPOTENT_UI_SECRET")), InboxRetention: max(inboxRetention, 0)})
		if err != nil {
			return usagef("%v", err)
		}
		ln, err := net.Listen("tcp", listen)
		if err != nil {
			return err
		}
		scheme := "http"
		if certFile != "" {
			scheme = "https"
		}
		fmt.Fprintf(a.stdout, "tempotent ui: serving the console at %s://%s/ (schema %s); stop it with Ctrl-C\n", scheme, ln.Addr(), f.schema)
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		done := make(chan error, 1)
		go func() {
			if certFile != "" {
				done <- srv.ServeTLS(ln, certFile, keyFile)
			} else {
				done <- srv.Serve(ln)
			}
		}()
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
		}
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = srv.Shutdown(shutdown)
		if serveErr := <-done; !errors.Is(serveErr, http.ErrServerClosed) {
			return serveErr
		}
		return err
	})
}

// isLoopback reports whether the address listen binds only a loopback interface ("localhost"
// counts; an empty host, which binds every interface, does not).
func isLoopback(listen string) (bool, error) {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false, err
	}
	if host == "localhost" {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// readUsers reads the users file: "NAME ROLE PASSWORD" a line. It refuses a file that others
// than its owner may read, since it holds passwords.
func readUsers(path string) ([]console.User, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	st, err := fh.Stat()
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %v: it holds passwords; chmod 600 it", path, st.Mode().Perm())
	}
	var users []console.User
	sc := bufio.NewScanner(fh)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 3 {
			return nil, fmt.Errorf("%s line %d: give NAME ROLE PASSWORD, separated by spaces (%d fields found)", path, n, len(fields))
		}
		u := console.User{Name: fields[0], Password: fields[2]}
		switch fields[1] {
		case "reader":
			u.Role = console.RoleReader
		case "operator":
			u.Role = console.RoleOperator
		default:
			return nil, fmt.Errorf("%s line %d: role %q; give reader or operator", path, n, fields[1])
		}
		users = append(users, u)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("%s names no user", path)
	}
	return users, nil
}
