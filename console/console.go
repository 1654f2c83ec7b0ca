package console

import (
	"cmp"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"strings"
	"time"

	"github.com/tempotent/tempotent/inbox"
	"github.com/tempotent/tempotent/operator"
	"github.com/tempotent/tempotent/outbox"
)

// Role is what a user may do in the console.
type Role int

// Roles, from least to most.
const (
	// RoleReader reads every page but payloads, results and headers, and acts on nothing.
	RoleReader Role = iota + 1
	// RoleOperator reads everything, payloads and results included, and acts: resolve, re-arm,
	// requeue, discard.
	RoleOperator
)

// String names the role.
func (r Role) String() string {
	switch r {
	case RoleReader:
		return "reader"
	case RoleOperator:
		return "operator"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// User is one person who may sign in, with HTTP basic authentication: Name is the user name,
// and is what the audit log records as the actor of each action the user takes.
type User struct {
	Name     string
	Password string
	Role     Role
}

// Defaults applied by New.
const (
	// PathDefault is where the handler is mounted.
	PathDefault = "/"
	// PageSizeDefault is how many rows a listing shows.
	PageSizeDefault = 50
	// InboxWindowDefault is the window of the overview's recent inbox counts.
	InboxWindowDefault = time.Hour
	// InboxRetentionDefault is the retention the overview holds the inbox's records to: the
	// worker's own default (worker.InboxRetentionDefault), after which its purge deletes them.
	InboxRetentionDefault = 30 * 24 * time.Hour
)

// Config configures a Handler.
type Config struct {
	// Operator reads and acts on receipts, and reads the audit log. Required. Give it the
	// workers' Codecs (operator.Config.Codecs): results are decoded with them for the operator
	// role, and results that a resolution records are sealed with them.
	Operator *operator.Client
	// Outbox, when set, shows the outbox's backlog and lets operators requeue and discard dead
	// messages; nil hides the outbox.
	Outbox *outbox.Outbox
	// Inbox, when set, is what the overview counts the inbox's consumers through (a
	// *pgxpool.Pool); nil hides those counts. The schema is the Operator's.
	Inbox inbox.Querier
	// Users are who may sign in. Every request must authenticate as one of them, unless
	// InsecureLocalReader is set.
	Users []User
	// InsecureLocalReader lets a request that comes without credentials from a loopback address
	// (127.0.0.1, ::1), and that carries no proxy header (Forwarded, X-Forwarded-For,
	// X-Real-Ip), read the console as the reader "anonymous": never act, never see payloads.
	// Do not set it behind a reverse proxy on the same host, which forwards remote requests
	// from a loopback address; the proxy headers are refused for that reason, but a proxy that
	// adds none cannot be told apart.
	InsecureLocalReader bool
	// Secret keys the CSRF tokens of the action forms (an HMAC of the user's name and
	// password). Empty: a random secret, so that a restart invalidates the forms open in
	// browsers (reload them). Give the same secret to every replica behind a load balancer.
	Secret []byte
	// Path is where the handler is mounted in the caller's mux, ending in "/" (the handler
	// strips it). Default PathDefault.
	Path string
	// PageSize is how many rows a listing shows. Default PageSizeDefault.
	PageSize int
	// InboxWindow is the window of the overview's recent inbox counts. Default
	// InboxWindowDefault.
	InboxWindow time.Duration
	// InboxRetention is the workers' worker.Config.InboxRetention: inbox records older than it
	// are shown as waiting for a purge. Default InboxRetentionDefault.
	InboxRetention time.Duration
	// FailedSignIns bounds the failed sign-ins of one client address (see SignInLimit).
	// Default: SignInBurstDefault at once, then one per SignInEveryDefault.
	FailedSignIns SignInLimit
}

// ConfigError is New's error for a Config it refuses: Field names the setting, Problem says
// what is wrong and what to give.
type ConfigError struct {
	Field, Problem string
}

func (e *ConfigError) Error() string { return "console: Config." + e.Field + ": " + e.Problem }

// Handler is the console: an http.Handler to mount in an admin server of your own (at
// Config.Path), or to serve with `tempotent ui`. It is safe for concurrent use. Make it with New;
// the zero Handler is not usable.
type Handler struct {
	cfg     Config
	users   []credential
	mux     *http.ServeMux
	pages   map[string]*template.Template
	static  http.Handler
	cross   *http.CrossOriginProtection
	signIns *signIns
}

// credential is a User with the digests its credentials are compared by, so that every
// comparison takes the same time whatever the lengths.
type credential struct {
	User
	name, password [sha256.Size]byte
}

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// New returns the console configured by cfg, or a *ConfigError for a setting it refuses.
func New(cfg Config) (*Handler, error) {
	cfg.Path = cmp.Or(cfg.Path, PathDefault)
	cfg.PageSize = cmp.Or(cfg.PageSize, PageSizeDefault)
	cfg.InboxWindow = cmp.Or(cfg.InboxWindow, InboxWindowDefault)
	cfg.InboxRetention = cmp.Or(cfg.InboxRetention, InboxRetentionDefault)
	cfg.FailedSignIns.Burst = cmp.Or(cfg.FailedSignIns.Burst, SignInBurstDefault)
	cfg.FailedSignIns.Every = cmp.Or(cfg.FailedSignIns.Every, SignInEveryDefault)
	if err := validate(cfg); err != nil {
		return nil, err
	}
	if len(cfg.Secret) == 0 {
		cfg.Secret = make([]byte, 32)
		_, _ = rand.Read(cfg.Secret)
	}
	h := &Handler{cfg: cfg, mux: http.NewServeMux(), pages: map[string]*template.Template{}, cross: http.NewCrossOriginProtection(),
		signIns: newSignIns(cfg.FailedSignIns, cfg.Secret)}
	for _, u := range cfg.Users {
		h.users = append(h.users, credential{User: u, name: sha256.Sum256([]byte(u.Name)), password: sha256.Sum256([]byte(u.Password))})
	}
	if err := h.parseTemplates(); err != nil {
		return nil, err
	}
	static, _ := fs.Sub(staticFS, "static")
	h.static = http.StripPrefix("/static/", http.FileServerFS(static))
	h.routes()
	return h, nil
}

func validate(cfg Config) error {
	switch {
	case cfg.Operator == nil:
		return &ConfigError{"Operator", "is nil; give an *operator.Client on the workers' schema"}
	case len(cfg.Users) == 0 && !cfg.InsecureLocalReader:
		return &ConfigError{"Users", "is empty: nobody could sign in; give at least one User, or set InsecureLocalReader to read from localhost without one"}
	case !strings.HasPrefix(cfg.Path, "/") || !strings.HasSuffix(cfg.Path, "/"):
		return &ConfigError{"Path", fmt.Sprintf("is %q; give the path the handler is mounted at, beginning and ending in \"/\"", cfg.Path)}
	case cfg.PageSize < 0 || cfg.PageSize > operator.ListLimitMax || cfg.PageSize > outbox.ListLimitMax:
		return &ConfigError{"PageSize", fmt.Sprintf("is %d; give 1 to %d, or 0 for %d", cfg.PageSize, min(operator.ListLimitMax, outbox.ListLimitMax), PageSizeDefault)}
	case cfg.InboxWindow < 0:
		return &ConfigError{"InboxWindow", "is negative; give a positive duration, or 0 for the default"}
	case cfg.InboxRetention < 0:
		return &ConfigError{"InboxRetention", "is negative; give the workers' worker.Config.InboxRetention, or 0 for the default"}
	case cfg.FailedSignIns.Every < 0:
		return &ConfigError{"FailedSignIns.Every", "is negative; give how often an address that used its burst gets one more try, or 0 for the default"}
	}
	seen := map[string]bool{}
	for i, u := range cfg.Users {
		field := fmt.Sprintf("Users[%d]", i)
		switch {
		case u.Name == "" || strings.ContainsAny(u.Name, ":\r\n"):
			return &ConfigError{field + ".Name", "is empty or holds a colon or a line break; give the user's name, as the audit log is to record it"}
		case seen[u.Name]:
			return &ConfigError{field + ".Name", fmt.Sprintf("%q is given twice; give each user once", u.Name)}
		case len(u.Password) < 12:
			return &ConfigError{field + ".Password", "is shorter than 12 characters; give a long random one"}
		case u.Role != RoleReader && u.Role != RoleOperator:
			return &ConfigError{field + ".Role", fmt.Sprintf("is %v; give RoleReader or RoleOperator", u.Role)}
		}
		seen[u.Name] = true
	}
	return nil
}

// errStatus is an error that a page answers with its status.
type errStatus struct {
	status int
	err    error
}

func (e *errStatus) Error() string { return e.err.Error() }
func (e *errStatus) Unwrap() error { return e.err }

func statusf(status int, format string, args ...any) error {
	return &errStatus{status, fmt.Errorf(format, args...)}
}

// statusOf is the HTTP status of err: its own, or 500.
func statusOf(err error) int {
	if e, ok := errors.AsType[*errStatus](err); ok {
		return e.status
	}
	return http.StatusInternalServerError
}
