package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tempotent/tempotent/keys"
	"github.com/tempotent/tempotent/operator"
)

// Exit codes (see the package documentation).
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	exitRefused = 3
	exitDoctor  = 4
)

// localDatabase is the database used when DATABASE_URL is empty, as the worker does.
const localDatabase = "postgres://postgres@127.0.0.1:5432/postgres"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// app is one invocation: where it writes, and what the environment says.
type app struct {
	stdout, stderr io.Writer
	getenv         func(string) string
}

// command is a subcommand: its name as typed, what it does, and how it runs.
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string) error
}

func (a *app) commands() []command {
	return []command{
		{"receipts list", "list receipts, oldest first, with filters; paged", a.list},
		{"receipts show", "every field of a receipt (by token or --key), or of a workflow's receipts (--workflow)", a.show},
		{"receipts resolve", "settle an unknown outcome: --applied --result JSON, or --not-applied", a.resolve},
		{"receipts rearm", "run a receipt that failed for good again, once its cause is fixed: --reason WHY", a.rearm},
		{"receipts partition", "partition receipts by day, so that purge drops days instead of rows", a.partition},
		{"purge", "delete receipts past their retention (drop whole days, if partitioned); never an unresolved one", a.purge},
		{"outbox list", "list outbox messages (default pending and dead) with filters; paged", a.outboxList},
		{"outbox show", "every field of an outbox message, its audit records; --payload prints its payload, escaped", a.outboxShow},
		{"outbox requeue", "deliver a dead message (or --all-dead matching filters) again: --reason WHY", a.outboxRequeue},
		{"outbox discard", "delete a dead message (or --all-dead matching filters) undelivered: --reason WHY", a.outboxDiscard},
		{"inbox", "count inbox records per consumer, or list one's (--consumer)", a.inbox},
		{"webhooks", "count each webhook source's deliveries accepted, duplicate, refused and failed, or list one's (--source)", a.webhooks},
		{"audit", "the audit log, newest first: who did what, to which receipt or message, and why", a.audit},
		{"stats", "count receipts by operation and state; the oldest unresolved", a.stats},
		{"shard init", "create the directory of shards (tenant → shard) with its --default shard", a.shardInit},
		{"shard list", "the directory of shards: the default, and the tenants on others or moving", a.shardList},
		{"shard move", "move a tenant to another shard: fence, drain, copy its receipts, switch; restartable", a.shardMove},
		{"migrate", "apply the migrations, or --print their SQL", a.migrate},
		{"ui", "serve the web console (127.0.0.1:8080): receipts, outbox, audit; act with a reason", a.ui},
		{"doctor", "check schema version, indexes, clock skew, retention against key memory", a.doctor},
	}
}

// run runs the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	a := &app{stdout: stdout, stderr: stderr, getenv: getenv}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		a.usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	for _, c := range a.commands() {
		words := strings.Fields(c.name)
		if len(args) < len(words) || strings.Join(args[:len(words)], " ") != c.name {
			continue
		}
		err := c.run(ctx, args[len(words):])
		return a.exit(c.name, err)
	}
	switch args[0] {
	case "receipts":
		fmt.Fprintf(stderr, "tempotent receipts: give list, show, resolve, rearm or partition\n\n")
	case "outbox":
		fmt.Fprintf(stderr, "tempotent outbox: give list, show, requeue or discard\n\n")
	case "shard":
		fmt.Fprintf(stderr, "tempotent shard: give init, list or move\n\n")
	default:
		fmt.Fprintf(stderr, "tempotent: unknown command %q\n\n", strings.Join(args, " "))
	}
	a.usage(stderr)
	return exitUsage
}

func (a *app) usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: tempotent <command> [flags]   (tempotent <command> --help for its flags)")
	fmt.Fprintln(w)
	for _, c := range a.commands() {
		fmt.Fprintf(w, "  %-18s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Configured like the worker: DATABASE_URL (or --database-url), TEMPOTENT_SCHEMA (or --schema).")
	fmt.Fprintln(w, "Exit codes: 0 done, 1 failed, 2 wrong command line, 3 refused (no such receipt or message, not unresolved, not failed, not dead), 4 doctor found a problem.")
}

// usageError is a wrong command line: exit 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{fmt.Sprintf(format, args...)} }

// refusedError is exit 3; doctorError exit 4.
type refusedError struct{ err error }

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

var errDoctor = errors.New("doctor found problems")

func (a *app) exit(name string, err error) int {
	var (
		usage   *usageError
		refused *refusedError
	)
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &usage):
		fmt.Fprintf(a.stderr, "tempotent %s: %s (see tempotent %s --help)\n", name, usage.msg, name)
		return exitUsage
	case errors.As(err, &refused):
		fmt.Fprintf(a.stderr, "tempotent %s: %v\n", name, err)
		return exitRefused
	case errors.Is(err, errDoctor):
		return exitDoctor
	}
	fmt.Fprintf(a.stderr, "tempotent %s: %v\n", name, err)
	return exitFailed
}

// flags is a command's flag set with the connection flags every command takes.
type flags struct {
	*flag.FlagSet
	databaseURL, schema string
	help                func()
	// args are the positional arguments, which may come before, between or after the flags.
	args []string
}

func (a *app) flags(name, args, about string) *flags {
	f := &flags{FlagSet: flag.NewFlagSet("tempotent "+name, flag.ContinueOnError)}
	f.SetOutput(io.Discard)
	f.StringVar(&f.databaseURL, "database-url", a.getenv("DATABASE_URL"), "Postgres URL (env DATABASE_URL; empty means "+localDatabase+")")
	f.StringVar(&f.schema, "schema", cmp.Or(a.getenv("TEMPOTENT_SCHEMA"), operator.SchemaDefault), "Postgres schema of the receipts (env TEMPOTENT_SCHEMA)")
	f.Usage = func() {} // parse prints the help on --help, and errors go back to run
	f.help = func() {
		w := a.stdout
		fmt.Fprintf(w, "Usage: tempotent %s [flags] %s\n\n%s\n\nFlags:\n", name, args, about)
		f.SetOutput(w)
		f.PrintDefaults()
		f.SetOutput(io.Discard)
	}
	return f
}

// parse parses args, flags and positional arguments in any order ("resolve TOKEN --applied" as
// well as "resolve --applied TOKEN"); --help prints the usage and ends the command with exit 0.
// A token may begin with "-" (it is base64url): such an argument is positional unless it is the
// value of the flag before it, and everything after "--" is positional too.
func (f *flags) parse(args []string) error {
	var rest []string
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "--":
			f.args = append(f.args, args[i+1:]...)
			i = len(args)
		case isDashToken(args[i]) && !f.takesValue(rest):
			f.args = append(f.args, args[i])
		default:
			rest = append(rest, args[i])
		}
	}
	for {
		err := f.Parse(rest)
		if errors.Is(err, flag.ErrHelp) {
			f.help()
			return err
		}
		if err != nil {
			return usagef("%v", err)
		}
		if f.NArg() == 0 {
			return nil
		}
		f.args = append(f.args, f.Arg(0))
		rest = f.Args()[1:]
	}
}

// isDashToken reports whether arg has a token's shape (keys.TokenLen characters of base64url)
// and begins with "-", so that the flag package would take it for a flag.
func isDashToken(arg string) bool {
	if len(arg) != keys.TokenLen || arg[0] != '-' {
		return false
	}
	for _, c := range arg {
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// takesValue reports whether the last of args is a flag that takes the next argument as its
// value ("--reason X", not "--reason=X" or a boolean flag).
func (f *flags) takesValue(args []string) bool {
	if len(args) == 0 {
		return false
	}
	last := args[len(args)-1]
	name := strings.TrimPrefix(strings.TrimPrefix(last, "-"), "-")
	if name == last || strings.Contains(name, "=") {
		return false
	}
	fl := f.Lookup(name)
	if fl == nil {
		return false
	}
	b, isBool := fl.Value.(interface{ IsBoolFlag() bool })
	return !isBool || !b.IsBoolFlag()
}

// arg returns the i-th positional argument, or "".
func (f *flags) arg(i int) string {
	if i < len(f.args) {
		return f.args[i]
	}
	return ""
}

// session is what a command acts through once connected: the pool, and an operator client on
// the schema.
type session struct {
	pool *pgxpool.Pool
	op   *operator.Client
}

// errDone is what a command's check returns when it did all the command asks without the
// database (migrate --print): execute then ends the command, successfully, without connecting.
var errDone = errors.New("done without the database")

// execute is the parse, open and close that every command shares: it parses args (the
// command's own flags defined on f beforehand), has check (nil when the flags say it all) refuse
// what the command cannot take before anything connects, opens a session on the database and the
// schema, runs do in it, and closes it.
func (f *flags) execute(ctx context.Context, args []string, check func() error, do func(*session) error) error {
	if err := f.parse(args); err != nil {
		return err
	}
	if check != nil {
		switch err := check(); {
		case errors.Is(err, errDone):
			return nil
		case err != nil:
			return err
		}
	}
	s, err := f.open(ctx)
	if err != nil {
		return err
	}
	defer s.pool.Close()
	return do(s)
}

// open connects to the database and builds an operator client on the schema. Nothing is checked
// against the schema here: each command says what it found.
func (f *flags) open(ctx context.Context) (*session, error) {
	url := cmp.Or(f.databaseURL, localDatabase)
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usagef("DATABASE_URL is not a Postgres URL: %v", err)
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	pingCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres at %s:%d (database %q) does not answer: %w; set DATABASE_URL or --database-url to your receipts' database",
			cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Database, err)
	}
	op, err := operator.NewClient(pool, operator.Config{Schema: f.schema})
	if err != nil {
		pool.Close()
		return nil, usagef("%v", err)
	}
	return &session{pool: pool, op: op}, nil
}

// durationFlag parses a duration that may be given in days ("7d") as well as Go's units.
func durationFlag(p *time.Duration) func(string) error {
	return func(v string) error {
		d, err := parseDuration(v)
		*p = d
		return err
	}
}

func parseDuration(v string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(v, "d"); ok {
		d, err := time.ParseDuration(days + "h")
		return d * 24, err
	}
	return time.ParseDuration(v)
}
